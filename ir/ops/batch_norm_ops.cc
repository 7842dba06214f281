// Registry entries of batch normalization over [N, C, *]: native_batch_norm,
// _native_batch_norm_legit_functional (which also returns the updated
// running statistics) and native_batch_norm_backward.
//
// Folded activations (compiler/fold_activations.h): a forward with
// attribute residual = true takes one more input, last, of the input's
// type, and stores round(out + residual) (add.Tensor's value: in float32
// for float32 and 16-bit tensors) in place of out; a forward with
// attribute relu = true then applies a ReLU to its stored output; a backward
// with attribute mask_threshold = t takes one more input, last, of
// grad_out's type, and reads grad_out where that input is > t and 0
// elsewhere (threshold_backward's rule).
//
// Channels-last (attribute channels_last = true, set by the layout pass
// compiler/channels_last.h): the channel dim of input, out, grad_out and
// grad_input is the last one, [*, C], not dim 1.
//
// Optional tensors: weight and bias must be present (affine batch norm).
// Running statistics may be absent only where the input count says so
// unambiguously: native_batch_norm with 3 inputs (input, weight, bias) in
// training, native_batch_norm_backward with 5 inputs (grad_out, input,
// weight, save_mean, save_invstd) with train=true.
//
// Dtypes (PyTorch's CUDA rules): a float32 or float64 input has every
// per-channel tensor in its own dtype. A bfloat16 or float16 input has its
// weight, bias and running statistics all in its own dtype or all in
// float32 (PyTorch's mixed batch norm); its save_mean and save_invstd are
// float32 either way (the accumulation type, as PyTorch's CUDA kernels
// return them), grad_weight and grad_bias take the weight's dtype, and the
// running statistics keep theirs.
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/cnn_rules.h"
#include "ir/ops/infer_util.h"

