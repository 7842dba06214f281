// The fused_elementwise kernel: a grid-stride loop that runs a short
// straight-line program (fused_launch.h) over packs of elements.
//
// Evaluation is instruction-major: a thread takes a pack of 16 bytes of
// register values (four float32, two float64) and runs each instruction
// over the whole pack, so decoding an instruction (a uniform read of the launch's
// parameter space) is paid once per pack, not once per element. The
// program's registers are a per-thread column of packs in shared memory:
// register s of thread t is pack s * blockDim.x + t, so a warp's accesses
// to one register are consecutive 16-byte units (no bank conflicts), and
// no thread ever reads another's column (no barriers). Before the launch,
// the program's registers are renamed onto the fewest slots
// (CompactRegisters: a value's slot is free after its last reader), which
// sets the shared memory per thread; the block shrinks for programs with
// many live values so that a block's file stays within 48 KiB.
//
// Inputs and outputs move as whole packs (16 bytes; 8 for 16-bit tensors)
// when every non-scalar pointer is aligned to a pack and the pack is whole,
// one element at a time otherwise (unaligned buffers, the last n % pack
// elements). A rank-0 input is read once per thread into its slot, which no
// other value ever takes.
//
// Rounding is pinned with intrinsics so that the compiler can neither fuse
// nor split an operation: each instruction rounds exactly as the unfused
// kernel of its op does (elementwise_kernels.cu, built with nvcc's default
// -fmad=true, -prec-div=true, -prec-sqrt=true): add/sub.Tensor's
// `a ± alpha * b` is one fused multiply-add there, so it is one here; every
// other op rounds once, IEEE round-to-nearest; maximum and minimum are
// exact (NaN-propagating, as activation_kernels.cu).
//
// 16-bit programs (bfloat16, float16: storage type S) run on float32
// registers (compute type T = float) as the unfused 16-bit kernels
// (half_kernels.cu, half_elementwise_kernels.cu) do: a pack is four
// elements, loaded as 8 bytes and widened exactly; each instruction's
// float32 result is rounded to S at once (where the unfused op stores it);
// a rank-0 input of another float dtype is rounded to S when read.
#include <algorithm>
#include <array>
#include <type_traits>

#include "kernels/cuda/fused_launch.h"
#include "kernels/cuda/half_common.cuh"

