// Deterministic reductions that spread one output's sum over several blocks
// without scratch memory or atomics: the blocks form a thread-block cluster
// (Hopper, sm_90), each block reduces its share into shared memory, and the
// cluster's first block adds the blocks' partial sums from their shared
// memory (distributed shared memory) in rank order. Every sum has a fixed
// order (per thread, then per block, then per cluster), so results are the
// same bit for bit on every run, op by op or replayed from a CUDA graph.
//
//   ColumnSum: over the rows of [slabs, rows, cols] (the column sums of
//     sum.dim over a middle dim, layer norm's grad_weight and grad_bias). A
//     block is 32 threads across (one column each, or one 16-byte vector of
//     columns) by up to 32 row threads; a cluster of up to 8 blocks shares
//     the rows.
//   ChannelSum: out[c] = the sum of `rows` runs of `row_size` contiguous
//     elements at `row_stride` apart, starting at c * channel_stride (the
//     per-channel statistics of [N, C, H, W] over N, H and W). A cluster of
//     up to 8 blocks per channel (of 1024 threads when the channels are
//     few); 16-byte loads when the strides and the base allow. Any float
//     input, 16-bit ones widened (WidenTo) to the accumulator.
//
// Header-only: kernels in an anonymous namespace (each including .cu file
// gets its own instantiations) and their launchers. Launches are plain
// kernel launches with a cluster attribute: no allocation, no host
// synchronization, so they can be captured into CUDA graphs.
#ifndef TANDEM_ADAPTOR_CUDA_CLUSTER_REDUCE_CUH_
#define TANDEM_ADAPTOR_CUDA_CLUSTER_REDUCE_CUH_

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/launch.h"

