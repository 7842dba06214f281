// Registry entries of the ops that make constant tensors: zeros, ones, full,
// their *_like forms, fill.Scalar and scalar_tensor. A fill value is
// converted to the result's dtype as a C++ cast would (truncation toward
// zero for integers, nonzero -> true for bool).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::StatusOr<Shape> SizeAttr(const Attrs& attrs) {
  ASSIGN_OR_RETURN(std::vector<int64_t> size, attrs.GetInts("size"));
  for (int64_t d : size) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'size' [", absl::StrJoin(size, ", "), "] has the negative dim ", d));
    }
  }
  return Shape(size.begin(), size.end());
}

absl::StatusOr<DType> DTypeAttr(const Attrs& attrs, DType fallback) {
  ASSIGN_OR_RETURN(DType dtype, attrs.GetDType("dtype", fallback));
  RETURN_IF_ERROR(ops::RequireDTypeValue("attribute 'dtype'", dtype, ops::kStorableAndHalfTypes));
  return dtype;
}

// zeros, ones, full: `value_attr` is the fill value's attribute ("" for none).
InferFn SizedInfer(std::string value_attr) {
  return [value_attr](const Attrs& attrs, absl::Span<const TensorType>) -> absl::StatusOr<TypeList> {
    if (!value_attr.empty()) RETURN_IF_ERROR(attrs.GetFloat(value_attr).status());
    ASSIGN_OR_RETURN(Shape shape, SizeAttr(attrs));
    ASSIGN_OR_RETURN(DType dtype, DTypeAttr(attrs, DType::kFloat32));
    return TypeList{{dtype, shape}};
  };
}

// zeros_like, ones_like, full_like, fill.Scalar: self's shape, self's dtype
// unless `dtype` is given.
InferFn LikeInfer(std::string value_attr) {
  return [value_attr](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    if (!value_attr.empty()) RETURN_IF_ERROR(attrs.GetFloat(value_attr).status());
    ASSIGN_OR_RETURN(DType dtype, DTypeAttr(attrs, in[0].dtype));
    return TypeList{{dtype, in[0].shape}};
  };
}

absl::StatusOr<TypeList> ScalarTensorInfer(const Attrs& attrs, absl::Span<const TensorType>) {
  RETURN_IF_ERROR(attrs.GetFloat("s").status());
  ASSIGN_OR_RETURN(DType dtype, DTypeAttr(attrs, DType::kFloat32));
  return TypeList{{dtype, {}}};
}

absl::StatusOr<TypeList> FillInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(attrs.GetFloat("value").status());
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableAndHalfTypes));
  return TypeList{in[0]};
}

}  // namespace

void RegisterFactoryOps(OpRegistry& registry) {
  using ops::RegisterOp;
  constexpr AliasKind kNone = AliasKind::kNone;
  RegisterOp(registry, "zeros", 0, 0, 1, kNone, SizedInfer(""));
  RegisterOp(registry, "ones", 0, 0, 1, kNone, SizedInfer(""));
  RegisterOp(registry, "full", 0, 0, 1, kNone, SizedInfer("fill_value"));
  RegisterOp(registry, "zeros_like", 1, 1, 1, kNone, LikeInfer(""));
  RegisterOp(registry, "ones_like", 1, 1, 1, kNone, LikeInfer(""));
  RegisterOp(registry, "full_like", 1, 1, 1, kNone, LikeInfer("fill_value"));
  // The output never reads self, so it may take self's place.
  RegisterOp(registry, "fill.Scalar", 1, 1, 1, AliasKind::kInPlace, FillInfer);
  RegisterOp(registry, "scalar_tensor", 0, 0, 1, kNone, ScalarTensorInfer);
}

}  // namespace tandem
