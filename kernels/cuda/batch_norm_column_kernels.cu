// Batch normalization on CUDA for inner == 1, the column layout: a tensor
// [rows, channels] with the channel the fastest-moving index (BatchNorm1d's
// [M, C]; channels-last activations [N, H, W, C] as [N*H*W, C]). The
// chunked kernels of batch_norm_kernels.cu would read a channel with a
// stride of C; these read along the rows, in the same sequence of launches
// and with the same finalize kernels (batch_norm_common.cuh):
//   forward:  [training] statistics -> finalize -> apply;
//   backward: [when needed] gradient sums -> finalize -> [grad_input] apply.
//
// Geometry (ColumnGeometry, computed on the host for each launch). A unit
// is kWidth consecutive channels of a row: 16 bytes, one vector access, when
// C is a multiple of the vector width and the tensors are 16-byte aligned;
// one element otherwise. A row's units are cut into `tiles` tiles of at
// most tile_units units, at most kTileBytes wide (a cache line) and evened
// out (the last may be short). A block's 256 threads are row_threads =
// 256 / tile_units rows of tile_units lanes: thread t takes unit t %
// tile_units of the tile in row t / tile_units, so a warp's accesses are
// the tile's segments of consecutive rows (one contiguous run when a tile
// spans the row). The rows are cut into chunks of chunk_rows = row_threads *
// rows_per_thread; block b takes tile b % tiles of chunk b / tiles (blocks
// that run together read neighbouring segments of the same rows), and each
// of its threads the chunk's rows r, r + row_threads, ... rows_per_thread is
// at most kStatsRows for the statistics (which hold their values in
// registers; the gradient sums use the same chunks) and kApplyRows for the
// elementwise kernels, less where that is needed for about kTargetBlocks
// blocks. The elementwise kernels hold their units' coefficients in
// registers and walk their rows a few at a time.
//
// Sums: each thread adds its rows in order, a sum per channel of its unit;
// the block's row_threads sums of each channel then merge in shared memory
// in a fixed tree (RowTreeSum); the chunks of a channel merge in the
// finalize kernel, in a fixed order, the variance as M2 = sum(M2_j + n_j *
// (mean_j - mean)^2). Within a chunk the statistics are two-pass: the
// chunk's mean, then the squared deviations from it of the values held in
// registers. All in double, in an order fixed by the shape and the vector
// width; no atomics: batch_norm_kernels.cu's results contract, with the CPU
// kernels' formulas.
//
// Scratch: 4 coefficients per channel, then 2 partials per chunk and
// channel (channel-major, as the finalize kernels read them), as many as the
// most chunks any dtype and width would take (BatchNormScratchBytes is
// asked before the dtype is known).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/batch_norm_common.cuh"
#include "kernels/cuda/cnn_launch.h"
#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/kernel_common.cuh"