namespace tandem {
namespace {

using ops::TypeList;

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// The input's channel count, and whether the channel dim is the last.
struct Channels {
  int64_t c = 0;
  bool last = false;
};

// input [N, C, *] (channels-last [*, C]) of a float or 16-bit float dtype.
absl::StatusOr<Channels> CheckInput(const TensorType& input, const Attrs& attrs) {
  RETURN_IF_ERROR(ops::RequireDType("input", input, ops::kFloatAndHalfTypes));
  ASSIGN_OR_RETURN(bool last, attrs.GetBool("channels_last", false));
  if (input.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("input is ", input.ToString(), "; expected ", last ? "[N, ..., C]" : "[N, C, ...]"));
  }
  return Channels{input.shape[ChannelDim(input.shape, last)], last};
}

// The dtype of save_mean and save_invstd: float32 for a 16-bit input, else
// the input's.
DType StatsDType(DType input) { return IsHalf(input) ? DType::kFloat32 : input; }

// The dtype of the per-channel parameters, from the weight's: the input's,
// or float32 for a 16-bit input.
absl::StatusOr<DType> ParamDType(const TensorType& weight, const TensorType& input, int64_t c) {
  if (weight.dtype == input.dtype) return input.dtype;
  if (IsHalf(input.dtype) && weight.dtype == DType::kFloat32) return DType::kFloat32;
  return absl::InvalidArgumentError(absl::StrCat(
      "weight is ", weight.ToString(), " but input is ", input.ToString(), "; expected ", DTypeName(input.dtype),
      ShapeString({c}), IsHalf(input.dtype) ? absl::StrCat(" or float32", ShapeString({c})) : ""));
}

// A per-channel tensor: `dtype` and [C] (or, with `may_be_empty`, [0]).
// `note` ends the message (why `dtype` is expected).
absl::Status CheckPerChannel(absl::string_view name, const TensorType& t, const TensorType& input, int64_t c,
                             DType dtype, bool may_be_empty = false, absl::string_view note = "") {
  if (t.dtype == dtype && (t.shape == Shape{c} || (may_be_empty && t.shape == Shape{0}))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(name, " is ", t.ToString(), " but input is ", input.ToString(),
                                                 "; expected ", DTypeName(dtype), ShapeString({c}),
                                                 may_be_empty ? " (or [0])" : "", note));
}

// The note of a parameter of `param` dtype that is not the input's.
absl::string_view ParamNote(DType param, const TensorType& input) {
  return param != input.dtype ? " (the weight's dtype)" : "";
}

// weight, bias and (where given) the running statistics of a forward, all
// of one parameter dtype; returns it.
absl::StatusOr<DType> CheckParams(absl::Span<const TensorType> in, int64_t c) {
  ASSIGN_OR_RETURN(DType param, ParamDType(in[1], in[0], c));
  const absl::string_view note = ParamNote(param, in[0]);
  RETURN_IF_ERROR(CheckPerChannel("weight", in[1], in[0], c, param));
  RETURN_IF_ERROR(CheckPerChannel("bias", in[2], in[0], c, param, /*may_be_empty=*/false, note));
  if (in.size() == 5) {
    RETURN_IF_ERROR(CheckPerChannel("running_mean", in[3], in[0], c, param, /*may_be_empty=*/false, note));
    RETURN_IF_ERROR(CheckPerChannel("running_var", in[4], in[0], c, param, /*may_be_empty=*/false, note));
  }
  return param;
}

struct ForwardAttrs {
  bool training = false;
};

absl::StatusOr<ForwardAttrs> CheckForwardAttrs(const Attrs& attrs) {
  ForwardAttrs a;
  ASSIGN_OR_RETURN(a.training, attrs.GetBool("training"));
  RETURN_IF_ERROR(attrs.GetBool("relu", false).status());
  RETURN_IF_ERROR(attrs.GetBool("residual", false).status());
  RETURN_IF_ERROR(attrs.GetFloat("momentum").status());
  ASSIGN_OR_RETURN(double eps, attrs.GetFloat("eps"));
  if (!(eps >= 0.0)) return absl::InvalidArgumentError(absl::StrCat("attribute 'eps' is ", eps, "; must be >= 0"));
  return a;
}

// out, save_mean, save_invstd; the saved statistics are [0] in eval mode,
// as in ATen.
TypeList ForwardOutputs(const TensorType& input, int64_t c, bool training) {
  const Shape saved = training ? Shape{c} : Shape{0};
  const DType stats = StatsDType(input.dtype);
  return TypeList{input, TensorType{stats, saved}, TensorType{stats, saved}};
}

// A forward's inputs without its residual (attribute residual = true: the
// last input, of the input's type).
absl::StatusOr<absl::Span<const TensorType>> WithoutResidual(const Attrs& attrs, absl::Span<const TensorType> all) {
  ASSIGN_OR_RETURN(bool residual, attrs.GetBool("residual", false));
  if (!residual) return all;
  if (all.size() < 2) return absl::InvalidArgumentError("with residual, expected the residual as the last input");
  if (!(all.back() == all[0])) {
    return absl::InvalidArgumentError(absl::StrCat("residual is ", all.back().ToString(), " but input is ",
                                                   all[0].ToString(), "; they must have the same type"));
  }
  return all.subspan(0, all.size() - 1);
}

// Inputs: input, weight, bias[, running_mean, running_var][, residual].
absl::StatusOr<TypeList> NativeBatchNormInfer(const Attrs& attrs, absl::Span<const TensorType> all) {
  ASSIGN_OR_RETURN(absl::Span<const TensorType> in, WithoutResidual(attrs, all));
  if (in.size() != 3 && in.size() != 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", in.size(),
                     " inputs; expected input, weight, bias[, running_mean, running_var] (absent weight or "
                     "bias is not supported)"));
  }
  ASSIGN_OR_RETURN(Channels ch, CheckInput(in[0], attrs));
  ASSIGN_OR_RETURN(ForwardAttrs a, CheckForwardAttrs(attrs));
  RETURN_IF_ERROR(CheckParams(in, ch.c).status());
  if (in.size() != 5 && !a.training) {
    return absl::InvalidArgumentError("eval mode (training=false) needs running_mean and running_var");
  }
  return ForwardOutputs(in[0], ch.c, a.training);
}

// Inputs: input, weight, bias, running_mean, running_var[, residual].
// Outputs: out, save_mean, save_rstd, running_mean, running_var (updated in
// training, copied in eval mode).
absl::StatusOr<TypeList> LegitFunctionalInfer(const Attrs& attrs, absl::Span<const TensorType> all) {
  ASSIGN_OR_RETURN(absl::Span<const TensorType> in, WithoutResidual(attrs, all));
  if (in.size() != 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", in.size(), " inputs; expected input, weight, bias, running_mean, running_var"));
  }
  ASSIGN_OR_RETURN(Channels ch, CheckInput(in[0], attrs));
  ASSIGN_OR_RETURN(ForwardAttrs a, CheckForwardAttrs(attrs));
  RETURN_IF_ERROR(CheckParams(in, ch.c).status());
  TypeList out = ForwardOutputs(in[0], ch.c, a.training);
  out.push_back(in[3]);
  out.push_back(in[4]);
  return out;
}

