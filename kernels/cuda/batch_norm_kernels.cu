// Batch normalization on CUDA: the launchers, and the chunked kernels for
// [outer, channels, inner] with inner > 1 (NCHW). A tensor with inner == 1
// (BatchNorm1d's [M, C], channels-last [N*H*W, C]) would have a channel
// read with a stride of C here; the launchers give it to the column
// kernels (batch_norm_column_kernels.cu) instead, which share this file's
// finalize kernels, sequence and contracts (batch_norm_common.cuh).
//
// Each channel's elements (outer rows of
// `inner` contiguous elements) are cut into chunks of kChunkElements, and
// each chunk is one block's work in the streaming kernels, so even a layer
// with few channels fills the GPU (64 channels of [32, 64, 112, 112] are
// 6272 blocks). An op is a short sequence of launches on one stream:
//   forward:  [training] statistics (per chunk: mean and sum of squared
//             deviations, two-pass in registers) -> finalize (a warp per
//             channel merges the chunks, writes the saved and running
//             statistics and the channel's scale and shift) -> apply
//             (out = x * scale + shift);
//   backward: [when needed] gradient sums (per chunk: sum(dy) and
//             sum(dy * (x - mean))) -> finalize (a warp per channel:
//             grad_weight, grad_bias and grad_input's coefficients) ->
//             [grad_input] apply.
// The partial results and coefficients live in the caller's scratch buffer
// (BatchNormScratchBytes). Every sum has a fixed order (per thread, then a
// fixed shuffle tree, then chunks in order), so results are deterministic;
// no atomics. All arithmetic is in double, like the CPU kernels
// (kernels/cpu/batch_norm_kernels.cc), whose formulas these are: the
// variance is exact two-pass within a chunk, and the chunks merge as
// M2 = sum(M2_j + n_j * (mean_j - mean)^2), which is the two-pass variance
// of the whole channel up to rounding. Loads and stores are 16 bytes wide
// when `inner` is a multiple of the vector width and the tensors are
// 16-byte aligned, one element wide otherwise.
//
// The kernels are templated on three storage types: T for the data (x, out,
// grad_output, grad_input), P for the per-channel parameters (weight, bias,
// running statistics, grad_weight, grad_bias) and S for the saved
// statistics (save_mean, save_invstd; the backward's mean and invstd
// inputs, which are the running statistics, of type P, in eval mode).
// float32 and float64 use one type throughout. A bfloat16 or float16 T has
// float32 S and P either T or float32 (the registry's rules, PyTorch's
// CUDA dtypes): arithmetic stays in double, values widen exactly, and each
// 16-bit store rounds once (through float32, as the CPU kernels round).
// Folded activations (compiler/fold_activations.h): the forward's apply
// takes relu's rule on each stored value; the backward's gradient sums and
// grad_input read dy through a mask (MaskedGrad) when one is given.
#include <cmath>

#include "kernels/cuda/batch_norm_common.cuh"
#include "kernels/cuda/cnn_launch.h"
#include "kernels/cuda/half_cnn_common.cuh"
#include "kernels/cuda/kernel_common.cuh"