namespace tandem::cuda::batch_norm {
namespace {

constexpr int kTileBytes = 128;
constexpr int kMaxTileUnits = 32;        // so that row_threads >= 8
constexpr int kStatsRows = 8;            // rows per thread of a statistics chunk, at most
constexpr int kApplyRows = 32;           // rows per thread of an elementwise chunk, at most
constexpr int64_t kTargetBlocks = 1024;  // about 8 resident blocks per SM of an H100 or H200

// Rows that the streaming loops load together: 4, or in the backward's
// kernels 2 for 8-element units (16-bit data), whose widened dy, x and mask
// would need too many registers.
constexpr int kApplyGroupRows = 4;
template <int kWidth>
inline constexpr int kGradGroupRows = kWidth >= 8 ? 2 : 4;

struct ColumnGeometry {
  int64_t rows = 0;       // outer
  int64_t row_units = 0;  // channels / width
  int64_t tiles = 0;      // tiles per row
  int tile_units = 0;     // units per tile (the last tile may have fewer)
  int row_threads = 0;    // kBatchNormThreads / tile_units
  int first_stride = 0;   // the largest power of 2 below row_threads: RowTreeSum's first step
  int64_t chunk_rows = 0;
  int64_t chunks = 0;
};

ColumnGeometry GeometryFor(const BatchNormLaunchParams& p, int element_bytes, int width, int max_rows_per_thread) {
  ColumnGeometry g;
  g.rows = p.outer;
  g.row_units = p.channels / width;
  const int64_t widest = std::clamp<int64_t>(kTileBytes / (element_bytes * width), 1, kMaxTileUnits);
  g.tiles = (g.row_units + widest - 1) / widest;
  g.tile_units = static_cast<int>((g.row_units + g.tiles - 1) / g.tiles);
  g.row_threads = kBatchNormThreads / g.tile_units;
  for (int stride = 1; stride < g.row_threads; stride *= 2) g.first_stride = stride;
  const int64_t wanted_chunks = (kTargetBlocks + g.tiles - 1) / g.tiles;
  const int64_t wanted_rows = (g.rows + wanted_chunks - 1) / wanted_chunks;
  const int64_t rows_per_thread =
      std::clamp<int64_t>((wanted_rows + g.row_threads - 1) / g.row_threads, 1, max_rows_per_thread);
  g.chunk_rows = g.row_threads * rows_per_thread;
  g.chunks = (g.rows + g.chunk_rows - 1) / g.chunk_rows;
  return g;
}

unsigned GridOf(const ColumnGeometry& g) {
  const int64_t blocks = g.tiles * g.chunks;
  return static_cast<unsigned>(blocks < kMaxGrid ? blocks : kMaxGrid);
}

// The calling thread's place in block-chunk b: its unit's index in a row,
// its first row and the end of the chunk's rows. `active` when the unit
// exists (threads past row_threads rows, and lanes past a short last tile,
// have none).
struct ColumnPlace {
  int64_t chunk;
  int64_t unit;
  int64_t row;
  int64_t end;
  bool active;
};

__device__ __forceinline__ ColumnPlace PlaceOf(const ColumnGeometry& g, int64_t b) {
  ColumnPlace place;
  place.chunk = b / g.tiles;
  const int lane = static_cast<int>(threadIdx.x) % g.tile_units;
  const int row = static_cast<int>(threadIdx.x) / g.tile_units;
  place.unit = (b - place.chunk * g.tiles) * g.tile_units + lane;
  place.row = place.chunk * g.chunk_rows + row;
  const int64_t end = (place.chunk + 1) * g.chunk_rows;
  place.end = end < g.rows ? end : g.rows;
  place.active = row < g.row_threads && place.unit < g.row_units;
  return place;
}

// The calling thread's first channel-sum slot in RowTreeSum's results.
__device__ __forceinline__ int SlotOf(const ColumnGeometry& g, int width) {
  return static_cast<int>(threadIdx.x) % g.tile_units * width;
}

// Sums `v` (the calling thread's sums for the kWidth channels of its unit)
// over the block's rows of threads, for every channel of the tile, in a
// fixed tree: row r adds row r + s for s = first_stride, first_stride / 2,
// ..., 1. Leaves the tile's channel k total in shared[k], k = lane * kWidth
// + e. Every thread of the block calls it; `shared` holds kBatchNormThreads
// * kWidth values (row_threads * tile_units <= kBatchNormThreads).
template <int kWidth>
__device__ void RowTreeSum(const ColumnGeometry& g, const double (&v)[kWidth], double* shared) {
  const int slots = g.tile_units * kWidth;
  const int row = static_cast<int>(threadIdx.x) / g.tile_units;
  double* mine = shared + row * slots + SlotOf(g, kWidth);
  __syncthreads();  // `shared` may still be read from a previous call
  if (row < g.row_threads) {
#pragma unroll
    for (int e = 0; e < kWidth; ++e) mine[e] = v[e];
  }
  for (int stride = g.first_stride; stride > 0; stride /= 2) {
    __syncthreads();
    if (row < stride && row + stride < g.row_threads) {
#pragma unroll
      for (int e = 0; e < kWidth; ++e) mine[e] += mine[stride * slots + e];
    }
  }
  __syncthreads();
}

// Per chunk and channel: the mean of the chunk's values and their sum of
// squared deviations from it (two passes over the values in registers),
// into partials[2 * (c * chunks + chunk)] and the next.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kBatchNormThreads) ColumnStatsKernel(ColumnGeometry g, const T* x, double* partials) {
  __shared__ double shared[kBatchNormThreads * kWidth];
  const Pack<T, kWidth>* in = reinterpret_cast<const Pack<T, kWidth>*>(x);
  const int64_t blocks = g.tiles * g.chunks;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const ColumnPlace place = PlaceOf(g, b);
    const int valid =
        place.active && place.row < place.end ? static_cast<int>((place.end - place.row - 1) / g.row_threads + 1) : 0;
    const int64_t step = g.row_threads * g.row_units;
    Pack<T, kWidth> v[kStatsRows];
#pragma unroll
    for (int k = 0; k < kStatsRows; ++k) {
      if (k < valid) v[k] = in[place.row * g.row_units + place.unit + k * step];
    }
    double sum[kWidth] = {};
#pragma unroll
    for (int k = 0; k < kStatsRows; ++k) {
      if (k < valid) {
#pragma unroll
        for (int e = 0; e < kWidth; ++e) sum[e] += WidenTo<double>(v[k].v[e]);
      }
    }
    RowTreeSum<kWidth>(g, sum, shared);
    const double n = static_cast<double>(ChunkCount(g.rows, g.chunk_rows, place.chunk));
    const int slot = SlotOf(g, kWidth);
    double mean[kWidth], m2[kWidth] = {};
#pragma unroll
    for (int e = 0; e < kWidth; ++e) mean[e] = shared[slot + e] / n;
#pragma unroll
    for (int k = 0; k < kStatsRows; ++k) {
      if (k < valid) {
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
          const double d = WidenTo<double>(v[k].v[e]) - mean[e];
          m2[e] += d * d;
        }
      }
    }
    RowTreeSum<kWidth>(g, m2, shared);
    if (place.active && static_cast<int>(threadIdx.x) < g.tile_units) {
#pragma unroll
      for (int e = 0; e < kWidth; ++e) {
        double* part = partials + 2 * ((place.unit * kWidth + e) * g.chunks + place.chunk);
        part[0] = mean[e];
        part[1] = shared[slot + e];
      }
    }
  }
}

