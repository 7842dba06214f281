// Reference CPU kernels of 2-D pooling, plane by plane (a plane is one
// channel of one image):
//   - max_pool2d_with_indices: the window's largest value and its flat index
//     h * W + w in the plane; a NaN wins (the last NaN of the window), ties
//     keep the first in row-major window order, as in ATen;
//   - the backward ops gather: each input element sums the gradients of the
//     output windows that contain it (max: whose index names it), in double.
//     An index that names no element of its window contributes nothing (no
//     out-of-bounds access for corrupt indices).
//   - avg_pool2d divides by the window clipped to input + padding
//     (count_include_pad), by the window clipped to the input, or by
//     divisor_override, as ATen does;
//   - adaptive windows: [floor(o * in / out), ceil((o + 1) * in / out)).
// bfloat16 and float16 run these kernels on float32 copies (half_kernels.h's
// WithHalf): a max is exact, a sum is in double, each result rounds once;
// max pooling's indices stay int64.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/cnn_rules.h"
#include "kernels/cpu/channels_first.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

absl::StatusOr<Pool2dGeometry> GeometryOf(const KernelArgs& args, const Shape& self, PoolKind kind) {
  ASSIGN_OR_RETURN(Pool2dParams params, ParsePool2dParams(args.node->attrs, kind));
  return Pool2dShape(params, self);
}

// Start of window `o` along one dim, and the first in-bounds tap (start +
// k * dilation >= 0).
int64_t FirstTap(int64_t start, int64_t dilation) {
  while (start < 0) start += dilation;
  return start;
}

absl::Status MaxPoolKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  ASSIGN_OR_RETURN(Pool2dGeometry g, GeometryOf(args, self.type.shape, PoolKind::kMax));
  const Pool2dParams& p = g.params;
  int64_t* indices = args.outputs[1].as<int64_t>();
  return DispatchFloat(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = self.as<const T>();
    T* y = args.outputs[0].as<T>();
    for (int64_t pl = 0; pl < g.planes; ++pl) {
      const T* plane = x + pl * g.h * g.w;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        const int64_t hs = oy * p.stride[0] - p.padding[0];
        const int64_t he = std::min(hs + (p.kernel[0] - 1) * p.dilation[0] + 1, g.h);
        const int64_t h0 = FirstTap(hs, p.dilation[0]);
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const int64_t ws = ox * p.stride[1] - p.padding[1];
          const int64_t we = std::min(ws + (p.kernel[1] - 1) * p.dilation[1] + 1, g.w);
          const int64_t w0 = FirstTap(ws, p.dilation[1]);
          T best = -std::numeric_limits<T>::infinity();
          int64_t best_index = h0 * g.w + w0;
          for (int64_t ih = h0; ih < he; ih += p.dilation[0]) {
            for (int64_t iw = w0; iw < we; iw += p.dilation[1]) {
              const T v = plane[ih * g.w + iw];
              if (v > best || std::isnan(v)) {
                best = v;
                best_index = ih * g.w + iw;
              }
            }
          }
          const int64_t at = (pl * g.oh + oy) * g.ow + ox;
          y[at] = best;
          indices[at] = best_index;
        }
      }
    }
    return absl::OkStatus();
  });
}

// The output positions along one dim whose window has a tap at input
// position `i`: o with o * stride - pad + k * dilation == i, k in [0,
// kernel). Calls f(o).
template <typename F>
void ForEachWindowWithTap(int64_t i, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, int64_t out,
                          F&& f) {
  for (int64_t k = 0; k < kernel; ++k) {
    const int64_t t = i + pad - k * dilation;
    if (t < 0 || t % stride != 0) continue;
    const int64_t o = t / stride;
    if (o < out) f(o);
  }
}

