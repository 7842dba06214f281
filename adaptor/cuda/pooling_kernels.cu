// 2-D pooling on CUDA: a thread per output element for the forwards, a
// thread per input element for the backwards, which gather the gradients of
// the windows that contain the element (no atomics, so results are
// deterministic and need no zeroing pass). Sums accumulate in double. The
// window rules are the CPU kernels' (adaptor/cpu/pooling_kernels.cc).
#include <cmath>
#include <limits>

#include "adaptor/cuda/cnn_launch.h"
#include "adaptor/cuda/kernel_common.cuh"

namespace tandem::cuda {
namespace {

// Splits a flat index of [planes, rows, cols] into its parts.
struct PlaneIndex {
  int64_t plane, row, col;
};
__device__ __forceinline__ PlaneIndex Split(int64_t i, int64_t rows, int64_t cols) {
  PlaneIndex r;
  r.col = i % cols;
  const int64_t t = i / cols;
  r.row = t % rows;
  r.plane = t / rows;
  return r;
}

template <typename T>
__global__ void MaxPoolKernel(PoolLaunchParams p, const T* x, T* y, int64_t* indices) {
  const int64_t total = p.planes * p.oh * p.ow;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const PlaneIndex o = Split(i, p.oh, p.ow);
    int64_t h0 = o.row * p.stride[0] - p.padding[0];
    const int64_t h1 = min(h0 + (p.kernel[0] - 1) * p.dilation[0] + 1, p.h);
    while (h0 < 0) h0 += p.dilation[0];
    int64_t w0 = o.col * p.stride[1] - p.padding[1];
    const int64_t w1 = min(w0 + (p.kernel[1] - 1) * p.dilation[1] + 1, p.w);
    while (w0 < 0) w0 += p.dilation[1];
    const T* plane = x + o.plane * p.h * p.w;
    T best = -std::numeric_limits<T>::infinity();
    int64_t best_index = h0 * p.w + w0;
    for (int64_t ih = h0; ih < h1; ih += p.dilation[0]) {
      for (int64_t iw = w0; iw < w1; iw += p.dilation[1]) {
        const T v = plane[ih * p.w + iw];
        if (v > best || isnan(v)) {
          best = v;
          best_index = ih * p.w + iw;
        }
      }
    }
    y[i] = best;
    indices[i] = best_index;
  }
}

// The output position along one dim whose window has tap `k` at input
// position `i`, or -1.
__device__ __forceinline__ int64_t WindowWithTap(int64_t i, int64_t k, int64_t stride, int64_t pad,
                                                 int64_t dilation, int64_t out) {
  const int64_t t = i + pad - k * dilation;
  if (t < 0 || t % stride != 0) return -1;
  const int64_t o = t / stride;
  return o < out ? o : -1;
}

template <typename T>
__global__ void MaxPoolBackwardKernel(PoolLaunchParams p, const T* dy, const int64_t* indices, T* dx) {
  const int64_t total = p.planes * p.h * p.w;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const PlaneIndex in = Split(i, p.h, p.w);
    const int64_t self_index = in.row * p.w + in.col;
    const int64_t out_base = in.plane * p.oh * p.ow;
    double sum = 0.0;
    for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
      const int64_t oy = WindowWithTap(in.row, kh, p.stride[0], p.padding[0], p.dilation[0], p.oh);
      if (oy < 0) continue;
      for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
        const int64_t ox = WindowWithTap(in.col, kw, p.stride[1], p.padding[1], p.dilation[1], p.ow);
        if (ox < 0) continue;
        const int64_t at = out_base + oy * p.ow + ox;
        if (indices[at] == self_index) sum += static_cast<double>(dy[at]);
      }
    }
    dx[i] = static_cast<T>(sum);
  }
}

struct AvgWindow {
  int64_t h0, h1, w0, w1;
  double divisor;
};

__device__ __forceinline__ AvgWindow AvgWindowAt(const PoolLaunchParams& p, int64_t oy, int64_t ox) {
  AvgWindow win;
  const int64_t hs = oy * p.stride[0] - p.padding[0];
  const int64_t ws = ox * p.stride[1] - p.padding[1];
  const int64_t he = min(hs + p.kernel[0], p.h + p.padding[0]);
  const int64_t we = min(ws + p.kernel[1], p.w + p.padding[1]);
  const int64_t padded_size = (he - hs) * (we - ws);
  win.h0 = max(hs, int64_t{0});
  win.w0 = max(ws, int64_t{0});
  win.h1 = min(he, p.h);
  win.w1 = min(we, p.w);
  if (p.divisor_override != 0) {
    win.divisor = static_cast<double>(p.divisor_override);
  } else if (p.count_include_pad) {
    win.divisor = static_cast<double>(padded_size);
  } else {
    win.divisor = static_cast<double>((win.h1 - win.h0) * (win.w1 - win.w0));
  }
  return win;
}

template <typename T>
__global__ void AvgPoolKernel(PoolLaunchParams p, const T* x, T* y) {
  const int64_t total = p.planes * p.oh * p.ow;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const PlaneIndex o = Split(i, p.oh, p.ow);
    const AvgWindow win = AvgWindowAt(p, o.row, o.col);
    const T* plane = x + o.plane * p.h * p.w;
    double sum = 0.0;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += static_cast<double>(plane[ih * p.w + iw]);
    }
    const bool empty = win.h0 >= win.h1 || win.w0 >= win.w1;
    y[i] = empty ? T(0) : static_cast<T>(sum / win.divisor);
  }
}

