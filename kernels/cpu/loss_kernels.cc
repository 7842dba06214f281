// Reference CPU kernels of the loss path: _log_softmax and its backward,
// nll_loss_forward and nll_loss_backward. Row sums and the loss accumulate in
// double. Class labels (int64 or int32) are data: each is checked before it
// indexes anything.
#include <algorithm>
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

// out = x - max - log(sum(exp(x - max))) over `dim`.
absl::Status LogSoftmaxKernel(const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(DimSplit split, SplitAtDimAttr(args, in.type.shape));
  return DispatchFloat(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = in.as<const T>();
    T* y = out.as<T>();
    const int64_t inner = split.inner;
    for (int64_t o = 0; o < split.outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const T* xs = x + o * split.size * inner + i;
        T* ys = y + o * split.size * inner + i;
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t d = 0; d < split.size; ++d) max = std::max(max, static_cast<double>(xs[d * inner]));
        double sum = 0.0;
        for (int64_t d = 0; d < split.size; ++d) sum += std::exp(static_cast<double>(xs[d * inner]) - max);
        const double shift = max + std::log(sum);
        for (int64_t d = 0; d < split.size; ++d) {
          ys[d * inner] = static_cast<T>(static_cast<double>(xs[d * inner]) - shift);
        }
      }
    }
    return absl::OkStatus();
  });
}

// grad_input = grad_output - exp(output) * sum(grad_output over dim). The
// output may be grad_output's buffer: each slice's sum is taken before the
// slice is written.
absl::Status LogSoftmaxBackwardKernel(const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& output = args.inputs[1];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(DimSplit split, SplitAtDimAttr(args, grad.type.shape));
  return DispatchFloat(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.as<const T>();
    const T* o = output.as<const T>();
    T* r = out.as<T>();
    const int64_t inner = split.inner;
    for (int64_t b = 0; b < split.outer; ++b) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = b * split.size * inner + i;
        double sum = 0.0;
        for (int64_t d = 0; d < split.size; ++d) sum += static_cast<double>(g[base + d * inner]);
        for (int64_t d = 0; d < split.size; ++d) {
          const int64_t at = base + d * inner;
          r[at] = static_cast<T>(static_cast<double>(g[at]) - std::exp(static_cast<double>(o[at])) * sum);
        }
      }
    }
    return absl::OkStatus();
  });
}

struct NllAttrs {
  int64_t reduction = 1;  // 0 none, 1 mean, 2 sum
  int64_t ignore_index = -100;
};

absl::StatusOr<NllAttrs> GetNllAttrs(const KernelArgs& args) {
  NllAttrs attrs;
  ASSIGN_OR_RETURN(attrs.reduction, args.node->attrs.GetInt("reduction", 1));
  ASSIGN_OR_RETURN(attrs.ignore_index, args.node->attrs.GetInt("ignore_index", -100));
  return attrs;
}

// Every label (of type I) is in [0, classes) or ignore_index; otherwise the
// first bad one, by index and value.
template <typename I>
absl::Status CheckLabels(const KernelArgs& args, const TensorArg& target, int64_t classes, int64_t ignore_index) {
  const I* t = target.as<const I>();
  for (int64_t i = 0; i < target.numel(); ++i) {
    if (t[i] != ignore_index && (t[i] < 0 || t[i] >= classes)) {
      return absl::InvalidArgumentError(absl::StrCat(args.node->op, ": target[", i, "] is ", t[i],
                                                     ", outside the classes [0, ", classes, ") and not ignore_index (",
                                                     ignore_index, ")"));
    }
  }
  return absl::OkStatus();
}