// Inputs: grad_output, self, indices.
absl::Status MaxPoolBackwardKernel(const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& self = args.inputs[1];
  ASSIGN_OR_RETURN(Pool2dGeometry g, GeometryOf(args, self.type.shape, PoolKind::kMax));
  const Pool2dParams& p = g.params;
  const int64_t* indices = args.inputs[2].as<const int64_t>();
  return DispatchFloat(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = grad.as<const T>();
    T* dx = args.outputs[0].as<T>();
    for (int64_t pl = 0; pl < g.planes; ++pl) {
      const int64_t out_base = pl * g.oh * g.ow;
      for (int64_t ih = 0; ih < g.h; ++ih) {
        for (int64_t iw = 0; iw < g.w; ++iw) {
          const int64_t self_index = ih * g.w + iw;
          double sum = 0.0;
          ForEachWindowWithTap(ih, p.kernel[0], p.stride[0], p.padding[0], p.dilation[0], g.oh, [&](int64_t oy) {
            ForEachWindowWithTap(iw, p.kernel[1], p.stride[1], p.padding[1], p.dilation[1], g.ow, [&](int64_t ox) {
              const int64_t at = out_base + oy * g.ow + ox;
              if (indices[at] == self_index) sum += static_cast<double>(dy[at]);
            });
          });
          dx[pl * g.h * g.w + self_index] = static_cast<T>(sum);
        }
      }
    }
    return absl::OkStatus();
  });
}

// The window of average pooling output (oy, ox) clipped to the input, and
// its divisor.
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  double divisor;
};

AvgWindow AvgWindowAt(const Pool2dGeometry& g, int64_t oy, int64_t ox) {
  const Pool2dParams& p = g.params;
  AvgWindow win;
  int64_t hs = oy * p.stride[0] - p.padding[0];
  int64_t ws = ox * p.stride[1] - p.padding[1];
  int64_t he = std::min(hs + p.kernel[0], g.h + p.padding[0]);
  int64_t we = std::min(ws + p.kernel[1], g.w + p.padding[1]);
  const int64_t padded_size = (he - hs) * (we - ws);
  win.h0 = std::max<int64_t>(hs, 0);
  win.w0 = std::max<int64_t>(ws, 0);
  win.h1 = std::min(he, g.h);
  win.w1 = std::min(we, g.w);
  if (p.divisor_override != 0) {
    win.divisor = static_cast<double>(p.divisor_override);
  } else if (p.count_include_pad) {
    win.divisor = static_cast<double>(padded_size);
  } else {
    win.divisor = static_cast<double>((win.h1 - win.h0) * (win.w1 - win.w0));
  }
  return win;
}

absl::Status AvgPoolKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  ASSIGN_OR_RETURN(Pool2dGeometry g, GeometryOf(args, self.type.shape, PoolKind::kAvg));
  return DispatchFloat(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = self.as<const T>();
    T* y = args.outputs[0].as<T>();
    for (int64_t pl = 0; pl < g.planes; ++pl) {
      const T* plane = x + pl * g.h * g.w;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const AvgWindow win = AvgWindowAt(g, oy, ox);
          double sum = 0.0;
          for (int64_t ih = win.h0; ih < win.h1; ++ih) {
            for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += static_cast<double>(plane[ih * g.w + iw]);
          }
          const bool empty = win.h0 >= win.h1 || win.w0 >= win.w1;
          y[(pl * g.oh + oy) * g.ow + ox] = empty ? T(0) : static_cast<T>(sum / win.divisor);
        }
      }
    }
    return absl::OkStatus();
  });
}

