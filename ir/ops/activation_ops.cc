// Registry entries of the activations and the pointwise math of the LSTM,
// transformer and Adam/AdamW steps: unary math (sigmoid, tanh, exp, log,
// rsqrt, gelu, pow), the activation backwards, clamp, maximum/minimum,
// addcmul/addcdiv, lerp, and native_dropout with its backward.
//
// Float ops take float32 and float64 (sigmoid, tanh, gelu and their
// backwards, clamp, maximum/minimum, addcmul/addcdiv, native_dropout and its
// backward also bfloat16 and float16); the broadcasting ones follow the
// binary elementwise type rule (equal dtypes, or a rank-0 operand of another
// dtype converted to the result's).
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

// The dtypes of an op: floats (and int64 unless float_only); the 16-bit
// floats too where `half` (kernels on both backends take them).
absl::Span<const DType> Allowed(bool float_only, bool half = false) {
  if (half) return float_only ? absl::Span<const DType>(ops::kFloatAndHalfTypes) : ops::kNumericAndHalfTypes;
  return float_only ? absl::Span<const DType>(ops::kFloatTypes) : absl::Span<const DType>(ops::kNumericTypes);
}

// The dtype and broadcast shape of inputs `names` (all of `in`), pairwise by
// the binary rule against the first.
absl::StatusOr<TensorType> BroadcastAll(absl::Span<const TensorType> in, std::initializer_list<const char*> names,
                                        bool float_only, bool half = false) {
  const char* const* name = names.begin();
  TensorType result = in[0];
  std::string result_name = name[0];
  for (size_t k = 1; k < in.size(); ++k) {
    ASSIGN_OR_RETURN(DType dtype, ops::BinaryResultDType(result_name, result, name[k], in[k]));
    auto shape = BroadcastShapes(result.shape, in[k].shape);
    if (!shape.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(result_name, " is ", result.ToString(), " and ", name[k], " is ",
                                                     in[k].ToString(), "; ", shape.status().message()));
    }
    // A rank-0 operand of another dtype takes the other one's dtype; the
    // running result keeps the non-rank-0 dtype.
    result = TensorType{dtype, *shape};
    result_name = absl::StrCat(result_name, " and ", name[k]);
  }
  RETURN_IF_ERROR(ops::RequireDTypeValue("the result", result.dtype, Allowed(float_only, half)));
  return result;
}

InferFn UnaryInfer(bool float_only, bool half = false) {
  return [=](const Attrs&, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    RETURN_IF_ERROR(ops::RequireDType("self", in[0], Allowed(float_only, half)));
    return TypeList{in[0]};
  };
}

absl::Status CheckApproximate(const Attrs& attrs) {
  // A StatusOr kept whole: GCC 12 misreads a moved-out string as
  // uninitialized here.
  const absl::StatusOr<std::string> approximate = attrs.GetString("approximate", "none");
  if (!approximate.ok()) return approximate.status();
  if (*approximate != "none" && *approximate != "tanh") {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'approximate' is '", *approximate, "'; expected 'none' or 'tanh'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TypeList> GeluInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(CheckApproximate(attrs));
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kFloatAndHalfTypes));
  return TypeList{in[0]};
}

absl::StatusOr<TypeList> PowTensorScalarInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(attrs.GetFloat("exponent").status());
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kFloatTypes));
  return TypeList{in[0]};
}

// pow.Scalar(self: number, exponent: tensor).
absl::StatusOr<TypeList> PowScalarInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(attrs.GetFloat("self").status());
  RETURN_IF_ERROR(ops::RequireDType("exponent", in[0], ops::kFloatTypes));
  return TypeList{in[0]};
}

// sigmoid_backward(grad_output, output), tanh_backward(grad_output, output),
// gelu_backward(grad_output, self): equal float types, bfloat16 and float16
// included.
InferFn ActivationBackwardInfer(const char* second, bool gelu) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    if (gelu) RETURN_IF_ERROR(CheckApproximate(attrs));
    RETURN_IF_ERROR(ops::RequireDType("grad_output", in[0], ops::kFloatAndHalfTypes));
    if (!(in[0] == in[1])) {
      return absl::InvalidArgumentError(absl::StrCat("grad_output is ", in[0].ToString(), " but ", second, " is ",
                                                     in[1].ToString(), "; they must have the same type"));
    }
    return TypeList{in[0]};
  };
}

// clamp(self; min, max): numbers, at least one given.
absl::StatusOr<TypeList> ClampInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kNumericAndHalfTypes));
  if (!attrs.Has("min") && !attrs.Has("max")) {
    return absl::InvalidArgumentError("at least one of the attributes 'min' and 'max' must be given");
  }
  for (const char* name : {"min", "max"}) {
    if (!attrs.Has(name)) continue;
    RETURN_IF_ERROR(attrs.GetFloat(name).status());
    RETURN_IF_ERROR(ops::RequireScalarFits(attrs, name, "self", in[0].dtype));
  }
  return TypeList{in[0]};
}