// out = x * scale + shift (then + residual, where it is not null, and
// relu's x < 0 ? 0 : x, with `relu`, each on the stored value). Each thread
// loads a group of rows before storing it, and stores only what it loaded,
// so `out` may be `x` or `residual`.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kBatchNormThreads)
    ColumnApplyKernel(ColumnGeometry g, const double* coeffs, const T* x, const T* residual, T* out, bool relu) {
  const Pack<T, kWidth>* in = reinterpret_cast<const Pack<T, kWidth>*>(x);
  const Pack<T, kWidth>* res = reinterpret_cast<const Pack<T, kWidth>*>(residual);
  Pack<T, kWidth>* y = reinterpret_cast<Pack<T, kWidth>*>(out);
  const int64_t blocks = g.tiles * g.chunks;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const ColumnPlace place = PlaceOf(g, b);
    if (!place.active) continue;
    double scale[kWidth], shift[kWidth];
#pragma unroll
    for (int e = 0; e < kWidth; ++e) {
      const int64_t c = place.unit * kWidth + e;
      scale[e] = coeffs[2 * c];
      shift[e] = coeffs[2 * c + 1];
    }
    const int64_t step = g.row_threads * g.row_units;
    int64_t offset = place.row * g.row_units + place.unit;
    for (int64_t row = place.row; row < place.end;
         row += kApplyGroupRows * g.row_threads, offset += kApplyGroupRows * step) {
      Pack<T, kWidth> v[kApplyGroupRows], r[kApplyGroupRows];
#pragma unroll
      for (int k = 0; k < kApplyGroupRows; ++k) {
        if (row + k * g.row_threads < place.end) {
          v[k] = in[offset + k * step];
          if (res != nullptr) r[k] = res[offset + k * step];
        }
      }
#pragma unroll
      for (int k = 0; k < kApplyGroupRows; ++k) {
        if (row + k * g.row_threads < place.end) {
          Pack<T, kWidth> o;
#pragma unroll
          for (int e = 0; e < kWidth; ++e) {
            o.v[e] = RoundTo<T>(WidenTo<double>(v[k].v[e]) * scale[e] + shift[e]);
            if (res != nullptr) o.v[e] = AddResidual(o.v[e], r[k].v[e]);
            if (relu && WidenTo<double>(o.v[e]) < 0.0) o.v[e] = RoundTo<T>(0.0);  // relu's rule: keeps NaN and -0
          }
          y[offset + k * step] = o;
        }
      }
    }
  }
}

