// 3-D pooling on CUDA: max_pool3d_with_indices, avg_pool3d,
// _adaptive_avg_pool3d and their backward ops. A thread per output element
// for the forwards, a thread per input element for the backwards, which
// gather the gradients of the windows that contain the element (no atomics:
// deterministic, no zeroing pass). The window rules are the CPU kernels'
// (kernels/cpu/pooling3d_kernels.cc) and the 2-D kernels' in one more dim.
// Sums run in double for float32 and float64, float32 for the 16-bit types;
// a max compares in float32 for them; each result rounds once. Video models
// pool whole volumes to one value (adaptive output 1 x 1 x 1): the adaptive
// forward then walks a long window per thread, which is what PyTorch's
// kernel does too.
#include <limits>
#include <type_traits>

#include "kernels/cuda/half_cnn_common.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/spatial_launch.h"

namespace tandem::cuda {
namespace {

template <typename T>
using SumType = std::conditional_t<kIsHalfType<T>, float, double>;
template <typename T>
using CompareType = std::conditional_t<kIsHalfType<T>, float, T>;

struct VolumeIndex {
  int64_t plane;
  int64_t pos[3];
};
__device__ __forceinline__ VolumeIndex SplitVolume(int64_t i, const int64_t (&dims)[3]) {
  VolumeIndex v;
  for (int d = 2; d >= 0; --d) {
    v.pos[d] = i % dims[d];
    i /= dims[d];
  }
  v.plane = i;
  return v;
}

template <typename T>
__global__ void MaxPool3dKernel(Pool3dLaunchParams p, const T* x, T* y, int64_t* indices) {
  using V = CompareType<T>;
  const int64_t total = p.planes * p.out[0] * p.out[1] * p.out[2];
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const VolumeIndex o = SplitVolume(i, p.out);
    int64_t first[3], end[3];
    for (int d = 0; d < 3; ++d) {
      int64_t start = o.pos[d] * p.stride[d] - p.padding[d];
      end[d] = min(start + (p.kernel[d] - 1) * p.dilation[d] + 1, p.in[d]);
      while (start < 0) start += p.dilation[d];
      first[d] = start;
    }
    const T* volume = x + o.plane * p.in[0] * p.in[1] * p.in[2];
    V best = -std::numeric_limits<V>::infinity();
    int64_t best_index = (first[0] * p.in[1] + first[1]) * p.in[2] + first[2];
    for (int64_t iz = first[0]; iz < end[0]; iz += p.dilation[0]) {
      for (int64_t iy = first[1]; iy < end[1]; iy += p.dilation[1]) {
        for (int64_t ix = first[2]; ix < end[2]; ix += p.dilation[2]) {
          const int64_t index = (iz * p.in[1] + iy) * p.in[2] + ix;
          const V v = WidenTo<V>(volume[index]);
          if (v > best || isnan(v)) {
            best = v;
            best_index = index;
          }
        }
      }
    }
    y[i] = RoundTo<T>(best);  // exact: a widened stored value (or -inf)
    indices[i] = best_index;
  }
}

// The output positions along dim d whose window has a tap at input
// position `pos`: o in [first, last] with pos + padding - o * stride in
// [0, (kernel - 1) * dilation] and a multiple of the dilation.
struct WindowRange {
  int64_t first, last;
};
__device__ __forceinline__ WindowRange WindowsWithTap(const Pool3dLaunchParams& p, int d, int64_t pos,
                                                      int64_t dilation) {
  const int64_t top = pos + p.padding[d];
  const int64_t low = top - (p.kernel[d] - 1) * dilation;
  WindowRange r;
  r.last = min(top / p.stride[d], p.out[d] - 1);
  r.first = low <= 0 ? 0 : (low + p.stride[d] - 1) / p.stride[d];
  return r;
}
__device__ __forceinline__ bool IsTap(const Pool3dLaunchParams& p, int d, int64_t pos, int64_t o, int64_t dilation) {
  return (pos + p.padding[d] - o * p.stride[d]) % dilation == 0;
}

// Windows in the CPU kernel's order (kernel taps ascending, so output
// positions descending).
template <typename T>
__global__ void MaxPool3dBackwardKernel(Pool3dLaunchParams p, const T* dy, const int64_t* indices, T* dx) {
  using S = SumType<T>;
  const int64_t total = p.planes * p.in[0] * p.in[1] * p.in[2];
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const VolumeIndex v = SplitVolume(i, p.in);
    const int64_t self_index = (v.pos[0] * p.in[1] + v.pos[1]) * p.in[2] + v.pos[2];
    WindowRange r[3];
    for (int d = 0; d < 3; ++d) r[d] = WindowsWithTap(p, d, v.pos[d], p.dilation[d]);
    const int64_t out_base = v.plane * p.out[0] * p.out[1] * p.out[2];
    S sum = 0;
    for (int64_t oz = r[0].last; oz >= r[0].first; --oz) {
      if (!IsTap(p, 0, v.pos[0], oz, p.dilation[0])) continue;
      for (int64_t oy = r[1].last; oy >= r[1].first; --oy) {
        if (!IsTap(p, 1, v.pos[1], oy, p.dilation[1])) continue;
        for (int64_t ox = r[2].last; ox >= r[2].first; --ox) {
          if (!IsTap(p, 2, v.pos[2], ox, p.dilation[2])) continue;
          const int64_t at = out_base + (oz * p.out[1] + oy) * p.out[2] + ox;
          if (indices[at] == self_index) sum += WidenTo<S>(dy[at]);
        }
      }
    }
    dx[i] = RoundTo<T>(sum);
  }
}

