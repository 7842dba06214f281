// The row-tile softmax and log_softmax kernels, forward and backward, of
// every float dtype: normalization_kernels.cu launches them for float32 and
// float64, half_row_kernels.cu for bfloat16 and float16. A row of S (the
// stored type) is loaded once into a row tile (row_kernels.cuh), widened
// to Acc (float for 16-bit types, else S itself), reduced with shuffles,
// and written from the registers, rounded to S once. A 16-bit row keeps its
// widened values in a second register array, so the exponentials that
// softmax reuses are not rounded before they are scaled (as PyTorch
// computes them); for float32 and float64 that array is the tile itself
// once compiled.
//
// Their launchers (LaunchSoftmaxTile, LaunchSoftmaxBackwardTile), and the
// formulas that the other softmax kernels share (AllNegInf, BackwardTerm,
// BackwardValue).
#ifndef TANDEM_ADAPTOR_CUDA_SOFTMAX_TILE_KERNELS_CUH_
#define TANDEM_ADAPTOR_CUDA_SOFTMAX_TILE_KERNELS_CUH_

#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/row_kernels.cuh"

namespace tandem::cuda {

// The type a row of S is computed in.
template <typename S>
using SoftmaxAcc = std::conditional_t<kIsHalfType<S>, float, S>;

// The max of a slice (NaN if any input is) is -inf exactly when every
// input is -inf.
template <typename T>
__device__ __forceinline__ bool AllNegInf(T max) {
  return max == -std::numeric_limits<T>::infinity();
}

// softmax: grad_in = y * (grad - sum(grad * y));
// log_softmax: grad_in = grad - exp(y) * sum(grad).
template <typename T, bool kLog>
__device__ __forceinline__ T BackwardTerm(T g, T y) {
  if constexpr (kLog) {
    return g;
  } else {
    return g * y;
  }
}

template <typename T, bool kLog>
__device__ __forceinline__ T BackwardValue(T g, T y, T s) {
  if constexpr (kLog) {
    return g - Exp(y) * s;
  } else {
    return y * (g - s);
  }
}

// A tile's values widened to Acc, and back.
template <typename S, int kThreadsPerRow, int kPacks>
struct WideTile {
  using Acc = SoftmaxAcc<S>;
  using Tile = RowTile<S, kThreadsPerRow, kPacks>;
  static constexpr int kWidth = Tile::kWidth;

  Acc v[kPacks][kWidth];

  __device__ __forceinline__ void From(const Tile& tile, int lane, int row_packs) {
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      if (!Tile::Has(k, lane, row_packs)) continue;
#pragma unroll
      for (int e = 0; e < kWidth; ++e) v[k][e] = WidenTo<Acc>(tile.pack[k].v[e]);
    }
  }
  __device__ __forceinline__ void To(Tile& tile, int lane, int row_packs) const {
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      if (!Tile::Has(k, lane, row_packs)) continue;
#pragma unroll
      for (int e = 0; e < kWidth; ++e) tile.pack[k].v[e] = RoundTo<S>(v[k][e]);
    }
  }
};

// Blocks per multiprocessor the softmax forward asks of the compiler: a
// float32 warp tile of at most two packs per thread in all (rows of up to
// 32 packs) fits 32 registers without spilling, and so 8 blocks of kThreads
// (every thread slot) per multiprocessor instead of 6 at 40 registers. On an
// H200, softmax of [32768, 128]: 9.7 -> 8.8 us (PyTorch 9.4). Not for
// log_softmax: with 64-bit indices its forward spilled 20 bytes at 32
// registers and measured no faster (9.6-9.9 -> 10.0 us), and with the
// tiles' 32-bit indices it takes 32 registers unbounded (7.7 us). Nor the
// backward, float64, 16-bit or block tiles (`nvcc -Xptxas -v`: with 64-bit
// indices they spilled 120-470 bytes at 32); 0 leaves the compiler
// unbounded (an explicit 1 let it take 44 registers for log_softmax).
template <typename S, bool kLog, int kThreadsPerRow, int kPacks, int kRows>
inline constexpr int kForwardMinBlocks =
    std::is_same_v<S, float> && !kLog && kThreadsPerRow == 32 && kPacks * kRows <= 2 ? 8 : 0;

