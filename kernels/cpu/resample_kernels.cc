// Reference CPU kernels of 2-D resampling: upsample_nearest2d and
// upsample_bilinear2d, their .vec forms, and the backward ops of both forms
// (geometry in ir/ops/spatial_rules.h).
//
// Source positions come from ir/ops/spatial_index.h, the maps the CUDA
// kernels use too: nearest src = min(floor(dst * scale), in - 1) in
// float32, bilinear taps and weights from PyTorch's source-index formula in
// the accumulation type (float32, or float64 for float64 tensors). A
// bilinear output is h0 * (w0 * x00 + w1 * x01) + h1 * (w0 * x10 + w1 * x11)
// (PyTorch's CUDA order), evaluated in double from those weights. The
// backward ops scatter every output gradient back along the forward's map
// into a double plane, the forward's exact adjoint, and round once.
// bfloat16 and float16 run these kernels on float32 copies (half_kernels.h's
// WithHalf), which is PyTorch's float32 arithmetic for them.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/spatial_index.h"
#include "ir/ops/spatial_rules.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

// The accumulation type of PyTorch's bilinear index arithmetic.
template <typename T>
using IndexType = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Per output position of one dim: its two taps and their weights, in double.
struct Tap {
  int64_t i0, i1;
  double w0, w1;
};

template <typename T>
std::vector<Tap> LinearTaps(int64_t in, int64_t out, bool align_corners, double scale_arg) {
  using A = IndexType<T>;
  const A scale = spatial::LinearScale<A>(in, out, align_corners, scale_arg);
  std::vector<Tap> taps(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const spatial::LinearTap<A> t = spatial::LinearTapAt<A>(scale, o, in, align_corners);
    taps[o] = {t.i0, t.i1, static_cast<double>(t.w0), static_cast<double>(t.w1)};
  }
  return taps;
}

std::vector<int64_t> NearestSources(int64_t in, int64_t out, double scale_arg) {
  const float scale = spatial::ResampleScale<float>(in, out, scale_arg);
  std::vector<int64_t> src(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) src[o] = spatial::NearestSource(scale, o, in);
  return src;
}

template <ResampleForm kForm>
absl::Status NearestKernel(const KernelArgs& args) {
  const TensorArg& input = args.inputs[0];
  ASSIGN_OR_RETURN(ResampleGeometry g,
                   ParseUpsample(args.node->attrs, input.type.shape, ResampleMode::kNearest, kForm));
  const std::vector<int64_t> rows = NearestSources(g.in[0], g.out[0], g.scales[0]);
  const std::vector<int64_t> cols = NearestSources(g.in[1], g.out[1], g.scales[1]);
  return DispatchFloat(args, input.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = input.as<const T>();
    T* y = args.outputs[0].as<T>();
    for (int64_t p = 0; p < g.planes(); ++p) {
      const T* plane = x + p * g.in[0] * g.in[1];
      for (int64_t oy = 0; oy < g.out[0]; ++oy) {
        const T* row = plane + rows[oy] * g.in[1];
        T* out = y + (p * g.out[0] + oy) * g.out[1];
        for (int64_t ox = 0; ox < g.out[1]; ++ox) out[ox] = row[cols[ox]];
      }
    }
    return absl::OkStatus();
  });
}

// Input: grad_output. Output: grad_input of input_size.
template <ResampleForm kForm>
absl::Status NearestBackwardKernel(const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  ASSIGN_OR_RETURN(ResampleGeometry g,
                   ParseUpsampleBackward(args.node->attrs, grad.type.shape, ResampleMode::kNearest, kForm));
  const std::vector<int64_t> rows = NearestSources(g.in[0], g.out[0], g.scales[0]);
  const std::vector<int64_t> cols = NearestSources(g.in[1], g.out[1], g.scales[1]);
  return DispatchFloat(args, grad.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = grad.as<const T>();
    T* dx = args.outputs[0].as<T>();
    std::vector<double> acc(static_cast<size_t>(g.in[0] * g.in[1]));
    for (int64_t p = 0; p < g.planes(); ++p) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t oy = 0; oy < g.out[0]; ++oy) {
        double* row = acc.data() + rows[oy] * g.in[1];
        const T* in = dy + (p * g.out[0] + oy) * g.out[1];
        for (int64_t ox = 0; ox < g.out[1]; ++ox) row[cols[ox]] += static_cast<double>(in[ox]);
      }
      T* out = dx + p * g.in[0] * g.in[1];
      for (size_t i = 0; i < acc.size(); ++i) out[i] = static_cast<T>(acc[i]);
    }
    return absl::OkStatus();
  });
}