// Per chunk and channel: sum(dy) and sum(dy * (x - mean)) with the
// channel's given mean (of type M), into partials[2 * (c * chunks + chunk)]
// and the next; dy masked by `mask` where it is not null (MaskedGrad).
template <typename T, typename M, int kWidth>
__global__ void __launch_bounds__(kBatchNormThreads)
    ColumnGradSumsKernel(ColumnGeometry g, const T* grad_output, const T* x, const M* mean_in, double* partials,
                         const T* mask, double threshold) {
  __shared__ double shared[kBatchNormThreads * kWidth];
  const Pack<T, kWidth>* dy = reinterpret_cast<const Pack<T, kWidth>*>(grad_output);
  const Pack<T, kWidth>* in = reinterpret_cast<const Pack<T, kWidth>*>(x);
  const Pack<T, kWidth>* mk = reinterpret_cast<const Pack<T, kWidth>*>(mask);
  const int64_t blocks = g.tiles * g.chunks;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const ColumnPlace place = PlaceOf(g, b);
    double sum_dy[kWidth] = {}, sum_dy_xmu[kWidth] = {};
    if (place.active) {
      double mean[kWidth];
#pragma unroll
      for (int e = 0; e < kWidth; ++e) mean[e] = WidenTo<double>(mean_in[place.unit * kWidth + e]);
      const int64_t step = g.row_threads * g.row_units;
      int64_t offset = place.row * g.row_units + place.unit;
      for (int64_t row = place.row; row < place.end;
           row += kGradGroupRows<kWidth> * g.row_threads, offset += kGradGroupRows<kWidth> * step) {
        Pack<T, kWidth> gv[kGradGroupRows<kWidth>], xv[kGradGroupRows<kWidth>], mv[kGradGroupRows<kWidth>];
#pragma unroll
        for (int k = 0; k < kGradGroupRows<kWidth>; ++k) {
          if (row + k * g.row_threads < place.end) {
            gv[k] = dy[offset + k * step];
            xv[k] = in[offset + k * step];
            if (mk != nullptr) mv[k] = mk[offset + k * step];
          }
        }
#pragma unroll
        for (int k = 0; k < kGradGroupRows<kWidth>; ++k) {
          if (row + k * g.row_threads < place.end) {
#pragma unroll
            for (int e = 0; e < kWidth; ++e) {
              const double gd = MaskedGrad(gv[k].v[e], mk != nullptr ? &mv[k].v[e] : nullptr, threshold);
              sum_dy[e] += gd;
              sum_dy_xmu[e] += gd * (WidenTo<double>(xv[k].v[e]) - mean[e]);
            }
          }
        }
      }
    }
    const int slot = SlotOf(g, kWidth);
    RowTreeSum<kWidth>(g, sum_dy, shared);
#pragma unroll
    for (int e = 0; e < kWidth; ++e) sum_dy[e] = shared[slot + e];
    RowTreeSum<kWidth>(g, sum_dy_xmu, shared);
    if (place.active && static_cast<int>(threadIdx.x) < g.tile_units) {
#pragma unroll
      for (int e = 0; e < kWidth; ++e) {
        double* part = partials + 2 * ((place.unit * kWidth + e) * g.chunks + place.chunk);
        part[0] = sum_dy[e];
        part[1] = shared[slot + e];
      }
    }
  }
}

