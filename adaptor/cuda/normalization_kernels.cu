// Softmax and layer normalization kernels. Softmax: a warp per row (a block
// past 1024 elements) when the dim is innermost, a thread per position
// otherwise; the same kernels serve _softmax and _safe_softmax (a flag: a
// slice of all -inf gives zeros instead of NaN). Layer norm: a block per row
// for the forward and for grad_input (two-pass mean and variance, float
// accumulation for float32), and a block per 32 columns summing over rows
// for grad_weight and grad_bias (deterministic: no atomics). Each row is
// read completely before any of it is written, so softmax's backward may
// write over grad.
#include <cmath>
#include <limits>

#include "adaptor/cuda/kernel_common.cuh"
#include "adaptor/cuda/sequence_launch.h"

namespace tandem::cuda {
namespace {

template <typename T>
__device__ __forceinline__ T WarpMaxNan(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v = MaxNan(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The max of a slice (NaN if any input is) is -inf exactly when every
// input is -inf.
template <typename T>
__device__ __forceinline__ bool AllNegInf(T max) {
  return max == -std::numeric_limits<T>::infinity();
}

// kThreadsPerRow == 32: a warp per row; kThreads: a block per row. With
// `zero_if_all_neg_inf`, a row of all -inf is written as zeros.
template <typename T, int kThreadsPerRow>
__global__ void SoftmaxRowKernel(int64_t rows, int64_t size, bool zero_if_all_neg_inf, const T* in, T* out) {
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
    T m = -std::numeric_limits<T>::infinity();
    if (active) {
      for (int64_t j = lane; j < size; j += kThreadsPerRow) m = MaxNan(m, x[j]);
    }
    if constexpr (kThreadsPerRow == 32) {
      m = WarpMaxNan(m);
    } else {
      m = BlockMax(m, shared, -std::numeric_limits<T>::infinity());
    }
    T s = 0;
    if (active) {
      for (int64_t j = lane; j < size; j += kThreadsPerRow) s += exp(x[j] - m);
    }
    if constexpr (kThreadsPerRow == 32) {
      s = WarpSum(s);
    } else {
      s = BlockSum(s, shared);
    }
    if (active) {
      T* y = out + row * size;
      if (zero_if_all_neg_inf && AllNegInf(m)) {
        for (int64_t j = lane; j < size; j += kThreadsPerRow) y[j] = T(0);
      } else {
        for (int64_t j = lane; j < size; j += kThreadsPerRow) y[j] = exp(x[j] - m) / s;
      }
    }
  }
}

template <typename T>
__global__ void SoftmaxColumnKernel(int64_t outer, int64_t size, int64_t inner, bool zero_if_all_neg_inf, const T* in,
                                    T* out) {
  for (int64_t p = GlobalThread(); p < outer * inner; p += GlobalStride()) {
    const int64_t base = (p / inner) * size * inner + p % inner;
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t d = 0; d < size; ++d) m = MaxNan(m, in[base + d * inner]);
    if (zero_if_all_neg_inf && AllNegInf(m)) {
      for (int64_t d = 0; d < size; ++d) out[base + d * inner] = T(0);
      continue;
    }
    T s = 0;
    for (int64_t d = 0; d < size; ++d) s += exp(in[base + d * inner] - m);
    for (int64_t d = 0; d < size; ++d) out[base + d * inner] = exp(in[base + d * inner] - m) / s;
  }
}

template <typename T, int kThreadsPerRow>
__global__ void SoftmaxBackwardRowKernel(int64_t rows, int64_t size, const T* grad, const T* y, T* grad_in) {
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
      for (int64_t j = lane; j < size; j += kThreadsPerRow) s += grad[base + j] * y[base + j];
    }
    if constexpr (kThreadsPerRow == 32) {
      s = WarpSum(s);
    } else {
      s = BlockSum(s, shared);
    }
    if (active) {
      for (int64_t j = lane; j < size; j += kThreadsPerRow) grad_in[base + j] = y[base + j] * (grad[base + j] - s);
    }
  }
}

template <typename T>
__global__ void SoftmaxBackwardColumnKernel(int64_t outer, int64_t size, int64_t inner, const T* grad, const T* y,
                                            T* grad_in) {
  for (int64_t p = GlobalThread(); p < outer * inner; p += GlobalStride()) {
    const int64_t base = (p / inner) * size * inner + p % inner;
    T s = 0;
    for (int64_t d = 0; d < size; ++d) s += grad[base + d * inner] * y[base + d * inner];
    for (int64_t d = 0; d < size; ++d) {
      const int64_t at = base + d * inner;
      grad_in[at] = y[at] * (grad[at] - s);
    }
  }
}

// A block per row.
template <typename T>
__global__ void LayerNormKernel(int64_t rows, int64_t cols, T eps, const T* x, const T* weight, const T* bias, T* y,
                                T* mean_out, T* rstd_out) {
  __shared__ T shared[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T sum = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += xr[c];
    const T mean = BlockSum(sum, shared) / static_cast<T>(cols);
    T sq = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const T d = xr[c] - mean;
      sq += d * d;
    }
    const T rstd = T(1) / sqrt(BlockSum(sq, shared) / static_cast<T>(cols) + eps);
    T* yr = y + row * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      T v = (xr[c] - mean) * rstd;
      if (weight != nullptr) v *= weight[c];
      if (bias != nullptr) v += bias[c];
      yr[c] = v;
    }
    if (threadIdx.x == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
  }
}

// grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
template <typename T>
__global__ void LayerNormBackwardRowKernel(int64_t rows, int64_t cols, const T* grad, const T* x, const T* mean,
                                           const T* rstd, const T* weight, T* grad_x) {
  __shared__ T shared[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T m = mean[row], s = rstd[row];
    const int64_t base = row * cols;
    T sum_g = 0, sum_gx = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const T g = weight != nullptr ? grad[base + c] * weight[c] : grad[base + c];
      sum_g += g;
      sum_gx += g * (x[base + c] - m) * s;
    }
    const T n = static_cast<T>(cols);
    const T mean_g = BlockSum(sum_g, shared) / n;
    const T mean_gx = BlockSum(sum_gx, shared) / n;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const T g = weight != nullptr ? grad[base + c] * weight[c] : grad[base + c];
      grad_x[base + c] = s * (g - mean_g - (x[base + c] - m) * s * mean_gx);
    }
  }
}

constexpr int kColumnTile = 32;
constexpr int kRowGroups = 16;

// A block per 32 columns: grad_weight = sum over rows of dy * xhat,
// grad_bias = sum of dy.
template <typename T>
__global__ void LayerNormBackwardColumnKernel(int64_t rows, int64_t cols, const T* grad, const T* x, const T* mean,
                                              const T* rstd, T* grad_weight, T* grad_bias) {
  __shared__ T dw[kRowGroups][kColumnTile + 1];
  __shared__ T db[kRowGroups][kColumnTile + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  T sw = 0, sb = 0;
  if (c < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kRowGroups) {
      const T d = grad[r * cols + c];
      sw += d * (x[r * cols + c] - mean[r]) * rstd[r];
      sb += d;
    }
  }
  dw[threadIdx.y][threadIdx.x] = sw;
  db[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    T tw = 0, tb = 0;
    for (int g = 0; g < kRowGroups; ++g) {
      tw += dw[g][threadIdx.x];
      tb += db[g][threadIdx.x];
    }
    grad_weight[c] = tw;
    grad_bias[c] = tb;
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

cudaError_t LaunchSoftmax(DType dtype, int64_t outer, int64_t size, int64_t inner, bool zero_if_all_neg_inf,
                          const void* in, void* out, cudaStream_t stream) {
  if (outer * size * inner == 0) return cudaSuccess;
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(out);
    if (inner == 1 && size <= 1024) {
      SoftmaxRowKernel<T, 32>
          <<<Blocks(outer, kThreads / 32), kThreads, 0, stream>>>(outer, size, zero_if_all_neg_inf, x, y);
    } else if (inner == 1) {
      SoftmaxRowKernel<T, kThreads><<<Blocks(outer, 1), kThreads, 0, stream>>>(outer, size, zero_if_all_neg_inf, x, y);
    } else {
      SoftmaxColumnKernel<T>
          <<<Blocks(outer * inner), kThreads, 0, stream>>>(outer, size, inner, zero_if_all_neg_inf, x, y);
    }
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchSoftmaxBackward(DType dtype, int64_t outer, int64_t size, int64_t inner, const void* grad,
                                  const void* y, void* grad_in, cudaStream_t stream) {
  if (outer * size * inner == 0) return cudaSuccess;
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(grad);
    const T* o = static_cast<const T*>(y);
    T* r = static_cast<T*>(grad_in);
    if (inner == 1 && size <= 1024) {
      SoftmaxBackwardRowKernel<T, 32><<<Blocks(outer, kThreads / 32), kThreads, 0, stream>>>(outer, size, g, o, r);
    } else if (inner == 1) {
      SoftmaxBackwardRowKernel<T, kThreads><<<Blocks(outer, 1), kThreads, 0, stream>>>(outer, size, g, o, r);
    } else {
      SoftmaxBackwardColumnKernel<T><<<Blocks(outer * inner), kThreads, 0, stream>>>(outer, size, inner, g, o, r);
    }
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchLayerNorm(DType dtype, int64_t rows, int64_t cols, double eps, const void* x, const void* weight,
                            const void* bias, void* y, void* mean, void* rstd, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    LayerNormKernel<T><<<Blocks(rows, 1), kThreads, 0, stream>>>(
        rows, cols, static_cast<T>(eps), static_cast<const T*>(x), static_cast<const T*>(weight),
        static_cast<const T*>(bias), static_cast<T*>(y), static_cast<T*>(mean), static_cast<T*>(rstd));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchLayerNormBackward(DType dtype, int64_t rows, int64_t cols, const void* grad, const void* x,
                                    const void* mean, const void* rstd, const void* weight, void* grad_x,
                                    void* grad_weight, void* grad_bias, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(grad);
    const T* px = static_cast<const T*>(x);
    const T* pm = static_cast<const T*>(mean);
    const T* pr = static_cast<const T*>(rstd);
    if (rows > 0) {
      LayerNormBackwardRowKernel<T><<<Blocks(rows, 1), kThreads, 0, stream>>>(
          rows, cols, g, px, pm, pr, static_cast<const T*>(weight), static_cast<T*>(grad_x));
    }
    const dim3 block(kColumnTile, kRowGroups);
    const unsigned grid = static_cast<unsigned>((cols + kColumnTile - 1) / kColumnTile);
    LayerNormBackwardColumnKernel<T><<<grid, block, 0, stream>>>(rows, cols, g, px, pm, pr,
                                                                 static_cast<T*>(grad_weight),
                                                                 static_cast<T*>(grad_bias));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