namespace tandem::cuda {
namespace {

// The most blocks of a cluster that every Hopper part can schedule.
constexpr int kMaxClusterBlocks = 8;
constexpr int kMaxColumnRowThreads = 32;
// Threads of a ChannelSum block: 256, or 1024 when the channels are too few
// to fill the GPU with clusters of 256-thread blocks (a full sum is one
// channel).
constexpr int kChannelSumThreads = 256;
constexpr int kFewChannelSumThreads = 1024;
constexpr int64_t kFewChannelBlocks = 264;  // two blocks per SM of an H200
// Grid-stride loops cover outputs past this many clusters.
constexpr int64_t kMaxClusterGridX = int64_t{1} << 20;

// The smallest power of two >= `want`, clamped to [1, kMaxClusterBlocks].
inline int ClusterBlocksFor(int64_t want) {
  int blocks = 1;
  while (blocks < kMaxClusterBlocks && blocks < want) blocks *= 2;
  return blocks;
}

// Launches `kernel` on a grid of (grid_x, cluster_blocks) blocks of `block`
// threads, cluster_blocks blocks per cluster along y.
template <typename... Params, typename... Args>
cudaError_t LaunchClustered(void (*kernel)(Params...), int64_t grid_x, int cluster_blocks, dim3 block,
                            cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(cluster_blocks), 1);
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 1;
  attribute[0].val.clusterDim.y = static_cast<unsigned>(cluster_blocks);
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// ---- ColumnSum ----

// What a column sum adds and where its result goes. A Source provides:
//   using Element = ...;  // the type it loads (sets the 16-byte vector width)
//   using Acc = ...;  static constexpr int kSums = ...;
//   template <int kVec> __device__ void Add(int64_t slab, int64_t row, int64_t col,
//                                           Acc (&acc)[kVec][kSums]) const;
//   template <int kVec> __device__ void Store(int64_t slab, int64_t col,
//                                             const Acc (&total)[kVec][kSums]) const;
// Add adds the terms of elements (slab, row, col + c), c < kVec, to acc[c]
// (with kVec > 1 the kVec columns all exist and start 16 bytes aligned);
// Store receives the totals of columns col + c of slab.
//
// Block (32, row_threads), grid (tiles, cluster blocks): tile t is slab
// t / col_tiles, columns (t % col_tiles) * 32 * kVec + [0, 32 * kVec),
// thread x taking kVec adjacent columns. Thread (x, y) of the cluster's
// block `rank` adds rows rank * row_threads + y + k * step, step = cluster
// blocks * row_threads, into kUnroll interleaved accumulators (that many
// rows' loads in flight).
template <typename Source, int kVec>
__global__ void __launch_bounds__(32 * kMaxColumnRowThreads)
    ColumnSumKernel(int64_t slabs, int64_t rows, int64_t cols, Source source) {
  using Acc = typename Source::Acc;
  constexpr int kSums = Source::kSums;
  constexpr int kTile = 32 * kVec;
  constexpr int kUnroll = kVec * kSums >= 8 ? 2 : 4;
  __shared__ Acc partial[kVec * kSums][kMaxColumnRowThreads][33];
  __shared__ Acc block_total[kVec * kSums][32];
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  const unsigned cluster_blocks = cluster.num_blocks();
  const int64_t col_tiles = (cols + kTile - 1) / kTile;
  const int64_t tiles = slabs * col_tiles;
  const int64_t step = static_cast<int64_t>(cluster_blocks) * blockDim.y;
  const int64_t first_row = static_cast<int64_t>(rank) * blockDim.y + threadIdx.y;
  // Every block of a cluster shares blockIdx.x, so all run the same tiles
  // and meet at the same cluster barriers.
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t slab = t / col_tiles;
    const int64_t col = (t - slab * col_tiles) * kTile + threadIdx.x * kVec;
    Acc acc[kUnroll][kVec][kSums] = {};
    if (col < cols) {
      int64_t r = first_row;
      for (; r + (kUnroll - 1) * step < rows; r += kUnroll * step) {
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) source.template Add<kVec>(slab, r + k * step, col, acc[k]);
      }
      for (; r < rows; r += step) source.template Add<kVec>(slab, r, col, acc[0]);
    }
#pragma unroll
    for (int c = 0; c < kVec; ++c) {
#pragma unroll
      for (int s = 0; s < kSums; ++s) {
        Acc v = acc[0][c][s];
#pragma unroll
        for (int k = 1; k < kUnroll; ++k) v += acc[k][c][s];
        partial[c * kSums + s][threadIdx.y][threadIdx.x] = v;
      }
    }
    __syncthreads();
    if (threadIdx.y == 0) {
#pragma unroll
      for (int cs = 0; cs < kVec * kSums; ++cs) {
        Acc v = 0;
        for (unsigned y = 0; y < blockDim.y; ++y) v += partial[cs][y][threadIdx.x];
        block_total[cs][threadIdx.x] = v;
      }
    }
    cluster.sync();  // every block's block_total is complete
    if (rank == 0 && threadIdx.y == 0 && col < cols) {
      Acc total[kVec][kSums] = {};
      for (unsigned q = 0; q < cluster_blocks; ++q) {
#pragma unroll
        for (int c = 0; c < kVec; ++c) {
#pragma unroll
          for (int s = 0; s < kSums; ++s) {
            total[c][s] += cluster.map_shared_rank(&block_total[c * kSums + s][0], q)[threadIdx.x];
          }
        }
      }
      source.template Store<kVec>(slab, col, total);
    }
    cluster.sync();  // block_total and partial are free again
  }
}