namespace tandem::cuda {
namespace {

using batch_norm::AddResidual;
using batch_norm::BatchNormBackwardFinalizeKernel;
using batch_norm::BatchNormForwardFinalizeKernel;
using batch_norm::ChunkSplit;
using batch_norm::FinalizeGrid;
using batch_norm::kBatchNormThreads;
using batch_norm::kMaxGrid;
using batch_norm::MaskedGrad;
using batch_norm::Pack;
using batch_norm::WidthFor;

constexpr int kElementsPerThread = 16;
constexpr int64_t kChunkElements = int64_t{kBatchNormThreads} * kElementsPerThread;  // 4096

// How the streaming kernels walk the tensor, in units of kWidth elements
// (computed on the host for the launch's width). Block b handles chunk
// b % chunks of channel b / chunks; its thread t takes the chunk's units
// t, t + kBatchNormThreads, t + 2 * kBatchNormThreads, ..., so that a
// warp's accesses are consecutive units of a row.
struct ChunkGeometry {
  int64_t channels = 0;
  int64_t count = 0;          // elements per channel: outer * inner
  int64_t chunks = 0;         // chunks (blocks) per channel
  int64_t row_units = 0;      // units of one row (inner / width)
  int64_t channel_units = 0;  // outer * row_units
  int64_t chunk_units = 0;    // kChunkElements / width
  int64_t row_stride = 0;     // units from a row of a channel to its next row: channels * row_units
  int64_t step_rows = 0;      // kBatchNormThreads units of a channel as whole rows ...
  int64_t step_col = 0;       // ... and the rest (< row_units)
};

int64_t ChunksPerChannel(const BatchNormLaunchParams& p) {
  return (p.outer * p.inner + kChunkElements - 1) / kChunkElements;
}

ChunkGeometry GeometryFor(const BatchNormLaunchParams& p, int width) {
  ChunkGeometry g;
  g.channels = p.channels;
  g.count = p.outer * p.inner;
  g.chunks = ChunksPerChannel(p);
  g.row_units = p.inner / width;
  g.channel_units = p.outer * g.row_units;
  g.chunk_units = kChunkElements / width;
  g.row_stride = p.channels * g.row_units;
  g.step_rows = kBatchNormThreads / g.row_units;
  g.step_col = kBatchNormThreads % g.row_units;
  return g;
}

// A thread's position in the tensor: `offset` units from its start, at unit
// `col` of its row.
struct UnitCursor {
  int64_t offset;
  int64_t col;

  // Moves kBatchNormThreads units on in the channel (onto later rows when
  // the row ends). Pure arithmetic: moving past the channel's end is
  // harmless as long as nothing is accessed there.
  __device__ __forceinline__ void Advance(const ChunkGeometry& g) {
    offset += g.step_rows * g.row_stride + g.step_col;
    col += g.step_col;
    if (col >= g.row_units) {
      col -= g.row_units;
      offset += g.row_stride - g.row_units;
    }
  }
};

// The calling thread's first unit in chunk `chunk` of channel `c`, and how
// many of its kUnits units exist (the channel's last chunk may be short).
template <int kUnits>
__device__ __forceinline__ int StartCursor(const ChunkGeometry& g, int64_t c, int64_t chunk, UnitCursor* cursor) {
  const int64_t u = chunk * g.chunk_units + threadIdx.x;  // unit index within the channel
  if (u >= g.channel_units) {
    cursor->offset = 0;
    cursor->col = 0;
    return 0;
  }
  int64_t row, col;
  if (g.channel_units <= int64_t{0xffffffff}) {
    const uint32_t q = static_cast<uint32_t>(u) / static_cast<uint32_t>(g.row_units);
    row = q;
    col = u - static_cast<int64_t>(q) * g.row_units;
  } else {
    row = u / g.row_units;
    col = u - row * g.row_units;
  }
  cursor->offset = row * g.row_stride + c * g.row_units + col;
  cursor->col = col;
  const int64_t left = (g.channel_units - u - 1) / kBatchNormThreads + 1;
  return left < kUnits ? static_cast<int>(left) : kUnits;
}

// Per chunk: its mean and its sum of squared deviations from that mean
// (two passes over the values held in registers), into partials[2 * b] and
// partials[2 * b + 1] for block-chunk b = c * chunks + chunk.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kBatchNormThreads)
    BatchNormStatsKernel(ChunkGeometry g, const T* x, double* partials) {
  constexpr int kUnits = kElementsPerThread / kWidth;
  __shared__ double shared[32];
  const Pack<T, kWidth>* in = reinterpret_cast<const Pack<T, kWidth>*>(x);
  const int64_t blocks = g.channels * g.chunks;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t c = b / g.chunks;
    const int64_t chunk = b - c * g.chunks;
    UnitCursor cursor;
    const int valid = StartCursor<kUnits>(g, c, chunk, &cursor);
    Pack<T, kWidth> v[kUnits];
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      if (k < valid) {
        v[k] = in[cursor.offset];
      } else {
#pragma unroll
        for (int e = 0; e < kWidth; ++e) v[k].v[e] = RoundTo<T>(0.0);
      }
      cursor.Advance(g);
    }
    double sum = 0.0;
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
#pragma unroll
      for (int e = 0; e < kWidth; ++e) sum += WidenTo<double>(v[k].v[e]);  // absent units hold 0
    }
    const double n = static_cast<double>(batch_norm::ChunkCount(g.count, kChunkElements, chunk));
    const double mean = BlockSum(sum, shared) / n;
    double m2 = 0.0;
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      if (k < valid) {
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
          const double d = WidenTo<double>(v[k].v[e]) - mean;
          m2 += d * d;
        }
      }
    }
    m2 = BlockSum(m2, shared);
    if (threadIdx.x == 0) {
      partials[2 * b] = mean;
      partials[2 * b + 1] = m2;
    }
  }
}