// Inputs: grad_out, input, weight[, running_mean, running_var], save_mean,
// save_invstd. Outputs: grad_input, grad_weight, grad_bias ([0] where
// output_mask is false).
absl::StatusOr<TypeList> BatchNormBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> all) {
  absl::Span<const TensorType> in = all;
  if (attrs.Has("mask_threshold")) {
    RETURN_IF_ERROR(attrs.GetFloat("mask_threshold").status());
    if (all.size() != 6 && all.size() != 8) {
      return absl::InvalidArgumentError(absl::StrCat("got ", all.size(),
                                                     " inputs; with mask_threshold, expected grad_out, input, weight[, "
                                                     "running_mean, running_var], save_mean, save_invstd, mask"));
    }
    if (!(all.back() == all[0])) {
      return absl::InvalidArgumentError(absl::StrCat("mask is ", all.back().ToString(), " but grad_out is ",
                                                     all[0].ToString(), "; they must have the same type"));
    }
    in = all.subspan(0, all.size() - 1);
  }
  if (in.size() != 5 && in.size() != 7) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", in.size(),
                     " inputs; expected grad_out, input, weight[, running_mean, running_var], save_mean, "
                     "save_invstd (absent weight is not supported)"));
  }
  const TensorType& grad = in[0];
  const TensorType& input = in[1];
  ASSIGN_OR_RETURN(Channels ch, CheckInput(input, attrs));
  const int64_t c = ch.c;
  if (!(grad == input)) {
    return absl::InvalidArgumentError(absl::StrCat("grad_out is ", grad.ToString(), " but input is ", input.ToString(),
                                                   "; they must have the same type"));
  }
  ASSIGN_OR_RETURN(bool train, attrs.GetBool("train"));
  ASSIGN_OR_RETURN(double eps, attrs.GetFloat("eps"));
  if (!(eps >= 0.0)) return absl::InvalidArgumentError(absl::StrCat("attribute 'eps' is ", eps, "; must be >= 0"));
  ASSIGN_OR_RETURN(DType param, ParamDType(in[2], input, c));
  RETURN_IF_ERROR(CheckPerChannel("weight", in[2], input, c, param));
  const bool has_running = in.size() == 7;
  if (has_running) {
    const absl::string_view note = ParamNote(param, input);
    RETURN_IF_ERROR(CheckPerChannel("running_mean", in[3], input, c, param, /*may_be_empty=*/false, note));
    RETURN_IF_ERROR(CheckPerChannel("running_var", in[4], input, c, param, /*may_be_empty=*/false, note));
  } else if (!train) {
    return absl::InvalidArgumentError("eval mode (train=false) needs running_mean and running_var");
  }
  const size_t saved = has_running ? 5 : 3;
  const DType stats = StatsDType(input.dtype);
  RETURN_IF_ERROR(CheckPerChannel("save_mean", in[saved], input, c, stats, /*may_be_empty=*/!train));
  RETURN_IF_ERROR(CheckPerChannel("save_invstd", in[saved + 1], input, c, stats, /*may_be_empty=*/!train));
  ASSIGN_OR_RETURN(auto mask, ParseOutputMask(attrs));
  return TypeList{TensorType{input.dtype, mask[0] ? input.shape : Shape{0}},
                  TensorType{param, mask[1] ? Shape{c} : Shape{0}}, TensorType{param, mask[2] ? Shape{c} : Shape{0}}};
}

}  // namespace

void RegisterBatchNormOps(OpRegistry& registry) {
  ops::RegisterOp(registry, "native_batch_norm", 3, 6, 3, AliasKind::kNone, NativeBatchNormInfer);
  ops::RegisterOp(registry, "_native_batch_norm_legit_functional", 5, 6, 5, AliasKind::kNone, LegitFunctionalInfer);
  ops::RegisterOp(registry, "native_batch_norm_backward", 5, 8, 3, AliasKind::kNone, BatchNormBackwardInfer);
}

}  // namespace tandem
