// Reference CPU kernels of 3-D pooling, volume by volume (a volume is one
// channel of one clip; geometry in ir/ops/spatial_rules.h), with the rules
// of the 2-D kernels (pooling_kernels.cc) in one more dim:
//   - max_pool3d_with_indices: the window's largest value and its flat index
//     (d * H + h) * W + w in the volume; a NaN wins, ties keep the first in
//     row-major window order, as in ATen;
//   - the backward ops gather: each input element sums the gradients of the
//     output windows that contain it (max: whose index names it), in double;
//   - avg_pool3d divides by the window clipped to input + padding
//     (count_include_pad), by the window clipped to the input, or by
//     divisor_override, as ATen does; a window entirely in the padding
//     averages to 0;
//   - adaptive windows: [floor(o * in / out), ceil((o + 1) * in / out)).
// bfloat16 and float16 run these kernels on float32 copies (half_kernels.h's
// WithHalf); max pooling's indices stay int64.
#include <algorithm>
#include <cmath>
#include <limits>

#include "base/status_macros.h"
#include "ir/ops/cnn_rules.h"
#include "ir/ops/spatial_rules.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

absl::StatusOr<Pool3dGeometry> GeometryOf(const KernelArgs& args, const Shape& self, PoolKind kind) {
  ASSIGN_OR_RETURN(Pool3dParams params, ParsePool3dParams(args.node->attrs, kind));
  return Pool3dShape(params, self);
}

// One window along one dim: taps [first, end) every `step`.
struct Span {
  int64_t first, end, step;
};

Span MaxSpan(const Pool3dGeometry& g, int d, int64_t o) {
  const Pool3dParams& p = g.params;
  int64_t start = o * p.stride[d] - p.padding[d];
  const int64_t end = std::min(start + (p.kernel[d] - 1) * p.dilation[d] + 1, g.in[d]);
  while (start < 0) start += p.dilation[d];
  return {start, end, p.dilation[d]};
}

