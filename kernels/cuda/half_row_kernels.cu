// Kernels of 16-bit float tensors, part 2: everything that sums. Sum and
// mean, softmax and log_softmax with their backwards, layer norm with its
// backward, and embedding_dense_backward (nll_loss of 16-bit values runs in
// loss_kernels.cu with the float types, templated on its label type). Every
// sum accumulates in float32 (float64 when a float64 tensor takes part) in a
// fixed order, with no atomics, so a result repeats bit for bit; values are
// rounded to 16 bits once, when stored.
//
// Softmax rows that fit a row tile run softmax_tile_kernels.cuh's kernels
// (one read of the row into registers). Other rows (softmax over a dim, a
// layer norm row, a reduction over the middle dim) belong to a warp when
// they are short (up to kWarpRowMax elements) and to a whole block
// otherwise; row_kernels.cuh's RowSum / RowMax reduce over them.
#include <limits>
#include <type_traits>

#include "kernels/cuda/cluster_reduce.cuh"
#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/row_kernels.cuh"
#include "kernels/cuda/softmax_tile_kernels.cuh"

namespace tandem::cuda {
namespace {

constexpr int64_t kWarpRowMax = 1024;

__device__ __forceinline__ void ReportBadValue(const ErrorWord& error, int64_t value) {
  if (error.word == nullptr) return;
  auto* word = reinterpret_cast<unsigned long long*>(error.word);
  if (atomicCAS(word, 0ull, static_cast<unsigned long long>(error.node) + 1) == 0ull) error.word[1] = value;
}

// Calls f(T{}) for the dtypes a 16-bit reduction pairs: the 16-bit ones,
// float32 and float64.
template <typename F>
bool DispatchReduceSide(DType dtype, F&& f) {
  if (DispatchHalf(dtype, f)) return true;
  switch (dtype) {
    case DType::kFloat32:
      f(float{});
      return true;
    case DType::kFloat64:
      f(double{});
      return true;
    default:
      return false;
  }
}

template <typename In, typename Out>
using ReduceAcc = std::conditional_t<std::is_same_v<In, double> || std::is_same_v<Out, double>, double, float>;

// ---- sum and mean ----

// Rows of [outer, size] (inner == 1), a warp or block per row.
template <int kThreadsPerRow, typename In, typename Out>
__global__ void HalfRowReduceKernel(int64_t rows, int64_t size, bool mean, const In* in, Out* out) {
  using Acc = ReduceAcc<In, Out>;
  __shared__ Acc shared[32];
  constexpr int kRowsPerBlock = kThreads / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t row = first; row < rows; row += step) {
    const In* x = in + row * size;
    Acc acc = 0;
    for (int64_t j = lane; j < size; j += kThreadsPerRow) acc += WidenTo<Acc>(x[j]);
    acc = RowSum<kThreadsPerRow>(acc, shared);
    if (lane == 0) out[row] = RoundTo<Out>(mean ? acc / static_cast<Acc>(size) : acc);
  }
}

// [outer, size, inner] with inner > 1 and many outputs: a thread per output,
// adjacent threads reading adjacent columns.
template <typename In, typename Out>
__global__ void HalfColumnReduceKernel(int64_t outer, int64_t size, int64_t inner, bool mean, const In* in, Out* out) {
  using Acc = ReduceAcc<In, Out>;
  const int64_t n = outer * inner;
  for (int64_t o = GlobalThread(); o < n; o += GlobalStride()) {
    const int64_t i = o / inner;
    const int64_t j = o - i * inner;
    const In* x = in + i * size * inner + j;
    Acc acc = 0;
    for (int64_t k = 0; k < size; ++k) acc += WidenTo<Acc>(x[k * inner]);
    out[o] = RoundTo<Out>(mean ? acc / static_cast<Acc>(size) : acc);
  }
}

// Any layout, few outputs: a block per output; reduced element r of output o
// is at StridedOffset(kept, o) + StridedOffset(reduced, r).
template <typename In, typename Out>
__global__ void HalfBlockReduceKernel(int64_t out_n, StridedOperand kept, StridedOperand reduced, int64_t count,
                                      bool mean, const In* in, Out* out) {
  using Acc = ReduceAcc<In, Out>;
  __shared__ Acc shared[32];
  for (int64_t o = blockIdx.x; o < out_n; o += gridDim.x) {
    const In* x = in + (kept.rank == 0 ? o : StridedOffset(kept, o));
    Acc acc = 0;
    for (int64_t r = threadIdx.x; r < count; r += blockDim.x) {
      acc += WidenTo<Acc>(x[reduced.rank == 0 ? r : StridedOffset(reduced, r)]);
    }
    acc = BlockSum(acc, shared);
    if (threadIdx.x == 0) out[o] = RoundTo<Out>(mean ? acc / static_cast<Acc>(count) : acc);
  }
}

// A channel's total of ChannelSum (cluster_reduce.cuh), stored as Out.
template <typename Acc, typename Out>
struct StoreChannelSum {
  bool mean;
  Out* out;
  __device__ __forceinline__ void operator()(int64_t channel, Acc total, int64_t count) const {
    out[channel] = RoundTo<Out>(mean ? total / static_cast<Acc>(count) : total);
  }
};

// From this many reduced elements per output, [N, C, plane] channel sums
// take a cluster of blocks per channel instead of one block.
constexpr int64_t kChannelSumMinCount = 16384;

// Below this many outputs, the column case takes a block per output.
constexpr int64_t kThreadPerOutputMin = 4096;

// ---- softmax and log_softmax ----

// A row of [outer, size, inner]: element k of row r = (i, j) is at
// base + k * inner, base = i * size * inner + j.
__device__ __forceinline__ int64_t RowBase(int64_t row, int64_t size, int64_t inner) {
  const int64_t i = row / inner;
  return i * size * inner + (row - i * inner);
}

template <int kThreadsPerRow, typename H>
__global__ void HalfSoftmaxKernel(bool log, int64_t rows, int64_t size, int64_t inner, const H* in, H* out) {
  __shared__ float shared[32];
  constexpr int kRowsPerBlock = kThreads / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t row = first; row < rows; row += step) {
    const int64_t base = RowBase(row, size, inner);
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t k = lane; k < size; k += kThreadsPerRow) max = MaxNan(max, Widen(in[base + k * inner]));
    max = RowMax<kThreadsPerRow>(max, shared);
    float sum = 0.0f;
    for (int64_t k = lane; k < size; k += kThreadsPerRow) sum += expf(Widen(in[base + k * inner]) - max);
    sum = RowSum<kThreadsPerRow>(sum, shared);
    if (log) {
      const float shift = max + logf(sum);
      for (int64_t k = lane; k < size; k += kThreadsPerRow) {
        out[base + k * inner] = Narrow<H>(Widen(in[base + k * inner]) - shift);
      }
    } else {
      const float inverse = 1.0f / sum;
      for (int64_t k = lane; k < size; k += kThreadsPerRow) {
        out[base + k * inner] = Narrow<H>(expf(Widen(in[base + k * inner]) - max) * inverse);
      }
    }
  }
}

