// Softmax, log_softmax and layer normalization kernels.
//
// Softmax and log_softmax share one templated kernel per shape of the work
// (kLog picks the formula), forward and backward:
//   - the dim innermost and the row a whole number of 16-byte packs that
//     fits a row tile (row_kernels.cuh: half a warp per row up to 64
//     float32 elements, a warp per row up to 1024, taking 2 short rows at
//     once, a block per row up to 4096 elements): the row is read once into registers, reduced with shuffles
//     and written from the registers (softmax_tile_kernels.cuh, whose
//     kernels also serve 16-bit rows);
//   - longer rows of packs up to 48 KiB: a block per row with the row (the
//     backward: grad) cached in shared memory, so that each tensor is read
//     from global memory once (the softmax backward reads y twice);
//   - the dim innermost otherwise: a warp per row up to 1024 elements, a
//     block per row past that, reading the row once per pass;
//   - the dim not innermost: a thread per (outer, inner) position.
// The same kernels serve _softmax and _safe_softmax (a flag: a slice of all
// -inf gives zeros instead of NaN). Every thread reads all its elements of
// a row before the row's reductions and writes only elements it read, so
// the backward may write over grad.
//
// Layer norm (kernels in layer_norm_kernels.cuh): the forward (tiles up to
// 8192 float32 elements) and grad_input (up to 4096) take the same row
// shapes, other rows a block per row; grad_weight and grad_bias are column
// sums over the rows by a cluster of blocks per column tile
// (cluster_reduce.cuh: deterministic, no atomics).
#include <atomic>
#include <cmath>
#include <limits>

#include "kernels/cuda/cluster_reduce.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/layer_norm_kernels.cuh"
#include "kernels/cuda/row_kernels.cuh"
#include "kernels/cuda/sequence_launch.h"
#include "kernels/cuda/softmax_tile_kernels.cuh"

namespace tandem::cuda {
namespace {

// ---- softmax and log_softmax, forward ----

// Rows too long for a tile but of at most kLongRowBytes: a block per row,
// the row cached in shared memory. Pass 1 reads it from global memory (four
// 16-byte loads in flight per thread) into the cache and finds the max;
// pass 2 sums the exponentials from the cache (softmax keeps them there);
// pass 3 writes the output.
constexpr int kLongRowThreads = 512;
constexpr int64_t kLongRowBytes = 48 * 1024;  // the most shared memory a block gets without opting in

template <typename T, bool kLog>
__global__ void __launch_bounds__(kLongRowThreads)
    SoftmaxLongRowKernel(int64_t rows, int64_t size, bool zero_if_all_neg_inf, const T* in, T* out) {
  using V = Vec16<T>;
  constexpr int kWidth = V::kCount;
  extern __shared__ __align__(16) unsigned char row_cache[];  // one declaration for every T
  V* cache = reinterpret_cast<V*>(row_cache);
  __shared__ T shared[32];
  const int64_t packs = size / kWidth;
  const int64_t threads = blockDim.x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const V* x = reinterpret_cast<const V*>(in + row * size);
    T m = -std::numeric_limits<T>::infinity();
    int64_t j = threadIdx.x;
    for (; j + 3 * threads < packs; j += 4 * threads) {
      V v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = x[j + u * threads];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        cache[j + u * threads] = v[u];
#pragma unroll
        for (int e = 0; e < kWidth; ++e) m = MaxNan(m, v[u].v[e]);
      }
    }
    for (; j < packs; j += threads) {
      const V v = x[j];
      cache[j] = v;
#pragma unroll
      for (int e = 0; e < kWidth; ++e) m = MaxNan(m, v.v[e]);
    }
    // Each thread reads back only the packs it cached itself, so the
    // reductions' barriers are the only ones the cache needs.
    m = BlockMax(m, shared, -std::numeric_limits<T>::infinity());
    T s = 0;
    for (j = threadIdx.x; j < packs; j += threads) {
      V v = cache[j];
#pragma unroll
      for (int e = 0; e < kWidth; ++e) {
        const T ex = Exp(v.v[e] - m);
        s += ex;
        v.v[e] = ex;
      }
      if constexpr (!kLog) cache[j] = v;
    }
    s = BlockSum(s, shared);
    const bool zeros = !kLog && zero_if_all_neg_inf && AllNegInf(m);
    const T shift = kLog ? m + Log(s) : T(0);
    const T scale = kLog ? T(0) : T(1) / s;
    V* y = reinterpret_cast<V*>(out + row * size);
    for (j = threadIdx.x; j < packs; j += threads) {
      V v = cache[j];
#pragma unroll
      for (int e = 0; e < kWidth; ++e) {
        if constexpr (kLog) {
          v.v[e] = v.v[e] - shift;
        } else {
          v.v[e] = zeros ? T(0) : v.v[e] * scale;  // NaN in a row of all -inf
        }
      }
      y[j] = v;
    }
  }
}