// maximum, minimum: self, other broadcast.
absl::StatusOr<TypeList> MaxMinInfer(const Attrs&, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(TensorType out, BroadcastAll(in, {"self", "other"}, false, /*half=*/true));
  return TypeList{out};
}

// addcmul / addcdiv: self + value * tensor1 (* or /) tensor2, broadcast.
InferFn AddcInfer(bool float_only) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    ASSIGN_OR_RETURN(TensorType out, BroadcastAll(in, {"self", "tensor1", "tensor2"}, float_only, /*half=*/true));
    RETURN_IF_ERROR(attrs.GetFloat("value", 1.0).status());
    RETURN_IF_ERROR(ops::RequireScalarFits(attrs, "value", "the result", out.dtype));
    return TypeList{out};
  };
}

// lerp.Scalar(self, end; weight), lerp.Tensor(self, end, weight).
absl::StatusOr<TypeList> LerpScalarInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(attrs.GetFloat("weight").status());
  ASSIGN_OR_RETURN(TensorType out, BroadcastAll(in, {"self", "end"}, true));
  return TypeList{out};
}

absl::StatusOr<TypeList> LerpTensorInfer(const Attrs&, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(TensorType out, BroadcastAll(in, {"self", "end", "weight"}, true));
  return TypeList{out};
}

// native_dropout(input[, seed]; p, train, seed): (output, mask bool). The
// optional second input is an int64 rank-0 seed (a per-iteration feed).
absl::StatusOr<TypeList> NativeDropoutInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("input", in[0], ops::kFloatAndHalfTypes));
  ASSIGN_OR_RETURN(double p, attrs.GetFloat("p"));
  if (!(p >= 0.0 && p <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'p' is ", p, "; expected a probability in [0, 1]"));
  }
  RETURN_IF_ERROR(attrs.GetBool("train", true).status());
  RETURN_IF_ERROR(attrs.GetInt("seed", 0).status());
  if (in.size() > 1 && !(in[1] == TensorType{DType::kInt64, {}})) {
    return absl::InvalidArgumentError(absl::StrCat("seed is ", in[1].ToString(), "; expected an int64 rank-0 tensor"));
  }
  return TypeList{in[0], {DType::kBool, in[0].shape}};
}

// native_dropout_backward(grad_output, mask; scale).
absl::StatusOr<TypeList> NativeDropoutBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(attrs.GetFloat("scale").status());
  RETURN_IF_ERROR(ops::RequireDType("grad_output", in[0], ops::kFloatAndHalfTypes));
  if (in[1].dtype != DType::kBool || in[1].shape != in[0].shape) {
    return absl::InvalidArgumentError(absl::StrCat("grad_output is ", in[0].ToString(), " but mask is ",
                                                   in[1].ToString(), "; expected a bool mask of the same shape"));
  }
  return TypeList{in[0]};
}

}  // namespace

void RegisterActivationOps(OpRegistry& registry) {
  using ops::RegisterOp;
  constexpr AliasKind kInPlace = AliasKind::kInPlace;
  for (const char* op : {"sigmoid", "tanh"}) {
    RegisterOp(registry, op, 1, 1, 1, kInPlace, UnaryInfer(true, /*half=*/true));
  }
  for (const char* op : {"exp", "log", "rsqrt"}) {
    RegisterOp(registry, op, 1, 1, 1, kInPlace, UnaryInfer(true));
  }
  RegisterOp(registry, "gelu", 1, 1, 1, kInPlace, GeluInfer);
  RegisterOp(registry, "pow.Tensor_Scalar", 1, 1, 1, kInPlace, PowTensorScalarInfer);
  RegisterOp(registry, "pow.Scalar", 1, 1, 1, kInPlace, PowScalarInfer);
  RegisterOp(registry, "sigmoid_backward", 2, 2, 1, kInPlace, ActivationBackwardInfer("output", false));
  RegisterOp(registry, "tanh_backward", 2, 2, 1, kInPlace, ActivationBackwardInfer("output", false));
  RegisterOp(registry, "gelu_backward", 2, 2, 1, kInPlace, ActivationBackwardInfer("self", true));
  RegisterOp(registry, "clamp", 1, 1, 1, kInPlace, ClampInfer);
  RegisterOp(registry, "maximum", 2, 2, 1, kInPlace, MaxMinInfer);
  RegisterOp(registry, "minimum", 2, 2, 1, kInPlace, MaxMinInfer);
  RegisterOp(registry, "addcmul", 3, 3, 1, kInPlace, AddcInfer(false));
  RegisterOp(registry, "addcdiv", 3, 3, 1, kInPlace, AddcInfer(true));
  RegisterOp(registry, "lerp.Scalar", 2, 2, 1, kInPlace, LerpScalarInfer);
  RegisterOp(registry, "lerp.Tensor", 3, 3, 1, kInPlace, LerpTensorInfer);
  RegisterOp(registry, "native_dropout", 1, 2, 2, kInPlace, NativeDropoutInfer);
  RegisterOp(registry, "native_dropout_backward", 2, 2, 1, kInPlace, NativeDropoutBackwardInfer);
}

}  // namespace tandem
