// The dtype dispatch of the CNN kernels (pooling_kernels.cu,
// batch_norm_kernels.cu), which are templated on their storage types and
// run float32, float64, bfloat16 and float16 with one body (converting with
// half_common.cuh's WidenTo and RoundTo). Header-only.
#ifndef TANDEM_ADAPTOR_CUDA_HALF_CNN_COMMON_CUH_
#define TANDEM_ADAPTOR_CUDA_HALF_CNN_COMMON_CUH_

#include <type_traits>

#include "kernels/cuda/half_common.cuh"

namespace tandem::cuda {

// Calls f(T{}) for float32, float64, bfloat16 (__nv_bfloat16) and float16
// (__half); false for other dtypes.
template <typename F>
bool DispatchFloatOrHalf(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      f(float{});
      return true;
    case DType::kFloat64:
      f(double{});
      return true;
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

}  // namespace tandem::cuda

#endif  // TANDEM_ADAPTOR_CUDA_HALF_CNN_COMMON_CUH_