namespace tandem::cuda {
namespace {

__device__ __forceinline__ float Fma(float p, float y, float x) { return __fmaf_rn(p, y, x); }
__device__ __forceinline__ double Fma(double p, double y, double x) { return __fma_rn(p, y, x); }
__device__ __forceinline__ float Add(float x, float y) { return __fadd_rn(x, y); }
__device__ __forceinline__ double Add(double x, double y) { return __dadd_rn(x, y); }
__device__ __forceinline__ float Mul(float x, float y) { return __fmul_rn(x, y); }
__device__ __forceinline__ double Mul(double x, double y) { return __dmul_rn(x, y); }
__device__ __forceinline__ float Div(float x, float y) { return __fdiv_rn(x, y); }
__device__ __forceinline__ double Div(double x, double y) { return __ddiv_rn(x, y); }
__device__ __forceinline__ float Sqrt(float x) { return __fsqrt_rn(x); }
__device__ __forceinline__ double Sqrt(double x) { return __dsqrt_rn(x); }
template <typename T>
__device__ __forceinline__ T Maximum(T x, T y) {
  if (x != x) return x;
  if (y != y) return y;
  return x > y ? x : y;
}
template <typename T>
__device__ __forceinline__ T Minimum(T x, T y) {
  if (x != x) return x;
  if (y != y) return y;
  return x < y ? x : y;
}

// The elements of one pack as stored: S[kWidth], aligned to its size (16
// bytes when S is T, 8 for a 16-bit S with float32 registers).
template <typename S, typename T>
struct alignas(sizeof(S) * Vec16<T>::kCount) StoredPack {
  S v[Vec16<T>::kCount];
};

// A float32 register value rounded to the 16-bit storage type S (a no-op
// for programs computing in their own dtype).
template <typename S, typename T>
__device__ __forceinline__ T RoundTo(T v) {
  if constexpr (std::is_same_v<S, T>) {
    return v;
  } else {
    return Widen(Narrow<S>(v));
  }
}

template <typename S, typename T>
__device__ __forceinline__ T Load(S v) {
  if constexpr (std::is_same_v<S, T>) {
    return v;
  } else {
    return Widen(v);
  }
}

template <typename S, typename T>
__device__ __forceinline__ S Store(T v) {
  if constexpr (std::is_same_v<S, T>) {
    return v;
  } else {
    return Narrow<S>(v);
  }
}

// Input k's one element when it is a scalar (rank 0): of the program's
// dtype, or for a 16-bit program of any float dtype, rounded to S.
template <typename S, typename T>
__device__ __forceinline__ T LoadScalarInput(const FusedLaunchParams& p, int k) {
  if constexpr (std::is_same_v<S, T>) {
    return *static_cast<const T*>(p.inputs[k]);
  } else {
    return RoundTo<S, T>(LoadAsFloat(p.inputs[k], p.scalar_dtype[k]));
  }
}

// An instruction's constant in T: float32 programs read the copy rounded
// on the host (exact: the constant is a float32 value held in a double).
__device__ __forceinline__ float ParamOf(const FusedDeviceInstruction& ins, float) { return ins.param32; }
__device__ __forceinline__ double ParamOf(const FusedDeviceInstruction& ins, double) { return ins.param; }

// One instruction over a pack.
template <typename T>
__device__ __forceinline__ Vec16<T> Apply(const FusedDeviceInstruction& ins, const Vec16<T>& x, const Vec16<T>& y) {
  constexpr int kWidth = Vec16<T>::kCount;
  const T param = ParamOf(ins, T{});
  Vec16<T> v;
  switch (ins.op) {
    case FusedDeviceOp::kFma:
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v.v[e] = Fma(param, y.v[e], x.v[e]);
      break;
    case FusedDeviceOp::kMul:
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v.v[e] = Mul(x.v[e], y.v[e]);
      break;
    case FusedDeviceOp::kDiv:
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v.v[e] = Div(x.v[e], y.v[e]);
      break;
    case FusedDeviceOp::kAddConst:
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v.v[e] = Add(x.v[e], param);
      break;
    case FusedDeviceOp::kMulConst:
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v.v[e] = Mul(x.v[e], param);
      break;
    case FusedDeviceOp::kDivConst:
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v.v[e] = Div(x.v[e], param);
      break;
    case FusedDeviceOp::kNeg:
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v.v[e] = -x.v[e];
      break;
    case FusedDeviceOp::kMax:
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v.v[e] = Maximum(x.v[e], y.v[e]);
      break;
    case FusedDeviceOp::kMin:
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v.v[e] = Minimum(x.v[e], y.v[e]);
      break;
    case FusedDeviceOp::kRelu:
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v.v[e] = x.v[e] < T(0) ? T(0) : x.v[e];
      break;
    case FusedDeviceOp::kThresholdBackward:
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v.v[e] = y.v[e] > param ? x.v[e] : T(0);
      break;
    default:  // kSqrt
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v.v[e] = Sqrt(x.v[e]);
      break;
  }
  return v;
}

__host__ __device__ __forceinline__ bool ReadsB(FusedDeviceOp op) {
  return op == FusedDeviceOp::kFma || op == FusedDeviceOp::kMul || op == FusedDeviceOp::kDiv ||
         op == FusedDeviceOp::kMax || op == FusedDeviceOp::kMin || op == FusedDeviceOp::kThresholdBackward;
}

// `aligned`: every non-scalar input and every output is aligned to a
// StoredPack. kInputs >= p.num_inputs bounds the packs a thread holds while
// loading (fewer registers for programs of few inputs).
template <typename S, typename T, int kInputs>
__global__ void FusedElementwiseKernel(const __grid_constant__ FusedLaunchParams p, bool aligned) {
  using V = Vec16<T>;
  using P = StoredPack<S, T>;
  constexpr int kWidth = V::kCount;
  extern __shared__ __align__(16) unsigned char register_file[];  // one declaration for every T
  V* file = reinterpret_cast<V*>(register_file) + threadIdx.x;    // slot s: file[s * stride]
  const int stride = static_cast<int>(blockDim.x);
  if (p.skip_if_error != nullptr && *p.skip_if_error != 0) return;
#pragma unroll
  for (int k = 0; k < kInputs; ++k) {
    if (k < p.num_inputs && p.scalar[k]) {
      V v;
      const T value = LoadScalarInput<S, T>(p, k);
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v.v[e] = value;
      file[k * stride] = v;
    }
  }
  const int64_t packs = (p.n + kWidth - 1) / kWidth;
  for (int64_t i = GlobalThread(); i < packs; i += GlobalStride()) {
    const int64_t first = i * kWidth;
    const int count = p.n - first < kWidth ? static_cast<int>(p.n - first) : kWidth;
    const bool whole = aligned && count == kWidth;
    // Every input of the pack is read before any output is written, so an
    // output may be an input's buffer.
    V in[kInputs];
#pragma unroll
    for (int k = 0; k < kInputs; ++k) {
      if (k >= p.num_inputs || p.scalar[k]) continue;
      const S* src = static_cast<const S*>(p.inputs[k]);
      if (whole) {
        const P pack = reinterpret_cast<const P*>(src)[i];
#pragma unroll
        for (int e = 0; e < kWidth; ++e) in[k].v[e] = Load<S, T>(pack.v[e]);
      } else {
#pragma unroll
        for (int e = 0; e < kWidth; ++e) in[k].v[e] = e < count ? Load<S, T>(src[first + e]) : T(0);
      }
    }
#pragma unroll
    for (int k = 0; k < kInputs; ++k) {
      if (k < p.num_inputs && !p.scalar[k]) file[k * stride] = in[k];
    }
    for (int j = 0; j < p.num_instructions; ++j) {
      const FusedDeviceInstruction& ins = p.code[j];
      const V x = file[ins.a * stride];
      const V y = ReadsB(ins.op) ? file[ins.b * stride] : x;
      V r = Apply<T>(ins, x, y);
#pragma unroll
      for (int e = 0; e < kWidth; ++e) r.v[e] = RoundTo<S, T>(r.v[e]);
      file[ins.dst * stride] = r;
    }
#pragma unroll
    for (int o = 0; o < kFusedLaunchMaxOutputs; ++o) {
      if (o >= p.num_outputs) continue;
      const V v = file[p.output_regs[o] * stride];
      S* dst = static_cast<S*>(p.outputs[o]);
      if (whole) {
        P pack;
#pragma unroll
        for (int e = 0; e < kWidth; ++e) pack.v[e] = Store<S, T>(v.v[e]);
        reinterpret_cast<P*>(dst)[i] = pack;
      } else {
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
          if (e < count) dst[first + e] = Store<S, T>(v.v[e]);
        }
      }
    }
  }
}

// Renames the registers of `p`'s program onto the fewest slots and returns
// how many it uses, or -1 for a program that reads a register before
// writing it (DecodeFusedProgram refuses those). Input k keeps slot k (a
// rank-0 input for the whole program; others until their last reader);
// each instruction's result takes the lowest slot free at that point, where
// the slots of values whose last reader is that instruction already count
// as free (the kernel reads an instruction's operands before writing its
// result). Values that are outputs stay until the end.
int CompactRegisters(FusedLaunchParams& p) {
  constexpr int kNone = -1;
  constexpr int kMaxValues = kFusedLaunchMaxInputs + kFusedLaunchMaxInstructions;
  const int inputs = p.num_inputs;
  const int count = p.num_instructions;
  // Values: input k is value k, instruction j's result value inputs + j.
  std::array<int, kFusedLaunchMaxRegisters> holder;  // register -> value in it
  holder.fill(kNone);
  for (int k = 0; k < inputs; ++k) holder[k] = k;
  std::array<int, kFusedLaunchMaxInstructions> value_a{}, value_b{};
  std::array<int, kMaxValues> last_use;
  last_use.fill(kNone);
  for (int j = 0; j < count; ++j) {
    const FusedDeviceInstruction& ins = p.code[j];
    value_a[j] = holder[ins.a];
    value_b[j] = ReadsB(ins.op) ? holder[ins.b] : kNone;
    if (value_a[j] == kNone || (ReadsB(ins.op) && value_b[j] == kNone)) return -1;
    last_use[value_a[j]] = j;
    if (value_b[j] != kNone) last_use[value_b[j]] = j;
    holder[ins.dst] = inputs + j;
  }
  std::array<int, kFusedLaunchMaxOutputs> output_value{};
  for (int o = 0; o < p.num_outputs; ++o) {
    output_value[o] = holder[p.output_regs[o]];
    if (output_value[o] == kNone) return -1;
    last_use[output_value[o]] = count;  // live to the end
  }
  for (int k = 0; k < inputs; ++k) {
    if (p.scalar[k]) last_use[k] = count;
  }
  std::array<int, kMaxValues> slot_of;
  slot_of.fill(kNone);
  std::array<bool, kFusedLaunchMaxRegisters> busy{};
  for (int k = 0; k < inputs; ++k) {
    slot_of[k] = k;
    busy[k] = last_use[k] != kNone;  // an input nothing reads frees its slot at once
  }
  int used = inputs;
  for (int j = 0; j < count; ++j) {
    for (int value : {value_a[j], value_b[j]}) {
      if (value != kNone && last_use[value] == j) busy[slot_of[value]] = false;
    }
    // At most inputs + j < kFusedLaunchMaxRegisters values are live here,
    // so a slot is free.
    int slot = 0;
    while (busy[slot]) ++slot;
    const int value = inputs + j;
    slot_of[value] = slot;
    busy[slot] = last_use[value] != kNone;  // a result nothing reads frees its slot at once
    used = std::max(used, slot + 1);
    FusedDeviceInstruction& ins = p.code[j];
    ins.a = slot_of[value_a[j]];
    ins.b = value_b[j] != kNone ? slot_of[value_b[j]] : 0;
    ins.dst = slot;
  }
  for (int o = 0; o < p.num_outputs; ++o) p.output_regs[o] = slot_of[output_value[o]];
  return used;
}

// Threads per block for a register file of `slots` packs per thread within
// 48 KiB of shared memory (the most a block gets without opting in): 256
// up to 12 slots, 128 up to 24, 64 up to kFusedLaunchMaxRegisters.
int ThreadsFor(int slots) {
  constexpr int kFileBytes = 48 * 1024;
  int threads = kThreads;
  while (threads > 32 && static_cast<int64_t>(slots) * threads * 16 > kFileBytes) threads /= 2;
  return threads;
}

bool AlignedTo(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// S: the tensors' storage type; T: the registers' type (S, or float32 for
// a 16-bit S).
template <typename S, typename T>
cudaError_t Run(const FusedLaunchParams& params, cudaStream_t stream) {
  FusedLaunchParams p = params;
  const int slots = CompactRegisters(p);
  if (slots < 0) return cudaErrorInvalidValue;
  for (int j = 0; j < p.num_instructions; ++j) p.code[j].param32 = static_cast<float>(p.code[j].param);
  constexpr size_t kPackBytes = sizeof(StoredPack<S, T>);
  bool aligned = true;
  for (int k = 0; k < p.num_inputs; ++k) aligned = aligned && (p.scalar[k] || AlignedTo(p.inputs[k], kPackBytes));
  for (int o = 0; o < p.num_outputs; ++o) aligned = aligned && AlignedTo(p.outputs[o], kPackBytes);
  const int threads = ThreadsFor(slots);
  const int64_t packs = (p.n + Vec16<T>::kCount - 1) / Vec16<T>::kCount;
  const size_t file_bytes = static_cast<size_t>(slots) * threads * sizeof(Vec16<T>);
  const int64_t blocks = Blocks(packs, threads);
  if (p.num_inputs <= 4) {
    FusedElementwiseKernel<S, T, 4><<<blocks, threads, file_bytes, stream>>>(p, aligned);
  } else {
    FusedElementwiseKernel<S, T, kFusedLaunchMaxInputs><<<blocks, threads, file_bytes, stream>>>(p, aligned);
  }
  return LaunchError();
}

}  // namespace

cudaError_t LaunchFusedElementwise(DType dtype, const FusedLaunchParams& params, cudaStream_t stream) {
  if (params.num_inputs < 1 || params.num_inputs > kFusedLaunchMaxInputs || params.num_instructions < 1 ||
      params.num_instructions > kFusedLaunchMaxInstructions || params.num_outputs < 1 ||
      params.num_outputs > kFusedLaunchMaxOutputs) {
    return cudaErrorInvalidValue;
  }
  for (int j = 0; j < params.num_instructions; ++j) {
    const FusedDeviceInstruction& ins = params.code[j];
    for (int r : {ins.dst, ins.a, ins.b}) {
      if (r < 0 || r >= kFusedLaunchMaxRegisters) return cudaErrorInvalidValue;
    }
  }
  for (int o = 0; o < params.num_outputs; ++o) {
    if (params.output_regs[o] < 0 || params.output_regs[o] >= kFusedLaunchMaxRegisters) return cudaErrorInvalidValue;
  }
  if (params.n == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32:
      return Run<float, float>(params, stream);
    case DType::kFloat64:
      return Run<double, double>(params, stream);
    case DType::kBFloat16:
      return Run<__nv_bfloat16, float>(params, stream);
    case DType::kFloat16:
      return Run<__half, float>(params, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace tandem::cuda
