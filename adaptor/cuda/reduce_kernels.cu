// Sum and mean over dims. The wrappers collapse the reduced dims into one
// middle dim when they are adjacent ([outer, size, inner]); this file has a
// row kernel (inner == 1: a warp or a block per output), a column kernel
// (inner > 1: 32 adjacent outputs per block, the reduced dim split over the
// block's rows), and two kernels for scattered reduced dims: a thread per
// output when each output sums few elements, a block per output when each
// sums many (the [N, C, H, W] -> [C] shape of per-channel statistics).
#include <type_traits>

#include "adaptor/cuda/kernel_common.cuh"
#include "adaptor/cuda/launch.h"

namespace tandem::cuda {
namespace {

// float32 sums of float32 stay in float (as on PyTorch's GPU path); any other
// float mix accumulates in double; integer sums in int64.
template <typename In, typename Out>
using AccOf = std::conditional_t<std::is_same_v<In, float> && std::is_same_v<Out, float>, float,
                                 std::conditional_t<std::is_floating_point_v<In> || std::is_floating_point_v<Out>,
                                                    double, int64_t>>;

template <typename Acc, typename Out>
__device__ __forceinline__ Out Finish(Acc sum, int64_t count, bool mean) {
  if constexpr (std::is_floating_point_v<Acc>) {
    if (mean) return static_cast<Out>(sum / static_cast<Acc>(count));  // 0 / 0 = NaN for an empty slice
  }
  return static_cast<Out>(sum);
}

// One warp per row (threads_per_row == 32) or one block per row.
template <typename In, typename Out, int kThreadsPerRow>
__global__ void RowReduceKernel(int64_t rows, int64_t size, bool mean, const In* in, Out* out) {
  using Acc = AccOf<In, Out>;
  constexpr int kRowsPerBlock = kThreads / kThreadsPerRow;
  __shared__ Acc shared[32];
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  // Every thread of the block runs the same number of iterations (BlockSum
  // synchronizes the block).
  const int64_t rounds = (rows + step - 1) / step;
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t row = first + round * step;
    Acc acc = 0;
    if (row < rows) {
      const In* x = in + row * size;
      for (int64_t j = lane; j < size; j += kThreadsPerRow) acc += static_cast<Acc>(x[j]);
    }
    if constexpr (kThreadsPerRow == 32) {
      acc = WarpSum(acc);
    } else {
      acc = BlockSum(acc, shared);
    }
    if (lane == 0 && row < rows) out[row] = Finish<Acc, Out>(acc, size, mean);
  }
}

constexpr int kColumnRows = 8;

// Block (32, kColumnRows): 32 adjacent outputs of one outer slice.
template <typename In, typename Out>
__global__ void ColumnReduceKernel(int64_t outer, int64_t size, int64_t inner, bool mean, const In* in, Out* out) {
  using Acc = AccOf<In, Out>;
  __shared__ Acc partial[kColumnRows][33];
  const int64_t column_blocks = (inner + 31) / 32;
  for (int64_t b = blockIdx.x; b < outer * column_blocks; b += gridDim.x) {
    const int64_t o = b / column_blocks;
    const int64_t c = (b % column_blocks) * 32 + threadIdx.x;
    Acc acc = 0;
    if (c < inner) {
      const In* x = in + o * size * inner + c;
      for (int64_t r = threadIdx.y; r < size; r += kColumnRows) acc += static_cast<Acc>(x[r * inner]);
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < inner) {
      Acc total = 0;
#pragma unroll
      for (int r = 0; r < kColumnRows; ++r) total += partial[r][threadIdx.x];
      out[o * inner + c] = Finish<Acc, Out>(total, size, mean);
    }
    __syncthreads();
  }
}

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
    case DType::kFloat32: f(float{}); return true;
    case DType::kFloat64: f(double{}); return true;
    case DType::kInt64: f(int64_t{}); return true;
    default: return false;
  }
}

template <typename F>
bool DispatchPair(DType out_dtype, DType in_dtype, F&& f) {
  bool ok = false;
  DispatchNumeric(out_dtype, [&](auto out_tag) {
    ok = DispatchNumeric(in_dtype, [&](auto in_tag) { f(in_tag, out_tag); });
  });
  return ok;
}

}  // namespace

cudaError_t LaunchReduceMiddle(DType out_dtype, DType in_dtype, int64_t outer, int64_t size, int64_t inner,
                               bool mean, const void* in, void* out, cudaStream_t stream) {
  if (outer * inner == 0) return cudaSuccess;
  const bool launched = DispatchPair(out_dtype, in_dtype, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    const In* x = static_cast<const In*>(in);
    Out* y = static_cast<Out*>(out);
    if (inner == 1) {
      if (size <= 1024) {
        constexpr int kRowsPerBlock = kThreads / 32;
        RowReduceKernel<In, Out, 32>
            <<<Blocks(outer, kRowsPerBlock), kThreads, 0, stream>>>(outer, size, mean, x, y);
      } else {
        RowReduceKernel<In, Out, kThreads><<<Blocks(outer, 1), kThreads, 0, stream>>>(outer, size, mean, x, y);
      }
    } else {
      const int64_t blocks = outer * ((inner + 31) / 32);
      ColumnReduceKernel<In, Out><<<Blocks(blocks, 1), dim3(32, kColumnRows), 0, stream>>>(outer, size, inner, mean,
                                                                                          x, y);
    }
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchReduceGeneral(DType out_dtype, DType in_dtype, int64_t out_n, const StridedOperand& kept,
                                const StridedOperand& reduced, bool mean, const void* in, void* out,
                                cudaStream_t stream) {
  if (out_n == 0) return cudaSuccess;
  int64_t count = 1;
  for (int d = 0; d < reduced.rank; ++d) count *= reduced.sizes[d];
  const bool launched = DispatchPair(out_dtype, in_dtype, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    const In* x = static_cast<const In*>(in);
    Out* y = static_cast<Out*>(out);
    if (count < kBlockPerOutputMinCount || reduced.rank == 0) {
      GeneralReduceKernel<In, Out><<<Blocks(out_n), kThreads, 0, stream>>>(out_n, kept, reduced, count, mean, x, y);
      return;
    }
    StridedOperand rows = reduced;
    --rows.rank;
    const int64_t row_size = reduced.sizes[rows.rank];
    const int64_t row_stride = reduced.strides[rows.rank];
    BlockPerOutputReduceKernel<In, Out><<<Blocks(out_n, 1), kThreads, 0, stream>>>(
        out_n, kept, rows, count / row_size, row_size, row_stride, mean, x, y);
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