// Inputs: self [N, C] or [C], target [N] or [], weight [C] (optional).
// Outputs: output ([N] for reduction none and 2-D self, else []) and
// total_weight (the sum of the weights of the non-ignored labels, for every
// reduction).
absl::Status NllLossForwardKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(NllAttrs attrs, GetNllAttrs(args));
  const TensorArg& self = args.inputs[0];
  const TensorArg& target = args.inputs[1];
  const TensorArg* weight = args.inputs.size() > 2 ? &args.inputs[2] : nullptr;
  const int64_t classes = self.type.shape.back();
  const int64_t rows = target.numel();
  return DispatchIndex(args, target.type.dtype, [&](auto index_tag) {
    using I = decltype(index_tag);
    RETURN_IF_ERROR(CheckLabels<I>(args, target, classes, attrs.ignore_index));
    return DispatchFloat(args, self.type.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* x = self.as<const T>();
      const I* t = target.as<const I>();
      const T* w = weight != nullptr ? weight->as<const T>() : nullptr;
      T* loss = args.outputs[0].as<T>();
      double total = 0.0;
      double total_weight = 0.0;
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t label = t[i];
        double row_loss = 0.0;
        if (label != attrs.ignore_index) {
          const double wi = w != nullptr ? static_cast<double>(w[label]) : 1.0;
          row_loss = -static_cast<double>(x[i * classes + label]) * wi;
          total_weight += wi;
        }
        if (attrs.reduction == 0) loss[i] = static_cast<T>(row_loss);
        total += row_loss;
      }
      if (attrs.reduction == 1) {
        // All labels ignored: 0 / 0 = NaN, as in PyTorch.
        loss[0] = static_cast<T>(total / total_weight);
      } else if (attrs.reduction == 2) {
        loss[0] = static_cast<T>(total);
      }
      *args.outputs[1].as<T>() = static_cast<T>(total_weight);
      return absl::OkStatus();
    });
  });
}

// Inputs: grad_output, self, target, total_weight, weight (optional).
// grad_input[i, t_i] = -w[t_i] * g_i (/ total_weight for mean); 0 elsewhere
// and on ignored rows.
absl::Status NllLossBackwardKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(NllAttrs attrs, GetNllAttrs(args));
  const TensorArg& grad_output = args.inputs[0];
  const TensorArg& self = args.inputs[1];
  const TensorArg& target = args.inputs[2];
  const TensorArg& total_weight = args.inputs[3];
  const TensorArg* weight = args.inputs.size() > 4 ? &args.inputs[4] : nullptr;
  const int64_t classes = self.type.shape.back();
  const int64_t rows = target.numel();
  return DispatchIndex(args, target.type.dtype, [&](auto index_tag) {
    using I = decltype(index_tag);
    RETURN_IF_ERROR(CheckLabels<I>(args, target, classes, attrs.ignore_index));
    return DispatchFloat(args, self.type.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* g = grad_output.as<const T>();
      const I* t = target.as<const I>();
      const T* w = weight != nullptr ? weight->as<const T>() : nullptr;
      T* gi = args.outputs[0].as<T>();
      const int64_t n = args.outputs[0].numel();
      for (int64_t i = 0; i < n; ++i) gi[i] = T(0);
      const double scale = attrs.reduction == 1 ? 1.0 / static_cast<double>(*total_weight.as<const T>()) : 1.0;
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t label = t[i];
        if (label == attrs.ignore_index) continue;
        const double wi = w != nullptr ? static_cast<double>(w[label]) : 1.0;
        const double gr = static_cast<double>(attrs.reduction == 0 ? g[i] : g[0]);
        gi[i * classes + label] = static_cast<T>(-wi * gr * scale);
      }
      return absl::OkStatus();
    });
  });
}

}  // namespace

void AddLossKernels(CpuKernelTable& table) {
  table["_log_softmax"] = WithHalf<LogSoftmaxKernel>;
  table["_log_softmax_backward_data"] = WithHalf<LogSoftmaxBackwardKernel>;
  table["nll_loss_forward"] = WithHalf<NllLossForwardKernel>;
  table["nll_loss_backward"] = WithHalf<NllLossBackwardKernel>;
}

}  // namespace tandem::cpu
