// The classification loss path after log_softmax (whose kernels are
// softmax's, normalization_kernels.cu): nll_loss forward (one block) and
// backward (one thread per element of grad_input), for float32, float64 and
// the 16-bit floats, with int64 or int32 class labels (templates over the
// value type T and the label type I). 16-bit values are widened to float32,
// summed there in a fixed order, and rounded once when stored (PyTorch's
// opmath rule; the same sums as the other 16-bit kernels, half_launch.h).
// Class labels are data: each is checked before it indexes anything, and a
// bad one is reported through the error word (launch.h) and skipped.
#include <type_traits>

#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/launch.h"

namespace tandem::cuda {
namespace {

__device__ __forceinline__ void ReportBadValue(const ErrorWord& error, int64_t value) {
  if (error.word == nullptr) return;
  auto* word = reinterpret_cast<unsigned long long*>(error.word);
  if (atomicCAS(word, 0ull, static_cast<unsigned long long>(error.node) + 1) == 0ull) {
    error.word[1] = value;
  }
}

__device__ __forceinline__ bool LabelValid(int64_t t, const NllParams& p) { return t >= 0 && t < p.classes; }

// The type the kernels compute a T in: float32 for the 16-bit types.
template <typename T>
using OpMath = std::conditional_t<kIsHalfType<T>, float, T>;

template <typename T>
__device__ __forceinline__ OpMath<T> Load(T v) {
  if constexpr (kIsHalfType<T>) {
    return Widen(v);
  } else {
    return v;
  }
}

template <typename T>
__device__ __forceinline__ T Store(OpMath<T> v) {
  if constexpr (kIsHalfType<T>) {
    return Narrow<T>(v);
  } else {
    return v;
  }
}

constexpr int kNllThreads = 512;

template <typename T, typename I>
__global__ void NllLossForwardKernel(NllParams p, const T* self, const I* target, const T* weight, T* loss,
                                     T* total_weight) {
  using A = OpMath<T>;
  __shared__ A shared[32];
  A sum = 0;
  A weights = 0;
  for (int64_t i = threadIdx.x; i < p.rows; i += blockDim.x) {
    const int64_t t = target[i];
    A row_loss = 0;
    if (t != p.ignore_index) {
      if (LabelValid(t, p)) {
        const A w = weight != nullptr ? Load(weight[t]) : A(1);
        row_loss = -Load(self[i * p.classes + t]) * w;
        weights += w;
      } else {
        ReportBadValue(p.error, t);
      }
    }
    if (p.reduction == 0) loss[i] = Store<T>(row_loss);
    sum += row_loss;
  }
  sum = BlockSum(sum, shared);
  weights = BlockSum(weights, shared);
  if (threadIdx.x == 0) {
    if (p.reduction == 1) {
      loss[0] = Store<T>(sum / weights);  // every label ignored: 0 / 0 = NaN, as in PyTorch
    } else if (p.reduction == 2) {
      loss[0] = Store<T>(sum);
    }
    *total_weight = Store<T>(weights);
  }
}

template <typename T, typename I>
__global__ void NllLossBackwardKernel(NllParams p, const T* grad_output, const I* target, const T* total_weight,
                                      const T* weight, T* grad_input) {
  using A = OpMath<T>;
  const int64_t n = p.rows * p.classes;
  const A scale = p.reduction == 1 ? A(1) / Load(*total_weight) : A(1);
  for (int64_t idx = GlobalThread(); idx < n; idx += GlobalStride()) {
    const int64_t i = idx / p.classes;
    const int64_t c = idx - i * p.classes;
    const int64_t t = target[i];
    A value = 0;
    if (t != p.ignore_index) {
      if (!LabelValid(t, p)) {
        if (c == 0) ReportBadValue(p.error, t);
      } else if (c == t) {
        const A w = weight != nullptr ? Load(weight[t]) : A(1);
        const A g = Load(p.reduction == 0 ? grad_output[i] : grad_output[0]);
        value = -w * g * scale;
      }
    }
    grad_input[idx] = Store<T>(value);
  }
}

// Calls f(T{}, I{}) for the value dtype's and the label dtype's C++ types;
// false for dtypes without a kernel.
template <typename F>
bool DispatchNll(DType dtype, DType target_dtype, F&& f) {
  bool launched = false;
  DispatchIndex(target_dtype, [&](auto index_tag) {
    switch (dtype) {
      case DType::kFloat32:
        f(float{}, index_tag);
        launched = true;
        break;
      case DType::kFloat64:
        f(double{}, index_tag);
        launched = true;
        break;
      default:
        launched = DispatchHalf(dtype, [&](auto half_tag) { f(half_tag, index_tag); });
    }
  });
  return launched;
}

}  // namespace

cudaError_t LaunchNllLossForward(DType dtype, const NllParams& params, const void* self, IndexOperand target,
                                 const void* weight, void* loss, void* total_weight, cudaStream_t stream) {
  const bool launched = DispatchNll(dtype, target.dtype, [&](auto tag, auto index_tag) {
    using T = decltype(tag);
    using I = decltype(index_tag);
    NllLossForwardKernel<T, I><<<1, kNllThreads, 0, stream>>>(
        params, static_cast<const T*>(self), static_cast<const I*>(target.data), static_cast<const T*>(weight),
        static_cast<T*>(loss), static_cast<T*>(total_weight));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchNllLossBackward(DType dtype, const NllParams& params, const void* grad_output, IndexOperand target,
                                  const void* total_weight, const void* weight, void* grad_input, cudaStream_t stream) {
  const int64_t n = params.rows * params.classes;
  if (n == 0) return cudaSuccess;
  const bool launched = DispatchNll(dtype, target.dtype, [&](auto tag, auto index_tag) {
    using T = decltype(tag);
    using I = decltype(index_tag);
    NllLossBackwardKernel<T, I><<<Blocks(n), kThreads, 0, stream>>>(
        params, static_cast<const T*>(grad_output), static_cast<const I*>(target.data),
        static_cast<const T*>(total_weight), static_cast<const T*>(weight), static_cast<T*>(grad_input));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
