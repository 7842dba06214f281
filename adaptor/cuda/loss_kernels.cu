// The classification loss path: log_softmax and its backward (a warp or a
// block per row when the dim is innermost), nll_loss forward (one block) and
// backward (one thread per element of grad_input). Class labels are data:
// each is checked before it indexes anything, and a bad one is reported
// through the error word (launch.h) and skipped.
#include <cmath>
#include <limits>

#include "adaptor/cuda/kernel_common.cuh"
#include "adaptor/cuda/launch.h"

namespace tandem::cuda {
namespace {

__device__ __forceinline__ float Exp(float x) { return expf(x); }
__device__ __forceinline__ double Exp(double x) { return exp(x); }
__device__ __forceinline__ float Log(float x) { return logf(x); }
__device__ __forceinline__ double Log(double x) { return log(x); }

// Row max with NaN propagation, over lanes [lane, size) stepping by `step`.
template <typename T>
__device__ __forceinline__ T PartialMax(const T* x, int64_t size, int lane, int step) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = lane; j < size; j += step) m = MaxNan(m, x[j]);
  return m;
}

template <typename T>
__device__ __forceinline__ T WarpMaxNan(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v = MaxNan(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// kThreadsPerRow == 32: a warp per row; kThreads: a block per row.
template <typename T, int kThreadsPerRow>
__global__ void LogSoftmaxRowKernel(int64_t rows, int64_t size, const T* in, T* out) {
  constexpr int kRowsPerBlock = kThreads / kThreadsPerRow;
  __shared__ T shared[32];
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  const int64_t rounds = (rows + step - 1) / step;
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t row = first + round * step;
    const bool active = row < rows;
    const T* x = in + (active ? row : 0) * size;
    T m = active ? PartialMax(x, size, lane, kThreadsPerRow) : -std::numeric_limits<T>::infinity();
    if constexpr (kThreadsPerRow == 32) {
      m = WarpMaxNan(m);
    } else {
      m = BlockMax(m, shared, -std::numeric_limits<T>::infinity());
    }
    T s = 0;
    if (active) {
      for (int64_t j = lane; j < size; j += kThreadsPerRow) s += Exp(x[j] - m);
    }
    if constexpr (kThreadsPerRow == 32) {
      s = WarpSum(s);
    } else {
      s = BlockSum(s, shared);
    }
    if (active) {
      const T shift = m + Log(s);
      T* y = out + row * size;
      for (int64_t j = lane; j < size; j += kThreadsPerRow) y[j] = x[j] - shift;
    }
  }
}

// The dim is not innermost: a thread per (outer, inner) position.
template <typename T>
__global__ void LogSoftmaxColumnKernel(int64_t outer, int64_t size, int64_t inner, const T* in, T* out) {
  for (int64_t p = GlobalThread(); p < outer * inner; p += GlobalStride()) {
    const int64_t base = (p / inner) * size * inner + p % inner;
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t d = 0; d < size; ++d) m = MaxNan(m, in[base + d * inner]);
    T s = 0;
    for (int64_t d = 0; d < size; ++d) s += Exp(in[base + d * inner] - m);
    const T shift = m + Log(s);
    for (int64_t d = 0; d < size; ++d) out[base + d * inner] = in[base + d * inner] - shift;
  }
}

template <typename T, int kThreadsPerRow>
__global__ void LogSoftmaxBackwardRowKernel(int64_t rows, int64_t size, const T* grad, const T* output, T* grad_in) {
  constexpr int kRowsPerBlock = kThreads / kThreadsPerRow;
  __shared__ T shared[32];
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  const int64_t rounds = (rows + step - 1) / step;
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t row = first + round * step;
    const bool active = row < rows;
    const int64_t base = (active ? row : 0) * size;
    T s = 0;
    if (active) {
      for (int64_t j = lane; j < size; j += kThreadsPerRow) s += grad[base + j];
    }
    // The sum is complete before any element is written (grad_in may be grad).
    if constexpr (kThreadsPerRow == 32) {
      s = WarpSum(s);
    } else {
      s = BlockSum(s, shared);
    }
    if (active) {
      for (int64_t j = lane; j < size; j += kThreadsPerRow) {
        grad_in[base + j] = grad[base + j] - Exp(output[base + j]) * s;
      }
    }
  }
}

template <typename T>
__global__ void LogSoftmaxBackwardColumnKernel(int64_t outer, int64_t size, int64_t inner, const T* grad,
                                               const T* output, T* grad_in) {
  for (int64_t p = GlobalThread(); p < outer * inner; p += GlobalStride()) {
    const int64_t base = (p / inner) * size * inner + p % inner;
    T s = 0;
    for (int64_t d = 0; d < size; ++d) s += grad[base + d * inner];
    for (int64_t d = 0; d < size; ++d) {
      const int64_t at = base + d * inner;
      grad_in[at] = grad[at] - Exp(output[at]) * s;
    }
  }
}

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

cudaError_t LaunchLogSoftmax(DType dtype, int64_t outer, int64_t size, int64_t inner, const void* in, void* out,
                             cudaStream_t stream) {
  if (outer * size * inner == 0) return cudaSuccess;
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(out);
    if (inner == 1 && size <= 1024) {
      LogSoftmaxRowKernel<T, 32><<<Blocks(outer, kThreads / 32), kThreads, 0, stream>>>(outer, size, x, y);
    } else if (inner == 1) {
      LogSoftmaxRowKernel<T, kThreads><<<Blocks(outer, 1), kThreads, 0, stream>>>(outer, size, x, y);
    } else {
      LogSoftmaxColumnKernel<T><<<Blocks(outer * inner), kThreads, 0, stream>>>(outer, size, inner, x, y);
    }
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchLogSoftmaxBackward(DType dtype, int64_t outer, int64_t size, int64_t inner, const void* grad,
                                     const void* output, void* grad_in, cudaStream_t stream) {
  if (outer * size * inner == 0) return cudaSuccess;
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(grad);
    const T* o = static_cast<const T*>(output);
    T* r = static_cast<T*>(grad_in);
    if (inner == 1 && size <= 1024) {
      LogSoftmaxBackwardRowKernel<T, 32><<<Blocks(outer, kThreads / 32), kThreads, 0, stream>>>(outer, size, g, o, r);
    } else if (inner == 1) {
      LogSoftmaxBackwardRowKernel<T, kThreads><<<Blocks(outer, 1), kThreads, 0, stream>>>(outer, size, g, o, r);
    } else {
      LogSoftmaxBackwardColumnKernel<T><<<Blocks(outer * inner), kThreads, 0, stream>>>(outer, size, inner, g, o, r);
    }
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

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
