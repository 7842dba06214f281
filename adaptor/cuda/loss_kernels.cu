// The classification loss path after log_softmax (whose kernels are
// softmax's, normalization_kernels.cu): nll_loss forward (one block) and
// backward (one thread per element of grad_input). Class labels are data:
// each is checked before it indexes anything, and a bad one is reported
// through the error word (launch.h) and skipped.
#include "adaptor/cuda/kernel_common.cuh"
#include "adaptor/cuda/launch.h"

namespace tandem::cuda {
namespace {

__device__ __forceinline__ void ReportBadValue(const ErrorWord& error, int64_t value) {
  if (error.word == nullptr) return;
  auto* word = reinterpret_cast<unsigned long long*>(error.word);
  if (atomicCAS(word, 0ull, static_cast<unsigned long long>(error.node) + 1) == 0ull) {
    error.word[1] = value;
  }
}

__device__ __forceinline__ bool LabelValid(int64_t t, const NllParams& p) {
  return t >= 0 && t < p.classes;
}

constexpr int kNllThreads = 512;

template <typename T>
__global__ void NllLossForwardKernel(NllParams p, const T* self, const int64_t* target, const T* weight, T* loss,
                                     T* total_weight) {
  __shared__ T shared[32];
  T sum = 0;
  T weights = 0;
  for (int64_t i = threadIdx.x; i < p.rows; i += blockDim.x) {
    const int64_t t = target[i];
    T row_loss = 0;
    if (t != p.ignore_index) {
      if (LabelValid(t, p)) {
        const T w = weight != nullptr ? weight[t] : T(1);
        row_loss = -self[i * p.classes + t] * w;
        weights += w;
      } else {
        ReportBadValue(p.error, t);
      }
    }
    if (p.reduction == 0) loss[i] = row_loss;
    sum += row_loss;
  }
  sum = BlockSum(sum, shared);
  weights = BlockSum(weights, shared);
  if (threadIdx.x == 0) {
    if (p.reduction == 1) {
      loss[0] = sum / weights;  // every label ignored: 0 / 0 = NaN, as in PyTorch
    } else if (p.reduction == 2) {
      loss[0] = sum;
    }
    *total_weight = weights;
  }
}

template <typename T>
__global__ void NllLossBackwardKernel(NllParams p, const T* grad_output, const int64_t* target,
                                      const T* total_weight, const T* weight, T* grad_input) {
  const int64_t n = p.rows * p.classes;
  const T scale = p.reduction == 1 ? T(1) / *total_weight : T(1);
  for (int64_t idx = GlobalThread(); idx < n; idx += GlobalStride()) {
    const int64_t i = idx / p.classes;
    const int64_t c = idx - i * p.classes;
    const int64_t t = target[i];
    T value = 0;
    if (t != p.ignore_index) {
      if (!LabelValid(t, p)) {
        if (c == 0) ReportBadValue(p.error, t);
      } else if (c == t) {
        const T w = weight != nullptr ? weight[t] : T(1);
        const T g = p.reduction == 0 ? grad_output[i] : grad_output[0];
        value = -w * g * scale;
      }
    }
    grad_input[idx] = value;
  }
}

template <typename F>
bool DispatchFloat(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(float{}); return true;
    case DType::kFloat64: f(double{}); return true;
    default: return false;
  }
}

}  // namespace

cudaError_t LaunchNllLossForward(DType dtype, const NllParams& params, const void* self, const int64_t* target,
                                 const void* weight, void* loss, void* total_weight, cudaStream_t stream) {
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    NllLossForwardKernel<T><<<1, kNllThreads, 0, stream>>>(params, static_cast<const T*>(self), target,
                                                          static_cast<const T*>(weight), static_cast<T*>(loss),
                                                          static_cast<T*>(total_weight));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchNllLossBackward(DType dtype, const NllParams& params, const void* grad_output,
                                  const int64_t* target, const void* total_weight, const void* weight,
                                  void* grad_input, cudaStream_t stream) {
  const int64_t n = params.rows * params.classes;
  if (n == 0) return cudaSuccess;
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    NllLossBackwardKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
        params, static_cast<const T*>(grad_output), target, static_cast<const T*>(total_weight),
        static_cast<const T*>(weight), static_cast<T*>(grad_input));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