// A row tile per row, kRows rows per warp or block at once: y = exp(x -
// max) / sum (kLog: x - max - log(sum)). With `zero_if_all_neg_inf`
// (softmax only), a row of all -inf is zeros.
template <typename S, bool kLog, int kThreadsPerRow, int kPacks, int kRows>
__global__ void __launch_bounds__(kThreads, kForwardMinBlocks<S, kLog, kThreadsPerRow, kPacks, kRows>)
    SoftmaxTileKernel(int rows, int size, bool zero_if_all_neg_inf, const S* in, S* out) {
  using Tile = RowTile<S, kThreadsPerRow, kPacks>;
  using Wide = WideTile<S, kThreadsPerRow, kPacks>;
  using T = typename Wide::Acc;
  constexpr int kWidth = Tile::kWidth;
  __shared__ T shared[32];
  const RowWalk<kThreadsPerRow, kRows, int> walk(rows);
  const int lane = walk.lane;
  const int row_packs = size / kWidth;
  for (int base = walk.first; base < rows; base += walk.step) {
    Tile tile[kRows];
    Wide x[kRows];
    T m[kRows], s[kRows];
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      const int row = walk.Row(base, q);
      if (walk.Active(row)) tile[q].Load(in + row * size, lane, row_packs);
    }
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      m[q] = -std::numeric_limits<T>::infinity();
      if (!walk.Active(walk.Row(base, q))) continue;
      x[q].From(tile[q], lane, row_packs);
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        if (!Tile::Has(k, lane, row_packs)) continue;
#pragma unroll
        for (int e = 0; e < kWidth; ++e) m[q] = MaxNan(m[q], x[q].v[k][e]);
      }
    }
#pragma unroll
    for (int q = 0; q < kRows; ++q) m[q] = RowMax<kThreadsPerRow>(m[q], shared);
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      s[q] = 0;
      if (!walk.Active(walk.Row(base, q))) continue;
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        if (!Tile::Has(k, lane, row_packs)) continue;
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
          const T shifted = x[q].v[k][e] - m[q];
          if constexpr (kLog) {
            s[q] += Exp(shifted);
          } else {
            x[q].v[k][e] = Exp(shifted);  // kept for the output
            s[q] += x[q].v[k][e];
          }
        }
      }
    }
#pragma unroll
    for (int q = 0; q < kRows; ++q) s[q] = RowSum<kThreadsPerRow>(s[q], shared);
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      const int row = walk.Row(base, q);
      if (!walk.Active(row)) continue;
      const bool zeros = !kLog && zero_if_all_neg_inf && AllNegInf(m[q]);
      // softmax scales by 1 / sum (one division per row, not per element).
      const T shift = kLog ? m[q] + Log(s[q]) : T(0);
      const T scale = kLog ? T(0) : T(1) / s[q];
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        if (!Tile::Has(k, lane, row_packs)) continue;
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
          T& v = x[q].v[k][e];
          if constexpr (kLog) {
            v = v - shift;
          } else {
            v = zeros ? T(0) : v * scale;  // v is NaN in a row of all -inf
          }
        }
      }
      x[q].To(tile[q], lane, row_packs);
      tile[q].Store(out + row * size, lane, row_packs);
    }
  }
}

