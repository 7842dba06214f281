// 2-D resampling on CUDA: upsample_nearest2d and upsample_bilinear2d (every
// form) and their backward ops. Source positions and bilinear weights come
// from ir/ops/spatial_index.h, the maps the CPU kernels use, so both
// backends read the same elements.
//
// Forwards take a thread per output element. Backwards take a thread per
// input element and gather (no atomics, so race-free and deterministic):
// along each dim the destinations that read a source form one contiguous
// range (the maps are nondecreasing), found with the forward map itself, so
// each gradient is the exact adjoint of the forward. Bilinear values are
// h0 * (w0 * x00 + w1 * x01) + h1 * (w0 * x10 + w1 * x11) in the
// accumulation type (float32 for float32 and 16-bit tensors, float64 for
// float64), PyTorch's CUDA order; gathered gradient sums run in double for
// float32 and float64, float32 for the 16-bit types.
#include <type_traits>

#include "ir/ops/spatial_index.h"
#include "kernels/cuda/half_cnn_common.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/spatial_launch.h"

namespace tandem::cuda {
namespace {

// PyTorch's accumulation type for the index arithmetic and bilinear values.
template <typename T>
using IndexType = std::conditional_t<std::is_same_v<T, double>, double, float>;
// The type gathered gradients sum in.
template <typename T>
using SumType = std::conditional_t<kIsHalfType<T>, float, double>;

struct Position {
  int64_t plane, row, col;
};
__device__ __forceinline__ Position Split(int64_t i, int64_t rows, int64_t cols) {
  Position r;
  r.col = i % cols;
  const int64_t t = i / cols;
  r.row = t % rows;
  r.plane = t / rows;
  return r;
}

template <typename T>
__global__ void NearestKernel(ResampleLaunchParams p, float scale_h, float scale_w, const T* x, T* y) {
  const int64_t total = p.planes * p.out_h * p.out_w;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const Position o = Split(i, p.out_h, p.out_w);
    const int64_t sy = spatial::NearestSource(scale_h, o.row, p.in_h);
    const int64_t sx = spatial::NearestSource(scale_w, o.col, p.in_w);
    y[i] = x[(o.plane * p.in_h + sy) * p.in_w + sx];
  }
}

template <typename T>
__global__ void NearestBackwardKernel(ResampleLaunchParams p, float scale_h, float scale_w, const T* dy, T* dx) {
  using S = SumType<T>;
  const int64_t total = p.planes * p.in_h * p.in_w;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const Position s = Split(i, p.in_h, p.in_w);
    const int64_t y0 = spatial::NearestFirstAtLeast(scale_h, s.row, p.in_h, p.out_h);
    const int64_t y1 = spatial::NearestFirstAtLeast(scale_h, s.row + 1, p.in_h, p.out_h);
    const int64_t x0 = spatial::NearestFirstAtLeast(scale_w, s.col, p.in_w, p.out_w);
    const int64_t x1 = spatial::NearestFirstAtLeast(scale_w, s.col + 1, p.in_w, p.out_w);
    const T* plane = dy + s.plane * p.out_h * p.out_w;
    S sum = 0;
    for (int64_t oy = y0; oy < y1; ++oy) {
      for (int64_t ox = x0; ox < x1; ++ox) sum += WidenTo<S>(plane[oy * p.out_w + ox]);
    }
    dx[i] = RoundTo<T>(sum);
  }
}

template <typename T>
__global__ void BilinearKernel(ResampleLaunchParams p, IndexType<T> scale_h, IndexType<T> scale_w, const T* x, T* y) {
  using A = IndexType<T>;
  const int64_t total = p.planes * p.out_h * p.out_w;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const Position o = Split(i, p.out_h, p.out_w);
    const spatial::LinearTap<A> r = spatial::LinearTapAt<A>(scale_h, o.row, p.in_h, p.align_corners);
    const spatial::LinearTap<A> c = spatial::LinearTapAt<A>(scale_w, o.col, p.in_w, p.align_corners);
    const T* top = x + (o.plane * p.in_h + r.i0) * p.in_w;
    const T* bottom = x + (o.plane * p.in_h + r.i1) * p.in_w;
    const A upper = c.w0 * WidenTo<A>(top[c.i0]) + c.w1 * WidenTo<A>(top[c.i1]);
    const A lower = c.w0 * WidenTo<A>(bottom[c.i0]) + c.w1 * WidenTo<A>(bottom[c.i1]);
    y[i] = RoundTo<T>(r.w0 * upper + r.w1 * lower);
  }
}