// grad_input: training (dy - mean_dy - (x - mean) * k) * invstd * weight;
// eval dy * invstd * weight (x is not read); dy masked by `mask` where it
// is not null. Each thread loads a group of rows before storing it, and
// stores only what it loaded, so grad_input may be dy or x.
template <typename T, int kWidth, bool kTraining>
__global__ void __launch_bounds__(kBatchNormThreads, 2)
    ColumnGradInputKernel(ColumnGeometry g, const double* coeffs, const T* grad_output, const T* x, T* grad_input,
                          const T* mask, double threshold) {
  const Pack<T, kWidth>* dy = reinterpret_cast<const Pack<T, kWidth>*>(grad_output);
  const Pack<T, kWidth>* mk = reinterpret_cast<const Pack<T, kWidth>*>(mask);
  const Pack<T, kWidth>* in = reinterpret_cast<const Pack<T, kWidth>*>(x);
  Pack<T, kWidth>* dx = reinterpret_cast<Pack<T, kWidth>*>(grad_input);
  const int64_t blocks = g.tiles * g.chunks;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const ColumnPlace place = PlaceOf(g, b);
    if (!place.active) continue;
    double mean[kWidth], mean_dy[kWidth], k_xmu[kWidth], scale[kWidth];
#pragma unroll
    for (int e = 0; e < kWidth; ++e) {
      const int64_t c = place.unit * kWidth + e;
      mean[e] = coeffs[4 * c];
      mean_dy[e] = coeffs[4 * c + 1];
      k_xmu[e] = coeffs[4 * c + 2];
      scale[e] = coeffs[4 * c + 3];
    }
    const int64_t step = g.row_threads * g.row_units;
    int64_t offset = place.row * g.row_units + place.unit;
    for (int64_t row = place.row; row < place.end;
         row += kGradGroupRows<kWidth> * g.row_threads, offset += kGradGroupRows<kWidth> * step) {
      Pack<T, kWidth> gv[kGradGroupRows<kWidth>], xv[kGradGroupRows<kWidth>], mv[kGradGroupRows<kWidth>];
#pragma unroll
      for (int k = 0; k < kGradGroupRows<kWidth>; ++k) {
        if (row + k * g.row_threads < place.end) {
          gv[k] = dy[offset + k * step];
          if constexpr (kTraining) xv[k] = in[offset + k * step];
          if (mk != nullptr) mv[k] = mk[offset + k * step];
        }
      }
#pragma unroll
      for (int k = 0; k < kGradGroupRows<kWidth>; ++k) {
        if (row + k * g.row_threads < place.end) {
          Pack<T, kWidth> o;
#pragma unroll
          for (int e = 0; e < kWidth; ++e) {
            const double gd = MaskedGrad(gv[k].v[e], mk != nullptr ? &mv[k].v[e] : nullptr, threshold);
            if constexpr (kTraining) {
              const double xmu = WidenTo<double>(xv[k].v[e]) - mean[e];
              o.v[e] = RoundTo<T>((gd - mean_dy[e] - xmu * k_xmu[e]) * scale[e]);
            } else {
              o.v[e] = RoundTo<T>(gd * scale[e]);
            }
          }
          dx[offset + k * step] = o;
        }
      }
    }
  }
}

// Calls f(std::integral_constant<int, width>) for the launch's width: T's
// vector width or 1.
template <typename T, typename F>
void WithWidth(int width, F&& f) {
  constexpr int kVector = Vec16<T>::kCount;
  if (width == kVector) {
    f(std::integral_constant<int, kVector>{});
  } else {
    f(std::integral_constant<int, 1>{});
  }
}

// The scratch buffer: 4 coefficients per channel, then the partials.
double* CoeffsOf(void* scratch) { return static_cast<double*>(scratch); }
double* PartialsOf(void* scratch, const BatchNormLaunchParams& p) {
  return static_cast<double*>(scratch) + 4 * p.channels;
}

}  // namespace

// A single channel's elements are contiguous: the chunked kernels read them
// as they are, with more blocks than one tile of a row would give.
bool UsesColumnKernels(const BatchNormLaunchParams& p) { return p.inner == 1 && p.channels > 1; }

