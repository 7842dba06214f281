// Device-side building blocks of the .cu files (kernels/cuda only): dtype to
// C++ type, value conversion, strided offsets, grid sizing and launch-error
// reporting. Header-only.
#ifndef TANDEM_ADAPTOR_CUDA_KERNEL_COMMON_CUH_
#define TANDEM_ADAPTOR_CUDA_KERNEL_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/launch.h"

namespace tandem::cuda {

inline constexpr int kThreads = 256;
// Grid-stride loops cover the rest; this keeps every SM busy with room to
// spare on an H200 (132 SMs).
inline constexpr int64_t kMaxBlocks = 132 * 32;

inline int64_t Blocks(int64_t work_items, int threads = kThreads) {
  int64_t blocks = (work_items + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  return blocks < kMaxBlocks ? blocks : kMaxBlocks;
}

inline cudaError_t LaunchError() { return cudaGetLastError(); }

// A C++ cast, except that bool is "nonzero" (as the CPU kernels convert).
template <typename To, typename From>
__host__ __device__ __forceinline__ To Convert(From value) {
  if constexpr (std::is_same_v<To, bool>) {
    return value != From(0);
  } else {
    return static_cast<To>(value);
  }
}

// One element of `dtype` at `p`, converted to T.
template <typename T>
__device__ __forceinline__ T LoadConverted(const void* p, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return Convert<T>(*static_cast<const float*>(p));
    case DType::kFloat64:
      return Convert<T>(*static_cast<const double*>(p));
    case DType::kInt64:
      return Convert<T>(*static_cast<const int64_t*>(p));
    case DType::kInt32:
      return Convert<T>(*static_cast<const int32_t*>(p));
    case DType::kBool:
      return Convert<T>(*static_cast<const bool*>(p));
    // A 16-bit rank-0 operand of a float32 or float64 op (exact in float).
    case DType::kBFloat16:
      return Convert<T>(__bfloat162float(*static_cast<const __nv_bfloat16*>(p)));
    case DType::kFloat16:
      return Convert<T>(__half2float(*static_cast<const __half*>(p)));
  }
  return T{};
}

// Element offset of output index `i` in an operand read with `s`.
__device__ __forceinline__ int64_t StridedOffset(const StridedOperand& s, int64_t i) {
  int64_t offset = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t size = s.sizes[d];
    const int64_t q = i / size;
    offset += (i - q * size) * s.strides[d];
    i = q;
  }
  return offset;
}

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GlobalStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// 16 bytes of T, for vectorized loads and stores.
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kCount = 16 / sizeof(T);
  T v[kCount];
};

inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Calls f(T{}) with the unsigned integer type of `bytes` (1, 2, 4 or 8):
// kernels that only move elements (copies, gathers, scatters of whole
// elements) need no more of the dtype than its size; false for others.
template <typename F>
bool DispatchElementBytes(int bytes, F&& f) {
  switch (bytes) {
    case 1:
      f(uint8_t{});
      return true;
    case 2:
      f(uint16_t{});
      return true;
    case 4:
      f(uint32_t{});
      return true;
    case 8:
      f(uint64_t{});
      return true;
    default:
      return false;
  }
}

// Calls f(T{}) for the storable dtypes; false for others.
template <typename F>
bool DispatchStorable(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      f(float{});
      return true;
    case DType::kFloat64:
      f(double{});
      return true;
    case DType::kInt64:
      f(int64_t{});
      return true;
    case DType::kInt32:
      f(int32_t{});
      return true;
    case DType::kBool:
      f(bool{});
      return true;
    default:
      return false;
  }
}

// Warp-wide and block-wide sums (every thread gets the result); `shared`
// holds 32 values.
template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <typename T>
__device__ T BlockSum(T v, T* shared) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = (blockDim.x + 31) / 32;
  v = WarpSum(v);
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : T(0);
  return WarpSum(v);
}
// NaN-propagating max: a NaN anywhere makes the result NaN. Its users take
// it as a shift (softmax's row max), so neither the NaN's payload nor the
// sign of a zero result matters.
template <typename T>
__device__ __forceinline__ T MaxNan(T a, T b) {
  return (a != a || a > b) ? a : b;
}
// float32: one instruction (sm_80 and later) instead of two compares, an or
// and a select.
__device__ __forceinline__ float MaxNan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a != a || a > b) ? a : b;
#endif
}
template <typename T>
__device__ T BlockMax(T v, T* shared, T lowest) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = (blockDim.x + 31) / 32;
  for (int offset = 16; offset > 0; offset /= 2) v = MaxNan(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : lowest;
  for (int offset = 16; offset > 0; offset /= 2) v = MaxNan(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

}  // namespace tandem::cuda

#endif  // TANDEM_ADAPTOR_CUDA_KERNEL_COMMON_CUH_