// Any contiguous row, one element at a time: a max pass, a sum pass and a
// write pass over global memory.
template <typename T, bool kLog, int kThreadsPerRow>
__global__ void __launch_bounds__(kThreads)
    SoftmaxLoopKernel(int64_t rows, int64_t size, bool zero_if_all_neg_inf, const T* in, T* out) {
  __shared__ T shared[32];
  const RowWalk<kThreadsPerRow, 1> walk(rows);
  const int lane = walk.lane;
  // The row is the same for every thread of its warp or block.
  for (int64_t row = walk.first; row < rows; row += walk.step) {
    const T* x = in + row * size;
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t j = lane; j < size; j += kThreadsPerRow) m = MaxNan(m, x[j]);
    m = RowMax<kThreadsPerRow>(m, shared);
    T s = 0;
    for (int64_t j = lane; j < size; j += kThreadsPerRow) s += Exp(x[j] - m);
    s = RowSum<kThreadsPerRow>(s, shared);
    T* y = out + row * size;
    if constexpr (kLog) {
      const T shift = m + Log(s);
      for (int64_t j = lane; j < size; j += kThreadsPerRow) y[j] = x[j] - shift;
    } else if (zero_if_all_neg_inf && AllNegInf(m)) {
      for (int64_t j = lane; j < size; j += kThreadsPerRow) y[j] = T(0);
    } else {
      for (int64_t j = lane; j < size; j += kThreadsPerRow) y[j] = Exp(x[j] - m) / s;
    }
  }
}

// The dim is not innermost: a thread per (outer, inner) position.
template <typename T, bool kLog>
__global__ void SoftmaxColumnKernel(int64_t outer, int64_t size, int64_t inner, bool zero_if_all_neg_inf, const T* in,
                                    T* out) {
  for (int64_t p = GlobalThread(); p < outer * inner; p += GlobalStride()) {
    const int64_t base = (p / inner) * size * inner + p % inner;
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t d = 0; d < size; ++d) m = MaxNan(m, in[base + d * inner]);
    T s = 0;
    for (int64_t d = 0; d < size; ++d) s += Exp(in[base + d * inner] - m);
    if constexpr (kLog) {
      const T shift = m + Log(s);
      for (int64_t d = 0; d < size; ++d) out[base + d * inner] = in[base + d * inner] - shift;
    } else if (zero_if_all_neg_inf && AllNegInf(m)) {
      for (int64_t d = 0; d < size; ++d) out[base + d * inner] = T(0);
    } else {
      for (int64_t d = 0; d < size; ++d) out[base + d * inner] = Exp(in[base + d * inner] - m) / s;
    }
  }
}

// ---- softmax and log_softmax, backward ----
// (BackwardTerm and BackwardValue in softmax_tile_kernels.cuh)

