// Sum and mean over dims. The wrappers collapse the reduced dims into one
// middle dim when they are adjacent ([outer, size, inner]). Kernels:
//   - inner == 1, rows up to 1024 elements: a warp per output;
//   - inner == 1, longer rows: a row is a channel of one run for the
//     cluster channel sum below (a cluster of blocks shares a row when the
//     rows are few);
//   - inner > 1: a cluster column sum (cluster_reduce.cuh: a cluster of
//     blocks per 32 adjacent outputs shares the reduced dim);
//   - scattered reduced dims, many elements per output: a cluster of blocks
//     per output when the outputs are one kept dim between two reduced runs
//     (the [N, C, H, W] -> [C] shape of per-channel statistics), a block per
//     output for other layouts;
//   - scattered reduced dims, few elements per output: a thread per output.
// Every sum has a fixed order (no atomics), so results repeat bit for bit.
#include <type_traits>

#include "kernels/cuda/cluster_reduce.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/launch.h"

namespace tandem::cuda {
namespace {

// float32 sums of float32 stay in float (as on PyTorch's GPU path); any other
// float mix accumulates in double; integer sums in int64.
template <typename In, typename Out>
using AccOf = std::conditional_t<
    std::is_same_v<In, float> && std::is_same_v<Out, float>, float,
    std::conditional_t<std::is_floating_point_v<In> || std::is_floating_point_v<Out>, double, int64_t>>;

template <typename Acc, typename Out>
__device__ __forceinline__ Out Finish(Acc sum, int64_t count, bool mean) {
  if constexpr (std::is_floating_point_v<Acc>) {
    if (mean) return static_cast<Out>(sum / static_cast<Acc>(count));  // 0 / 0 = NaN for an empty slice
  }
  return static_cast<Out>(sum);
}

// A warp per row (rows of up to 1024 elements).
template <typename In, typename Out>
__global__ void RowReduceKernel(int64_t rows, int64_t size, bool mean, const In* in, Out* out) {
  using Acc = AccOf<In, Out>;
  constexpr int kRowsPerBlock = kThreads / 32;
  const int lane = threadIdx.x % 32;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t row = first; row < rows; row += step) {
    // The whole warp takes the row (WarpSum needs every lane).
    const In* x = in + row * size;
    Acc acc = 0;
    for (int64_t j = lane; j < size; j += 32) acc += static_cast<Acc>(x[j]);
    acc = WarpSum(acc);
    if (lane == 0) out[row] = Finish<Acc, Out>(acc, size, mean);
  }
}

// The column sums of [outer, size, inner] over the middle dim.
template <typename In, typename Out>
struct MiddleSums {
  using Element = In;
  using Acc = AccOf<In, Out>;
  static constexpr int kSums = 1;
  int64_t size;
  int64_t inner;
  bool mean;
  const In* in;
  Out* out;

  template <int kVec>
  __device__ __forceinline__ void Add(int64_t slab, int64_t row, int64_t col, Acc (&acc)[kVec][1]) const {
    In v[kVec];
    LoadColumns<kVec>(in + (slab * size + row) * inner + col, v);
#pragma unroll
    for (int c = 0; c < kVec; ++c) acc[c][0] += static_cast<Acc>(v[c]);
  }
  template <int kVec>
  __device__ __forceinline__ void Store(int64_t slab, int64_t col, const Acc (&total)[kVec][1]) const {
#pragma unroll
    for (int c = 0; c < kVec; ++c) out[slab * inner + col + c] = Finish<Acc, Out>(total[c][0], size, mean);
  }
};

// Stores a channel's total (ChannelSum's finish).
template <typename Acc, typename Out>
struct StoreChannel {
  bool mean;
  Out* out;