size_t ColumnScratchBytes(const BatchNormLaunchParams& p) {
  // (element bytes, width) of every dtype, vectorized and not.
  constexpr int kLayouts[][2] = {{2, 8}, {2, 1}, {4, 4}, {4, 1}, {8, 2}, {8, 1}};
  int64_t chunks = 0;
  for (const auto& layout : kLayouts) {
    if (p.channels % layout[1] != 0) continue;
    chunks = std::max(chunks, GeometryFor(p, layout[0], layout[1], kStatsRows).chunks);
  }
  return static_cast<size_t>(4 * p.channels + 2 * p.channels * chunks) * sizeof(double);
}

template <typename T, typename P, typename S>
cudaError_t ColumnForward(const BatchNormLaunchParams& p, const BatchNormForwardOperands& op, void* scratch,
                          cudaStream_t stream) {
  double* coeffs = CoeffsOf(scratch);
  double* partials = PartialsOf(scratch, p);
  const T* x = static_cast<const T*>(op.x);
  ChunkSplit split;
  if (p.training && p.outer > 0) {
    const int width = WidthFor<T>(p.channels, {op.x});
    const ColumnGeometry g = GeometryFor(p, sizeof(T), width, kStatsRows);
    split = {g.chunks, g.chunk_rows};
    WithWidth<T>(width, [&](auto w) {
      ColumnStatsKernel<T, decltype(w)::value><<<GridOf(g), kBatchNormThreads, 0, stream>>>(g, x, partials);
    });
    if (const cudaError_t error = LaunchError(); error != cudaSuccess) return error;
  }
  BatchNormForwardFinalizeKernel<P, S>
      <<<FinalizeGrid(p.channels), kBatchNormThreads, 0, stream>>>(p, split, op, partials, coeffs);
  if (const cudaError_t error = LaunchError(); error != cudaSuccess) return error;
  if (p.outer == 0) return cudaSuccess;
  const int width = WidthFor<T>(p.channels, {op.x, op.out, op.residual});
  const ColumnGeometry g = GeometryFor(p, sizeof(T), width, kApplyRows);
  T* out = static_cast<T*>(op.out);
  const T* residual = static_cast<const T*>(op.residual);
  WithWidth<T>(width, [&](auto w) {
    ColumnApplyKernel<T, decltype(w)::value>
        <<<GridOf(g), kBatchNormThreads, 0, stream>>>(g, coeffs, x, residual, out, p.relu);
  });
  return LaunchError();
}

template <typename T, typename P, typename M>
cudaError_t ColumnBackward(const BatchNormLaunchParams& p, const BatchNormBackwardOperands& op, void* scratch,
                           cudaStream_t stream) {
  double* coeffs = CoeffsOf(scratch);
  const T* dy = static_cast<const T*>(op.grad_output);
  const T* x = static_cast<const T*>(op.x);
  const T* mask = static_cast<const T*>(op.mask);
  const bool need_sums =
      op.grad_weight != nullptr || op.grad_bias != nullptr || (p.training && op.grad_input != nullptr);
  double* partials = nullptr;
  ChunkSplit split;
  if (need_sums) {
    partials = PartialsOf(scratch, p);
    if (p.outer > 0) {
      const int width = WidthFor<T>(p.channels, {op.grad_output, op.x, op.mask});
      const ColumnGeometry g = GeometryFor(p, sizeof(T), width, kStatsRows);
      split = {g.chunks, g.chunk_rows};
      const M* mean = static_cast<const M*>(op.mean);
      WithWidth<T>(width, [&](auto w) {
        ColumnGradSumsKernel<T, M, decltype(w)::value>
            <<<GridOf(g), kBatchNormThreads, 0, stream>>>(g, dy, x, mean, partials, mask, p.mask_threshold);
      });
      if (const cudaError_t error = LaunchError(); error != cudaSuccess) return error;
    }
  }
  BatchNormBackwardFinalizeKernel<P, M>
      <<<FinalizeGrid(p.channels), kBatchNormThreads, 0, stream>>>(p, split, op, partials, coeffs);
  if (const cudaError_t error = LaunchError(); error != cudaSuccess) return error;
  if (op.grad_input == nullptr || p.outer == 0) return cudaSuccess;
  const int width = p.training ? WidthFor<T>(p.channels, {op.grad_output, op.x, op.grad_input, op.mask})
                               : WidthFor<T>(p.channels, {op.grad_output, op.grad_input, op.mask});
  const ColumnGeometry g = GeometryFor(p, sizeof(T), width, kApplyRows);
  T* dx = static_cast<T*>(op.grad_input);
  WithWidth<T>(width, [&](auto w) {
    constexpr int kWidth = decltype(w)::value;
    if (p.training) {
      ColumnGradInputKernel<T, kWidth, true>
          <<<GridOf(g), kBatchNormThreads, 0, stream>>>(g, coeffs, dy, x, dx, mask, p.mask_threshold);
    } else {
      ColumnGradInputKernel<T, kWidth, false>
          <<<GridOf(g), kBatchNormThreads, 0, stream>>>(g, coeffs, dy, x, dx, mask, p.mask_threshold);
    }
  });
  return LaunchError();
}