// Rows too long for a tile but of at most kLongRowBytes: a block per row,
// grad cached in shared memory. Pass 1 reads grad (softmax: and y) from
// global memory, four 16-byte loads in flight per thread, caching grad;
// pass 2 reads y from global memory and grad from the cache. log_softmax
// reads each tensor once; softmax reads y twice (the second time mostly
// from L2).
template <typename T, bool kLog>
__global__ void __launch_bounds__(kLongRowThreads)
    SoftmaxBackwardLongRowKernel(int64_t rows, int64_t size, const T* grad, const T* y, T* grad_in) {
  using V = Vec16<T>;
  constexpr int kWidth = V::kCount;
  extern __shared__ __align__(16) unsigned char row_cache[];  // one declaration for every T
  V* cache = reinterpret_cast<V*>(row_cache);
  __shared__ T shared[32];
  const int64_t packs = size / kWidth;
  const int64_t threads = blockDim.x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const V* g = reinterpret_cast<const V*>(grad + row * size);
    const V* o = reinterpret_cast<const V*>(y + row * size);
    T s = 0;
    int64_t j = threadIdx.x;
    for (; j + 3 * threads < packs; j += 4 * threads) {
      V gv[4], ov[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        gv[u] = g[j + u * threads];
        if constexpr (!kLog) ov[u] = o[j + u * threads];
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        cache[j + u * threads] = gv[u];
#pragma unroll
        for (int e = 0; e < kWidth; ++e) s += BackwardTerm<T, kLog>(gv[u].v[e], kLog ? T(0) : ov[u].v[e]);
      }
    }
    for (; j < packs; j += threads) {
      const V gv = g[j];
      V ov;
      if constexpr (!kLog) ov = o[j];
      cache[j] = gv;
#pragma unroll
      for (int e = 0; e < kWidth; ++e) s += BackwardTerm<T, kLog>(gv.v[e], kLog ? T(0) : ov.v[e]);
    }
    // The sum is complete before any element is written (grad_in may be
    // grad); each thread reads back only the packs it cached itself.
    s = BlockSum(s, shared);
    V* r = reinterpret_cast<V*>(grad_in + row * size);
    for (j = threadIdx.x; j < packs; j += threads) {
      V gv = cache[j];
      const V ov = o[j];
#pragma unroll
      for (int e = 0; e < kWidth; ++e) gv.v[e] = BackwardValue<T, kLog>(gv.v[e], ov.v[e], s);
      r[j] = gv;
    }
  }
}

template <typename T, bool kLog, int kThreadsPerRow>
__global__ void __launch_bounds__(kThreads)
    SoftmaxBackwardLoopKernel(int64_t rows, int64_t size, const T* grad, const T* y, T* grad_in) {
  __shared__ T shared[32];
  const RowWalk<kThreadsPerRow, 1> walk(rows);
  const int lane = walk.lane;
  // The row is the same for every thread of its warp or block.
  for (int64_t row = walk.first; row < rows; row += walk.step) {
    const int64_t base = row * size;
    T s = 0;
    for (int64_t j = lane; j < size; j += kThreadsPerRow) s += BackwardTerm<T, kLog>(grad[base + j], y[base + j]);
    // The sum is complete before any element is written (grad_in may be grad).
    s = RowSum<kThreadsPerRow>(s, shared);
    for (int64_t j = lane; j < size; j += kThreadsPerRow) {
      grad_in[base + j] = BackwardValue<T, kLog>(grad[base + j], y[base + j], s);
    }
  }
}

template <typename T, bool kLog>
__global__ void SoftmaxBackwardColumnKernel(int64_t outer, int64_t size, int64_t inner, const T* grad, const T* y,
                                            T* grad_in) {
  for (int64_t p = GlobalThread(); p < outer * inner; p += GlobalStride()) {
    const int64_t base = (p / inner) * size * inner + p % inner;
    T s = 0;
    for (int64_t d = 0; d < size; ++d) s += BackwardTerm<T, kLog>(grad[base + d * inner], y[base + d * inner]);
    for (int64_t d = 0; d < size; ++d) {
      const int64_t at = base + d * inner;
      grad_in[at] = BackwardValue<T, kLog>(grad[at], y[at], s);
    }
  }
}

template <typename F>
bool DispatchFloat(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      f(float{});
      return true;
    case DType::kFloat64:
      f(double{});
      return true;
    default:
      return false;
  }
}

