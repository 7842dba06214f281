// Registry entries of the elementwise ops: arithmetic with tensors and
// scalars, unary math, threshold_backward, and the converting copies. All
// also take bfloat16 and float16.
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::StatusOr<Shape> BroadcastInputs(absl::string_view a_name, const TensorType& a, absl::string_view b_name,
                                      const TensorType& b) {
  auto shape = BroadcastShapes(a.shape, b.shape);
  if (!shape.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(a_name, " is ", a.ToString(), " and ", b_name, " is ", b.ToString(),
                                                   "; ", shape.status().message()));
  }
  return shape;
}

// The dtypes of an op: floats (and int64 unless float_only); the 16-bit
// floats where `half` (kernels on both backends take them).
absl::Span<const DType> Allowed(bool float_only, bool half) {
  if (half) return float_only ? absl::Span<const DType>(ops::kFloatAndHalfTypes) : ops::kNumericAndHalfTypes;
  return float_only ? absl::Span<const DType>(ops::kFloatTypes) : ops::kNumericTypes;
}

// add.Tensor, sub.Tensor, mul.Tensor, div.Tensor: self (op) other.
InferFn BinaryTensorInfer(bool has_alpha, bool float_only) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    ASSIGN_OR_RETURN(DType dtype, ops::BinaryResultDType("self", in[0], "other", in[1]));
    RETURN_IF_ERROR(ops::RequireDTypeValue("the result", dtype, Allowed(float_only, true)));
    if (has_alpha) {
      RETURN_IF_ERROR(attrs.GetFloat("alpha", 1.0).status());
      RETURN_IF_ERROR(ops::RequireScalarFits(attrs, "alpha", "the result", dtype));
    }
    ASSIGN_OR_RETURN(Shape shape, BroadcastInputs("self", in[0], "other", in[1]));
    return TypeList{{dtype, shape}};
  };
}

// add.Scalar, ...: self (op) other, `other` a number attribute.
InferFn BinaryScalarInfer(bool has_alpha, bool float_only) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    RETURN_IF_ERROR(ops::RequireDType("self", in[0], Allowed(float_only, true)));
    RETURN_IF_ERROR(attrs.GetFloat("other").status());
    RETURN_IF_ERROR(ops::RequireScalarFits(attrs, "other", "self", in[0].dtype));
    if (has_alpha) {
      RETURN_IF_ERROR(attrs.GetFloat("alpha", 1.0).status());
      RETURN_IF_ERROR(ops::RequireScalarFits(attrs, "alpha", "self", in[0].dtype));
    }
    return TypeList{in[0]};
  };
}

InferFn UnaryInfer(bool float_only, bool half) {
  return [=](const Attrs&, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    RETURN_IF_ERROR(ops::RequireDType("self", in[0], Allowed(float_only, half)));
    return TypeList{in[0]};
  };
}

absl::StatusOr<TypeList> ThresholdBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(attrs.GetFloat("threshold").status());
  RETURN_IF_ERROR(ops::RequireDType("grad_output", in[0], ops::kFloatAndHalfTypes));
  if (in[0].dtype != in[1].dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("grad_output is ", in[0].ToString(), " but self is ", in[1].ToString(), "; dtypes must match"));
  }
  ASSIGN_OR_RETURN(Shape shape, BroadcastInputs("grad_output", in[0], "self", in[1]));
  return TypeList{{in[0].dtype, shape}};
}

// copy(self, src): src broadcast to self's shape and converted to its dtype.
absl::StatusOr<TypeList> CopyInfer(const Attrs&, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableAndHalfTypes));
  RETURN_IF_ERROR(ops::RequireDType("src", in[1], ops::kStorableAndHalfTypes));
  if (!BroadcastsTo(in[1].shape, in[0].shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat("src is ", in[1].ToString(), " and does not broadcast to self's ", in[0].ToString()));
  }
  return TypeList{in[0]};
}

absl::StatusOr<TypeList> ToCopyInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableAndHalfTypes));
  ASSIGN_OR_RETURN(DType dtype, attrs.GetDType("dtype", in[0].dtype));
  RETURN_IF_ERROR(ops::RequireDTypeValue("attribute 'dtype'", dtype, ops::kStorableAndHalfTypes));
  return TypeList{{dtype, in[0].shape}};
}

}  // namespace

void RegisterElementwiseOps(OpRegistry& registry) {
  using ops::RegisterOp;
  constexpr AliasKind kInPlace = AliasKind::kInPlace;
  RegisterOp(registry, "add.Tensor", 2, 2, 1, kInPlace, BinaryTensorInfer(true, false));
  RegisterOp(registry, "sub.Tensor", 2, 2, 1, kInPlace, BinaryTensorInfer(true, false));
  RegisterOp(registry, "mul.Tensor", 2, 2, 1, kInPlace, BinaryTensorInfer(false, false));
  RegisterOp(registry, "div.Tensor", 2, 2, 1, kInPlace, BinaryTensorInfer(false, true));
  RegisterOp(registry, "add.Scalar", 1, 1, 1, kInPlace, BinaryScalarInfer(true, false));
  RegisterOp(registry, "sub.Scalar", 1, 1, 1, kInPlace, BinaryScalarInfer(true, false));
  RegisterOp(registry, "mul.Scalar", 1, 1, 1, kInPlace, BinaryScalarInfer(false, false));
  RegisterOp(registry, "div.Scalar", 1, 1, 1, kInPlace, BinaryScalarInfer(false, true));
  RegisterOp(registry, "neg", 1, 1, 1, kInPlace, UnaryInfer(false, true));
  RegisterOp(registry, "relu", 1, 1, 1, kInPlace, UnaryInfer(false, true));
  RegisterOp(registry, "sqrt", 1, 1, 1, kInPlace, UnaryInfer(true, true));
  RegisterOp(registry, "threshold_backward", 2, 2, 1, kInPlace, ThresholdBackwardInfer);
  RegisterOp(registry, "copy", 2, 2, 1, kInPlace, CopyInfer);
  RegisterOp(registry, "_to_copy", 1, 1, 1, AliasKind::kNone, ToCopyInfer);
}

}  // namespace tandem