// out = x * scale + shift (then + residual, where it is not null, and
// relu's x < 0 ? 0 : x, with `relu`, each on the stored value), a chunk per
// block. Each thread loads all its units before storing any, so `out` may
// be `x` or `residual`.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kBatchNormThreads)
    BatchNormApplyKernel(ChunkGeometry g, const double* coeffs, const T* x, const T* residual, T* out, bool relu) {
  constexpr int kUnits = kElementsPerThread / kWidth;
  const Pack<T, kWidth>* in = reinterpret_cast<const Pack<T, kWidth>*>(x);
  const Pack<T, kWidth>* res = reinterpret_cast<const Pack<T, kWidth>*>(residual);
  Pack<T, kWidth>* y = reinterpret_cast<Pack<T, kWidth>*>(out);
  const int64_t blocks = g.channels * g.chunks;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t c = b / g.chunks;
    const int64_t chunk = b - c * g.chunks;
    const double scale = coeffs[2 * c];
    const double shift = coeffs[2 * c + 1];
    UnitCursor start;
    const int valid = StartCursor<kUnits>(g, c, chunk, &start);
    UnitCursor cursor = start;
    Pack<T, kWidth> v[kUnits], r[kUnits];
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      if (k < valid) {
        v[k] = in[cursor.offset];
        if (res != nullptr) r[k] = res[cursor.offset];
      }
      cursor.Advance(g);
    }
    cursor = start;
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      if (k < valid) {
        Pack<T, kWidth> o;
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
          o.v[e] = RoundTo<T>(WidenTo<double>(v[k].v[e]) * scale + shift);
          if (res != nullptr) o.v[e] = AddResidual(o.v[e], r[k].v[e]);
          if (relu && WidenTo<double>(o.v[e]) < 0.0) o.v[e] = RoundTo<T>(0.0);  // relu's rule: keeps NaN and -0
        }
        y[cursor.offset] = o;
      }
      cursor.Advance(g);
    }
  }
}

// Per chunk: sum(dy) and sum(dy * (x - mean)) with the channel's given
// mean (of type M), into partials[2 * b] and partials[2 * b + 1]; dy masked
// by `mask` where it is not null (MaskedGrad).
template <typename T, typename M, int kWidth>
__global__ void __launch_bounds__(kBatchNormThreads)
    BatchNormGradSumsKernel(ChunkGeometry g, const T* grad_output, const T* x, const M* mean_in, double* partials,
                            const T* mask, double threshold) {
  constexpr int kUnits = kElementsPerThread / kWidth;
  __shared__ double shared[32];
  const Pack<T, kWidth>* dy = reinterpret_cast<const Pack<T, kWidth>*>(grad_output);
  const Pack<T, kWidth>* in = reinterpret_cast<const Pack<T, kWidth>*>(x);
  const Pack<T, kWidth>* mk = reinterpret_cast<const Pack<T, kWidth>*>(mask);
  const int64_t blocks = g.channels * g.chunks;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t c = b / g.chunks;
    const int64_t chunk = b - c * g.chunks;
    const double mean = WidenTo<double>(mean_in[c]);
    UnitCursor cursor;
    const int valid = StartCursor<kUnits>(g, c, chunk, &cursor);
    Pack<T, kWidth> gv[kUnits], xv[kUnits], mv[kUnits];
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      if (k < valid) {
        gv[k] = dy[cursor.offset];
        xv[k] = in[cursor.offset];
        if (mk != nullptr) mv[k] = mk[cursor.offset];
      }
      cursor.Advance(g);
    }
    double sum_dy = 0.0, sum_dy_xmu = 0.0;
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      if (k < valid) {
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
          const double gd = MaskedGrad(gv[k].v[e], mk != nullptr ? &mv[k].v[e] : nullptr, threshold);
          sum_dy += gd;
          sum_dy_xmu += gd * (WidenTo<double>(xv[k].v[e]) - mean);
        }
      }
    }
    sum_dy = BlockSum(sum_dy, shared);
    sum_dy_xmu = BlockSum(sum_dy_xmu, shared);
    if (threadIdx.x == 0) {
      partials[2 * b] = sum_dy;
      partials[2 * b + 1] = sum_dy_xmu;
    }
  }
}