template <typename T>
__global__ void AvgPoolBackwardKernel(PoolLaunchParams p, const T* dy, T* dx) {
  const int64_t total = p.planes * p.h * p.w;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const PlaneIndex in = Split(i, p.h, p.w);
    const T* dy_plane = dy + in.plane * p.oh * p.ow;
    double sum = 0.0;
    for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
      const int64_t oy = WindowWithTap(in.row, kh, p.stride[0], p.padding[0], 1, p.oh);
      if (oy < 0) continue;
      for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
        const int64_t ox = WindowWithTap(in.col, kw, p.stride[1], p.padding[1], 1, p.ow);
        if (ox < 0) continue;
        const AvgWindow win = AvgWindowAt(p, oy, ox);
        if (in.row < win.h1 && in.col < win.w1) sum += static_cast<double>(dy_plane[oy * p.ow + ox]) / win.divisor;
      }
    }
    dx[i] = static_cast<T>(sum);
  }
}

__device__ __forceinline__ int64_t AdaptiveStart(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
__device__ __forceinline__ int64_t AdaptiveEnd(int64_t o, int64_t in, int64_t out) {
  return ((o + 1) * in + out - 1) / out;
}

template <typename T>
__global__ void AdaptiveAvgPoolKernel(PoolLaunchParams p, const T* x, T* y) {
  const int64_t total = p.planes * p.oh * p.ow;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const PlaneIndex o = Split(i, p.oh, p.ow);
    const int64_t h0 = AdaptiveStart(o.row, p.h, p.oh), h1 = AdaptiveEnd(o.row, p.h, p.oh);
    const int64_t w0 = AdaptiveStart(o.col, p.w, p.ow), w1 = AdaptiveEnd(o.col, p.w, p.ow);
    const T* plane = x + o.plane * p.h * p.w;
    double sum = 0.0;
    for (int64_t ih = h0; ih < h1; ++ih) {
      for (int64_t iw = w0; iw < w1; ++iw) sum += static_cast<double>(plane[ih * p.w + iw]);
    }
    y[i] = static_cast<T>(sum / static_cast<double>((h1 - h0) * (w1 - w0)));
  }
}

template <typename T>
__global__ void AdaptiveAvgPoolBackwardKernel(PoolLaunchParams p, const T* dy, T* dx) {
  const int64_t total = p.planes * p.h * p.w;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const PlaneIndex in = Split(i, p.h, p.w);
    const T* dy_plane = dy + in.plane * p.oh * p.ow;
    double sum = 0.0;
    const int64_t oy_end = min(AdaptiveEnd(in.row, p.oh, p.h) + 1, p.oh);
    const int64_t ox_end = min(AdaptiveEnd(in.col, p.ow, p.w) + 1, p.ow);
    for (int64_t oy = AdaptiveStart(in.row, p.oh, p.h); oy < oy_end; ++oy) {
      const int64_t h0 = AdaptiveStart(oy, p.h, p.oh), h1 = AdaptiveEnd(oy, p.h, p.oh);
      if (in.row < h0 || in.row >= h1) continue;
      for (int64_t ox = AdaptiveStart(in.col, p.ow, p.w); ox < ox_end; ++ox) {
        const int64_t w0 = AdaptiveStart(ox, p.w, p.ow), w1 = AdaptiveEnd(ox, p.w, p.ow);
        if (in.col < w0 || in.col >= w1) continue;
        sum += static_cast<double>(dy_plane[oy * p.ow + ox]) / static_cast<double>((h1 - h0) * (w1 - w0));
      }
    }
    dx[i] = static_cast<T>(sum);
  }
}

// Calls f(T{}) for float32 and float64; false for other dtypes.
template <typename F>
bool DispatchFloat(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(float{}); return true;
    case DType::kFloat64: f(double{}); return true;
    default: return false;
  }
}

}  // namespace

cudaError_t LaunchMaxPool2d(DType dtype, const PoolLaunchParams& p, const void* x, void* y, int64_t* indices,
                            cudaStream_t stream) {
  const int64_t total = p.planes * p.oh * p.ow;
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    MaxPoolKernel<T><<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(x), static_cast<T*>(y),
                                                             indices);
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchMaxPool2dBackward(DType dtype, const PoolLaunchParams& p, const void* grad_output,
                                    const int64_t* indices, void* grad_input, cudaStream_t stream) {
  const int64_t total = p.planes * p.h * p.w;
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    MaxPoolBackwardKernel<T><<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(grad_output),
                                                                     indices, static_cast<T*>(grad_input));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAvgPool2d(DType dtype, const PoolLaunchParams& p, const void* x, void* y, cudaStream_t stream) {
  const int64_t total = p.planes * p.oh * p.ow;
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    AvgPoolKernel<T><<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(x), static_cast<T*>(y));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAvgPool2dBackward(DType dtype, const PoolLaunchParams& p, const void* grad_output,
                                    void* grad_input, cudaStream_t stream) {
  const int64_t total = p.planes * p.h * p.w;
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    AvgPoolBackwardKernel<T><<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(grad_output),
                                                                     static_cast<T*>(grad_input));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAdaptiveAvgPool2d(DType dtype, const PoolLaunchParams& p, const void* x, void* y,
                                    cudaStream_t stream) {
  const int64_t total = p.planes * p.oh * p.ow;
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    AdaptiveAvgPoolKernel<T><<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(x),
                                                                     static_cast<T*>(y));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAdaptiveAvgPool2dBackward(DType dtype, const PoolLaunchParams& p, const void* grad_output,
                                            void* grad_input, cudaStream_t stream) {
  const int64_t total = p.planes * p.h * p.w;
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    AdaptiveAvgPoolBackwardKernel<T><<<Blocks(total), kThreads, 0, stream>>>(
        p, static_cast<const T*>(grad_output), static_cast<T*>(grad_input));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