template <ResampleForm kForm>
absl::Status BilinearKernel(const KernelArgs& args) {
  const TensorArg& input = args.inputs[0];
  ASSIGN_OR_RETURN(ResampleGeometry g,
                   ParseUpsample(args.node->attrs, input.type.shape, ResampleMode::kBilinear, kForm));
  return DispatchFloat(args, input.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const std::vector<Tap> rows = LinearTaps<T>(g.in[0], g.out[0], g.align_corners, g.scales[0]);
    const std::vector<Tap> cols = LinearTaps<T>(g.in[1], g.out[1], g.align_corners, g.scales[1]);
    const T* x = input.as<const T>();
    T* y = args.outputs[0].as<T>();
    for (int64_t p = 0; p < g.planes(); ++p) {
      const T* plane = x + p * g.in[0] * g.in[1];
      for (int64_t oy = 0; oy < g.out[0]; ++oy) {
        const Tap& r = rows[oy];
        const T* top = plane + r.i0 * g.in[1];
        const T* bottom = plane + r.i1 * g.in[1];
        T* out = y + (p * g.out[0] + oy) * g.out[1];
        for (int64_t ox = 0; ox < g.out[1]; ++ox) {
          const Tap& c = cols[ox];
          const double upper = c.w0 * static_cast<double>(top[c.i0]) + c.w1 * static_cast<double>(top[c.i1]);
          const double lower = c.w0 * static_cast<double>(bottom[c.i0]) + c.w1 * static_cast<double>(bottom[c.i1]);
          out[ox] = static_cast<T>(r.w0 * upper + r.w1 * lower);
        }
      }
    }
    return absl::OkStatus();
  });
}

template <ResampleForm kForm>
absl::Status BilinearBackwardKernel(const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  ASSIGN_OR_RETURN(ResampleGeometry g,
                   ParseUpsampleBackward(args.node->attrs, grad.type.shape, ResampleMode::kBilinear, kForm));
  return DispatchFloat(args, grad.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const std::vector<Tap> rows = LinearTaps<T>(g.in[0], g.out[0], g.align_corners, g.scales[0]);
    const std::vector<Tap> cols = LinearTaps<T>(g.in[1], g.out[1], g.align_corners, g.scales[1]);
    const T* dy = grad.as<const T>();
    T* dx = args.outputs[0].as<T>();
    std::vector<double> acc(static_cast<size_t>(g.in[0] * g.in[1]));
    for (int64_t p = 0; p < g.planes(); ++p) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t oy = 0; oy < g.out[0]; ++oy) {
        const Tap& r = rows[oy];
        double* top = acc.data() + r.i0 * g.in[1];
        double* bottom = acc.data() + r.i1 * g.in[1];
        const T* in = dy + (p * g.out[0] + oy) * g.out[1];
        for (int64_t ox = 0; ox < g.out[1]; ++ox) {
          const Tap& c = cols[ox];
          const double d = static_cast<double>(in[ox]);
          top[c.i0] += r.w0 * c.w0 * d;
          top[c.i1] += r.w0 * c.w1 * d;
          bottom[c.i0] += r.w1 * c.w0 * d;
          bottom[c.i1] += r.w1 * c.w1 * d;
        }
      }
      T* out = dx + p * g.in[0] * g.in[1];
      for (size_t i = 0; i < acc.size(); ++i) out[i] = static_cast<T>(acc[i]);
    }
    return absl::OkStatus();
  });
}

}  // namespace

void AddResampleKernels(CpuKernelTable& table) {
  constexpr auto kDefault = ResampleForm::kDefault;
  constexpr auto kVec = ResampleForm::kVec;
  table["upsample_nearest2d"] = WithHalf<NearestKernel<kDefault>>;
  table["upsample_nearest2d.vec"] = WithHalf<NearestKernel<kVec>>;
  table["upsample_nearest2d_backward"] = WithHalf<NearestBackwardKernel<kDefault>>;
  table["upsample_nearest2d_backward.vec"] = WithHalf<NearestBackwardKernel<kVec>>;
  table["upsample_bilinear2d"] = WithHalf<BilinearKernel<kDefault>>;
  table["upsample_bilinear2d.vec"] = WithHalf<BilinearKernel<kVec>>;
  table["upsample_bilinear2d_backward"] = WithHalf<BilinearBackwardKernel<kDefault>>;
  table["upsample_bilinear2d_backward.vec"] = WithHalf<BilinearBackwardKernel<kVec>>;
}

}  // namespace tandem::cpu
