// Group normalization on CUDA (native_group_norm and its backward). A
// group's channels are adjacent, so each (image, group) row of C / groups *
// HxW elements is contiguous: the forward and grad_input take a block per
// row (grid-stride over rows), the parameter gradients a block per channel
// that walks the channel's HxW span in every image. Block sums in a fixed
// order, no atomics, no scratch memory: deterministic and capturable.
//
// Arithmetic: float32 and float64 tensors accumulate in double (as the CPU
// oracle does), the 16-bit ones in float32 (PyTorch's opmath); each result
// rounds once when stored. The forward normalizes with the unrounded mean and
// rstd, then stores them in the tensor's dtype (PyTorch's rule for group
// norm, 16-bit tensors too).
#include <type_traits>

#include "kernels/cuda/half_cnn_common.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/spatial_launch.h"

namespace tandem::cuda {
namespace {

template <typename T>
using AccType = std::conditional_t<kIsHalfType<T>, float, double>;

template <typename A>
__device__ __forceinline__ A Rsqrt(A v) {
  return A(1) / sqrt(v);
}

template <typename T>
__global__ void GroupNormKernel(GroupNormLaunchParams p, const T* x, const T* weight, const T* bias, T* y, T* mean_out,
                                T* rstd_out) {
  using A = AccType<T>;
  __shared__ A shared[32];
  const int64_t cpg = p.c / p.groups;
  const int64_t row = cpg * p.hxw;
  const int64_t rows = p.n * p.groups;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * row;
    A sum = 0;
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) sum += WidenTo<A>(xr[i]);
    const A mean = BlockSum(sum, shared) / static_cast<A>(row);
    A sq = 0;
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
      const A d = WidenTo<A>(xr[i]) - mean;
      sq += d * d;
    }
    const A rstd = Rsqrt(BlockSum(sq, shared) / static_cast<A>(row) + static_cast<A>(p.eps));
    const int64_t first_channel = (r % p.groups) * cpg;
    T* yr = y + r * row;
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
      const int64_t c = first_channel + i / p.hxw;
      A v = (WidenTo<A>(xr[i]) - mean) * rstd;
      if (weight != nullptr) v *= WidenTo<A>(weight[c]);
      if (bias != nullptr) v += WidenTo<A>(bias[c]);
      yr[i] = RoundTo<T>(v);
    }
    if (threadIdx.x == 0) {
      mean_out[r] = RoundTo<T>(mean);
      rstd_out[r] = RoundTo<T>(rstd);
    }
  }
}

// grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)) over the row, g =
// dy * weight[c], xhat = (x - mean) * rstd with the saved statistics.
template <typename T>
__global__ void GroupNormGradInputKernel(GroupNormLaunchParams p, const T* dy, const T* x, const T* mean, const T* rstd,
                                         const T* weight, T* dx) {
  using A = AccType<T>;
  __shared__ A shared[32];
  const int64_t cpg = p.c / p.groups;
  const int64_t row = cpg * p.hxw;
  const int64_t rows = p.n * p.groups;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const A m = WidenTo<A>(mean[r]), s = WidenTo<A>(rstd[r]);
    const int64_t first_channel = (r % p.groups) * cpg;
    const int64_t base = r * row;
    A sum_g = 0, sum_gx = 0;
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
      A g = WidenTo<A>(dy[base + i]);
      if (weight != nullptr) g *= WidenTo<A>(weight[first_channel + i / p.hxw]);
      sum_g += g;
      sum_gx += g * (WidenTo<A>(x[base + i]) - m) * s;
    }
    const A n = static_cast<A>(row);
    const A mean_g = BlockSum(sum_g, shared) / n;
    const A mean_gx = BlockSum(sum_gx, shared) / n;
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
      A g = WidenTo<A>(dy[base + i]);
      if (weight != nullptr) g *= WidenTo<A>(weight[first_channel + i / p.hxw]);
      const A xhat = (WidenTo<A>(x[base + i]) - m) * s;
      dx[base + i] = RoundTo<T>(s * (g - mean_g - xhat * mean_gx));
    }
  }
}

// grad_weight[c] = sum over images and positions of dy * xhat, grad_bias[c]
// = sum of dy: a block per channel.
template <typename T>
__global__ void GroupNormGradAffineKernel(GroupNormLaunchParams p, const T* dy, const T* x, const T* mean,
                                          const T* rstd, T* grad_weight, T* grad_bias) {
  using A = AccType<T>;
  __shared__ A shared[32];
  const int64_t cpg = p.c / p.groups;
  const int64_t span = p.n * p.hxw;
  for (int64_t c = blockIdx.x; c < p.c; c += gridDim.x) {
    const int64_t group = c / cpg;
    A sum_w = 0, sum_b = 0;
    for (int64_t i = threadIdx.x; i < span; i += blockDim.x) {
      const int64_t n = i / p.hxw;
      const int64_t at = (n * p.c + c) * p.hxw + (i - n * p.hxw);
      const int64_t stat = n * p.groups + group;
      const A d = WidenTo<A>(dy[at]);
      sum_b += d;
      sum_w += d * (WidenTo<A>(x[at]) - WidenTo<A>(mean[stat])) * WidenTo<A>(rstd[stat]);
    }
    sum_w = BlockSum(sum_w, shared);
    sum_b = BlockSum(sum_b, shared);
    if (threadIdx.x == 0) {
      if (grad_weight != nullptr) grad_weight[c] = RoundTo<T>(sum_w);
      if (grad_bias != nullptr) grad_bias[c] = RoundTo<T>(sum_b);
    }
  }
}

}  // namespace

cudaError_t LaunchGroupNorm(DType dtype, const GroupNormLaunchParams& p, const void* x, const void* weight,
                            const void* bias, void* y, void* mean, void* rstd, cudaStream_t stream) {
  const int64_t rows = p.n * p.groups;
  if (rows == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    GroupNormKernel<T><<<Blocks(rows, 1), kThreads, 0, stream>>>(
        p, static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), static_cast<T*>(y),
        static_cast<T*>(mean), static_cast<T*>(rstd));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchGroupNormBackward(DType dtype, const GroupNormLaunchParams& p, const void* grad_out, const void* x,
                                    const void* mean, const void* rstd, const void* weight, void* grad_input,
                                    void* grad_weight, void* grad_bias, cudaStream_t stream) {
  const int64_t rows = p.n * p.groups;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = static_cast<const T*>(grad_out);
    const T* px = static_cast<const T*>(x);
    const T* pm = static_cast<const T*>(mean);
    const T* pr = static_cast<const T*>(rstd);
    if (grad_input != nullptr && rows > 0) {
      GroupNormGradInputKernel<T><<<Blocks(rows, 1), kThreads, 0, stream>>>(
          p, dy, px, pm, pr, static_cast<const T*>(weight), static_cast<T*>(grad_input));
    }
    if ((grad_weight != nullptr || grad_bias != nullptr) && p.c > 0) {
      GroupNormGradAffineKernel<T><<<Blocks(p.c, 1), kThreads, 0, stream>>>(
          p, dy, px, pm, pr, static_cast<T*>(grad_weight), static_cast<T*>(grad_bias));
    }
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