  __device__ __forceinline__ void operator()(int64_t channel, Acc total, int64_t count) const {
    out[channel] = Finish<Acc, Out>(total, count, mean);
  }
};

template <typename In, typename Out>
__global__ void GeneralReduceKernel(int64_t out_n, StridedOperand kept, StridedOperand reduced, int64_t count,
                                    bool mean, const In* in, Out* out) {
  using Acc = AccOf<In, Out>;
  for (int64_t j = GlobalThread(); j < out_n; j += GlobalStride()) {
    const In* x = in + StridedOffset(kept, j);
    Acc acc = 0;
    for (int64_t r = 0; r < count; ++r) acc += static_cast<Acc>(x[StridedOffset(reduced, r)]);
    out[j] = Finish<Acc, Out>(acc, count, mean);
  }
}

// A block per output (grid-stride over outputs). `rows` indexes the reduced
// dims but the innermost, whose `row_size` elements lie `row_stride` apart;
// the threads walk a row together when it is at least a block wide (one
// offset computation per row, coalesced when row_stride is 1), otherwise the
// flattened (row, element) space.
template <typename In, typename Out>
__global__ void BlockPerOutputReduceKernel(int64_t out_n, StridedOperand kept, StridedOperand rows, int64_t row_count,
                                           int64_t row_size, int64_t row_stride, bool mean, const In* in, Out* out) {
  using Acc = AccOf<In, Out>;
  __shared__ Acc shared[32];
  for (int64_t j = blockIdx.x; j < out_n; j += gridDim.x) {
    const In* x = in + StridedOffset(kept, j);
    Acc acc = 0;
    if (row_size >= blockDim.x) {
      for (int64_t r = 0; r < row_count; ++r) {
        const In* row = x + StridedOffset(rows, r);
        for (int64_t i = threadIdx.x; i < row_size; i += blockDim.x) acc += static_cast<Acc>(row[i * row_stride]);
      }
    } else {
      const int64_t count = row_count * row_size;
      for (int64_t flat = threadIdx.x; flat < count; flat += blockDim.x) {
        const int64_t r = flat / row_size;
        acc += static_cast<Acc>(x[StridedOffset(rows, r) + (flat - r * row_size) * row_stride]);
      }
    }
    acc = BlockSum(acc, shared);
    if (threadIdx.x == 0) out[j] = Finish<Acc, Out>(acc, row_count * row_size, mean);
  }
}

// Below this many elements per output, a thread per output does the sum.
constexpr int64_t kBlockPerOutputMinCount = 2048;

template <typename F>
bool DispatchNumeric(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      f(float{});
      return true;
    case DType::kFloat64:
      f(double{});
      return true;
    case DType::kInt64:
      f(int64_t{});
      return true;
    default:
      return false;
  }
}

template <typename F>
bool DispatchPair(DType out_dtype, DType in_dtype, F&& f) {
  bool ok = false;
  DispatchNumeric(out_dtype,
                  [&](auto out_tag) { ok = DispatchNumeric(in_dtype, [&](auto in_tag) { f(in_tag, out_tag); }); });
  return ok;
}

}  // namespace

cudaError_t LaunchReduceMiddle(DType out_dtype, DType in_dtype, int64_t outer, int64_t size, int64_t inner, bool mean,
                               const void* in, void* out, cudaStream_t stream) {
  if (outer * inner == 0) return cudaSuccess;
  cudaError_t error = cudaSuccess;
  const bool launched = DispatchPair(out_dtype, in_dtype, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    const In* x = static_cast<const In*>(in);
    Out* y = static_cast<Out*>(out);
    if (inner == 1 && size <= 1024) {
      constexpr int kRowsPerBlock = kThreads / 32;
      RowReduceKernel<In, Out><<<Blocks(outer, kRowsPerBlock), kThreads, 0, stream>>>(outer, size, mean, x, y);
    } else if (inner == 1) {
      // Long rows: each row is a "channel" of one run, so a cluster of
      // blocks shares a row when there are few rows.
      ChannelSumShape shape;
      shape.channels = outer;
      shape.channel_stride = size;
      shape.rows = 1;
      shape.row_stride = size;
      shape.row_units = size;
      error = LaunchChannelSum<In, AccOf<In, Out>>(shape, x, StoreChannel<AccOf<In, Out>, Out>{mean, y}, stream);
      return;
    } else {
      error = LaunchColumnSum(outer, size, inner, MiddleSums<In, Out>{size, inner, mean, x, y}, Aligned16(in), stream);
      return;
    }
    error = LaunchError();
  });
  return launched ? error : cudaErrorInvalidValue;
}

cudaError_t LaunchReduceGeneral(DType out_dtype, DType in_dtype, int64_t out_n, const StridedOperand& kept,
                                const StridedOperand& reduced, bool mean, const void* in, void* out,
                                cudaStream_t stream) {
  if (out_n == 0) return cudaSuccess;
  int64_t count = 1;
  for (int d = 0; d < reduced.rank; ++d) count *= reduced.sizes[d];
  cudaError_t error = cudaSuccess;
  const bool launched = DispatchPair(out_dtype, in_dtype, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    const In* x = static_cast<const In*>(in);
    Out* y = static_cast<Out*>(out);
    if (count < kBlockPerOutputMinCount || reduced.rank == 0) {
      GeneralReduceKernel<In, Out><<<Blocks(out_n), kThreads, 0, stream>>>(out_n, kept, reduced, count, mean, x, y);
      error = LaunchError();
      return;
    }
    if (ChannelSumShape shape; AsChannelSum(kept, reduced, &shape)) {
      error = LaunchChannelSum<In, AccOf<In, Out>>(shape, x, StoreChannel<AccOf<In, Out>, Out>{mean, y}, stream);
      return;
    }
    StridedOperand rows = reduced;
    --rows.rank;
    const int64_t row_size = reduced.sizes[rows.rank];
    const int64_t row_stride = reduced.strides[rows.rank];
    BlockPerOutputReduceKernel<In, Out><<<Blocks(out_n, 1), kThreads, 0, stream>>>(out_n, kept, rows, count / row_size,
                                                                                   row_size, row_stride, mean, x, y);
    error = LaunchError();
  });
  return launched ? error : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
