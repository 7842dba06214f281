// A reduction skeleton for the reductions whose accumulator is more than a
// running sum (extremum_kernels.cu: maxima with NaN propagation, arg-extrema
// with their indices; norm_var_kernels.cu: Welford's variance, the vector
// norms; prod_scan_kernels.cu: products), plus the element-type dispatch,
// wrapping integer arithmetic and word-wise warp shuffles that those files,
// the scans and the sorts share. An Op says what one output accumulates:
//
//   struct Op {
//     using In = ...;   // the element type read
//     using Acc = ...;  // trivially copyable, a multiple of 4 bytes
//     __device__ Acc Identity() const;
//     __device__ void Add(Acc& acc, In x, int64_t r) const;  // element r of the output's slice
//     __device__ Acc Combine(const Acc& a, const Acc& b) const;
//     __device__ void Store(int64_t j, const Acc& acc, int64_t count) const;  // output j's result
//   };
//
// Combine must not depend on which side holds the earlier elements
// (arg-extrema break ties by index), so the tree below may pair partial
// results in any fixed order. Every output's elements are visited in a
// fixed order, so results repeat bit for bit; nothing is allocated and
// nothing synchronizes with the host (CUDA-graph capturable).
//
// Layouts (ReduceLayout, reduce_launch.h): [outer, count, inner] with
// output j = (o, i) reading in[o][r][i], or a general kept / reduced pair of
// strided operands. Kernels, chosen by LaunchGenericReduce:
//   - a thread per output: few elements per output, or many outputs whose
//     adjacent threads read adjacent columns;
//   - a warp per output: contiguous rows (inner == 1) of up to
//     kWarpRowMax elements;
//   - a block per output: long rows, scattered reduced dims, or few
//     outputs of long strided columns;
//   - a column tile: 32 adjacent columns of [outer, count, inner] per block,
//     8 warps splitting the rows (coalesced reads), the warps' partial
//     results combined through shared memory.
//
// Header-only: kernels in an anonymous namespace (each including .cu file
// instantiates its own).
#ifndef TANDEM_KERNELS_CUDA_GENERIC_REDUCE_CUH_
#define TANDEM_KERNELS_CUDA_GENERIC_REDUCE_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/reduce_launch.h"

namespace tandem::cuda {
namespace {

constexpr int64_t kWarpRowMax = 1024;
// At most this many elements per output: a thread per output.
constexpr int64_t kThreadPerOutputMaxCount = 16;
// Column tiles when there are at least this many (one per SM of an H200);
// fewer long columns take a block each.
constexpr int64_t kMinColumnTiles = 132;
// Scattered reduced dims with at least this many elements per output take a
// block per output.
constexpr int64_t kBlockPerOutputMinCount = 256;
constexpr int kTileRowWarps = kThreads / 32;

// ---- element types ----

// Calls f(T{}) for the element types of the reductions: float32, float64,
// int64 and the 16-bit floats (with kInts false: the floats only); false for
// others.
template <bool kInts = true, typename F>
bool DispatchReduceType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      f(float{});
      return true;
    case DType::kFloat64:
      f(double{});
      return true;
    case DType::kInt64:
      if constexpr (kInts) {
        f(int64_t{});
        return true;
      }
      return false;
    default:
      return DispatchHalf(dtype, f);
  }
}

// Calls f(In{}, Out{}) for the conversions of reduce_launch.h (a type to
// itself, float32 to float64, a 16-bit float to float32, with kInts also
// int64 to float32 or float64); false for others.
template <bool kInts, typename F>
bool DispatchConversion(DType out_dtype, DType in_dtype, F&& f) {
  if (out_dtype == in_dtype) return DispatchReduceType<kInts>(in_dtype, [&](auto tag) { f(tag, tag); });
  if (out_dtype == DType::kFloat32 && DispatchHalf(in_dtype, [&](auto tag) { f(tag, float{}); })) return true;
  if (in_dtype == DType::kFloat32 && out_dtype == DType::kFloat64) {
    f(float{}, double{});
    return true;
  }
  if constexpr (kInts) {
    if (in_dtype == DType::kInt64 && out_dtype == DType::kFloat32) {
      f(int64_t{}, float{});
      return true;
    }
    if (in_dtype == DType::kInt64 && out_dtype == DType::kFloat64) {
      f(int64_t{}, double{});
      return true;
    }
  }
  return false;
}

// The arithmetic type of a reduction from In to Out: double when either is
// float64, int64 when the result is int64, float otherwise (float32 and the
// 16-bit floats, as PyTorch's CUDA kernels accumulate them).
template <typename In, typename Out = In>
using ReduceAccOf = std::conditional_t<std::is_same_v<In, double> || std::is_same_v<Out, double>, double,
                                       std::conditional_t<std::is_same_v<Out, int64_t>, int64_t, float>>;

