// Reference CPU kernels of softmax (_softmax, _safe_softmax) and layer
// normalization. Row sums, means and variances accumulate in double and
// round once to the tensor's dtype.
#include <cmath>
#include <limits>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

absl::StatusOr<DimSplit> SplitAtDimAttr(const KernelArgs& args, const Shape& shape) {
  ASSIGN_OR_RETURN(int64_t dim, args.node->attrs.GetInt("dim"));
  ASSIGN_OR_RETURN(int d, NormalizeDim(dim, static_cast<int>(shape.size())));
  return SplitAtDim(shape, d);
}

// out = exp(x - max) / sum(exp(x - max)) over `dim`. A slice whose inputs
// are all -inf is NaN, or zeros with `zero_if_all_neg_inf` (_safe_softmax).
// The output may be the input's buffer: each slice is read fully before it
// is written.
absl::Status Softmax(const KernelArgs& args, bool zero_if_all_neg_inf) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(DimSplit split, SplitAtDimAttr(args, in.type.shape));
  return DispatchFloat(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = in.as<const T>();
    T* y = out.as<T>();
    const int64_t inner = split.inner;
    std::vector<double> e(static_cast<size_t>(split.size));
    for (int64_t o = 0; o < split.outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * split.size * inner + i;
        double max = -std::numeric_limits<double>::infinity();
        bool nan = false;
        for (int64_t d = 0; d < split.size; ++d) {
          const double v = static_cast<double>(x[base + d * inner]);
          nan = nan || std::isnan(v);
          max = std::max(max, v);
        }
        if (nan) max = std::numeric_limits<double>::quiet_NaN();
        // Without a NaN, the max is -inf exactly when every input is.
        if (zero_if_all_neg_inf && max == -std::numeric_limits<double>::infinity()) {
          for (int64_t d = 0; d < split.size; ++d) y[base + d * inner] = T(0);
          continue;
        }
        double sum = 0.0;
        for (int64_t d = 0; d < split.size; ++d) {
          e[d] = std::exp(static_cast<double>(x[base + d * inner]) - max);
          sum += e[d];
        }
        for (int64_t d = 0; d < split.size; ++d) y[base + d * inner] = static_cast<T>(e[d] / sum);
      }
    }
    return absl::OkStatus();
  });
}

absl::Status SoftmaxKernel(const KernelArgs& args) { return Softmax(args, false); }
absl::Status SafeSoftmaxKernel(const KernelArgs& args) { return Softmax(args, true); }

// grad_input = output * (grad_output - sum(grad_output * output)) over dim.
absl::Status SoftmaxBackwardKernel(const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& output = args.inputs[1];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(DimSplit split, SplitAtDimAttr(args, grad.type.shape));
  return DispatchFloat(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.as<const T>();
    const T* y = output.as<const T>();
    T* r = out.as<T>();
    const int64_t inner = split.inner;
    for (int64_t o = 0; o < split.outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * split.size * inner + i;
        double dot = 0.0;
        for (int64_t d = 0; d < split.size; ++d) {
          dot += static_cast<double>(g[base + d * inner]) * static_cast<double>(y[base + d * inner]);
        }
        for (int64_t d = 0; d < split.size; ++d) {
          const int64_t at = base + d * inner;
          r[at] = static_cast<T>(static_cast<double>(y[at]) * (static_cast<double>(g[at]) - dot));
        }
      }
    }
    return absl::OkStatus();
  });
}

// Rows of the normalized part: [rows, cols] with cols = prod(normalized_shape).
absl::StatusOr<std::pair<int64_t, int64_t>> LayerNormRows(const KernelArgs& args, const TensorArg& input) {
  ASSIGN_OR_RETURN(std::vector<int64_t> normalized, args.node->attrs.GetInts("normalized_shape"));
  int64_t cols = 1;
  for (int64_t d : normalized) cols *= d;
  const int64_t rows = cols == 0 ? 0 : input.numel() / cols;
  return std::make_pair(rows, cols);
}

