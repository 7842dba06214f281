// prod over generic_reduce.cuh's skeleton, and cumsum. A cumsum line (o, i)
// of [outer, size, inner] is scanned by one thread when lines are many (or
// short), else by a warp (short contiguous lines) or a block, in chunks of
// kScanItems elements per thread: each thread sums its items, the group
// scans the threads' totals (warp shuffles, and shared memory across the
// warps of a block), and a running carry links the chunks. Every sum has a
// fixed order, so results repeat bit for bit.
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/generic_reduce.cuh"
#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/reduce_launch.h"

namespace tandem::cuda {
namespace {

template <typename In_, typename Out>
struct ProdOp {
  using In = In_;
  using Acc = ReduceAccOf<In_, Out>;
  Out* out;

  __device__ __forceinline__ Acc Identity() const { return Acc(1); }
  __device__ __forceinline__ Acc Combine(const Acc& a, const Acc& b) const { return MulWrapping(a, b); }
  __device__ __forceinline__ void Add(Acc& acc, In x, int64_t) const { acc = MulWrapping(acc, WidenTo<Acc>(x)); }
  __device__ __forceinline__ void Store(int64_t j, const Acc& acc, int64_t) const { out[j] = RoundTo<Out>(acc); }
};

// ---- cumsum ----

constexpr int kScanItems = 8;
// Lines of at most this many elements, or at least kManyScanLines strided
// lines, take a thread each.
constexpr int64_t kThreadScanMaxSize = 16;
constexpr int64_t kManyScanLines = 4096;
constexpr int64_t kWarpScanMaxSize = 4096;

template <typename In, typename Out>
__global__ void ThreadScanKernel(int64_t lines, int64_t size, int64_t inner, const In* in, Out* out) {
  using Acc = ReduceAccOf<In, Out>;
  for (int64_t j = GlobalThread(); j < lines; j += GlobalStride()) {
    const int64_t o = j / inner;
    const int64_t base = o * size * inner + (j - o * inner);
    Acc acc = 0;
    for (int64_t r = 0; r < size; ++r) {
      acc = AddWrapping(acc, WidenTo<Acc>(in[base + r * inner]));
      out[base + r * inner] = RoundTo<Out>(acc);
    }
  }
}

// The exclusive prefix of `v` over the kGroup threads of a group (a warp or
// the whole block) in thread order, and the group's total in `total`.
// `shared` holds 32 values; a block-wide group synchronizes the block.
template <int kGroup, typename A>
__device__ __forceinline__ A GroupExclusiveScan(A v, A* shared, A* total) {
  const int lane = threadIdx.x % 32;
  A inclusive = v;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const A up = ShuffleUp(inclusive, d);
    if (lane >= d) inclusive = AddWrapping(inclusive, up);
  }
  A exclusive = ShuffleUp(inclusive, 1);
  if (lane == 0) exclusive = A(0);
  if constexpr (kGroup == 32) {
    *total = ShuffleFrom(inclusive, 31);  // the last lane's inclusive prefix
    return exclusive;
  } else {
    const int warp = threadIdx.x / 32;
    constexpr int kWarps = kGroup / 32;
    if (lane == 31) shared[warp] = inclusive;
    __syncthreads();
    A offset = A(0), sum = A(0);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (w == warp) offset = sum;
      sum = AddWrapping(sum, shared[w]);
    }
    __syncthreads();  // `shared` is reused by the next chunk
    *total = sum;
    return AddWrapping(offset, exclusive);
  }
}

template <int kGroup, typename In, typename Out>
__global__ void GroupScanKernel(int64_t lines, int64_t size, int64_t inner, const In* in, Out* out) {
  using Acc = ReduceAccOf<In, Out>;
  __shared__ alignas(16) unsigned char raw[32 * sizeof(Acc)];
  Acc* shared = reinterpret_cast<Acc*>(raw);
  constexpr int kGroupsPerBlock = kThreads / kGroup;
  constexpr int64_t kChunk = int64_t{kGroup} * kScanItems;
  const int lane = threadIdx.x % kGroup;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kGroupsPerBlock + threadIdx.x / kGroup;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kGroupsPerBlock;
  for (int64_t j = first; j < lines; j += step) {
    const int64_t o = j / inner;
    const int64_t base = o * size * inner + (j - o * inner);
    const In* x = in + base;
    Out* y = out + base;
    Acc carry = Acc(0);
    for (int64_t chunk = 0; chunk < size; chunk += kChunk) {
      const int64_t r0 = chunk + int64_t{lane} * kScanItems;
      Acc items[kScanItems];
      Acc local = Acc(0);
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        const int64_t r = r0 + k;
        if (r < size) local = AddWrapping(local, WidenTo<Acc>(x[r * inner]));
        items[k] = local;
      }
      Acc total;
      const Acc prefix = AddWrapping(carry, GroupExclusiveScan<kGroup>(local, shared, &total));
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        const int64_t r = r0 + k;
        if (r < size) y[r * inner] = RoundTo<Out>(AddWrapping(prefix, items[k]));
      }
      carry = AddWrapping(carry, total);
    }
  }
}

}  // namespace

cudaError_t LaunchProd(DType out_dtype, DType in_dtype, const ReduceLayout& layout, const void* in, void* out,
                       cudaStream_t stream) {
  if (layout.general) return cudaErrorInvalidValue;
  cudaError_t error = cudaErrorInvalidValue;
  DispatchConversion</*kInts=*/true>(out_dtype, in_dtype, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    error = LaunchGenericReduce(ProdOp<In, Out>{static_cast<Out*>(out)}, layout, static_cast<const In*>(in), stream);
  });
  return error;
}

cudaError_t LaunchCumsum(DType out_dtype, DType in_dtype, int64_t outer, int64_t size, int64_t inner, const void* in,
                         void* out, cudaStream_t stream) {
  const int64_t lines = outer * inner;
  cudaError_t error = cudaErrorInvalidValue;
  DispatchConversion</*kInts=*/true>(out_dtype, in_dtype, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    const In* x = static_cast<const In*>(in);
    Out* y = static_cast<Out*>(out);
    if (lines == 0 || size == 0) {
      error = cudaSuccess;
      return;
    }
    if (size <= kThreadScanMaxSize || (inner > 1 && lines >= kManyScanLines)) {
      ThreadScanKernel<<<Blocks(lines), kThreads, 0, stream>>>(lines, size, inner, x, y);
    } else if (inner == 1 && size <= kWarpScanMaxSize) {
      GroupScanKernel<32><<<Blocks(lines, kThreads / 32), kThreads, 0, stream>>>(lines, size, inner, x, y);
    } else {
      GroupScanKernel<kThreads><<<Blocks(lines, 1), kThreads, 0, stream>>>(lines, size, inner, x, y);
    }
    error = LaunchError();
  });
  return error;
}

}  // namespace tandem::cuda
