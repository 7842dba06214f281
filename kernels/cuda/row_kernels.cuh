// Building blocks of the row-wise kernels over a [rows, size] tensor whose
// rows are contiguous (softmax, log_softmax and their backwards, layer norm;
// normalization_kernels.cu): a row belongs to a warp (kThreadsPerRow = 32,
// kThreads / 32 warps per block, each taking kRows rows at once) or to a
// whole block (kThreadsPerRow = kThreads), which loads it once into
// registers as 16-byte packs, reduces
// over it with warp shuffles (and shared memory across the warps of a
// block), and writes its results from the registers: one pass over global
// memory. A "row tile" is that register space: kPacks packs per thread, so a
// row of up to kThreadsPerRow * kPacks * Vec16<T>::kCount elements fits.
// Pack j of a row (elements [j * W, j * W + W)) is pack k = j /
// kThreadsPerRow of thread j % kThreadsPerRow, so a warp's loads are
// consecutive 16-byte units. Header-only; device code and the host-side
// choice of a tile.
#ifndef TANDEM_ADAPTOR_CUDA_ROW_KERNELS_CUH_
#define TANDEM_ADAPTOR_CUDA_ROW_KERNELS_CUH_

#include <cstdint>
#include <initializer_list>
#include <limits>

#include "kernels/cuda/kernel_common.cuh"

namespace tandem::cuda {

__device__ __forceinline__ float Exp(float x) { return expf(x); }
__device__ __forceinline__ double Exp(double x) { return exp(x); }
__device__ __forceinline__ float Log(float x) { return logf(x); }
__device__ __forceinline__ double Log(double x) { return log(x); }

// A row tile: the calling thread's packs of one row.
template <typename T, int kThreadsPerRow, int kPacks>
struct RowTile {
  static constexpr int kWidth = Vec16<T>::kCount;
  using Pack = Vec16<T>;

  Pack pack[kPacks];

  // Whether the thread's pack k exists in a row of `row_packs` packs.
  __device__ __forceinline__ static bool Has(int k, int lane, int row_packs) {
    return lane + k * kThreadsPerRow < row_packs;
  }

  // Loads the thread's packs of `row` (16-byte aligned); absent packs are
  // left unset and must not be read.
  __device__ __forceinline__ void Load(const T* row, int lane, int row_packs) {
    const Pack* p = reinterpret_cast<const Pack*>(row);
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      if (Has(k, lane, row_packs)) pack[k] = p[lane + k * kThreadsPerRow];
    }
  }

  __device__ __forceinline__ void Store(T* row, int lane, int row_packs) const {
    Pack* p = reinterpret_cast<Pack*>(row);
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      if (Has(k, lane, row_packs)) p[lane + k * kThreadsPerRow] = pack[k];
    }
  }
};