// grad_input, a chunk per block: training (dy - mean_dy - (x - mean) * k) *
// invstd * weight; eval dy * invstd * weight (x is not read); dy masked by
// `mask` where it is not null. Each thread loads all its units before
// storing any, so grad_input may be dy or x.
template <typename T, int kWidth, bool kTraining>
__global__ void __launch_bounds__(kBatchNormThreads)
    BatchNormGradInputKernel(ChunkGeometry g, const double* coeffs, const T* grad_output, const T* x, T* grad_input,
                             const T* mask, double threshold) {
  constexpr int kUnits = kElementsPerThread / kWidth;
  const Pack<T, kWidth>* dy = reinterpret_cast<const Pack<T, kWidth>*>(grad_output);
  const Pack<T, kWidth>* mk = reinterpret_cast<const Pack<T, kWidth>*>(mask);
  const Pack<T, kWidth>* in = reinterpret_cast<const Pack<T, kWidth>*>(x);
  Pack<T, kWidth>* dx = reinterpret_cast<Pack<T, kWidth>*>(grad_input);
  const int64_t blocks = g.channels * g.chunks;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t c = b / g.chunks;
    const int64_t chunk = b - c * g.chunks;
    const double mean = coeffs[4 * c];
    const double mean_dy = coeffs[4 * c + 1];
    const double k_xmu = coeffs[4 * c + 2];
    const double scale = coeffs[4 * c + 3];
    UnitCursor start;
    const int valid = StartCursor<kUnits>(g, c, chunk, &start);
    UnitCursor cursor = start;
    Pack<T, kWidth> gv[kUnits], xv[kUnits], mv[kUnits];
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      if (k < valid) {
        gv[k] = dy[cursor.offset];
        if constexpr (kTraining) xv[k] = in[cursor.offset];
        if (mk != nullptr) mv[k] = mk[cursor.offset];
      }
      cursor.Advance(g);
    }
    cursor = start;
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      if (k < valid) {
        Pack<T, kWidth> o;
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
          const double gd = MaskedGrad(gv[k].v[e], mk != nullptr ? &mv[k].v[e] : nullptr, threshold);
          if constexpr (kTraining) {
            const double xmu = WidenTo<double>(xv[k].v[e]) - mean;
            o.v[e] = RoundTo<T>((gd - mean_dy - xmu * k_xmu) * scale);
          } else {
            o.v[e] = RoundTo<T>(gd * scale);
          }
        }
        dx[cursor.offset] = o;
      }
      cursor.Advance(g);
    }
  }
}

unsigned ChunkGrid(const ChunkGeometry& g) {
  const int64_t blocks = g.channels * g.chunks;
  return static_cast<unsigned>(blocks < kMaxGrid ? blocks : kMaxGrid);
}

// Where the scratch buffer's parts start: 2 * channels * chunks partials,
// then 4 coefficients per channel.
double* PartialsOf(void* scratch) { return static_cast<double*>(scratch); }
double* CoeffsOf(void* scratch, const BatchNormLaunchParams& p) {
  return static_cast<double*>(scratch) + 2 * p.channels * ChunksPerChannel(p);
}