// The storage types the launchers of batch_norm_kernels.cu use: float32 and
// float64 alone; 16-bit data with 16-bit or float32 parameters, float32
// saved statistics, and in an eval backward 16-bit running statistics.
template cudaError_t ColumnForward<float, float, float>(const BatchNormLaunchParams&, const BatchNormForwardOperands&,
                                                        void*, cudaStream_t);
template cudaError_t ColumnForward<double, double, double>(const BatchNormLaunchParams&,
                                                           const BatchNormForwardOperands&, void*, cudaStream_t);
template cudaError_t ColumnForward<__nv_bfloat16, __nv_bfloat16, float>(const BatchNormLaunchParams&,
                                                                        const BatchNormForwardOperands&, void*,
                                                                        cudaStream_t);
template cudaError_t ColumnForward<__nv_bfloat16, float, float>(const BatchNormLaunchParams&,
                                                                const BatchNormForwardOperands&, void*, cudaStream_t);
template cudaError_t ColumnForward<__half, __half, float>(const BatchNormLaunchParams&, const BatchNormForwardOperands&,
                                                          void*, cudaStream_t);
template cudaError_t ColumnForward<__half, float, float>(const BatchNormLaunchParams&, const BatchNormForwardOperands&,
                                                         void*, cudaStream_t);
template cudaError_t ColumnBackward<float, float, float>(const BatchNormLaunchParams&, const BatchNormBackwardOperands&,
                                                         void*, cudaStream_t);
template cudaError_t ColumnBackward<double, double, double>(const BatchNormLaunchParams&,
                                                            const BatchNormBackwardOperands&, void*, cudaStream_t);
template cudaError_t ColumnBackward<__nv_bfloat16, float, float>(const BatchNormLaunchParams&,
                                                                 const BatchNormBackwardOperands&, void*, cudaStream_t);
template cudaError_t ColumnBackward<__nv_bfloat16, __nv_bfloat16, float>(const BatchNormLaunchParams&,
                                                                         const BatchNormBackwardOperands&, void*,
                                                                         cudaStream_t);
template cudaError_t ColumnBackward<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(const BatchNormLaunchParams&,
                                                                                 const BatchNormBackwardOperands&,
                                                                                 void*, cudaStream_t);
template cudaError_t ColumnBackward<__half, float, float>(const BatchNormLaunchParams&,
                                                          const BatchNormBackwardOperands&, void*, cudaStream_t);
template cudaError_t ColumnBackward<__half, __half, float>(const BatchNormLaunchParams&,
                                                           const BatchNormBackwardOperands&, void*, cudaStream_t);
template cudaError_t ColumnBackward<__half, __half, __half>(const BatchNormLaunchParams&,
                                                            const BatchNormBackwardOperands&, void*, cudaStream_t);

}  // namespace tandem::cuda::batch_norm