template <typename S, bool kLog, int kThreadsPerRow, int kPacks, int kRows>
__global__ void __launch_bounds__(kThreads)
    SoftmaxBackwardTileKernel(int rows, int size, const S* grad, const S* y, S* grad_in) {
  using Tile = RowTile<S, kThreadsPerRow, kPacks>;
  using Wide = WideTile<S, kThreadsPerRow, kPacks>;
  using T = typename Wide::Acc;
  constexpr int kWidth = Tile::kWidth;
  __shared__ T shared[32];
  const RowWalk<kThreadsPerRow, kRows, int> walk(rows);
  const int lane = walk.lane;
  const int row_packs = size / kWidth;
  for (int base = walk.first; base < rows; base += walk.step) {
    Tile gt[kRows], ot[kRows];
    Wide g[kRows], o[kRows];
    T s[kRows];
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      const int row = walk.Row(base, q);
      if (!walk.Active(row)) continue;
      gt[q].Load(grad + row * size, lane, row_packs);
      ot[q].Load(y + row * size, lane, row_packs);
    }
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      s[q] = 0;
      if (!walk.Active(walk.Row(base, q))) continue;
      g[q].From(gt[q], lane, row_packs);
      o[q].From(ot[q], lane, row_packs);
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        if (!Tile::Has(k, lane, row_packs)) continue;
#pragma unroll
        for (int e = 0; e < kWidth; ++e) s[q] += BackwardTerm<T, kLog>(g[q].v[k][e], o[q].v[k][e]);
      }
    }
#pragma unroll
    for (int q = 0; q < kRows; ++q) s[q] = RowSum<kThreadsPerRow>(s[q], shared);
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      const int row = walk.Row(base, q);
      if (!walk.Active(row)) continue;
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        if (!Tile::Has(k, lane, row_packs)) continue;
#pragma unroll
        for (int e = 0; e < kWidth; ++e) g[q].v[k][e] = BackwardValue<T, kLog>(g[q].v[k][e], o[q].v[k][e], s[q]);
      }
      g[q].To(gt[q], lane, row_packs);
      gt[q].Store(grad_in + row * size, lane, row_packs);
    }
  }
}

// Launches the tile kernel for `outer` contiguous rows of `size` elements
// when a row fits a tile (DispatchRowTile) and the pointers are 16-byte
// aligned; false, launching nothing, otherwise.
template <typename S, bool kLog>
bool LaunchSoftmaxTile(int64_t outer, int64_t size, bool zero_if_all_neg_inf, const S* in, S* out,
                       cudaStream_t stream) {
  return DispatchRowTile<S, 4>(size, AllAligned16({in, out}), [&]<int kThreadsPerRow, int kPacks, int kRows>() {
    ForEachRowChunk(outer, size, [&](int64_t first, int64_t rows) {
      const int64_t at = first * size;
      SoftmaxTileKernel<S, kLog, kThreadsPerRow, kPacks, kRows>
          <<<RowBlocks<kThreadsPerRow, kRows>(rows), kThreads, 0, stream>>>(
              static_cast<int>(rows), static_cast<int>(size), zero_if_all_neg_inf, in + at, out + at);
    });
  });
}

template <typename S, bool kLog>
bool LaunchSoftmaxBackwardTile(int64_t outer, int64_t size, const S* grad, const S* y, S* grad_in,
                               cudaStream_t stream) {
  const bool aligned = AllAligned16({grad, y, grad_in});
  return DispatchRowTile<S, 4>(size, aligned, [&]<int kThreadsPerRow, int kPacks, int kRows>() {
    ForEachRowChunk(outer, size, [&](int64_t first, int64_t rows) {
      const int64_t at = first * size;
      SoftmaxBackwardTileKernel<S, kLog, kThreadsPerRow, kPacks, kRows>
          <<<RowBlocks<kThreadsPerRow, kRows>(rows), kThreads, 0, stream>>>(
              static_cast<int>(rows), static_cast<int>(size), grad + at, y + at, grad_in + at);
    });
  });
}

}  // namespace tandem::cuda

#endif  // TANDEM_ADAPTOR_CUDA_SOFTMAX_TILE_KERNELS_CUH_