template <typename T, typename P, typename S>
cudaError_t Forward(const BatchNormLaunchParams& p, const BatchNormForwardOperands& op, void* scratch,
                    cudaStream_t stream) {
  if (batch_norm::UsesColumnKernels(p)) return batch_norm::ColumnForward<T, P, S>(p, op, scratch, stream);
  constexpr int kVector = Vec16<T>::kCount;
  const int64_t chunks = ChunksPerChannel(p);
  double* partials = PartialsOf(scratch);
  double* coeffs = CoeffsOf(scratch, p);
  const T* x = static_cast<const T*>(op.x);
  if (p.training && chunks > 0) {
    const int width = WidthFor<T>(p.inner, {op.x});
    const ChunkGeometry g = GeometryFor(p, width);
    if (width == kVector) {
      BatchNormStatsKernel<T, kVector><<<ChunkGrid(g), kBatchNormThreads, 0, stream>>>(g, x, partials);
    } else {
      BatchNormStatsKernel<T, 1><<<ChunkGrid(g), kBatchNormThreads, 0, stream>>>(g, x, partials);
    }
    if (const cudaError_t error = LaunchError(); error != cudaSuccess) return error;
  }
  BatchNormForwardFinalizeKernel<P, S><<<FinalizeGrid(p.channels), kBatchNormThreads, 0, stream>>>(
      p, ChunkSplit{chunks, kChunkElements}, op, partials, coeffs);
  if (const cudaError_t error = LaunchError(); error != cudaSuccess) return error;
  if (chunks == 0) return cudaSuccess;
  const int width = WidthFor<T>(p.inner, {op.x, op.out, op.residual});
  const ChunkGeometry g = GeometryFor(p, width);
  T* out = static_cast<T*>(op.out);
  const T* residual = static_cast<const T*>(op.residual);
  if (width == kVector) {
    BatchNormApplyKernel<T, kVector>
        <<<ChunkGrid(g), kBatchNormThreads, 0, stream>>>(g, coeffs, x, residual, out, p.relu);
  } else {
    BatchNormApplyKernel<T, 1><<<ChunkGrid(g), kBatchNormThreads, 0, stream>>>(g, coeffs, x, residual, out, p.relu);
  }
  return LaunchError();
}

template <typename T, bool kTraining>
void LaunchGradInput(const ChunkGeometry& g, int width, const double* coeffs, const T* dy, const T* x, T* dx,
                     const T* mask, double threshold, cudaStream_t stream) {
  constexpr int kVector = Vec16<T>::kCount;
  if (width == kVector) {
    BatchNormGradInputKernel<T, kVector, kTraining>
        <<<ChunkGrid(g), kBatchNormThreads, 0, stream>>>(g, coeffs, dy, x, dx, mask, threshold);
  } else {
    BatchNormGradInputKernel<T, 1, kTraining>
        <<<ChunkGrid(g), kBatchNormThreads, 0, stream>>>(g, coeffs, dy, x, dx, mask, threshold);
  }
}

