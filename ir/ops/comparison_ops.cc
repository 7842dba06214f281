// Registry entries of the comparisons and the boolean ops that captured loss
// and attention steps use: eq/ne/lt/le/gt/ge (.Scalar and .Tensor, bool
// results), where.self, masked_fill, logical_not and any.
//
// Comparisons accept float32, float64, int64, int32, bool, bfloat16 and
// float16 (where.self's self and other, masked_fill's self and value,
// logical_not's and any's input too). A .Tensor comparison follows
// the binary elementwise type rule (equal dtypes, or a rank-0 operand
// converted); a .Scalar one compares in double unless both the tensor and
// the number are integers (then exactly, in int64), or the tensor is 16-bit
// (then the number is rounded to its dtype and compared in float32).
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::StatusOr<Shape> Broadcast2(absl::string_view a_name, const TensorType& a, absl::string_view b_name,
                                 const TensorType& b) {
  auto shape = BroadcastShapes(a.shape, b.shape);
  if (!shape.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(a_name, " is ", a.ToString(), " and ", b_name, " is ", b.ToString(),
                                                   "; ", shape.status().message()));
  }
  return shape;
}

absl::StatusOr<TypeList> CompareTensorInfer(const Attrs&, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableAndHalfTypes));
  RETURN_IF_ERROR(ops::RequireDType("other", in[1], ops::kStorableAndHalfTypes));
  RETURN_IF_ERROR(ops::BinaryResultDType("self", in[0], "other", in[1]).status());
  ASSIGN_OR_RETURN(Shape shape, Broadcast2("self", in[0], "other", in[1]));
  return TypeList{{DType::kBool, shape}};
}

absl::StatusOr<TypeList> CompareScalarInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableAndHalfTypes));
  RETURN_IF_ERROR(attrs.GetFloat("other").status());
  return TypeList{{DType::kBool, in[0].shape}};
}

// where.self(condition, self, other): condition bool; self and other by the
// binary rule; all three broadcast.
absl::StatusOr<TypeList> WhereInfer(const Attrs&, absl::Span<const TensorType> in) {
  if (in[0].dtype != DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat("condition is ", in[0].ToString(), "; expected bool"));
  }
  RETURN_IF_ERROR(ops::RequireDType("self", in[1], ops::kStorableAndHalfTypes));
  RETURN_IF_ERROR(ops::RequireDType("other", in[2], ops::kStorableAndHalfTypes));
  ASSIGN_OR_RETURN(DType dtype, ops::BinaryResultDType("self", in[1], "other", in[2]));
  ASSIGN_OR_RETURN(Shape values, Broadcast2("self", in[1], "other", in[2]));
  ASSIGN_OR_RETURN(Shape shape, Broadcast2("condition", in[0], "self and other", TensorType{dtype, values}));
  return TypeList{{dtype, shape}};
}

// masked_fill.Scalar(self, mask; value), masked_fill.Tensor(self, mask,
// value rank-0): the result has self's type; mask (bool) broadcasts to it.
InferFn MaskedFillInfer(bool tensor_value) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableAndHalfTypes));
    if (in[1].dtype != DType::kBool || !BroadcastsTo(in[1].shape, in[0].shape)) {
      return absl::InvalidArgumentError(absl::StrCat("self is ", in[0].ToString(), " but mask is ", in[1].ToString(),
                                                     "; expected a bool mask that broadcasts to self"));
    }
    if (tensor_value) {
      if (in[2].rank() != 0) {
        return absl::InvalidArgumentError(absl::StrCat("value is ", in[2].ToString(), "; expected a rank-0 tensor"));
      }
      RETURN_IF_ERROR(ops::RequireDType("value", in[2], ops::kStorableAndHalfTypes));
    } else {
      RETURN_IF_ERROR(attrs.GetFloat("value").status());
    }
    return TypeList{in[0]};
  };
}

absl::StatusOr<TypeList> LogicalNotInfer(const Attrs&, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableAndHalfTypes));
  return TypeList{{DType::kBool, in[0].shape}};
}

// any (all dims), any.dim (one dim), any.dims (a list; absent or empty: all).
InferFn AnyInfer(bool has_dims) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableAndHalfTypes));
    if (!has_dims) return TypeList{{DType::kBool, {}}};
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("dim", std::vector<int64_t>{}));
    ASSIGN_OR_RETURN(bool keepdim, attrs.GetBool("keepdim", false));
    auto mask = ReductionMask(dims, in[0].rank());
    if (!mask.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("self is ", in[0].ToString(), ": ", mask.status().message()));
    }
    return TypeList{{DType::kBool, ReducedShape(in[0].shape, *mask, keepdim)}};
  };
}

}  // namespace

void RegisterComparisonOps(OpRegistry& registry) {
  using ops::RegisterOp;
  constexpr AliasKind kNone = AliasKind::kNone;
  for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    RegisterOp(registry, absl::StrCat(op, ".Tensor"), 2, 2, 1, kNone, CompareTensorInfer);
    RegisterOp(registry, absl::StrCat(op, ".Scalar"), 1, 1, 1, kNone, CompareScalarInfer);
  }
  RegisterOp(registry, "where.self", 3, 3, 1, kNone, WhereInfer);
  RegisterOp(registry, "masked_fill.Scalar", 2, 2, 1, AliasKind::kInPlace, MaskedFillInfer(false));
  RegisterOp(registry, "masked_fill.Tensor", 3, 3, 1, AliasKind::kInPlace, MaskedFillInfer(true));
  RegisterOp(registry, "logical_not", 1, 1, 1, kNone, LogicalNotInfer);
  RegisterOp(registry, "any", 1, 1, 1, kNone, AnyInfer(false));
  // any.dim's `dim` is one int; Attrs reads a single int as a list too.
  RegisterOp(registry, "any.dim", 1, 1, 1, kNone, AnyInfer(true), {"any.dims"});
}

}  // namespace tandem