// Every destination in [First(s - 1), First(s + 1)) reads source s (as its
// first or second tap), with LinearWeight's weight.
template <typename T>
__global__ void BilinearBackwardKernel(ResampleLaunchParams p, IndexType<T> scale_h, IndexType<T> scale_w, const T* dy,
                                       T* dx) {
  using A = IndexType<T>;
  using S = SumType<T>;
  const int64_t total = p.planes * p.in_h * p.in_w;
  const bool align = p.align_corners;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const Position s = Split(i, p.in_h, p.in_w);
    const int64_t y0 = spatial::LinearFirstAtLeast(scale_h, s.row - 1, p.in_h, p.out_h, align);
    const int64_t y1 = spatial::LinearFirstAtLeast(scale_h, s.row + 1, p.in_h, p.out_h, align);
    const int64_t x0 = spatial::LinearFirstAtLeast(scale_w, s.col - 1, p.in_w, p.out_w, align);
    const int64_t x1 = spatial::LinearFirstAtLeast(scale_w, s.col + 1, p.in_w, p.out_w, align);
    const T* plane = dy + s.plane * p.out_h * p.out_w;
    S sum = 0;
    for (int64_t oy = y0; oy < y1; ++oy) {
      const S wy = static_cast<S>(spatial::LinearWeight(spatial::LinearTapAt<A>(scale_h, oy, p.in_h, align), s.row));
      for (int64_t ox = x0; ox < x1; ++ox) {
        const S wx = static_cast<S>(spatial::LinearWeight(spatial::LinearTapAt<A>(scale_w, ox, p.in_w, align), s.col));
        sum += wy * wx * WidenTo<S>(plane[oy * p.out_w + ox]);
      }
    }
    dx[i] = RoundTo<T>(sum);
  }
}

}  // namespace

cudaError_t LaunchUpsampleNearest2d(DType dtype, const ResampleLaunchParams& p, const void* x, void* y,
                                    cudaStream_t stream) {
  const int64_t total = p.planes * p.out_h * p.out_w;
  if (total == 0) return cudaSuccess;
  const float scale_h = spatial::ResampleScale<float>(p.in_h, p.out_h, p.scale_h);
  const float scale_w = spatial::ResampleScale<float>(p.in_w, p.out_w, p.scale_w);
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    NearestKernel<T>
        <<<Blocks(total), kThreads, 0, stream>>>(p, scale_h, scale_w, static_cast<const T*>(x), static_cast<T*>(y));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchUpsampleNearest2dBackward(DType dtype, const ResampleLaunchParams& p, const void* grad_output,
                                            void* grad_input, cudaStream_t stream) {
  const int64_t total = p.planes * p.in_h * p.in_w;
  if (total == 0) return cudaSuccess;
  const float scale_h = spatial::ResampleScale<float>(p.in_h, p.out_h, p.scale_h);
  const float scale_w = spatial::ResampleScale<float>(p.in_w, p.out_w, p.scale_w);
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    NearestBackwardKernel<T><<<Blocks(total), kThreads, 0, stream>>>(
        p, scale_h, scale_w, static_cast<const T*>(grad_output), static_cast<T*>(grad_input));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchUpsampleBilinear2d(DType dtype, const ResampleLaunchParams& p, const void* x, void* y,
                                     cudaStream_t stream) {
  const int64_t total = p.planes * p.out_h * p.out_w;
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = IndexType<T>;
    const A scale_h = spatial::LinearScale<A>(p.in_h, p.out_h, p.align_corners, p.scale_h);
    const A scale_w = spatial::LinearScale<A>(p.in_w, p.out_w, p.align_corners, p.scale_w);
    BilinearKernel<T>
        <<<Blocks(total), kThreads, 0, stream>>>(p, scale_h, scale_w, static_cast<const T*>(x), static_cast<T*>(y));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchUpsampleBilinear2dBackward(DType dtype, const ResampleLaunchParams& p, const void* grad_output,
                                             void* grad_input, cudaStream_t stream) {
  const int64_t total = p.planes * p.in_h * p.in_w;
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = IndexType<T>;
    const A scale_h = spatial::LinearScale<A>(p.in_h, p.out_h, p.align_corners, p.scale_h);
    const A scale_w = spatial::LinearScale<A>(p.in_w, p.out_w, p.align_corners, p.scale_w);
    BilinearBackwardKernel<T><<<Blocks(total), kThreads, 0, stream>>>(
        p, scale_h, scale_w, static_cast<const T*>(grad_output), static_cast<T*>(grad_input));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