// M: the type of op.mean and op.invstd (S in training, P in eval mode).
template <typename T, typename P, typename M>
cudaError_t Backward(const BatchNormLaunchParams& p, const BatchNormBackwardOperands& op, void* scratch,
                     cudaStream_t stream) {
  if (batch_norm::UsesColumnKernels(p)) return batch_norm::ColumnBackward<T, P, M>(p, op, scratch, stream);
  constexpr int kVector = Vec16<T>::kCount;
  const int64_t chunks = ChunksPerChannel(p);
  double* coeffs = CoeffsOf(scratch, p);
  const T* dy = static_cast<const T*>(op.grad_output);
  const T* x = static_cast<const T*>(op.x);
  const T* mask = static_cast<const T*>(op.mask);
  const bool need_sums =
      op.grad_weight != nullptr || op.grad_bias != nullptr || (p.training && op.grad_input != nullptr);
  double* partials = nullptr;
  if (need_sums) {
    partials = PartialsOf(scratch);
    if (chunks > 0) {
      const int width = WidthFor<T>(p.inner, {op.grad_output, op.x, op.mask});
      const ChunkGeometry g = GeometryFor(p, width);
      const M* mean = static_cast<const M*>(op.mean);
      if (width == kVector) {
        BatchNormGradSumsKernel<T, M, kVector>
            <<<ChunkGrid(g), kBatchNormThreads, 0, stream>>>(g, dy, x, mean, partials, mask, p.mask_threshold);
      } else {
        BatchNormGradSumsKernel<T, M, 1>
            <<<ChunkGrid(g), kBatchNormThreads, 0, stream>>>(g, dy, x, mean, partials, mask, p.mask_threshold);
      }
      if (const cudaError_t error = LaunchError(); error != cudaSuccess) return error;
    }
  }
  BatchNormBackwardFinalizeKernel<P, M><<<FinalizeGrid(p.channels), kBatchNormThreads, 0, stream>>>(
      p, ChunkSplit{chunks, kChunkElements}, op, partials, coeffs);
  if (const cudaError_t error = LaunchError(); error != cudaSuccess) return error;
  if (op.grad_input == nullptr || chunks == 0) return cudaSuccess;
  const int width = p.training ? WidthFor<T>(p.inner, {op.grad_output, op.x, op.grad_input, op.mask})
                               : WidthFor<T>(p.inner, {op.grad_output, op.grad_input, op.mask});
  const ChunkGeometry g = GeometryFor(p, width);
  T* dx = static_cast<T*>(op.grad_input);
  if (p.training) {
    LaunchGradInput<T, true>(g, width, coeffs, dy, x, dx, mask, p.mask_threshold, stream);
  } else {
    LaunchGradInput<T, false>(g, width, coeffs, dy, x, dx, mask, p.mask_threshold, stream);
  }
  return LaunchError();
}

}  // namespace

size_t BatchNormScratchBytes(const BatchNormLaunchParams& p) {
  if (batch_norm::UsesColumnKernels(p)) return batch_norm::ColumnScratchBytes(p);
  return static_cast<size_t>(2 * p.channels * ChunksPerChannel(p) + 4 * p.channels) * sizeof(double);
}

cudaError_t LaunchBatchNormForward(DType dtype, const BatchNormLaunchParams& p, const BatchNormForwardOperands& op,
                                   void* scratch, cudaStream_t stream) {
  if (p.channels == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32:
      return Forward<float, float, float>(p, op, scratch, stream);
    case DType::kFloat64:
      return Forward<double, double, double>(p, op, scratch, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchBatchNormBackward(DType dtype, const BatchNormLaunchParams& p, const BatchNormBackwardOperands& op,
                                    void* scratch, cudaStream_t stream) {
  if (p.channels == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32:
      return Backward<float, float, float>(p, op, scratch, stream);
    case DType::kFloat64:
      return Backward<double, double, double>(p, op, scratch, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchHalfBatchNormForward(DType dtype, DType param_dtype, const BatchNormLaunchParams& p,
                                       const BatchNormForwardOperands& op, void* scratch, cudaStream_t stream) {
  if (param_dtype != dtype && param_dtype != DType::kFloat32) return cudaErrorInvalidValue;
  cudaError_t error = cudaErrorInvalidValue;
  DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    if (p.channels == 0) {
      error = cudaSuccess;
    } else if (param_dtype == dtype) {
      error = Forward<H, H, float>(p, op, scratch, stream);
    } else {
      error = Forward<H, float, float>(p, op, scratch, stream);
    }
  });
  return error;
}

cudaError_t LaunchHalfBatchNormBackward(DType dtype, DType param_dtype, const BatchNormLaunchParams& p,
                                        const BatchNormBackwardOperands& op, void* scratch, cudaStream_t stream) {
  if (param_dtype != dtype && param_dtype != DType::kFloat32) return cudaErrorInvalidValue;
  cudaError_t error = cudaErrorInvalidValue;
  DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    if (p.channels == 0) {
      error = cudaSuccess;
    } else if (param_dtype == DType::kFloat32) {
      // Saved and running statistics are both float32.
      error = Backward<H, float, float>(p, op, scratch, stream);
    } else if (p.training) {
      error = Backward<H, H, float>(p, op, scratch, stream);
    } else {
      error = Backward<H, H, H>(p, op, scratch, stream);  // the running statistics, 16-bit
    }
  });
  return error;
}

}  // namespace tandem::cuda