template <int kThreadsPerRow, typename H>
__global__ void HalfSoftmaxBackwardKernel(bool log, int64_t rows, int64_t size, int64_t inner, const H* grad,
                                          const H* output, H* grad_in) {
  __shared__ float shared[32];
  constexpr int kRowsPerBlock = kThreads / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t row = first; row < rows; row += step) {
    const int64_t base = RowBase(row, size, inner);
    float sum = 0.0f;
    for (int64_t k = lane; k < size; k += kThreadsPerRow) {
      const int64_t at = base + k * inner;
      sum += log ? Widen(grad[at]) : Widen(grad[at]) * Widen(output[at]);
    }
    sum = RowSum<kThreadsPerRow>(sum, shared);
    // Each element is read before it is written by the same thread, so
    // grad_in may be grad.
    for (int64_t k = lane; k < size; k += kThreadsPerRow) {
      const int64_t at = base + k * inner;
      const float g = Widen(grad[at]);
      const float o = Widen(output[at]);
      grad_in[at] = Narrow<H>(log ? g - expf(o) * sum : o * (g - sum));
    }
  }
}

// ---- layer norm ----

template <int kThreadsPerRow, typename H>
__global__ void HalfLayerNormKernel(int64_t rows, int64_t cols, float eps, const H* x, const H* weight, const H* bias,
                                    H* y, float* mean_out, float* rstd_out) {
  __shared__ float shared[32];
  constexpr int kRowsPerBlock = kThreads / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  const float n = static_cast<float>(cols);
  for (int64_t row = first; row < rows; row += step) {
    const H* xr = x + row * cols;
    float sum = 0.0f;
    for (int64_t c = lane; c < cols; c += kThreadsPerRow) sum += Widen(xr[c]);
    const float mean = RowSum<kThreadsPerRow>(sum, shared) / n;
    float sq = 0.0f;
    for (int64_t c = lane; c < cols; c += kThreadsPerRow) {
      const float d = Widen(xr[c]) - mean;
      sq += d * d;
    }
    const float rstd = 1.0f / sqrtf(RowSum<kThreadsPerRow>(sq, shared) / n + eps);
    for (int64_t c = lane; c < cols; c += kThreadsPerRow) {
      float v = (Widen(xr[c]) - mean) * rstd;
      if (weight != nullptr) v *= Widen(weight[c]);
      if (bias != nullptr) v += Widen(bias[c]);
      y[row * cols + c] = Narrow<H>(v);
    }
    if (lane == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
  }
}

// grad_input = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
template <int kThreadsPerRow, typename H>
__global__ void HalfLayerNormGradInputKernel(int64_t rows, int64_t cols, const H* dy, const H* x, const float* mean,
                                             const float* rstd, const H* weight, H* dx) {
  __shared__ float shared[32];
  constexpr int kRowsPerBlock = kThreads / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  const float n = static_cast<float>(cols);
  for (int64_t row = first; row < rows; row += step) {
    const int64_t base = row * cols;
    const float m = mean[row];
    const float s = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t c = lane; c < cols; c += kThreadsPerRow) {
      const float g = Widen(dy[base + c]) * (weight != nullptr ? Widen(weight[c]) : 1.0f);
      sum_g += g;
      sum_gx += g * (Widen(x[base + c]) - m) * s;
    }
    sum_g = RowSum<kThreadsPerRow>(sum_g, shared);
    sum_gx = RowSum<kThreadsPerRow>(sum_gx, shared);
    for (int64_t c = lane; c < cols; c += kThreadsPerRow) {
      const float g = Widen(dy[base + c]) * (weight != nullptr ? Widen(weight[c]) : 1.0f);
      const float xhat = (Widen(x[base + c]) - m) * s;
      dx[base + c] = Narrow<H>(s * (g - sum_g / n - xhat * sum_gx / n));
    }
  }
}