// Inputs: input, weight (optional), bias (optional). Outputs: output, mean,
// rstd = 1 / sqrt(biased variance + eps).
absl::Status LayerNormKernel(const KernelArgs& args) {
  const TensorArg& input = args.inputs[0];
  ASSIGN_OR_RETURN(double eps, args.node->attrs.GetFloat("eps"));
  ASSIGN_OR_RETURN(auto dims, LayerNormRows(args, input));
  // Plain names, not a structured binding: the lambdas below capture them.
  const int64_t rows = dims.first, cols = dims.second;
  return DispatchFloat(args, input.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = input.as<const T>();
    const T* w = args.inputs.size() > 1 ? args.inputs[1].as<const T>() : nullptr;
    const T* b = args.inputs.size() > 2 ? args.inputs[2].as<const T>() : nullptr;
    T* y = args.outputs[0].as<T>();
    T* mean_out = args.outputs[1].as<T>();
    T* rstd_out = args.outputs[2].as<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * cols;
      double sum = 0.0;
      for (int64_t c = 0; c < cols; ++c) sum += static_cast<double>(xr[c]);
      const double mean = sum / static_cast<double>(cols);
      double sq = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        const double d = static_cast<double>(xr[c]) - mean;
        sq += d * d;
      }
      const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps);
      for (int64_t c = 0; c < cols; ++c) {
        double v = (static_cast<double>(xr[c]) - mean) * rstd;
        if (w != nullptr) v *= static_cast<double>(w[c]);
        if (b != nullptr) v += static_cast<double>(b[c]);
        y[r * cols + c] = static_cast<T>(v);
      }
      mean_out[r] = static_cast<T>(mean);
      rstd_out[r] = static_cast<T>(rstd);
    }
    return absl::OkStatus();
  });
}

// Inputs: grad_out, input, mean, rstd, weight (optional), bias (optional).
// Outputs: grad_input, grad_weight, grad_bias (the latter two always).
absl::Status LayerNormBackwardKernel(const KernelArgs& args) {
  const TensorArg& input = args.inputs[1];
  ASSIGN_OR_RETURN(auto dims, LayerNormRows(args, input));
  // Plain names, not a structured binding: the lambdas below capture them.
  const int64_t rows = dims.first, cols = dims.second;
  return DispatchFloat(args, input.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = args.inputs[0].as<const T>();
    const T* x = input.as<const T>();
    const T* mean = args.inputs[2].as<const T>();
    const T* rstd = args.inputs[3].as<const T>();
    const T* w = args.inputs.size() > 4 ? args.inputs[4].as<const T>() : nullptr;
    T* dx = args.outputs[0].as<T>();
    std::vector<double> dw(static_cast<size_t>(cols), 0.0), db(static_cast<size_t>(cols), 0.0);
    std::vector<double> xhat(static_cast<size_t>(cols)), g(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      const double m = static_cast<double>(mean[r]);
      const double s = static_cast<double>(rstd[r]);
      double sum_g = 0.0, sum_gx = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        const double d = static_cast<double>(dy[r * cols + c]);
        xhat[c] = (static_cast<double>(x[r * cols + c]) - m) * s;
        g[c] = w != nullptr ? d * static_cast<double>(w[c]) : d;
        sum_g += g[c];
        sum_gx += g[c] * xhat[c];
        dw[c] += d * xhat[c];
        db[c] += d;
      }
      const double n = static_cast<double>(cols);
      for (int64_t c = 0; c < cols; ++c) {
        dx[r * cols + c] = static_cast<T>(s * (g[c] - sum_g / n - xhat[c] * sum_gx / n));
      }
    }
    T* grad_weight = args.outputs[1].as<T>();
    T* grad_bias = args.outputs[2].as<T>();
    for (int64_t c = 0; c < cols; ++c) {
      grad_weight[c] = static_cast<T>(dw[c]);
      grad_bias[c] = static_cast<T>(db[c]);
    }
    return absl::OkStatus();
  });
}

}  // namespace

void AddNormalizationKernels(CpuKernelTable& table) {
  table["_softmax"] = WithHalf<SoftmaxKernel>;
  table["_safe_softmax"] = WithHalf<SafeSoftmaxKernel>;
  table["_softmax_backward_data"] = WithHalf<SoftmaxBackwardKernel>;
  table["native_layer_norm"] = WithHalf<LayerNormKernel>;
  table["native_layer_norm_backward"] = WithHalf<LayerNormBackwardKernel>;
}

}  // namespace tandem::cpu