// The window of average pooling output `o` clipped to the input, and its
// divisor (count_include_pad: clipped to input + padding; else to the
// input; or divisor_override).
struct AvgWindow {
  int64_t lo[3], hi[3];
  int64_t divisor;
};
__device__ __forceinline__ AvgWindow AvgWindowAt(const Pool3dLaunchParams& p, const int64_t (&o)[3]) {
  AvgWindow w;
  int64_t padded = 1, clipped = 1;
  for (int d = 0; d < 3; ++d) {
    const int64_t start = o[d] * p.stride[d] - p.padding[d];
    const int64_t end = min(start + p.kernel[d], p.in[d] + p.padding[d]);
    padded *= end - start;
    w.lo[d] = max(start, int64_t{0});
    w.hi[d] = min(end, p.in[d]);
    clipped *= max(w.hi[d] - w.lo[d], int64_t{0});
  }
  w.divisor = p.divisor_override != 0 ? p.divisor_override : (p.count_include_pad ? padded : clipped);
  return w;
}

template <typename T>
__global__ void AvgPool3dKernel(Pool3dLaunchParams p, const T* x, T* y) {
  using S = SumType<T>;
  const int64_t total = p.planes * p.out[0] * p.out[1] * p.out[2];
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const VolumeIndex o = SplitVolume(i, p.out);
    const AvgWindow w = AvgWindowAt(p, o.pos);
    const T* volume = x + o.plane * p.in[0] * p.in[1] * p.in[2];
    S sum = 0;
    for (int64_t iz = w.lo[0]; iz < w.hi[0]; ++iz) {
      for (int64_t iy = w.lo[1]; iy < w.hi[1]; ++iy) {
        for (int64_t ix = w.lo[2]; ix < w.hi[2]; ++ix) sum += WidenTo<S>(volume[(iz * p.in[1] + iy) * p.in[2] + ix]);
      }
    }
    const bool empty = w.lo[0] >= w.hi[0] || w.lo[1] >= w.hi[1] || w.lo[2] >= w.hi[2];
    y[i] = empty ? RoundTo<T>(S(0)) : RoundTo<T>(sum / static_cast<S>(w.divisor));
  }
}

template <typename T>
__global__ void AvgPool3dBackwardKernel(Pool3dLaunchParams p, const T* dy, T* dx) {
  using S = SumType<T>;
  const int64_t total = p.planes * p.in[0] * p.in[1] * p.in[2];
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const VolumeIndex v = SplitVolume(i, p.in);
    WindowRange r[3];
    for (int d = 0; d < 3; ++d) r[d] = WindowsWithTap(p, d, v.pos[d], 1);
    const T* volume = dy + v.plane * p.out[0] * p.out[1] * p.out[2];
    S sum = 0;
    for (int64_t oz = r[0].last; oz >= r[0].first; --oz) {
      for (int64_t oy = r[1].last; oy >= r[1].first; --oy) {
        for (int64_t ox = r[2].last; ox >= r[2].first; --ox) {
          const int64_t o[3] = {oz, oy, ox};
          const AvgWindow w = AvgWindowAt(p, o);
          if (v.pos[0] < w.hi[0] && v.pos[1] < w.hi[1] && v.pos[2] < w.hi[2]) {
            sum += WidenTo<S>(volume[(oz * p.out[1] + oy) * p.out[2] + ox]) / static_cast<S>(w.divisor);
          }
        }
      }
    }
    dx[i] = RoundTo<T>(sum);
  }
}

__device__ __forceinline__ int64_t AdaptiveStart(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
__device__ __forceinline__ int64_t AdaptiveEnd(int64_t o, int64_t in, int64_t out) {
  return ((o + 1) * in + out - 1) / out;
}

template <typename T>
__global__ void AdaptiveAvgPool3dKernel(Pool3dLaunchParams p, const T* x, T* y) {
  using S = SumType<T>;
  const int64_t total = p.planes * p.out[0] * p.out[1] * p.out[2];
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const VolumeIndex o = SplitVolume(i, p.out);
    int64_t lo[3], hi[3];
    for (int d = 0; d < 3; ++d) {
      lo[d] = AdaptiveStart(o.pos[d], p.in[d], p.out[d]);
      hi[d] = AdaptiveEnd(o.pos[d], p.in[d], p.out[d]);
    }
    const T* volume = x + o.plane * p.in[0] * p.in[1] * p.in[2];
    S sum = 0;
    for (int64_t iz = lo[0]; iz < hi[0]; ++iz) {
      for (int64_t iy = lo[1]; iy < hi[1]; ++iy) {
        for (int64_t ix = lo[2]; ix < hi[2]; ++ix) sum += WidenTo<S>(volume[(iz * p.in[1] + iy) * p.in[2] + ix]);
      }
    }
    y[i] = RoundTo<T>(sum / static_cast<S>((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2])));
  }
}

