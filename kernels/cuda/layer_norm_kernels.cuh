// The layer normalization kernels (launched by normalization_kernels.cu,
// the only file that includes this one): the forward and grad_input over
// row tiles (row_kernels.cuh; two-pass mean and variance from the
// registers, float accumulation for float32) or a block per row for other
// rows, and the column sums that give grad_weight and grad_bias
// (cluster_reduce.cuh's ColumnSum source). Kernels in an anonymous
// namespace.
#ifndef TANDEM_ADAPTOR_CUDA_LAYER_NORM_KERNELS_CUH_
#define TANDEM_ADAPTOR_CUDA_LAYER_NORM_KERNELS_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cluster_reduce.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/row_kernels.cuh"

namespace tandem::cuda {
namespace {

// The affine parameters of a pack of columns: w = 1, b = 0 when absent.
template <typename T>
struct Affine {
  const T* weight;
  const T* bias;
};

// A row tile per row: mean, then the biased variance from the registers;
// y = (x - mean) * rstd * weight + bias.
template <typename T, int kThreadsPerRow, int kPacks, int kRows>
__global__ void __launch_bounds__(kThreads)
    LayerNormTileKernel(int rows, int cols, T eps, const T* x, Affine<T> affine, T* y, T* mean_out, T* rstd_out) {
  using Tile = RowTile<T, kThreadsPerRow, kPacks>;
  using Pack = typename Tile::Pack;
  constexpr int kWidth = Tile::kWidth;
  __shared__ T shared[32];
  const RowWalk<kThreadsPerRow, kRows, int> walk(rows);
  const int lane = walk.lane;
  const int row_packs = cols / kWidth;
  const T n = static_cast<T>(cols);
  for (int base = walk.first; base < rows; base += walk.step) {
    for (int q = 0; q < kRows; ++q) {  // the warp's rows one after another
      const int row = walk.Row(base, q);
      const bool active = walk.Active(row);
      Tile v;
      T sum = 0;
      if (active) {
        v.Load(x + row * cols, lane, row_packs);
#pragma unroll
        for (int k = 0; k < kPacks; ++k) {
          if (!Tile::Has(k, lane, row_packs)) continue;
#pragma unroll
          for (int e = 0; e < kWidth; ++e) sum += v.pack[k].v[e];
        }
      }
      const T mean = RowSum<kThreadsPerRow>(sum, shared) / n;
      T sq = 0;
      if (active) {
#pragma unroll
        for (int k = 0; k < kPacks; ++k) {
          if (!Tile::Has(k, lane, row_packs)) continue;
#pragma unroll
          for (int e = 0; e < kWidth; ++e) {
            const T d = v.pack[k].v[e] - mean;
            sq += d * d;
          }
        }
      }
      const T rstd = T(1) / sqrt(RowSum<kThreadsPerRow>(sq, shared) / n + eps);
      if (!active) continue;
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        if (!Tile::Has(k, lane, row_packs)) continue;
        const int at = lane + k * kThreadsPerRow;
        Pack w, b;
        if (affine.weight != nullptr) w = reinterpret_cast<const Pack*>(affine.weight)[at];
        if (affine.bias != nullptr) b = reinterpret_cast<const Pack*>(affine.bias)[at];
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
          T out = (v.pack[k].v[e] - mean) * rstd;
          if (affine.weight != nullptr) out *= w.v[e];
          if (affine.bias != nullptr) out += b.v[e];
          v.pack[k].v[e] = out;
        }
      }
      v.Store(y + row * cols, lane, row_packs);
      if (lane == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
      }
    }
  }
}

// Any row, a block per row, reading the row once per pass.
template <typename T>
__global__ void LayerNormLoopKernel(int64_t rows, int64_t cols, T eps, const T* x, Affine<T> affine, T* y, T* mean_out,
                                    T* rstd_out) {
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
      if (affine.weight != nullptr) v *= affine.weight[c];
      if (affine.bias != nullptr) v += affine.bias[c];
      yr[c] = v;
    }
    if (threadIdx.x == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
  }
}

// grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w,
// xhat = (x - mean) * rstd; a row tile per row.
template <typename T, int kThreadsPerRow, int kPacks, int kRows>
__global__ void __launch_bounds__(kThreads)
    LayerNormBackwardTileKernel(int rows, int cols, const T* grad, const T* x, const T* mean, const T* rstd,
                                const T* weight, T* grad_x) {
  using Tile = RowTile<T, kThreadsPerRow, kPacks>;
  using Pack = typename Tile::Pack;
  constexpr int kWidth = Tile::kWidth;
  __shared__ T shared[32];
  const RowWalk<kThreadsPerRow, kRows, int> walk(rows);
  const int lane = walk.lane;
  const int row_packs = cols / kWidth;
  const T n = static_cast<T>(cols);
  for (int base = walk.first; base < rows; base += walk.step) {
    for (int q = 0; q < kRows; ++q) {  // the warp's rows one after another
      const int row = walk.Row(base, q);
      const bool active = walk.Active(row);
      Tile g, xhat;  // g = dy * w in place of dy
      T m = 0, s = 0, sum_g = 0, sum_gx = 0;
      if (active) {
        m = mean[row];
        s = rstd[row];
        g.Load(grad + row * cols, lane, row_packs);
        xhat.Load(x + row * cols, lane, row_packs);
#pragma unroll
        for (int k = 0; k < kPacks; ++k) {
          if (!Tile::Has(k, lane, row_packs)) continue;
          Pack w;
          const int at = lane + k * kThreadsPerRow;
          if (weight != nullptr) w = reinterpret_cast<const Pack*>(weight)[at];
#pragma unroll
          for (int e = 0; e < kWidth; ++e) {
            if (weight != nullptr) g.pack[k].v[e] *= w.v[e];
            xhat.pack[k].v[e] = (xhat.pack[k].v[e] - m) * s;
            sum_g += g.pack[k].v[e];
            sum_gx += g.pack[k].v[e] * xhat.pack[k].v[e];
          }
        }
      }
      const T mean_g = RowSum<kThreadsPerRow>(sum_g, shared) / n;
      const T mean_gx = RowSum<kThreadsPerRow>(sum_gx, shared) / n;
      if (!active) continue;
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        if (!Tile::Has(k, lane, row_packs)) continue;
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
          g.pack[k].v[e] = s * (g.pack[k].v[e] - mean_g - xhat.pack[k].v[e] * mean_gx);
        }
      }
      g.Store(grad_x + row * cols, lane, row_packs);
    }
  }
}

template <typename T>
__global__ void LayerNormBackwardLoopKernel(int64_t rows, int64_t cols, const T* grad, const T* x, const T* mean,
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

// The column sums of the layer norm backward: grad_weight = sum over rows of
// dy * xhat, grad_bias = sum of dy.
template <typename T>
struct LayerNormGradSums {
  using Element = T;
  using Acc = T;
  static constexpr int kSums = 2;
  int64_t cols;
  const T* grad;
  const T* x;
  const T* mean;
  const T* rstd;
  T* grad_weight;
  T* grad_bias;

  template <int kVec>
  __device__ __forceinline__ void Add(int64_t /*slab*/, int64_t row, int64_t col, T (&acc)[kVec][2]) const {
    T d[kVec], v[kVec];
    LoadColumns<kVec>(grad + row * cols + col, d);
    LoadColumns<kVec>(x + row * cols + col, v);
    const T m = mean[row], s = rstd[row];
#pragma unroll
    for (int c = 0; c < kVec; ++c) {
      acc[c][0] += d[c] * (v[c] - m) * s;
      acc[c][1] += d[c];
    }
  }
  template <int kVec>
  __device__ __forceinline__ void Store(int64_t /*slab*/, int64_t col, const T (&total)[kVec][2]) const {
#pragma unroll
    for (int c = 0; c < kVec; ++c) {
      if (grad_weight != nullptr) grad_weight[col + c] = total[c][0];
      if (grad_bias != nullptr) grad_bias[col + c] = total[c][1];
    }
  }
};

}  // namespace
}  // namespace tandem::cuda

#endif  // TANDEM_ADAPTOR_CUDA_LAYER_NORM_KERNELS_CUH_