absl::Status MaxPoolKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  ASSIGN_OR_RETURN(Pool3dGeometry g, GeometryOf(args, self.type.shape, PoolKind::kMax));
  int64_t* indices = args.outputs[1].as<int64_t>();
  return DispatchFloat(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = self.as<const T>();
    T* y = args.outputs[0].as<T>();
    int64_t at = 0;
    for (int64_t pl = 0; pl < g.planes; ++pl) {
      const T* volume = x + pl * g.in_volume();
      for (int64_t oz = 0; oz < g.out[0]; ++oz) {
        const Span sz = MaxSpan(g, 0, oz);
        for (int64_t oy = 0; oy < g.out[1]; ++oy) {
          const Span sy = MaxSpan(g, 1, oy);
          for (int64_t ox = 0; ox < g.out[2]; ++ox, ++at) {
            const Span sx = MaxSpan(g, 2, ox);
            T best = -std::numeric_limits<T>::infinity();
            int64_t best_index = (sz.first * g.in[1] + sy.first) * g.in[2] + sx.first;
            for (int64_t iz = sz.first; iz < sz.end; iz += sz.step) {
              for (int64_t iy = sy.first; iy < sy.end; iy += sy.step) {
                for (int64_t ix = sx.first; ix < sx.end; ix += sx.step) {
                  const int64_t index = (iz * g.in[1] + iy) * g.in[2] + ix;
                  const T v = volume[index];
                  if (v > best || std::isnan(v)) {
                    best = v;
                    best_index = index;
                  }
                }
              }
            }
            y[at] = best;
            indices[at] = best_index;
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

// The output positions along dim `d` whose window has a tap at input
// position `i`: o with i + padding - o * stride in [0, (kernel - 1) *
// dilation] and a multiple of the dilation. Calls f(o). Only the outputs
// that can hold i are visited (not every kernel tap: a kernel may be huge).
template <typename F>
void ForEachWindowWithTap(const Pool3dGeometry& g, int d, int64_t i, int64_t dilation, F&& f) {
  const Pool3dParams& p = g.params;
  const int64_t top = i + p.padding[d];
  const int64_t low = top - (p.kernel[d] - 1) * dilation;
  const int64_t first = low <= 0 ? 0 : (low + p.stride[d] - 1) / p.stride[d];
  const int64_t last = std::min(top / p.stride[d], g.out[d] - 1);
  for (int64_t o = first; o <= last; ++o) {
    if ((top - o * p.stride[d]) % dilation == 0) f(o);
  }
}

// Inputs: grad_output, self, indices.
absl::Status MaxPoolBackwardKernel(const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& self = args.inputs[1];
  ASSIGN_OR_RETURN(Pool3dGeometry g, GeometryOf(args, self.type.shape, PoolKind::kMax));
  const Pool3dParams& p = g.params;
  const int64_t* indices = args.inputs[2].as<const int64_t>();
  return DispatchFloat(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = grad.as<const T>();
    T* dx = args.outputs[0].as<T>();
    int64_t at = 0;
    for (int64_t pl = 0; pl < g.planes; ++pl) {
      const int64_t out_base = pl * g.out_volume();
      for (int64_t iz = 0; iz < g.in[0]; ++iz) {
        for (int64_t iy = 0; iy < g.in[1]; ++iy) {
          for (int64_t ix = 0; ix < g.in[2]; ++ix, ++at) {
            const int64_t self_index = (iz * g.in[1] + iy) * g.in[2] + ix;
            double sum = 0.0;
            ForEachWindowWithTap(g, 0, iz, p.dilation[0], [&](int64_t oz) {
              ForEachWindowWithTap(g, 1, iy, p.dilation[1], [&](int64_t oy) {
                ForEachWindowWithTap(g, 2, ix, p.dilation[2], [&](int64_t ox) {
                  const int64_t o = out_base + (oz * g.out[1] + oy) * g.out[2] + ox;
                  if (indices[o] == self_index) sum += static_cast<double>(dy[o]);
                });
              });
            });
            dx[at] = static_cast<T>(sum);
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

// The window of average pooling output (oz, oy, ox) clipped to the input
// ([lo, hi) per dim), and its divisor.
struct AvgWindow {
  int64_t lo[3], hi[3];
  double divisor;
  bool empty() const { return lo[0] >= hi[0] || lo[1] >= hi[1] || lo[2] >= hi[2]; }
};

AvgWindow AvgWindowAt(const Pool3dGeometry& g, const int64_t o[3]) {
  const Pool3dParams& p = g.params;
  AvgWindow win;
  int64_t padded = 1, clipped = 1;
  for (int d = 0; d < 3; ++d) {
    const int64_t start = o[d] * p.stride[d] - p.padding[d];
    const int64_t end = std::min(start + p.kernel[d], g.in[d] + p.padding[d]);
    padded *= end - start;
    win.lo[d] = std::max<int64_t>(start, 0);
    win.hi[d] = std::min(end, g.in[d]);
    clipped *= std::max<int64_t>(win.hi[d] - win.lo[d], 0);
  }
  if (p.divisor_override != 0) {
    win.divisor = static_cast<double>(p.divisor_override);
  } else {
    win.divisor = static_cast<double>(p.count_include_pad ? padded : clipped);
  }
  return win;
}

absl::Status AvgPoolKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  ASSIGN_OR_RETURN(Pool3dGeometry g, GeometryOf(args, self.type.shape, PoolKind::kAvg));
  return DispatchFloat(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = self.as<const T>();
    T* y = args.outputs[0].as<T>();
    int64_t at = 0;
    for (int64_t pl = 0; pl < g.planes; ++pl) {
      const T* volume = x + pl * g.in_volume();
      int64_t o[3];
      for (o[0] = 0; o[0] < g.out[0]; ++o[0]) {
        for (o[1] = 0; o[1] < g.out[1]; ++o[1]) {
          for (o[2] = 0; o[2] < g.out[2]; ++o[2], ++at) {
            const AvgWindow win = AvgWindowAt(g, o);
            double sum = 0.0;
            for (int64_t iz = win.lo[0]; iz < win.hi[0]; ++iz) {
              for (int64_t iy = win.lo[1]; iy < win.hi[1]; ++iy) {
                for (int64_t ix = win.lo[2]; ix < win.hi[2]; ++ix) {
                  sum += static_cast<double>(volume[(iz * g.in[1] + iy) * g.in[2] + ix]);
                }
              }
            }
            y[at] = win.empty() ? T(0) : static_cast<T>(sum / win.divisor);
          }
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
  ASSIGN_OR_RETURN(Pool3dGeometry g, GeometryOf(args, self.type.shape, PoolKind::kAvg));
  return DispatchFloat(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = grad.as<const T>();
    T* dx = args.outputs[0].as<T>();
    int64_t at = 0;
    for (int64_t pl = 0; pl < g.planes; ++pl) {
      const T* dy_volume = dy + pl * g.out_volume();
      for (int64_t iz = 0; iz < g.in[0]; ++iz) {
        for (int64_t iy = 0; iy < g.in[1]; ++iy) {
          for (int64_t ix = 0; ix < g.in[2]; ++ix, ++at) {
            double sum = 0.0;
            ForEachWindowWithTap(g, 0, iz, 1, [&](int64_t oz) {
              ForEachWindowWithTap(g, 1, iy, 1, [&](int64_t oy) {
                ForEachWindowWithTap(g, 2, ix, 1, [&](int64_t ox) {
                  const int64_t o[3] = {oz, oy, ox};
                  const AvgWindow win = AvgWindowAt(g, o);
                  if (iz < win.hi[0] && iy < win.hi[1] && ix < win.hi[2]) {
                    sum += static_cast<double>(dy_volume[(oz * g.out[1] + oy) * g.out[2] + ox]) / win.divisor;
                  }
                });
              });
            });
            dx[at] = static_cast<T>(sum);
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::Status AdaptiveAvgPoolKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  ASSIGN_OR_RETURN(Pool3dGeometry g, Adaptive3dShape(self.type.shape, args.outputs[0].type.shape));
  return DispatchFloat(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = self.as<const T>();
    T* y = args.outputs[0].as<T>();
    int64_t at = 0;
    for (int64_t pl = 0; pl < g.planes; ++pl) {
      const T* volume = x + pl * g.in_volume();
      for (int64_t oz = 0; oz < g.out[0]; ++oz) {
        const int64_t z0 = AdaptiveStart(oz, g.in[0], g.out[0]), z1 = AdaptiveEnd(oz, g.in[0], g.out[0]);
        for (int64_t oy = 0; oy < g.out[1]; ++oy) {
          const int64_t y0 = AdaptiveStart(oy, g.in[1], g.out[1]), y1 = AdaptiveEnd(oy, g.in[1], g.out[1]);
          for (int64_t ox = 0; ox < g.out[2]; ++ox, ++at) {
            const int64_t x0 = AdaptiveStart(ox, g.in[2], g.out[2]), x1 = AdaptiveEnd(ox, g.in[2], g.out[2]);
            double sum = 0.0;
            for (int64_t iz = z0; iz < z1; ++iz) {
              for (int64_t iy = y0; iy < y1; ++iy) {
                for (int64_t ix = x0; ix < x1; ++ix) {
                  sum += static_cast<double>(volume[(iz * g.in[1] + iy) * g.in[2] + ix]);
                }
              }
            }
            y[at] = static_cast<T>(sum / static_cast<double>((z1 - z0) * (y1 - y0) * (x1 - x0)));
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

// The adaptive windows along one dim of `out` outputs over `in` inputs that
// contain input position i. Calls f(o, window size).
template <typename F>
void ForEachAdaptiveWindow(int64_t i, int64_t in, int64_t out, F&& f) {
  // The windows containing i start at or before it and end after it.
  for (int64_t o = AdaptiveStart(i, out, in); o < AdaptiveEnd(i, out, in) + 1 && o < out; ++o) {
    const int64_t lo = AdaptiveStart(o, in, out), hi = AdaptiveEnd(o, in, out);
    if (i >= lo && i < hi) f(o, hi - lo);
  }
}

// Inputs: grad_output, self.
absl::Status AdaptiveAvgPoolBackwardKernel(const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  ASSIGN_OR_RETURN(Pool3dGeometry g, Adaptive3dShape(args.inputs[1].type.shape, grad.type.shape));
  return DispatchFloat(args, grad.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = grad.as<const T>();
    T* dx = args.outputs[0].as<T>();
    int64_t at = 0;
    for (int64_t pl = 0; pl < g.planes; ++pl) {
      const T* dy_volume = dy + pl * g.out_volume();
      for (int64_t iz = 0; iz < g.in[0]; ++iz) {
        for (int64_t iy = 0; iy < g.in[1]; ++iy) {
          for (int64_t ix = 0; ix < g.in[2]; ++ix, ++at) {
            double sum = 0.0;
            ForEachAdaptiveWindow(iz, g.in[0], g.out[0], [&](int64_t oz, int64_t nz) {
              ForEachAdaptiveWindow(iy, g.in[1], g.out[1], [&](int64_t oy, int64_t ny) {
                ForEachAdaptiveWindow(ix, g.in[2], g.out[2], [&](int64_t ox, int64_t nx) {
                  sum += static_cast<double>(dy_volume[(oz * g.out[1] + oy) * g.out[2] + ox]) /
                         static_cast<double>(nz * ny * nx);
                });
              });
            });
            dx[at] = static_cast<T>(sum);
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace

void AddPooling3dKernels(CpuKernelTable& table) {
  table["max_pool3d_with_indices"] = WithHalf<MaxPoolKernel>;
  table["max_pool3d_with_indices_backward"] = WithHalf<MaxPoolBackwardKernel>;
  table["avg_pool3d"] = WithHalf<AvgPoolKernel>;
  table["avg_pool3d_backward"] = WithHalf<AvgPoolBackwardKernel>;
  table["_adaptive_avg_pool3d"] = WithHalf<AdaptiveAvgPoolKernel>;
  table["_adaptive_avg_pool3d_backward"] = WithHalf<AdaptiveAvgPoolBackwardKernel>;
}

}  // namespace tandem::cpu
