// Reference CPU kernels of group normalization: native_group_norm and
// native_group_norm_backward (geometry in ir/ops/spatial_rules.h).
//
// The input [N, C, *] is N * groups rows of C / groups * HxW contiguous
// elements (a group's channels are adjacent). Per row: mean, the biased
// variance (two passes, in double), rstd = 1 / sqrt(var + eps), and
//   out = (x - mean) * rstd * weight[c] + bias[c];
// the backward, with g = grad_out * weight[c] and xhat = (x - mean) * rstd
// from the saved mean and rstd, and M the row's element count:
//   grad_input  = rstd * (g - sum(g) / M - xhat * sum(g * xhat) / M)
//   grad_weight = sum over images and HxW of grad_out * xhat
//   grad_bias   = sum over images and HxW of grad_out.
// Everything accumulates in double and rounds once. bfloat16 and float16 run
// these kernels on float32 copies (half_kernels.h's WithHalf), so their
// statistics and results round once from float32; outputs of shape [0]
// (masked off by output_mask) are skipped.
#include <cmath>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/spatial_rules.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

// Inputs: input, weight (optional), bias (optional). Outputs: out, mean,
// rstd ([N, groups]).
absl::Status GroupNormKernel(const KernelArgs& args) {
  const TensorArg& input = args.inputs[0];
  ASSIGN_OR_RETURN(GroupNormGeometry g, ParseGroupNorm(args.node->attrs, input.type.shape));
  ASSIGN_OR_RETURN(double eps, args.node->attrs.GetFloat("eps"));
  return DispatchFloat(args, input.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = input.as<const T>();
    const T* w = args.inputs.size() > 1 ? args.inputs[1].as<const T>() : nullptr;
    const T* b = args.inputs.size() > 2 ? args.inputs[2].as<const T>() : nullptr;
    T* y = args.outputs[0].as<T>();
    T* mean_out = args.outputs[1].as<T>();
    T* rstd_out = args.outputs[2].as<T>();
    const int64_t row = g.row(), cpg = g.channels_per_group();
    for (int64_t r = 0; r < g.n * g.groups; ++r) {
      const T* xr = x + r * row;
      double sum = 0.0;
      for (int64_t i = 0; i < row; ++i) sum += static_cast<double>(xr[i]);
      const double mean = sum / static_cast<double>(row);
      double sq = 0.0;
      for (int64_t i = 0; i < row; ++i) {
        const double d = static_cast<double>(xr[i]) - mean;
        sq += d * d;
      }
      const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(row) + eps);
      const int64_t first_channel = (r % g.groups) * cpg;
      for (int64_t k = 0; k < cpg; ++k) {
        const int64_t c = first_channel + k;
        const double scale = w != nullptr ? static_cast<double>(w[c]) : 1.0;
        const double shift = b != nullptr ? static_cast<double>(b[c]) : 0.0;
        for (int64_t i = k * g.hxw; i < (k + 1) * g.hxw; ++i) {
          y[r * row + i] = static_cast<T>((static_cast<double>(xr[i]) - mean) * rstd * scale + shift);
        }
      }
      mean_out[r] = static_cast<T>(mean);
      rstd_out[r] = static_cast<T>(rstd);
    }
    return absl::OkStatus();
  });
}

// Inputs: grad_out, input, mean, rstd, weight (optional). Outputs:
// grad_input, grad_weight, grad_bias, each of 0 elements when masked off.
absl::Status GroupNormBackwardKernel(const KernelArgs& args) {
  const TensorArg& input = args.inputs[1];
  ASSIGN_OR_RETURN(GroupNormGeometry g, ParseGroupNorm(args.node->attrs, input.type.shape));
  return DispatchFloat(args, input.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = args.inputs[0].as<const T>();
    const T* x = input.as<const T>();
    const T* mean = args.inputs[2].as<const T>();
    const T* rstd = args.inputs[3].as<const T>();
    const T* w = args.inputs.size() > 4 ? args.inputs[4].as<const T>() : nullptr;
    auto out = [&](int i) { return args.outputs[i].numel() > 0 ? args.outputs[i].as<T>() : nullptr; };
    T* dx = out(0);
    T* dw = out(1);
    T* db = out(2);
    const int64_t row = g.row(), cpg = g.channels_per_group(), hxw = g.hxw;
    const double m_count = static_cast<double>(row);
    std::vector<double> sum_w(static_cast<size_t>(g.c), 0.0), sum_b(static_cast<size_t>(g.c), 0.0);
    for (int64_t r = 0; r < g.n * g.groups; ++r) {
      const double m = static_cast<double>(mean[r]), s = static_cast<double>(rstd[r]);
      const int64_t first_channel = (r % g.groups) * cpg;
      double sum_g = 0.0, sum_gx = 0.0;
      for (int64_t k = 0; k < cpg; ++k) {
        const int64_t c = first_channel + k;
        const double scale = w != nullptr ? static_cast<double>(w[c]) : 1.0;
        double channel_dy = 0.0, channel_dy_xhat = 0.0;
        for (int64_t i = r * row + k * hxw; i < r * row + (k + 1) * hxw; ++i) {
          const double d = static_cast<double>(dy[i]);
          const double xhat = (static_cast<double>(x[i]) - m) * s;
          channel_dy += d;
          channel_dy_xhat += d * xhat;
        }
        sum_g += scale * channel_dy;
        sum_gx += scale * channel_dy_xhat;
        sum_w[c] += channel_dy_xhat;
        sum_b[c] += channel_dy;
      }
      if (dx == nullptr) continue;
      for (int64_t k = 0; k < cpg; ++k) {
        const int64_t c = first_channel + k;
        const double scale = w != nullptr ? static_cast<double>(w[c]) : 1.0;
        for (int64_t i = r * row + k * hxw; i < r * row + (k + 1) * hxw; ++i) {
          const double xhat = (static_cast<double>(x[i]) - m) * s;
          const double gi = static_cast<double>(dy[i]) * scale;
          dx[i] = static_cast<T>(s * (gi - sum_g / m_count - xhat * sum_gx / m_count));
        }
      }
    }
    for (int64_t c = 0; c < g.c; ++c) {
      if (dw != nullptr) dw[c] = static_cast<T>(sum_w[c]);
      if (db != nullptr) db[c] = static_cast<T>(sum_b[c]);
    }
    return absl::OkStatus();
  });
}

}  // namespace

void AddGroupNormKernels(CpuKernelTable& table) {
  table["native_group_norm"] = WithHalf<GroupNormKernel>;
  table["native_group_norm_backward"] = WithHalf<GroupNormBackwardKernel>;
}

}  // namespace tandem::cpu