// Sum and NaN-propagating max over the threads of a row (every thread of the
// row gets the result). A block-wide row synchronizes the block, so every
// thread of the block must call these the same number of times.
// A row of 16 threads is half a warp: the shuffles stay inside it, and the
// whole warp calls them together (RowWalk keeps a warp's rows in step).
template <int kThreadsPerRow, typename T>
__device__ __forceinline__ T RowSum(T v, T* shared) {
  if constexpr (kThreadsPerRow <= 32) {
    for (int offset = kThreadsPerRow / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
  } else {
    return BlockSum(v, shared);
  }
}

template <int kThreadsPerRow, typename T>
__device__ __forceinline__ T RowMax(T v, T* shared) {
  if constexpr (kThreadsPerRow <= 32) {
    for (int offset = kThreadsPerRow / 2; offset > 0; offset /= 2) {
      v = MaxNan(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    return v;
  } else {
    return BlockMax(v, shared, -std::numeric_limits<T>::infinity());
  }
}

// The rows of the calling thread's warp or block, kRows at a time (a warp
// takes kRows consecutive rows together, so that short rows keep several
// loads in flight per thread; a warp of two 16-thread rows takes 2 x kRows,
// kRows per half). A kernel walks
//   for (base = walk.first; base < rows; base += walk.step)
// over rows Row(base, q), q < kRows: `base` is the same for every thread of
// a warp (of a block, for a block-wide row), so threads that shuffle or
// synchronize together run the same iterations; a row past the end
// (Active false) takes part in the reductions without touching memory.
//
// Row indices are of type I: the tile kernels walk in 32 bits (a launch of
// at most kTileLaunchElements elements, ForEachRowChunk), the loop kernels,
// whose rows may be of any length, in 64.
template <int kThreadsPerRow, int kRows, typename I = int64_t>
struct RowWalk {
  static constexpr int kGroupsPerBlock = kThreads / kThreadsPerRow;
  static constexpr int kGroupsPerWarp = kThreadsPerRow < 32 ? 32 / kThreadsPerRow : 1;
  static constexpr int kThreadsPerUnit = kThreadsPerRow * kGroupsPerWarp;  // threads in step: a warp or a block
  I rows;
  I first;
  I step;
  int lane;
  int offset;  // the calling thread's first row past `base`

  __device__ __forceinline__ explicit RowWalk(I row_count) : rows(row_count) {
    lane = static_cast<int>(threadIdx.x) % kThreadsPerRow;
    const I unit = static_cast<I>(blockIdx.x) * (kThreads / kThreadsPerUnit) + threadIdx.x / kThreadsPerUnit;
    first = unit * kGroupsPerWarp * kRows;
    step = static_cast<I>(gridDim.x) * kGroupsPerBlock * kRows;
    offset = static_cast<int>((threadIdx.x / kThreadsPerRow) % kGroupsPerWarp) * kRows;
  }
  __device__ __forceinline__ I Row(I base, int q) const { return base + offset + q; }
  __device__ __forceinline__ bool Active(I row) const { return row < rows; }
};

// The most elements one launch of a tile kernel covers, so that its row
// offsets (row * size) and row walk (past the last row by at most one grid
// step) fit in 32 bits. 32-bit indices take fewer registers: the float32
// log_softmax tile of 32 threads x 1 pack x 2 rows went from 40 to 32
// (`nvcc -Xptxas -v`), 8 blocks of kThreads per multiprocessor instead of 6.
inline constexpr int64_t kTileLaunchElements = int64_t{1} << 30;

// kTileLaunchElements, or what SetTileLaunchElementsForTesting set
// (normalization_kernels.cu).
int64_t TileLaunchElements();

// Calls `launch(first_row, row_count)` over consecutive chunks of `rows`
// rows of `size` elements (size <= a tile's elements), each of at most
// TileLaunchElements() elements (at least one row).
template <typename Launch>
void ForEachRowChunk(int64_t rows, int64_t size, Launch&& launch) {
  const int64_t per_row = size > 0 ? TileLaunchElements() / size : rows;
  const int64_t per_launch = per_row > 0 ? per_row : 1;
  for (int64_t first = 0; first < rows; first += per_launch) {
    launch(first, rows - first < per_launch ? rows - first : per_launch);
  }
}

// Calls `launch.template operator()<kThreadsPerRow, kPacks, kRows>()` with
// the smallest row tile that holds a row of `size` elements of T, and
// returns true; returns false (launching nothing) when the row cannot be
// loaded in packs (`vectorizable` false: the size is not a whole number of
// packs or a pointer is not 16-byte aligned) or is longer than the largest
// tile. Warp tiles hold up to 8 packs per thread (1024 float32), taking 2
// rows at once with 1 or 2 packs per thread (measured on an H200: rows of
// 128 float32 ran 3-8% faster than one at a time); rows of up to 16 packs
// take half a warp each, 2 at once (a warp-wide row would leave half its
// threads idle: 128 bfloat16 ran at 0.62 of PyTorch so on an H200); block
// tiles 2 to
// kMaxBlockPacks packs per thread (4096 float32 elements at 4).
template <typename T, int kMaxBlockPacks, typename Launch>
bool DispatchRowTile(int64_t size, bool vectorizable, Launch&& launch) {
  constexpr int64_t kWidth = Vec16<T>::kCount;
  if (!vectorizable || size % kWidth != 0) return false;
  const int64_t packs = size / kWidth;
  if (packs <= 16) {
    launch.template operator()<16, 1, 2>();
  } else if (packs <= 32) {
    launch.template operator()<32, 1, 2>();
  } else if (packs <= 64) {
    launch.template operator()<32, 2, 2>();
  } else if (packs <= 128) {
    launch.template operator()<32, 4, 1>();
  } else if (packs <= 256) {
    launch.template operator()<32, 8, 1>();
  } else if (packs <= 2 * kThreads) {
    launch.template operator()<kThreads, 2, 1>();
  } else if (packs <= 4 * kThreads) {
    if constexpr (kMaxBlockPacks < 4) {
      return false;
    } else {
      launch.template operator()<kThreads, 4, 1>();
    }
  } else if (packs <= 8 * kThreads) {
    if constexpr (kMaxBlockPacks < 8) {
      return false;
    } else {
      launch.template operator()<kThreads, 8, 1>();
    }
  } else {
    return false;
  }
  return true;
}

// Blocks for `rows` rows with kThreadsPerRow threads per row, kRows rows
// per warp.
template <int kThreadsPerRow, int kRows>
inline int64_t RowBlocks(int64_t rows) {
  return Blocks(rows, (kThreads / kThreadsPerRow) * kRows);
}

// Whether every non-null pointer is 16-byte aligned.
inline bool AllAligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (p != nullptr && !Aligned16(p)) return false;
  }
  return true;
}

}  // namespace tandem::cuda

#endif  // TANDEM_ADAPTOR_CUDA_ROW_KERNELS_CUH_