constexpr int kColumnTile = 32;
constexpr int kRowGroups = 16;

// grad_weight[c] = sum_r dy * xhat, grad_bias[c] = sum_r dy: a block per 32
// adjacent columns, its 16 thread rows taking every 16th row, then the 16
// partial sums added in a fixed order.
template <typename H>
__global__ void HalfLayerNormGradAffineKernel(int64_t rows, int64_t cols, const H* dy, const H* x, const float* mean,
                                              const float* rstd, H* grad_weight, H* grad_bias) {
  __shared__ float partial_w[kRowGroups][kColumnTile];
  __shared__ float partial_b[kRowGroups][kColumnTile];
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  for (int64_t tile = blockIdx.x; tile * kColumnTile < cols; tile += gridDim.x) {
    const int64_t c = tile * kColumnTile + tx;
    float sw = 0.0f, sb = 0.0f;
    if (c < cols) {
      for (int64_t r = ty; r < rows; r += kRowGroups) {
        const float d = Widen(dy[r * cols + c]);
        sw += d * (Widen(x[r * cols + c]) - mean[r]) * rstd[r];
        sb += d;
      }
    }
    partial_w[ty][tx] = sw;
    partial_b[ty][tx] = sb;
    __syncthreads();
    if (ty == 0 && c < cols) {
      float w = 0.0f, b = 0.0f;
      for (int k = 0; k < kRowGroups; ++k) {
        w += partial_w[k][tx];
        b += partial_b[k][tx];
      }
      grad_weight[c] = Narrow<H>(w);
      grad_bias[c] = Narrow<H>(b);
    }
    __syncthreads();
  }
}

// ---- embedding backward ----

constexpr int kIdChunk = kThreads;

template <typename H, typename I>
__global__ void HalfEmbeddingBackwardKernel(int64_t count, int64_t rows, int64_t width, int64_t padding_idx,
                                            const H* grad, const I* ids, H* grad_weight, ErrorWord error) {
  __shared__ int64_t chunk[kIdChunk];
  if (blockIdx.x == 0) {
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
      if (ids[i] < 0 || ids[i] >= rows) ReportBadValue(error, ids[i]);
    }
  }
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    for (int64_t c0 = 0; c0 < width; c0 += blockDim.x) {
      const int64_t c = c0 + threadIdx.x;
      float sum = 0.0f;
      if (row != padding_idx) {
        for (int64_t start = 0; start < count; start += kIdChunk) {
          const int64_t len = count - start < kIdChunk ? count - start : kIdChunk;
          __syncthreads();  // the previous chunk is no longer read
          if (threadIdx.x < len) chunk[threadIdx.x] = ids[start + threadIdx.x];
          __syncthreads();
          if (c < width) {
            for (int64_t k = 0; k < len; ++k) {
              if (chunk[k] == row) sum += Widen(grad[(start + k) * width + c]);
            }
          }
        }
      }
      if (c < width) grad_weight[row * width + c] = Narrow<H>(sum);
    }
  }
}