// Runs ColumnSumKernel over [slabs, rows, cols] (rows may be 0: every
// column stores zeros). Each row thread takes about 8 rows or more. With
// `vectorizable` (cols a whole number of 16-byte vectors of Element and the
// source's tensors 16-byte aligned), a thread takes a vector's columns when
// that still makes 64 blocks or more.
template <typename Source>
cudaError_t LaunchColumnSum(int64_t slabs, int64_t rows, int64_t cols, const Source& source, bool vectorizable,
                            cudaStream_t stream) {
  constexpr int kVector = Vec16<typename Source::Element>::kCount;
  if (slabs * cols == 0) return cudaSuccess;
  const int64_t row_threads_wanted = (rows + 7) / 8;
  int row_threads = 1;
  while (row_threads < kMaxColumnRowThreads && row_threads < row_threads_wanted) row_threads *= 2;
  const int cluster_blocks = ClusterBlocksFor((row_threads_wanted + row_threads - 1) / row_threads);
  const int64_t vector_tiles = slabs * ((cols + 32 * kVector - 1) / (32 * kVector));
  const dim3 block(32, row_threads);
  if (vectorizable && cols % kVector == 0 && vector_tiles * cluster_blocks >= 64) {
    const int64_t grid_x = vector_tiles < kMaxClusterGridX ? vector_tiles : kMaxClusterGridX;
    return LaunchClustered(ColumnSumKernel<Source, kVector>, grid_x, cluster_blocks, block, stream, slabs, rows, cols,
                           source);
  }
  const int64_t tiles = slabs * ((cols + 31) / 32);
  const int64_t grid_x = tiles < kMaxClusterGridX ? tiles : kMaxClusterGridX;
  return LaunchClustered(ColumnSumKernel<Source, 1>, grid_x, cluster_blocks, block, stream, slabs, rows, cols, source);
}

// The kVec elements of T at `p` (16-byte aligned when kVec > 1).
template <int kVec, typename T>
__device__ __forceinline__ void LoadColumns(const T* p, T (&v)[kVec]) {
  if constexpr (kVec == 1) {
    v[0] = *p;
  } else {
    static_assert(Vec16<T>::kCount == kVec, "a vector of columns is 16 bytes");
    const Vec16<T> pack = *reinterpret_cast<const Vec16<T>*>(p);
#pragma unroll
    for (int c = 0; c < kVec; ++c) v[c] = pack.v[c];
  }
}

// ---- ChannelSum ----

// The geometry of a ChannelSum in units of kWidth elements (every size and
// stride below is a whole number of units).
struct ChannelSumShape {
  int64_t channels = 0;
  int64_t channel_stride = 0;  // units from channel c to c + 1
  int64_t rows = 0;            // runs per channel
  int64_t row_stride = 0;      // units from a run to the next
  int64_t row_units = 0;       // units per run
};

// The ChannelSum of a reduction that keeps one dim (`kept`) and sums two
// (`reduced`, the inner one contiguous): per-channel sums of [N, C, plane].
// False, and *shape untouched, for any other layout.
inline bool AsChannelSum(const StridedOperand& kept, const StridedOperand& reduced, ChannelSumShape* shape) {
  if (kept.rank != 1 || reduced.rank != 2 || reduced.strides[1] != 1) return false;
  shape->channels = kept.sizes[0];
  shape->channel_stride = kept.strides[0];
  shape->rows = reduced.sizes[0];
  shape->row_stride = reduced.strides[0];
  shape->row_units = reduced.sizes[1];
  return true;
}

