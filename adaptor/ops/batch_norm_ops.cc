// Registry entries of batch normalization over [N, C, *]: native_batch_norm,
// _native_batch_norm_legit_functional (which also returns the updated
// running statistics) and native_batch_norm_backward.
//
// Optional tensors: weight and bias must be present (affine batch norm).
// Running statistics may be absent only where the input count says so
// unambiguously: native_batch_norm with 3 inputs (input, weight, bias) in
// training, native_batch_norm_backward with 5 inputs (grad_out, input,
// weight, save_mean, save_invstd) with train=true.
#include "absl/strings/str_cat.h"
#include "adaptor/op_registry.h"
#include "adaptor/ops/cnn_rules.h"
#include "adaptor/ops/infer_util.h"
#include "base/status_macros.h"

namespace tandem {
namespace {

using ops::TypeList;

// input [N, C, *] of a float dtype; returns C.
absl::StatusOr<int64_t> CheckInput(const TensorType& input) {
  RETURN_IF_ERROR(ops::RequireDType("input", input, ops::kFloatTypes));
  if (input.rank() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("input is ", input.ToString(), "; expected [N, C, ...]"));
  }
  return input.shape[1];
}

// A per-channel tensor: input's dtype and [C] (or, with `may_be_empty`, [0]).
absl::Status CheckPerChannel(absl::string_view name, const TensorType& t, const TensorType& input,
                             bool may_be_empty = false) {
  const int64_t c = input.shape[1];
  if (t.dtype == input.dtype && (t.shape == Shape{c} || (may_be_empty && t.shape == Shape{0}))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(name, " is ", t.ToString(), " but input is ", input.ToString(),
                                                 "; expected ", DTypeName(input.dtype), ShapeString({c}),
                                                 may_be_empty ? " (or [0])" : ""));
}

struct ForwardAttrs {
  bool training = false;
};

absl::StatusOr<ForwardAttrs> CheckForwardAttrs(const Attrs& attrs) {
  ForwardAttrs a;
  ASSIGN_OR_RETURN(a.training, attrs.GetBool("training"));
  RETURN_IF_ERROR(attrs.GetFloat("momentum").status());
  ASSIGN_OR_RETURN(double eps, attrs.GetFloat("eps"));
  if (!(eps >= 0.0)) return absl::InvalidArgumentError(absl::StrCat("attribute 'eps' is ", eps, "; must be >= 0"));
  return a;
}

// out, save_mean, save_invstd; the saved statistics are [0] in eval mode,
// as in ATen.
TypeList ForwardOutputs(const TensorType& input, bool training) {
  const Shape saved = training ? Shape{input.shape[1]} : Shape{0};
  return TypeList{input, TensorType{input.dtype, saved}, TensorType{input.dtype, saved}};
}

// Inputs: input, weight, bias[, running_mean, running_var].
absl::StatusOr<TypeList> NativeBatchNormInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  if (in.size() != 3 && in.size() != 5) {
    return absl::InvalidArgumentError(absl::StrCat(
        "got ", in.size(), " inputs; expected input, weight, bias[, running_mean, running_var] (absent weight or "
        "bias is not supported)"));
  }
  RETURN_IF_ERROR(CheckInput(in[0]).status());
  ASSIGN_OR_RETURN(ForwardAttrs a, CheckForwardAttrs(attrs));
  RETURN_IF_ERROR(CheckPerChannel("weight", in[1], in[0]));
  RETURN_IF_ERROR(CheckPerChannel("bias", in[2], in[0]));
  if (in.size() == 5) {
    RETURN_IF_ERROR(CheckPerChannel("running_mean", in[3], in[0]));
    RETURN_IF_ERROR(CheckPerChannel("running_var", in[4], in[0]));
  } else if (!a.training) {
    return absl::InvalidArgumentError("eval mode (training=false) needs running_mean and running_var");
  }
  return ForwardOutputs(in[0], a.training);
}

// Inputs: input, weight, bias, running_mean, running_var. Outputs: out,
// save_mean, save_rstd, running_mean, running_var (updated in training,
// copied in eval mode).
absl::StatusOr<TypeList> LegitFunctionalInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(CheckInput(in[0]).status());
  ASSIGN_OR_RETURN(ForwardAttrs a, CheckForwardAttrs(attrs));
  RETURN_IF_ERROR(CheckPerChannel("weight", in[1], in[0]));
  RETURN_IF_ERROR(CheckPerChannel("bias", in[2], in[0]));
  RETURN_IF_ERROR(CheckPerChannel("running_mean", in[3], in[0]));
  RETURN_IF_ERROR(CheckPerChannel("running_var", in[4], in[0]));
  TypeList out = ForwardOutputs(in[0], a.training);
  out.push_back(in[3]);
  out.push_back(in[4]);
  return out;
}

// Inputs: grad_out, input, weight[, running_mean, running_var], save_mean,
// save_invstd. Outputs: grad_input, grad_weight, grad_bias ([0] where
// output_mask is false).
absl::StatusOr<TypeList> BatchNormBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  if (in.size() != 5 && in.size() != 7) {
    return absl::InvalidArgumentError(absl::StrCat(
        "got ", in.size(), " inputs; expected grad_out, input, weight[, running_mean, running_var], save_mean, "
        "save_invstd (absent weight is not supported)"));
  }
  const TensorType& grad = in[0];
  const TensorType& input = in[1];
  ASSIGN_OR_RETURN(int64_t c, CheckInput(input));
  if (!(grad == input)) {
    return absl::InvalidArgumentError(absl::StrCat("grad_out is ", grad.ToString(), " but input is ",
                                                   input.ToString(), "; they must have the same type"));
  }
  ASSIGN_OR_RETURN(bool train, attrs.GetBool("train"));
  ASSIGN_OR_RETURN(double eps, attrs.GetFloat("eps"));
  if (!(eps >= 0.0)) return absl::InvalidArgumentError(absl::StrCat("attribute 'eps' is ", eps, "; must be >= 0"));
  RETURN_IF_ERROR(CheckPerChannel("weight", in[2], input));
  const bool has_running = in.size() == 7;
  if (has_running) {
    RETURN_IF_ERROR(CheckPerChannel("running_mean", in[3], input));
    RETURN_IF_ERROR(CheckPerChannel("running_var", in[4], input));
  } else if (!train) {
    return absl::InvalidArgumentError("eval mode (train=false) needs running_mean and running_var");
  }
  const size_t saved = has_running ? 5 : 3;
  RETURN_IF_ERROR(CheckPerChannel("save_mean", in[saved], input, /*may_be_empty=*/!train));
  RETURN_IF_ERROR(CheckPerChannel("save_invstd", in[saved + 1], input, /*may_be_empty=*/!train));
  ASSIGN_OR_RETURN(auto mask, ParseOutputMask(attrs));
  return TypeList{TensorType{input.dtype, mask[0] ? input.shape : Shape{0}},
                  TensorType{input.dtype, mask[1] ? Shape{c} : Shape{0}},
                  TensorType{input.dtype, mask[2] ? Shape{c} : Shape{0}}};
}

}  // namespace

void RegisterBatchNormOps(OpRegistry& registry) {
  ops::RegisterOp(registry, "native_batch_norm", 3, 5, 3, AliasKind::kNone, NativeBatchNormInfer);
  ops::RegisterOp(registry, "_native_batch_norm_legit_functional", 5, 5, 5, AliasKind::kNone, LegitFunctionalInfer);
  ops::RegisterOp(registry, "native_batch_norm_backward", 5, 7, 3, AliasKind::kNone, BatchNormBackwardInfer);
}

}  // namespace tandem