// Launches `kernel<kThreadsPerRow>` for `rows` rows of `size` elements: a
// warp per row for short rows, a block per row otherwise.
template <typename Launch>
void LaunchRows(int64_t rows, int64_t size, cudaStream_t stream, Launch&& launch) {
  if (size <= kWarpRowMax) {
    launch.template operator()<32>(Blocks(rows, kThreads / 32), stream);
  } else {
    launch.template operator()<kThreads>(Blocks(rows, 1), stream);
  }
}

}  // namespace

cudaError_t LaunchHalfReduceMiddle(DType out_dtype, DType in_dtype, int64_t outer, int64_t size, int64_t inner,
                                   bool mean, const void* in, void* out, cudaStream_t stream) {
  if (!IsHalfDType(out_dtype) && !IsHalfDType(in_dtype)) return cudaErrorInvalidValue;
  if (outer * inner == 0) return cudaSuccess;
  bool launched = false;
  DispatchReduceSide(out_dtype, [&](auto out_tag) {
    using Out = decltype(out_tag);
    launched = DispatchReduceSide(in_dtype, [&](auto in_tag) {
      using In = decltype(in_tag);
      const In* x = static_cast<const In*>(in);
      Out* y = static_cast<Out*>(out);
      if (inner == 1) {
        LaunchRows(outer, size, stream, [&]<int kThreadsPerRow>(int64_t blocks, cudaStream_t s) {
          HalfRowReduceKernel<kThreadsPerRow, In, Out><<<blocks, kThreads, 0, s>>>(outer, size, mean, x, y);
        });
      } else if (outer * inner >= kThreadPerOutputMin) {
        HalfColumnReduceKernel<In, Out><<<Blocks(outer * inner), kThreads, 0, stream>>>(outer, size, inner, mean, x, y);
      } else {
        // Output (i, j) reads i * size * inner + j + k * inner.
        StridedOperand kept, reduced;
        kept.rank = 2;
        kept.sizes[0] = outer;
        kept.sizes[1] = inner;
        kept.strides[0] = size * inner;
        kept.strides[1] = 1;
        reduced.rank = 1;
        reduced.sizes[0] = size;
        reduced.strides[0] = inner;
        HalfBlockReduceKernel<In, Out>
            <<<Blocks(outer * inner, 1), kThreads, 0, stream>>>(outer * inner, kept, reduced, size, mean, x, y);
      }
    });
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchHalfReduceGeneral(DType out_dtype, DType in_dtype, int64_t out_n, const StridedOperand& kept,
                                    const StridedOperand& reduced, bool mean, const void* in, void* out,
                                    cudaStream_t stream) {
  if (!IsHalfDType(out_dtype) && !IsHalfDType(in_dtype)) return cudaErrorInvalidValue;
  if (out_n == 0) return cudaSuccess;
  int64_t count = 1;
  for (int d = 0; d < reduced.rank; ++d) count *= reduced.sizes[d];
  bool launched = false;
  cudaError_t error = cudaSuccess;
  DispatchReduceSide(out_dtype, [&](auto out_tag) {
    using Out = decltype(out_tag);
    launched = DispatchReduceSide(in_dtype, [&](auto in_tag) {
      using In = decltype(in_tag);
      const In* x = static_cast<const In*>(in);
      Out* y = static_cast<Out*>(out);
      // Per-channel sums of [N, C, plane] (a 16-bit convolution's bias
      // gradient): a cluster of blocks per channel, 16-byte loads.
      if (ChannelSumShape shape; count >= kChannelSumMinCount && AsChannelSum(kept, reduced, &shape)) {
        using Acc = ReduceAcc<In, Out>;
        error = LaunchChannelSum<In, Acc>(shape, x, StoreChannelSum<Acc, Out>{mean, y}, stream);
        return;
      }
      HalfBlockReduceKernel<In, Out>
          <<<Blocks(out_n, 1), kThreads, 0, stream>>>(out_n, kept, reduced, count, mean, x, y);
      error = LaunchError();
    });
  });
  return launched ? error : cudaErrorInvalidValue;
}

cudaError_t LaunchHalfSoftmax(DType dtype, bool log, int64_t outer, int64_t size, int64_t inner, const void* in,
                              void* out, cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  const int64_t rows = outer * inner;
  if (rows == 0 || size == 0) return cudaSuccess;
  DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    const H* x = static_cast<const H*>(in);
    H* y = static_cast<H*>(out);
    if (inner == 1 && (log ? LaunchSoftmaxTile<H, true>(outer, size, false, x, y, stream)
                           : LaunchSoftmaxTile<H, false>(outer, size, false, x, y, stream))) {
      return;
    }
    LaunchRows(rows, size, stream, [&]<int kThreadsPerRow>(int64_t blocks, cudaStream_t s) {
      HalfSoftmaxKernel<kThreadsPerRow, H>
          <<<blocks, kThreads, 0, s>>>(log, rows, size, inner, static_cast<const H*>(in), static_cast<H*>(out));
    });
  });
  return LaunchError();
}

cudaError_t LaunchHalfSoftmaxBackward(DType dtype, bool log, int64_t outer, int64_t size, int64_t inner,
                                      const void* grad, const void* output, void* grad_in, cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  const int64_t rows = outer * inner;
  if (rows == 0 || size == 0) return cudaSuccess;
  DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    const H* g = static_cast<const H*>(grad);
    const H* o = static_cast<const H*>(output);
    H* r = static_cast<H*>(grad_in);
    if (inner == 1 && (log ? LaunchSoftmaxBackwardTile<H, true>(outer, size, g, o, r, stream)
                           : LaunchSoftmaxBackwardTile<H, false>(outer, size, g, o, r, stream))) {
      return;
    }
    LaunchRows(rows, size, stream, [&]<int kThreadsPerRow>(int64_t blocks, cudaStream_t s) {
      HalfSoftmaxBackwardKernel<kThreadsPerRow, H><<<blocks, kThreads, 0, s>>>(
          log, rows, size, inner, static_cast<const H*>(grad), static_cast<const H*>(output), static_cast<H*>(grad_in));
    });
  });
  return LaunchError();
}

