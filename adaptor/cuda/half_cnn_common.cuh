// Device-side conversions of the CNN kernels (pooling_kernels.cu,
// batch_norm_kernels.cu), which are templated on their storage types and
// run float32, float64, bfloat16 and float16 with one body: WidenTo<A>
// reads a stored value into the arithmetic type A (a 16-bit value exactly,
// through float), RoundTo<T> stores an arithmetic result as T (a 16-bit T
// through float32, so a double result rounds as the CPU kernels round it:
// to float32, then to nearest-even 16 bits; float32 and float64 as a C++
// cast). Header-only.
#ifndef TANDEM_ADAPTOR_CUDA_HALF_CNN_COMMON_CUH_
#define TANDEM_ADAPTOR_CUDA_HALF_CNN_COMMON_CUH_

#include <type_traits>

#include "adaptor/cuda/half_common.cuh"

namespace tandem::cuda {

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

// Calls f(T{}) for float32, float64, bfloat16 (__nv_bfloat16) and float16
// (__half); false for other dtypes.
template <typename F>
bool DispatchFloatOrHalf(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(float{}); return true;
    case DType::kFloat64: f(double{}); return true;
    case DType::kBFloat16: f(__nv_bfloat16{}); return true;
    case DType::kFloat16: f(__half{}); return true;
    default: return false;
  }
}

}  // namespace tandem::cuda

#endif  // TANDEM_ADAPTOR_CUDA_HALF_CNN_COMMON_CUH_