// Grid (channels, cluster blocks), kBlockThreads threads: the cluster's
// threads take the channel's units u = rank * blockDim.x + threadIdx.x +
// k * step (u = row * row_units + col), four loads at a time;
// `finish(c, total, count)` stores channel c's total of `count` elements.
template <typename In, typename Acc, int kWidth, int kBlockThreads, typename Finish>
__global__ void __launch_bounds__(kBlockThreads) ChannelSumKernel(ChannelSumShape shape, const In* in, Finish finish) {
  using Unit = std::conditional_t<kWidth == 1, In, Vec16<In>>;
  static_assert(kWidth == 1 || Vec16<In>::kCount == kWidth, "a unit is one element or 16 bytes");
  __shared__ Acc shared[32];
  __shared__ Acc block_total;
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  const unsigned cluster_blocks = cluster.num_blocks();
  const Unit* units = reinterpret_cast<const Unit*>(in);
  const int64_t channel_units = shape.rows * shape.row_units;
  const int64_t step = static_cast<int64_t>(cluster_blocks) * blockDim.x;
  // A step as whole runs plus a rest, so that a cursor moves without a
  // division.
  const int64_t step_rows = shape.row_units > 0 ? step / shape.row_units : 0;
  const int64_t step_cols = step - step_rows * shape.row_units;
  const int64_t first = static_cast<int64_t>(rank) * blockDim.x + threadIdx.x;
  for (int64_t c = blockIdx.x; c < shape.channels; c += gridDim.x) {
    Acc acc[4] = {Acc(0), Acc(0), Acc(0), Acc(0)};
    if (first < channel_units) {
      int64_t row = first / shape.row_units;
      int64_t col = first - row * shape.row_units;
      const Unit* base = units + c * shape.channel_stride;
      int64_t u = first;
      auto at = [&]() { return base + row * shape.row_stride + col; };
      auto advance = [&]() {
        u += step;
        row += step_rows;
        col += step_cols;
        if (col >= shape.row_units) {
          col -= shape.row_units;
          ++row;
        }
      };
      auto add = [&](Acc& a, const Unit& v) {
        if constexpr (kWidth == 1) {
          a += WidenTo<Acc>(v);
        } else {
#pragma unroll
          for (int e = 0; e < kWidth; ++e) a += WidenTo<Acc>(v.v[e]);
        }
      };
      while (u + 3 * step < channel_units) {
        Unit v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          v[k] = *at();
          advance();
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) add(acc[k], v[k]);
      }
      while (u < channel_units) {
        add(acc[0], *at());
        advance();
      }
    }
    const Acc sum = BlockSum((acc[0] + acc[1]) + (acc[2] + acc[3]), shared);
    if (threadIdx.x == 0) block_total = sum;
    cluster.sync();  // every block's block_total is written
    if (rank == 0 && threadIdx.x == 0) {
      Acc total = 0;
      for (unsigned q = 0; q < cluster_blocks; ++q) total += *cluster.map_shared_rank(&block_total, q);
      finish(c, total, channel_units * kWidth);
    }
    cluster.sync();  // block_total is free again
  }
}

// Runs ChannelSumKernel for `shape` given in elements: 16-byte units when
// the run length and both strides are whole units and `in` is aligned,
// single elements otherwise. About 16 units per thread or more.
template <typename In, typename Acc, int kBlockThreads, typename Finish>
cudaError_t LaunchChannelSumOf(ChannelSumShape shape, const In* in, const Finish& finish, cudaStream_t stream) {
  constexpr int kVector = Vec16<In>::kCount;
  const bool vector = shape.row_units % kVector == 0 && shape.row_stride % kVector == 0 &&
                      shape.channel_stride % kVector == 0 && Aligned16(in);
  const int width = vector ? kVector : 1;
  shape.row_units /= width;
  shape.row_stride /= width;
  shape.channel_stride /= width;
  const int64_t per_cluster = int64_t{kBlockThreads} * 16;
  const int cluster_blocks = ClusterBlocksFor((shape.rows * shape.row_units + per_cluster - 1) / per_cluster);
  const int64_t grid_x = shape.channels < kMaxClusterGridX ? shape.channels : kMaxClusterGridX;
  if (vector) {
    return LaunchClustered(ChannelSumKernel<In, Acc, kVector, kBlockThreads, Finish>, grid_x, cluster_blocks,
                           dim3(kBlockThreads), stream, shape, in, finish);
  }
  return LaunchClustered(ChannelSumKernel<In, Acc, 1, kBlockThreads, Finish>, grid_x, cluster_blocks,
                         dim3(kBlockThreads), stream, shape, in, finish);
}

template <typename In, typename Acc, typename Finish>
cudaError_t LaunchChannelSum(const ChannelSumShape& shape, const In* in, const Finish& finish, cudaStream_t stream) {
  if (shape.channels == 0) return cudaSuccess;
  if (shape.channels * kMaxClusterBlocks < kFewChannelBlocks) {
    return LaunchChannelSumOf<In, Acc, kFewChannelSumThreads>(shape, in, finish, stream);
  }
  return LaunchChannelSumOf<In, Acc, kChannelSumThreads>(shape, in, finish, stream);
}

}  // namespace
}  // namespace tandem::cuda

#endif  // TANDEM_ADAPTOR_CUDA_CLUSTER_REDUCE_CUH_
