// Device-side building blocks of the 16-bit float kernels (half_kernels.cu,
// half_row_kernels.cu): the storage types, their widening to float32 and
// rounding from it, a load of one element of any dtype as float32, and the
// dispatch over the two 16-bit dtypes (alone or with the storable ones).
// Header-only.
#ifndef TANDEM_ADAPTOR_CUDA_HALF_COMMON_CUH_
#define TANDEM_ADAPTOR_CUDA_HALF_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/launch.h"

namespace tandem::cuda {

template <typename H>
inline constexpr bool kIsHalfType = std::is_same_v<H, __nv_bfloat16> || std::is_same_v<H, __half>;

__device__ __forceinline__ float Widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float Widen(__half v) { return __half2float(v); }

// float32 -> H, to nearest, ties to even.
template <typename H>
__device__ __forceinline__ H Narrow(float v) {
  if constexpr (std::is_same_v<H, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return __float2half_rn(v);
  }
}

// For kernels templated on their storage type (float32, float64, bfloat16,
// float16) with one body: WidenTo<A> reads a stored value into the
// arithmetic type A (a 16-bit value exactly, through float), RoundTo<T>
// stores an arithmetic result as T (a 16-bit T through float32, so a double
// result rounds as the CPU kernels and PyTorch round it: to float32, then to
// nearest-even 16 bits; float32 and float64 as a C++ cast).
template <typename A, typename T>
__device__ __forceinline__ A WidenTo(T v) {
  if constexpr (kIsHalfType<T>) {
    return static_cast<A>(Widen(v));
  } else {
    return static_cast<A>(v);
  }
}

template <typename T, typename A>
__device__ __forceinline__ T RoundTo(A v) {
  if constexpr (kIsHalfType<T>) {
    return Narrow<T>(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// One element of `dtype` at `p` as float32 (double and int64 rounded to
// float, bool 0 or 1).
__device__ __forceinline__ float LoadAsFloat(const void* p, DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
      return Widen(*static_cast<const __nv_bfloat16*>(p));
    case DType::kFloat16:
      return Widen(*static_cast<const __half*>(p));
    case DType::kFloat32:
      return *static_cast<const float*>(p);
    case DType::kFloat64:
      return static_cast<float>(*static_cast<const double*>(p));
    case DType::kInt64:
      return static_cast<float>(*static_cast<const int64_t*>(p));
    case DType::kInt32:
      return static_cast<float>(*static_cast<const int32_t*>(p));
    case DType::kBool:
      return *static_cast<const bool*>(p) ? 1.0f : 0.0f;
  }
  return 0.0f;
}

// Calls f(H{}) with H the storage type of a 16-bit `dtype`; false for others.
template <typename F>
bool DispatchHalf(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kBFloat16:
      f(__nv_bfloat16{});
      return true;
    case DType::kFloat16:
      f(__half{});
      return true;
    default:
      return false;
  }
}

// Calls f(T{}) for the storable dtypes (kernel_common.cuh) and the 16-bit
// ones; false for others.
template <typename F>
bool DispatchStorableOrHalf(DType dtype, F&& f) {
  if (DispatchHalf(dtype, f)) return true;
  return DispatchStorable(dtype, f);
}

}  // namespace tandem::cuda

#endif  // TANDEM_ADAPTOR_CUDA_HALF_COMMON_CUH_