template <typename A>
__device__ __forceinline__ bool IsNanValue(A v) {
  if constexpr (std::is_floating_point_v<A>) {
    return v != v;
  } else {
    return false;
  }
}

// Sums and products with two's-complement wraparound for int64 (signed
// overflow is undefined).
template <typename A>
__device__ __forceinline__ A AddWrapping(A a, A b) {
  if constexpr (std::is_same_v<A, int64_t>) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  } else {
    return a + b;
  }
}
template <typename A>
__device__ __forceinline__ A MulWrapping(A a, A b) {
  if constexpr (std::is_same_v<A, int64_t>) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  } else {
    return a * b;
  }
}

// ---- shuffles and the reduction kernels ----

// __shfl_xor_sync / __shfl_up_sync / __shfl_sync of any trivially copyable T whose size
// is a multiple of 4 bytes, word by word.
template <typename T>
__device__ __forceinline__ T ShuffleXor(const T& v, int mask) {
  static_assert(sizeof(T) % 4 == 0, "shuffled types are whole 4-byte words");
  constexpr int kWords = sizeof(T) / 4;
  int words[kWords];
  memcpy(words, &v, sizeof(T));
#pragma unroll
  for (int w = 0; w < kWords; ++w) words[w] = __shfl_xor_sync(0xffffffffu, words[w], mask);
  T out;
  memcpy(&out, words, sizeof(T));
  return out;
}

template <typename T>
__device__ __forceinline__ T ShuffleUp(const T& v, int delta) {
  static_assert(sizeof(T) % 4 == 0, "shuffled types are whole 4-byte words");
  constexpr int kWords = sizeof(T) / 4;
  int words[kWords];
  memcpy(words, &v, sizeof(T));
#pragma unroll
  for (int w = 0; w < kWords; ++w) words[w] = __shfl_up_sync(0xffffffffu, words[w], delta);
  T out;
  memcpy(&out, words, sizeof(T));
  return out;
}

template <typename T>
__device__ __forceinline__ T ShuffleFrom(const T& v, int src_lane) {
  static_assert(sizeof(T) % 4 == 0, "shuffled types are whole 4-byte words");
  constexpr int kWords = sizeof(T) / 4;
  int words[kWords];
  memcpy(words, &v, sizeof(T));
#pragma unroll
  for (int w = 0; w < kWords; ++w) words[w] = __shfl_sync(0xffffffffu, words[w], src_lane);
  T out;
  memcpy(&out, words, sizeof(T));
  return out;
}

template <typename Op>
__device__ __forceinline__ typename Op::Acc WarpCombine(const Op& op, typename Op::Acc acc) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) acc = op.Combine(acc, ShuffleXor(acc, offset));
  return acc;
}

// The block's combined result, valid in thread 0. `shared` holds 32 Accs.
template <typename Op>
__device__ typename Op::Acc BlockCombine(const Op& op, typename Op::Acc acc, typename Op::Acc* shared) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = (blockDim.x + 31) / 32;
  acc = WarpCombine(op, acc);
  __syncthreads();  // `shared` may still be read from the previous output
  if (lane == 0) shared[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < warps ? shared[lane] : op.Identity();
    acc = WarpCombine(op, acc);
  }
  return acc;
}

// Where output j's elements are. Middle: [outer, count, inner].
struct MiddleLayout {
  int64_t count;
  int64_t inner;
  __device__ __forceinline__ int64_t Base(int64_t j) const {
    const int64_t o = j / inner;
    return o * count * inner + (j - o * inner);
  }
  __device__ __forceinline__ int64_t Offset(int64_t r) const { return r * inner; }
};

struct GeneralLayout {
  StridedOperand kept;
  StridedOperand reduced;
  __device__ __forceinline__ int64_t Base(int64_t j) const { return StridedOffset(kept, j); }
  __device__ __forceinline__ int64_t Offset(int64_t r) const { return StridedOffset(reduced, r); }
};

template <typename Op, typename Layout>
__global__ void ThreadPerOutputKernel(Op op, Layout layout, int64_t out_n, int64_t count, const typename Op::In* in) {
  for (int64_t j = GlobalThread(); j < out_n; j += GlobalStride()) {
    const typename Op::In* x = in + layout.Base(j);
    typename Op::Acc acc = op.Identity();
    for (int64_t r = 0; r < count; ++r) op.Add(acc, x[layout.Offset(r)], r);
    op.Store(j, acc, count);
  }
}