// Inputs: grad_output, self.
absl::Status AvgPoolBackwardKernel(const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& self = args.inputs[1];
  ASSIGN_OR_RETURN(Pool2dGeometry g, GeometryOf(args, self.type.shape, PoolKind::kAvg));
  const Pool2dParams& p = g.params;
  return DispatchFloat(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = grad.as<const T>();
    T* dx = args.outputs[0].as<T>();
    for (int64_t pl = 0; pl < g.planes; ++pl) {
      const T* dy_plane = dy + pl * g.oh * g.ow;
      for (int64_t ih = 0; ih < g.h; ++ih) {
        for (int64_t iw = 0; iw < g.w; ++iw) {
          double sum = 0.0;
          ForEachWindowWithTap(ih, p.kernel[0], p.stride[0], p.padding[0], 1, g.oh, [&](int64_t oy) {
            ForEachWindowWithTap(iw, p.kernel[1], p.stride[1], p.padding[1], 1, g.ow, [&](int64_t ox) {
              const AvgWindow win = AvgWindowAt(g, oy, ox);
              if (ih < win.h1 && iw < win.w1) sum += static_cast<double>(dy_plane[oy * g.ow + ox]) / win.divisor;
            });
          });
          dx[(pl * g.h + ih) * g.w + iw] = static_cast<T>(sum);
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::Status AdaptiveAvgPoolKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const Shape& in = self.type.shape;
  const Shape& out = args.outputs[0].type.shape;
  const size_t r = in.size();
  const int64_t h = in[r - 2], w = in[r - 1], oh = out[r - 2], ow = out[r - 1];
  const int64_t planes = self.numel() / (h * w);
  return DispatchFloat(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = self.as<const T>();
    T* y = args.outputs[0].as<T>();
    for (int64_t pl = 0; pl < planes; ++pl) {
      for (int64_t oy = 0; oy < oh; ++oy) {
        const int64_t h0 = AdaptiveStart(oy, h, oh), h1 = AdaptiveEnd(oy, h, oh);
        for (int64_t ox = 0; ox < ow; ++ox) {
          const int64_t w0 = AdaptiveStart(ox, w, ow), w1 = AdaptiveEnd(ox, w, ow);
          double sum = 0.0;
          for (int64_t ih = h0; ih < h1; ++ih) {
            for (int64_t iw = w0; iw < w1; ++iw) sum += static_cast<double>(x[(pl * h + ih) * w + iw]);
          }
          y[(pl * oh + oy) * ow + ox] = static_cast<T>(sum / static_cast<double>((h1 - h0) * (w1 - w0)));
        }
      }
    }
    return absl::OkStatus();
  });
}

// Inputs: grad_output, self.
absl::Status AdaptiveAvgPoolBackwardKernel(const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const Shape& in = args.inputs[1].type.shape;
  const Shape& out = grad.type.shape;
  const size_t r = in.size();
  const int64_t h = in[r - 2], w = in[r - 1], oh = out[r - 2], ow = out[r - 1];
  const int64_t planes = args.inputs[1].numel() / (h * w);
  return DispatchFloat(args, grad.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = grad.as<const T>();
    T* dx = args.outputs[0].as<T>();
    for (int64_t pl = 0; pl < planes; ++pl) {
      for (int64_t ih = 0; ih < h; ++ih) {
        for (int64_t iw = 0; iw < w; ++iw) {
          double sum = 0.0;
          // The windows containing ih start at or before it and end after it.
          for (int64_t oy = AdaptiveStart(ih, oh, h); oy < AdaptiveEnd(ih, oh, h) + 1 && oy < oh; ++oy) {
            const int64_t h0 = AdaptiveStart(oy, h, oh), h1 = AdaptiveEnd(oy, h, oh);
            if (ih < h0 || ih >= h1) continue;
            for (int64_t ox = AdaptiveStart(iw, ow, w); ox < AdaptiveEnd(iw, ow, w) + 1 && ox < ow; ++ox) {
              const int64_t w0 = AdaptiveStart(ox, w, ow), w1 = AdaptiveEnd(ox, w, ow);
              if (iw < w0 || iw >= w1) continue;
              sum += static_cast<double>(dy[(pl * oh + oy) * ow + ox]) / static_cast<double>((h1 - h0) * (w1 - w0));
            }
          }
          dx[(pl * h + ih) * w + iw] = static_cast<T>(sum);
        }
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace

void AddPoolingKernels(CpuKernelTable& table) {
  table["max_pool2d_with_indices"] = WithChannelsFirst<WithHalf<MaxPoolKernel>>;
  table["max_pool2d_with_indices_backward"] = WithChannelsFirst<WithHalf<MaxPoolBackwardKernel>>;
  table["avg_pool2d"] = WithChannelsFirst<WithHalf<AvgPoolKernel>>;
  table["avg_pool2d_backward"] = WithChannelsFirst<WithHalf<AvgPoolBackwardKernel>>;
  table["_adaptive_avg_pool2d"] = WithHalf<AdaptiveAvgPoolKernel>;
  table["_adaptive_avg_pool2d_backward"] = WithHalf<AdaptiveAvgPoolBackwardKernel>;
}

}  // namespace tandem::cpu