template <typename T>
__global__ void AdaptiveAvgPool3dBackwardKernel(Pool3dLaunchParams p, const T* dy, T* dx) {
  using S = SumType<T>;
  const int64_t total = p.planes * p.in[0] * p.in[1] * p.in[2];
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const VolumeIndex v = SplitVolume(i, p.in);
    // The windows containing a position start at or before it and end
    // after it: outputs [AdaptiveStart(pos), AdaptiveEnd(pos)] (inverse map).
    int64_t first[3], last[3];
    for (int d = 0; d < 3; ++d) {
      first[d] = AdaptiveStart(v.pos[d], p.out[d], p.in[d]);
      last[d] = min(AdaptiveEnd(v.pos[d], p.out[d], p.in[d]), p.out[d] - 1);
    }
    const T* volume = dy + v.plane * p.out[0] * p.out[1] * p.out[2];
    S sum = 0;
    for (int64_t oz = first[0]; oz <= last[0]; ++oz) {
      const int64_t z0 = AdaptiveStart(oz, p.in[0], p.out[0]), z1 = AdaptiveEnd(oz, p.in[0], p.out[0]);
      if (v.pos[0] < z0 || v.pos[0] >= z1) continue;
      for (int64_t oy = first[1]; oy <= last[1]; ++oy) {
        const int64_t y0 = AdaptiveStart(oy, p.in[1], p.out[1]), y1 = AdaptiveEnd(oy, p.in[1], p.out[1]);
        if (v.pos[1] < y0 || v.pos[1] >= y1) continue;
        for (int64_t ox = first[2]; ox <= last[2]; ++ox) {
          const int64_t x0 = AdaptiveStart(ox, p.in[2], p.out[2]), x1 = AdaptiveEnd(ox, p.in[2], p.out[2]);
          if (v.pos[2] < x0 || v.pos[2] >= x1) continue;
          sum += WidenTo<S>(volume[(oz * p.out[1] + oy) * p.out[2] + ox]) /
                 static_cast<S>((z1 - z0) * (y1 - y0) * (x1 - x0));
        }
      }
    }
    dx[i] = RoundTo<T>(sum);
  }
}

}  // namespace

cudaError_t LaunchMaxPool3d(DType dtype, const Pool3dLaunchParams& p, const void* x, void* y, int64_t* indices,
                            cudaStream_t stream) {
  const int64_t total = p.planes * p.out[0] * p.out[1] * p.out[2];
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    MaxPool3dKernel<T>
        <<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(x), static_cast<T*>(y), indices);
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchMaxPool3dBackward(DType dtype, const Pool3dLaunchParams& p, const void* grad_output,
                                    const int64_t* indices, void* grad_input, cudaStream_t stream) {
  const int64_t total = p.planes * p.in[0] * p.in[1] * p.in[2];
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    MaxPool3dBackwardKernel<T><<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(grad_output), indices,
                                                                       static_cast<T*>(grad_input));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAvgPool3d(DType dtype, const Pool3dLaunchParams& p, const void* x, void* y, cudaStream_t stream) {
  const int64_t total = p.planes * p.out[0] * p.out[1] * p.out[2];
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    AvgPool3dKernel<T><<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(x), static_cast<T*>(y));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAvgPool3dBackward(DType dtype, const Pool3dLaunchParams& p, const void* grad_output, void* grad_input,
                                    cudaStream_t stream) {
  const int64_t total = p.planes * p.in[0] * p.in[1] * p.in[2];
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    AvgPool3dBackwardKernel<T>
        <<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(grad_output), static_cast<T*>(grad_input));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAdaptiveAvgPool3d(DType dtype, const Pool3dLaunchParams& p, const void* x, void* y,
                                    cudaStream_t stream) {
  const int64_t total = p.planes * p.out[0] * p.out[1] * p.out[2];
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    AdaptiveAvgPool3dKernel<T><<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(x), static_cast<T*>(y));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAdaptiveAvgPool3dBackward(DType dtype, const Pool3dLaunchParams& p, const void* grad_output,
                                            void* grad_input, cudaStream_t stream) {
  const int64_t total = p.planes * p.in[0] * p.in[1] * p.in[2];
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    AdaptiveAvgPool3dBackwardKernel<T>
        <<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(grad_output), static_cast<T*>(grad_input));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
