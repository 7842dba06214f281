// The fused_elementwise kernel: a grid-stride loop that runs a short
// straight-line program (fused_launch.h) at every element index.
//
// The program stays in the launch's parameter space (__grid_constant__:
// read in place, uniformly across a warp, never copied per thread). The
// register file is a per-thread array indexed by the program, so it lives in
// thread-local memory (cached in L1); only the registers a program touches
// are ever accessed. Inputs and outputs move as 16-byte vectors when every
// non-scalar pointer is 16-byte aligned, one element at a time otherwise.
//
// Rounding is pinned with intrinsics so that the compiler can neither fuse
// nor split an operation: each instruction rounds exactly as the unfused
// kernel of its op does (elementwise_kernels.cu, built with nvcc's default
// -fmad=true, -prec-div=true, -prec-sqrt=true): add/sub.Tensor's
// `a ± alpha * b` is one fused multiply-add there, so it is one here; every
// other op rounds once, IEEE round-to-nearest.
#include "adaptor/cuda/fused_launch.h"
#include "adaptor/cuda/kernel_common.cuh"

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

// Runs the program on the register file `r` (inputs already in place).
template <typename T>
__device__ __forceinline__ void RunProgram(const FusedLaunchParams& p, T* r) {
  for (int i = 0; i < p.num_instructions; ++i) {
    const FusedDeviceInstruction& ins = p.code[i];
    const T x = r[ins.a];
    const T param = static_cast<T>(ins.param);
    T v;
    switch (ins.op) {
      case FusedDeviceOp::kFma: v = Fma(param, r[ins.b], x); break;
      case FusedDeviceOp::kMul: v = Mul(x, r[ins.b]); break;
      case FusedDeviceOp::kDiv: v = Div(x, r[ins.b]); break;
      case FusedDeviceOp::kAddConst: v = Add(x, param); break;
      case FusedDeviceOp::kMulConst: v = Mul(x, param); break;
      case FusedDeviceOp::kDivConst: v = Div(x, param); break;
      case FusedDeviceOp::kNeg: v = -x; break;
      default: v = Sqrt(x); break;  // kSqrt
    }
    r[ins.dst] = v;
  }
}

// Elements [begin, n), one at a time: the whole range without vectors, the
// tail after the last full vector with them.
template <typename T>
__device__ __forceinline__ void RunElements(const FusedLaunchParams& p, T* r, int64_t begin) {
  for (int64_t j = begin + GlobalThread(); j < p.n; j += GlobalStride()) {
#pragma unroll
    for (int k = 0; k < kFusedLaunchMaxInputs; ++k) {
      if (k < p.num_inputs && !p.scalar[k]) r[k] = static_cast<const T*>(p.inputs[k])[j];
    }
    RunProgram(p, r);
#pragma unroll
    for (int o = 0; o < kFusedLaunchMaxOutputs; ++o) {
      if (o < p.num_outputs) static_cast<T*>(p.outputs[o])[j] = r[p.output_regs[o]];
    }
  }
}

template <typename T, bool kVector>
__global__ void FusedElementwiseKernel(const __grid_constant__ FusedLaunchParams p) {
  T r[kFusedLaunchMaxRegisters];
#pragma unroll
  for (int k = 0; k < kFusedLaunchMaxInputs; ++k) {
    if (k < p.num_inputs && p.scalar[k]) r[k] = *static_cast<const T*>(p.inputs[k]);
  }
  if constexpr (!kVector) {
    RunElements(p, r, 0);
  } else {
    using V = Vec16<T>;
    constexpr int kCount = V::kCount;
    const int64_t vectors = p.n / kCount;
    for (int64_t i = GlobalThread(); i < vectors; i += GlobalStride()) {
      V in[kFusedLaunchMaxInputs];
#pragma unroll
      for (int k = 0; k < kFusedLaunchMaxInputs; ++k) {
        if (k < p.num_inputs && !p.scalar[k]) in[k] = static_cast<const V*>(p.inputs[k])[i];
      }
      V out[kFusedLaunchMaxOutputs];
#pragma unroll
      for (int e = 0; e < kCount; ++e) {
#pragma unroll
        for (int k = 0; k < kFusedLaunchMaxInputs; ++k) {
          if (k < p.num_inputs && !p.scalar[k]) r[k] = in[k].v[e];
        }
        RunProgram(p, r);
#pragma unroll
        for (int o = 0; o < kFusedLaunchMaxOutputs; ++o) {
          if (o < p.num_outputs) out[o].v[e] = r[p.output_regs[o]];
        }
      }
      // Every input vector at i was read above, so an output on an input's
      // buffer is safe.
#pragma unroll
      for (int o = 0; o < kFusedLaunchMaxOutputs; ++o) {
        if (o < p.num_outputs) static_cast<V*>(p.outputs[o])[i] = out[o];
      }
    }
    RunElements(p, r, vectors * kCount);
  }
}

template <typename T>
cudaError_t Run(const FusedLaunchParams& p, cudaStream_t stream) {
  bool aligned = true;
  for (int k = 0; k < p.num_inputs; ++k) aligned = aligned && (p.scalar[k] || Aligned16(p.inputs[k]));
  for (int o = 0; o < p.num_outputs; ++o) aligned = aligned && Aligned16(p.outputs[o]);
  if (aligned) {
    FusedElementwiseKernel<T, true><<<Blocks(p.n / Vec16<T>::kCount + 1), kThreads, 0, stream>>>(p);
  } else {
    FusedElementwiseKernel<T, false><<<Blocks(p.n), kThreads, 0, stream>>>(p);
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
  if (params.n == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32: return Run<float>(params, stream);
    case DType::kFloat64: return Run<double>(params, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tandem::cuda