cudaError_t LaunchHalfLayerNorm(DType dtype, int64_t rows, int64_t cols, double eps, const void* x, const void* weight,
                                const void* bias, void* y, float* mean, float* rstd, cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    LaunchRows(rows, cols, stream, [&]<int kThreadsPerRow>(int64_t blocks, cudaStream_t s) {
      HalfLayerNormKernel<kThreadsPerRow, H><<<blocks, kThreads, 0, s>>>(
          rows, cols, static_cast<float>(eps), static_cast<const H*>(x), static_cast<const H*>(weight),
          static_cast<const H*>(bias), static_cast<H*>(y), mean, rstd);
    });
  });
  return LaunchError();
}

cudaError_t LaunchHalfLayerNormBackward(DType dtype, int64_t rows, int64_t cols, const void* grad_out, const void* x,
                                        const float* mean, const float* rstd, const void* weight, void* grad_input,
                                        void* grad_weight, void* grad_bias, cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  if (cols == 0) return cudaSuccess;
  cudaError_t error = cudaSuccess;
  DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    const H* dy = static_cast<const H*>(grad_out);
    const H* xs = static_cast<const H*>(x);
    if (rows > 0) {
      LaunchRows(rows, cols, stream, [&]<int kThreadsPerRow>(int64_t blocks, cudaStream_t s) {
        HalfLayerNormGradInputKernel<kThreadsPerRow, H><<<blocks, kThreads, 0, s>>>(
            rows, cols, dy, xs, mean, rstd, static_cast<const H*>(weight), static_cast<H*>(grad_input));
      });
      error = LaunchError();
      if (error != cudaSuccess) return;
    }
    const int64_t tiles = (cols + kColumnTile - 1) / kColumnTile;
    HalfLayerNormGradAffineKernel<H><<<Blocks(tiles, 1), dim3(kColumnTile, kRowGroups), 0, stream>>>(
        rows, cols, dy, xs, mean, rstd, static_cast<H*>(grad_weight), static_cast<H*>(grad_bias));
    error = LaunchError();
  });
  return error;
}

cudaError_t LaunchHalfEmbeddingBackward(DType dtype, int64_t count, int64_t rows, int64_t width, int64_t padding_idx,
                                        const void* grad, IndexOperand ids, void* grad_weight, ErrorWord error,
                                        cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  if (rows * width == 0) return cudaSuccess;
  bool launched = false;
  DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    launched = DispatchIndex(ids.dtype, [&](auto index_tag) {
      using I = decltype(index_tag);
      HalfEmbeddingBackwardKernel<H, I><<<Blocks(rows, 1), kThreads, 0, stream>>>(
          count, rows, width, padding_idx, static_cast<const H*>(grad), static_cast<const I*>(ids.data),
          static_cast<H*>(grad_weight), error);
    });
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