template <bool kLog>
cudaError_t SoftmaxForward(DType dtype, int64_t outer, int64_t size, int64_t inner, bool zero_if_all_neg_inf,
                           const void* in, void* out, cudaStream_t stream) {
  if (outer * size * inner == 0) return cudaSuccess;
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(out);
    if (inner != 1) {
      SoftmaxColumnKernel<T, kLog>
          <<<Blocks(outer * inner), kThreads, 0, stream>>>(outer, size, inner, zero_if_all_neg_inf, x, y);
      return;
    }
    if (LaunchSoftmaxTile<T, kLog>(outer, size, zero_if_all_neg_inf, x, y, stream)) return;
    const bool vectorizable = AllAligned16({in, out}) && size % Vec16<T>::kCount == 0;
    const int64_t row_bytes = size * static_cast<int64_t>(sizeof(T));
    if (vectorizable && row_bytes <= kLongRowBytes) {
      SoftmaxLongRowKernel<T, kLog>
          <<<Blocks(outer, 1), kLongRowThreads, row_bytes, stream>>>(outer, size, zero_if_all_neg_inf, x, y);
    } else if (size <= 1024) {
      SoftmaxLoopKernel<T, kLog, 32>
          <<<RowBlocks<32, 1>(outer), kThreads, 0, stream>>>(outer, size, zero_if_all_neg_inf, x, y);
    } else {
      SoftmaxLoopKernel<T, kLog, kThreads>
          <<<RowBlocks<kThreads, 1>(outer), kThreads, 0, stream>>>(outer, size, zero_if_all_neg_inf, x, y);
    }
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

template <bool kLog>
cudaError_t SoftmaxBackward(DType dtype, int64_t outer, int64_t size, int64_t inner, const void* grad, const void* y,
                            void* grad_in, cudaStream_t stream) {
  if (outer * size * inner == 0) return cudaSuccess;
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(grad);
    const T* o = static_cast<const T*>(y);
    T* r = static_cast<T*>(grad_in);
    if (inner != 1) {
      SoftmaxBackwardColumnKernel<T, kLog><<<Blocks(outer * inner), kThreads, 0, stream>>>(outer, size, inner, g, o, r);
      return;
    }
    if (LaunchSoftmaxBackwardTile<T, kLog>(outer, size, g, o, r, stream)) return;
    const int64_t row_bytes = size * static_cast<int64_t>(sizeof(T));
    if (AllAligned16({grad, y, grad_in}) && size % Vec16<T>::kCount == 0 && row_bytes <= kLongRowBytes) {
      SoftmaxBackwardLongRowKernel<T, kLog>
          <<<Blocks(outer, 1), kLongRowThreads, row_bytes, stream>>>(outer, size, g, o, r);
    } else if (size <= 1024) {
      SoftmaxBackwardLoopKernel<T, kLog, 32><<<RowBlocks<32, 1>(outer), kThreads, 0, stream>>>(outer, size, g, o, r);
    } else {
      SoftmaxBackwardLoopKernel<T, kLog, kThreads>
          <<<RowBlocks<kThreads, 1>(outer), kThreads, 0, stream>>>(outer, size, g, o, r);
    }
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchSoftmax(DType dtype, int64_t outer, int64_t size, int64_t inner, bool zero_if_all_neg_inf,
                          const void* in, void* out, cudaStream_t stream) {
  return SoftmaxForward<false>(dtype, outer, size, inner, zero_if_all_neg_inf, in, out, stream);
}

cudaError_t LaunchSoftmaxBackward(DType dtype, int64_t outer, int64_t size, int64_t inner, const void* grad,
                                  const void* y, void* grad_in, cudaStream_t stream) {
  return SoftmaxBackward<false>(dtype, outer, size, inner, grad, y, grad_in, stream);
}

cudaError_t LaunchLogSoftmax(DType dtype, int64_t outer, int64_t size, int64_t inner, const void* in, void* out,
                             cudaStream_t stream) {
  return SoftmaxForward<true>(dtype, outer, size, inner, false, in, out, stream);
}

cudaError_t LaunchLogSoftmaxBackward(DType dtype, int64_t outer, int64_t size, int64_t inner, const void* grad,
                                     const void* output, void* grad_in, cudaStream_t stream) {
  return SoftmaxBackward<true>(dtype, outer, size, inner, grad, output, grad_in, stream);
}

namespace {
std::atomic<int64_t> g_tile_launch_elements{kTileLaunchElements};
}  // namespace

int64_t TileLaunchElements() { return g_tile_launch_elements.load(std::memory_order_relaxed); }

void SetTileLaunchElementsForTesting(int64_t elements) {
  g_tile_launch_elements.store(elements > 0 && elements <= kTileLaunchElements ? elements : kTileLaunchElements);
}

cudaError_t LaunchLayerNorm(DType dtype, int64_t rows, int64_t cols, double eps, const void* x, const void* weight,
                            const void* bias, void* y, void* mean, void* rstd, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x);
    const Affine<T> affine{static_cast<const T*>(weight), static_cast<const T*>(bias)};
    T* py = static_cast<T*>(y);
    T* pm = static_cast<T*>(mean);
    T* pr = static_cast<T*>(rstd);
    const T e = static_cast<T>(eps);
    const bool tiled = DispatchRowTile<T, 8>(
        cols, AllAligned16({x, weight, bias, y}), [&]<int kThreadsPerRow, int kPacks, int kRows>() {
          ForEachRowChunk(rows, cols, [&](int64_t first, int64_t n) {
            const int64_t at = first * cols;
            LayerNormTileKernel<T, kThreadsPerRow, kPacks, kRows>
                <<<RowBlocks<kThreadsPerRow, kRows>(n), kThreads, 0, stream>>>(
                    static_cast<int>(n), static_cast<int>(cols), e, px + at, affine, py + at, pm + first, pr + first);
          });
        });
    if (!tiled) {
      LayerNormLoopKernel<T><<<Blocks(rows, 1), kThreads, 0, stream>>>(rows, cols, e, px, affine, py, pm, pr);
    }
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchLayerNormBackward(DType dtype, int64_t rows, int64_t cols, const void* grad, const void* x,
                                    const void* mean, const void* rstd, const void* weight, void* grad_x,
                                    void* grad_weight, void* grad_bias, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  cudaError_t error = cudaSuccess;
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(grad);
    const T* px = static_cast<const T*>(x);
    const T* pm = static_cast<const T*>(mean);
    const T* pr = static_cast<const T*>(rstd);
    const T* pw = static_cast<const T*>(weight);
    T* dx = static_cast<T*>(grad_x);
    if (rows > 0) {
      const bool tiled = DispatchRowTile<T, 4>(cols, AllAligned16({grad, x, weight, grad_x}),
                                               [&]<int kThreadsPerRow, int kPacks, int kRows>() {
                                                 ForEachRowChunk(rows, cols, [&](int64_t first, int64_t n) {
                                                   const int64_t at = first * cols;
                                                   LayerNormBackwardTileKernel<T, kThreadsPerRow, kPacks, kRows>
                                                       <<<RowBlocks<kThreadsPerRow, kRows>(n), kThreads, 0, stream>>>(
                                                           static_cast<int>(n), static_cast<int>(cols), g + at, px + at,
                                                           pm + first, pr + first, pw, dx + at);
                                                 });
                                               });
      if (!tiled) {
        LayerNormBackwardLoopKernel<T><<<Blocks(rows, 1), kThreads, 0, stream>>>(rows, cols, g, px, pm, pr, pw, dx);
      }
      error = LaunchError();
      if (error != cudaSuccess) return;
    }
    const LayerNormGradSums<T> sums{cols, g, px, pm, pr, static_cast<T*>(grad_weight), static_cast<T*>(grad_bias)};
    error = LaunchColumnSum(1, rows, cols, sums, AllAligned16({grad, x}), stream);
  });
  return launched ? error : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
