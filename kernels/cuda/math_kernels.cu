// Device code of the pointwise math family: one grid-stride kernel per
// (op, compute type), reading each operand in its own dtype through its
// strided layout and storing in the output's dtype. The formulas are
// kernels/math_functions.h's, shared with the CPU kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <limits>
#include <type_traits>

#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/math_launch.h"
#include "kernels/math_functions.h"

namespace tandem::cuda {
namespace {

template <typename A>
__device__ __forceinline__ A LoadAt(const void* data, DType dtype, int64_t offset) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<A>(static_cast<const float*>(data)[offset]);
    case DType::kFloat64:
      return static_cast<A>(static_cast<const double*>(data)[offset]);
    case DType::kInt64:
      return static_cast<A>(static_cast<const int64_t*>(data)[offset]);
    case DType::kInt32:
      return static_cast<A>(static_cast<const int32_t*>(data)[offset]);
    case DType::kBool:
      return static_cast<A>(static_cast<const bool*>(data)[offset] ? 1 : 0);
    case DType::kBFloat16:
      return static_cast<A>(Widen(static_cast<const __nv_bfloat16*>(data)[offset]));
    case DType::kFloat16:
      return static_cast<A>(Widen(static_cast<const __half*>(data)[offset]));
  }
  return A(0);
}

// A float to an integer as the CPU backend converts (kernel_util.h's
// Convert): NaN to 0, out of range saturated; a C++ cast is undefined there.
template <typename I, typename A>
__device__ __forceinline__ I ToInt(A value) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<I>(value);
  } else {
    if (value != value) return I(0);
    if (value <= static_cast<A>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
    if (value >= static_cast<A>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
    return static_cast<I>(value);
  }
}

template <typename A>
__device__ __forceinline__ void StoreAt(void* data, DType dtype, int64_t i, A value) {
  switch (dtype) {
    case DType::kFloat32:
      static_cast<float*>(data)[i] = static_cast<float>(value);
      return;
    case DType::kFloat64:
      static_cast<double*>(data)[i] = static_cast<double>(value);
      return;
    case DType::kInt64:
      static_cast<int64_t*>(data)[i] = ToInt<int64_t>(value);
      return;
    case DType::kInt32:
      static_cast<int32_t*>(data)[i] = ToInt<int32_t>(value);
      return;
    case DType::kBool:
      static_cast<bool*>(data)[i] = value != A(0);
      return;
    case DType::kBFloat16:
      static_cast<__nv_bfloat16*>(data)[i] = Narrow<__nv_bfloat16>(static_cast<float>(value));
      return;
    case DType::kFloat16:
      static_cast<__half*>(data)[i] = Narrow<__half>(static_cast<float>(value));
      return;
  }
}

__device__ __forceinline__ int64_t OffsetOf(const StridedOperand& layout, int64_t i) {
  return layout.rank == 0 ? i : StridedOffset(layout, i);
}

template <MathOp kOp, typename A>
__global__ void MathKernel(MathLaunch launch, A y_const) {
  for (int64_t i = GlobalThread(); i < launch.n; i += GlobalStride()) {
    const A x = LoadAt<A>(launch.x.data, launch.x.dtype, OffsetOf(launch.x.layout, i));
    const A y = launch.has_y ? LoadAt<A>(launch.y.data, launch.y.dtype, OffsetOf(launch.y.layout, i)) : y_const;
    StoreAt<A>(launch.out, launch.out_dtype, i, math::ApplyMath<kOp, A>(x, y, launch.params));
  }
}

template <MathOp kOp, typename A>
cudaError_t Launch(const MathLaunch& launch, cudaStream_t stream) {
  A y_const;
  if constexpr (std::is_integral_v<A>) {
    y_const = static_cast<A>(launch.params.other_i);
  } else {
    y_const = static_cast<A>(launch.params.other_f);
  }
  MathKernel<kOp, A><<<Blocks(launch.n), kThreads, 0, stream>>>(launch, y_const);
  return LaunchError();
}

}  // namespace

cudaError_t LaunchMath(const MathLaunch& launch, cudaStream_t stream) {
  if (launch.n == 0) return cudaSuccess;
  cudaError_t result = cudaErrorInvalidValue;
  math::DispatchMathOp(launch.op, [&](auto op) {
    constexpr MathOp kOp = decltype(op)::value;
    switch (launch.compute) {
      case MathCompute::kFloat32:
        result = Launch<kOp, float>(launch, stream);
        break;
      case MathCompute::kFloat64:
        result = Launch<kOp, double>(launch, stream);
        break;
      case MathCompute::kInt64:
        result = Launch<kOp, int64_t>(launch, stream);
        break;
    }
  });
  return result;
}

}  // namespace tandem::cuda