// kGroup threads per output: a warp (32) or the whole block (kThreads).
template <int kGroup, typename Op, typename Layout>
__global__ void GroupPerOutputKernel(Op op, Layout layout, int64_t out_n, int64_t count, const typename Op::In* in) {
  using Acc = typename Op::Acc;
  __shared__ alignas(16) unsigned char raw[32 * sizeof(Acc)];
  Acc* shared = reinterpret_cast<Acc*>(raw);
  constexpr int kGroupsPerBlock = kThreads / kGroup;
  const int lane = threadIdx.x % kGroup;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kGroupsPerBlock + threadIdx.x / kGroup;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kGroupsPerBlock;
  // A block-wide group shares j, so its threads run the loop equally often
  // (BlockCombine synchronizes the block).
  for (int64_t j = first; j < out_n; j += step) {
    const typename Op::In* x = in + layout.Base(j);
    Acc acc = op.Identity();
    for (int64_t r = lane; r < count; r += kGroup) op.Add(acc, x[layout.Offset(r)], r);
    if constexpr (kGroup == 32) {
      acc = WarpCombine(op, acc);
    } else {
      acc = BlockCombine(op, acc, shared);
    }
    if (lane == 0) op.Store(j, acc, count);
  }
}

// 32 adjacent columns of [outer, count, inner] per block (blockDim 32 x
// kTileRowWarps): lane = column, warp w takes rows w, w + kTileRowWarps, ...
template <typename Op>
__global__ void ColumnTileKernel(Op op, int64_t outer, int64_t count, int64_t inner, const typename Op::In* in) {
  using Acc = typename Op::Acc;
  __shared__ alignas(16) unsigned char raw[kTileRowWarps * 32 * sizeof(Acc)];
  Acc* shared = reinterpret_cast<Acc*>(raw);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int64_t col_tiles = (inner + 31) / 32;
  const int64_t tiles = outer * col_tiles;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t o = t / col_tiles;
    const int64_t i = (t - o * col_tiles) * 32 + lane;
    Acc acc = op.Identity();
    if (i < inner) {
      const typename Op::In* x = in + o * count * inner + i;
      for (int64_t r = warp; r < count; r += kTileRowWarps) op.Add(acc, x[r * inner], r);
    }
    __syncthreads();  // the previous tile's reads of `shared` are done
    shared[warp * 32 + lane] = acc;
    __syncthreads();
    if (warp == 0 && i < inner) {
      for (int w = 1; w < kTileRowWarps; ++w) acc = op.Combine(acc, shared[w * 32 + lane]);
      op.Store(o * inner + i, acc, count);
    }
  }
}

template <typename Op>
cudaError_t LaunchGenericReduce(const Op& op, const ReduceLayout& layout, const typename Op::In* in,
                                cudaStream_t stream) {
  const int64_t out_n = layout.out_n;
  const int64_t count = layout.count;
  if (out_n == 0) return cudaSuccess;
  constexpr int kWarpsPerBlock = kThreads / 32;
  if (layout.general) {
    const GeneralLayout l{layout.kept, layout.reduced};
    if (count < kBlockPerOutputMinCount) {
      ThreadPerOutputKernel<<<Blocks(out_n), kThreads, 0, stream>>>(op, l, out_n, count, in);
    } else {
      GroupPerOutputKernel<kThreads><<<Blocks(out_n, 1), kThreads, 0, stream>>>(op, l, out_n, count, in);
    }
    return LaunchError();
  }
  const MiddleLayout l{count, layout.inner};
  if (count <= kThreadPerOutputMaxCount) {
    ThreadPerOutputKernel<<<Blocks(out_n), kThreads, 0, stream>>>(op, l, out_n, count, in);
  } else if (layout.inner == 1 && count <= kWarpRowMax) {
    GroupPerOutputKernel<32><<<Blocks(out_n, kWarpsPerBlock), kThreads, 0, stream>>>(op, l, out_n, count, in);
  } else if (layout.inner == 1) {
    GroupPerOutputKernel<kThreads><<<Blocks(out_n, 1), kThreads, 0, stream>>>(op, l, out_n, count, in);
  } else {
    const int64_t outer = out_n / layout.inner;
    const int64_t tiles = outer * ((layout.inner + 31) / 32);
    if (tiles >= kMinColumnTiles) {
      ColumnTileKernel<<<Blocks(tiles, 1), kThreads, 0, stream>>>(op, outer, count, layout.inner, in);
    } else {
      GroupPerOutputKernel<kThreads><<<Blocks(out_n, 1), kThreads, 0, stream>>>(op, l, out_n, count, in);
    }
  }
  return LaunchError();
}

}  // namespace
}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_GENERIC_REDUCE_CUH_
