// sort and topk along one dim of [outer, size, inner], in the order the CPU
// kernels use: NaN above every number, equal values in the order of their
// positions (every sort is stable), which makes (value, position) a strict
// total order, so that any correct sorting network gives the stable result.
//
// sort: lines of up to kInsertionSortMax elements are insertion-sorted by a
// thread each; longer ones are copied into the outputs (values, positions)
// and sorted there in place by a bitonic network padded to a power of two P
// (the padding is virtual: it sorts after everything, so comparisons with it
// never swap and it is never stored). The network's "flip" form compares
// every pair lower-first, in stages k = 2, 4, ..., P: a flip within blocks
// of k, then half-cleaners at distances k / 4, ..., 1. The stages and steps
// that stay within a tile of kSortTile elements run in shared memory, one
// launch per tile pass; the others take a launch each over all pairs.
// Nothing is allocated: the outputs are the workspace.
//
// topk: a block per line selects the k first elements of the order one after
// another, each pass a block-wide minimum over the elements after the
// previous pick (k passes over the line: meant for k much smaller than the
// line; k == size sorts).
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/generic_reduce.cuh"
#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/reduce_launch.h"

namespace tandem::cuda {
namespace {

constexpr int kSortTile = 2048;
constexpr int64_t kInsertionSortMax = 16;
constexpr int kTopkThreads = 256;

template <typename T>
using KeyOf = std::conditional_t<kIsHalfType<T>, float, T>;

// Whether (a, position ia) sorts before (b, position ib).
template <typename V>
__device__ __forceinline__ bool Before(V a, int64_t ia, V b, int64_t ib, bool descending) {
  const bool a_nan = IsNanValue(a), b_nan = IsNanValue(b);
  if (a_nan != b_nan) return descending ? a_nan : b_nan;
  if (!a_nan && a != b) return descending ? a > b : a < b;
  return ia < ib;
}

__device__ __forceinline__ int64_t LineBase(int64_t line, int64_t size, int64_t inner) {
  const int64_t o = line / inner;
  return o * size * inner + (line - o * inner);
}

// A thread per line of at most kInsertionSortMax elements; writes the first
// k of the order (k == size for sort).
template <typename T>
__global__ void InsertionSortKernel(int64_t lines, int64_t size, int64_t inner, int64_t k, bool descending, const T* in,
                                    T* values, int64_t* indices) {
  using V = KeyOf<T>;
  for (int64_t line = GlobalThread(); line < lines; line += GlobalStride()) {
    const T* x = in + LineBase(line, size, inner);
    V v[kInsertionSortMax];
    int64_t p[kInsertionSortMax];
    for (int64_t r = 0; r < size; ++r) {
      const V value = WidenTo<V>(x[r * inner]);
      int64_t at = r;
      while (at > 0 && Before(value, r, v[at - 1], p[at - 1], descending)) {
        v[at] = v[at - 1];
        p[at] = p[at - 1];
        --at;
      }
      v[at] = value;
      p[at] = r;
    }
    const int64_t out = LineBase(line, k, inner);
    for (int64_t m = 0; m < k; ++m) {
      values[out + m * inner] = RoundTo<T>(v[m]);
      indices[out + m * inner] = p[m];
    }
  }
}

// values = in, indices = each element's position along the dim.
template <typename T>
__global__ void SortInitKernel(int64_t n, int64_t size, int64_t inner, const T* in, T* values, int64_t* indices) {
  for (int64_t e = GlobalThread(); e < n; e += GlobalStride()) {
    values[e] = in[e];
    indices[e] = (e / inner) % size;
  }
}

// Pair q of a network step over a line: positions lo < hi. A flip step
// (k > 0) pairs off + blk * k with its mirror in a block of k; a
// half-cleaner (k == 0) pairs lo with lo + j.
__device__ __forceinline__ void PairOf(int64_t q, int64_t k, int64_t j, int64_t* lo, int64_t* hi) {
  if (k > 0) {
    const int64_t half = k / 2;
    const int64_t blk = q / half;
    const int64_t off = q - blk * half;
    *lo = blk * k + off;
    *hi = blk * k + k - 1 - off;
  } else {
    const int64_t blk = q / j;
    *lo = blk * 2 * j + (q - blk * j);
    *hi = *lo + j;
  }
}

// One network step over every line in global memory.
template <typename T>
__global__ void GlobalStepKernel(int64_t lines, int64_t size, int64_t inner, int64_t padded, int64_t k, int64_t j,
                                 bool descending, T* values, int64_t* indices) {
  using V = KeyOf<T>;
  const int64_t pairs = padded / 2;
  for (int64_t q = GlobalThread(); q < lines * pairs; q += GlobalStride()) {
    const int64_t line = q / pairs;
    int64_t lo, hi;
    PairOf(q - line * pairs, k, j, &lo, &hi);
    if (hi >= size) continue;  // the padding sorts last: nothing moves
    const int64_t base = LineBase(line, size, inner);
    T* a = values + base + lo * inner;
    T* b = values + base + hi * inner;
    int64_t* ia = indices + base + lo * inner;
    int64_t* ib = indices + base + hi * inner;
    if (Before(WidenTo<V>(*b), *ib, WidenTo<V>(*a), *ia, descending)) {
      const T t = *a;
      *a = *b;
      *b = t;
      const int64_t ti = *ia;
      *ia = *ib;
      *ib = ti;
    }
  }
}

// The steps within tiles of `tile` positions (a power of two, <= kSortTile),
// in shared memory, a block (tile / 2 threads) per tile: with `sort`, every
// stage k = 2 .. tile (each tile ends sorted); otherwise the half-cleaners
// j = tile / 2 .. 1 that end a larger stage.
template <typename T>
__global__ void TileKernel(int64_t lines, int64_t size, int64_t inner, int64_t tile, bool sort, bool descending,
                           T* values, int64_t* indices) {
  using V = KeyOf<T>;
  __shared__ V v[kSortTile];
  __shared__ int64_t p[kSortTile];  // -1: padding
  const int64_t tiles_per_line = (size + tile - 1) / tile;
  const int64_t pairs = tile / 2;
  // Compares positions lo < hi of the tile and swaps them out of order.
  const auto exchange = [&](int64_t lo, int64_t hi) {
    if (p[hi] < 0) return;  // padding sorts last
    if (p[lo] < 0 || Before(v[hi], p[hi], v[lo], p[lo], descending)) {
      const V tv = v[lo];
      v[lo] = v[hi];
      v[hi] = tv;
      const int64_t tp = p[lo];
      p[lo] = p[hi];
      p[hi] = tp;
    }
  };
  for (int64_t b = blockIdx.x; b < lines * tiles_per_line; b += gridDim.x) {
    const int64_t line = b / tiles_per_line;
    const int64_t start = (b - line * tiles_per_line) * tile;
    const int64_t base = LineBase(line, size, inner) + start * inner;
    __syncthreads();  // the previous tile's stores are done
    for (int64_t e = threadIdx.x; e < tile; e += blockDim.x) {
      if (start + e < size) {
        v[e] = WidenTo<V>(values[base + e * inner]);
        p[e] = indices[base + e * inner];
      } else {
        p[e] = -1;
      }
    }
    __syncthreads();
    const auto half_cleaners = [&](int64_t from) {
      for (int64_t j = from; j >= 1; j /= 2) {
        for (int64_t q = threadIdx.x; q < pairs; q += blockDim.x) {
          int64_t lo, hi;
          PairOf(q, 0, j, &lo, &hi);
          exchange(lo, hi);
        }
        __syncthreads();
      }
    };
    if (sort) {
      for (int64_t k = 2; k <= tile; k *= 2) {
        for (int64_t q = threadIdx.x; q < pairs; q += blockDim.x) {
          int64_t lo, hi;
          PairOf(q, k, 0, &lo, &hi);
          exchange(lo, hi);
        }
        __syncthreads();
        half_cleaners(k / 4);
      }
    } else {
      half_cleaners(tile / 2);
    }
    for (int64_t e = threadIdx.x; e < tile; e += blockDim.x) {
      if (start + e < size) {
        values[base + e * inner] = RoundTo<T>(v[e]);
        indices[base + e * inner] = p[e];
      }
    }
  }
}

// The best candidate of a topk pass (index -1: none).
template <typename V>
struct Pick {
  V value;
  int64_t index;
};

template <typename V>
struct PickOp {
  using Acc = Pick<V>;
  bool descending;
  __device__ __forceinline__ Acc Identity() const { return Acc{V(0), -1}; }
  __device__ __forceinline__ Acc Combine(const Acc& a, const Acc& b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    return Before(b.value, b.index, a.value, a.index, descending) ? b : a;
  }
};

// A block per line: k passes, each picking the first element of the order
// after the previous pick.
template <typename T>
__global__ void TopkSelectKernel(int64_t lines, int64_t size, int64_t inner, int64_t k, bool descending, const T* in,
                                 T* values, int64_t* indices) {
  using V = KeyOf<T>;
  using Acc = Pick<V>;
  __shared__ alignas(16) unsigned char raw[32 * sizeof(Acc)];
  __shared__ alignas(16) unsigned char last_raw[sizeof(Acc)];
  Acc* shared = reinterpret_cast<Acc*>(raw);
  Acc* last = reinterpret_cast<Acc*>(last_raw);
  const PickOp<V> op{descending};
  for (int64_t line = blockIdx.x; line < lines; line += gridDim.x) {
    const T* x = in + LineBase(line, size, inner);
    const int64_t out = LineBase(line, k, inner);
    Acc previous = op.Identity();
    for (int64_t m = 0; m < k; ++m) {
      Acc best = op.Identity();
      for (int64_t r = threadIdx.x; r < size; r += blockDim.x) {
        const V value = WidenTo<V>(x[r * inner]);
        if (previous.index >= 0 && !Before(previous.value, previous.index, value, r, descending)) continue;
        best = op.Combine(best, Acc{value, r});
      }
      best = BlockCombine(op, best, shared);
      if (threadIdx.x == 0) {
        values[out + m * inner] = RoundTo<T>(best.value);
        indices[out + m * inner] = best.index;
        *last = best;
      }
      __syncthreads();
      previous = *last;
    }
  }
}

int64_t PaddedSize(int64_t size) {
  int64_t padded = 1;
  while (padded < size) padded *= 2;
  return padded;
}

template <typename T>
cudaError_t SortInPlace(int64_t lines, int64_t size, int64_t inner, bool descending, T* values, int64_t* indices,
                        cudaStream_t stream) {
  const int64_t padded = PaddedSize(size);
  const int64_t tile = padded < kSortTile ? padded : kSortTile;
  const int64_t tile_blocks = lines * ((size + tile - 1) / tile);
  const int tile_threads = static_cast<int>(tile / 2);
  TileKernel<<<Blocks(tile_blocks, 1), tile_threads, 0, stream>>>(lines, size, inner, tile, true, descending, values,
                                                                  indices);
  if (cudaError_t error = LaunchError(); error != cudaSuccess) return error;
  const int64_t pairs = lines * (padded / 2);
  for (int64_t k = tile * 2; k <= padded; k *= 2) {
    GlobalStepKernel<<<Blocks(pairs), kThreads, 0, stream>>>(lines, size, inner, padded, k, 0, descending, values,
                                                             indices);
    for (int64_t j = k / 4; j >= tile; j /= 2) {
      GlobalStepKernel<<<Blocks(pairs), kThreads, 0, stream>>>(lines, size, inner, padded, 0, j, descending, values,
                                                               indices);
    }
    TileKernel<<<Blocks(tile_blocks, 1), tile_threads, 0, stream>>>(lines, size, inner, tile, false, descending, values,
                                                                    indices);
    if (cudaError_t error = LaunchError(); error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchSort(DType dtype, int64_t outer, int64_t size, int64_t inner, bool descending, const void* in,
                       void* values, int64_t* indices, cudaStream_t stream) {
  const int64_t lines = outer * inner;
  cudaError_t error = cudaErrorInvalidValue;
  DispatchReduceType(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(values);
    if (lines == 0 || size == 0) {
      error = cudaSuccess;
    } else if (size <= kInsertionSortMax) {
      InsertionSortKernel<<<Blocks(lines), kThreads, 0, stream>>>(lines, size, inner, size, descending, x, y, indices);
      error = LaunchError();
    } else {
      SortInitKernel<<<Blocks(lines * size), kThreads, 0, stream>>>(lines * size, size, inner, x, y, indices);
      error = LaunchError();
      if (error == cudaSuccess) error = SortInPlace(lines, size, inner, descending, y, indices, stream);
    }
  });
  return error;
}

cudaError_t LaunchTopk(DType dtype, int64_t outer, int64_t size, int64_t inner, int64_t k, bool largest, const void* in,
                       void* values, int64_t* indices, cudaStream_t stream) {
  if (k == size) return LaunchSort(dtype, outer, size, inner, largest, in, values, indices, stream);
  const int64_t lines = outer * inner;
  cudaError_t error = cudaErrorInvalidValue;
  DispatchReduceType(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(values);
    if (lines == 0 || k == 0) {
      error = cudaSuccess;
    } else if (size <= kInsertionSortMax) {
      InsertionSortKernel<<<Blocks(lines), kThreads, 0, stream>>>(lines, size, inner, k, largest, x, y, indices);
      error = LaunchError();
    } else {
      TopkSelectKernel<<<Blocks(lines, 1), kTopkThreads, 0, stream>>>(lines, size, inner, k, largest, x, y, indices);
      error = LaunchError();
    }
  });
  return error;
}

}  // namespace tandem::cuda
