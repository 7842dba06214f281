// Registry entries of the reductions: sum and mean (over dims or all),
// prod, var, linalg_vector_norm, amax / amin, argmax / argmin and max.dim /
// min.dim (values and int64 indices), and the scans and sorts over one dim:
// cumsum, sort and topk. Their attribute rules are in reduction_rules.h,
// which the kernels read too.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/reduction_rules.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

// `dim` absent or empty reduces every dim. The optional `dtype` attribute
// is the result's dtype (ATen's dtype argument). 16-bit floats accumulate in
// float32.
InferFn ReduceInfer(bool has_dims, bool float_only) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    const auto allowed = float_only ? absl::Span<const DType>(ops::kFloatAndHalfTypes) : ops::kNumericAndHalfTypes;
    RETURN_IF_ERROR(ops::RequireDType("self", in[0], allowed));
    ASSIGN_OR_RETURN(DType dtype, attrs.GetDType("dtype", in[0].dtype));
    RETURN_IF_ERROR(ops::RequireDTypeValue("attribute 'dtype'", dtype, allowed));
    const bool half = dtype == DType::kBFloat16 || dtype == DType::kFloat16 || in[0].dtype == DType::kBFloat16 ||
                      in[0].dtype == DType::kFloat16;
    if (half && (!IsFloating(dtype) || !IsFloating(in[0].dtype))) {
      return absl::InvalidArgumentError(absl::StrCat("self is ", in[0].ToString(), " and attribute 'dtype' is ",
                                                     DTypeName(dtype),
                                                     "; a 16-bit float sum takes and gives floats only"));
    }
    if (!has_dims) return TypeList{{dtype, {}}};
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("dim", std::vector<int64_t>{}));
    ASSIGN_OR_RETURN(bool keepdim, attrs.GetBool("keepdim", false));
    auto mask = ReductionMask(dims, in[0].rank());
    if (!mask.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("self is ", in[0].ToString(), ": ", mask.status().message()));
    }
    return TypeList{{dtype, ReducedShape(in[0].shape, *mask, keepdim)}};
  };
}

// The shape after reducing `dim` (SingleDimOf's; -1: every dim, keepdim
// keeping each as 1).
Shape ReducedShapeForDim(const Shape& shape, int dim, bool keepdim) {
  std::vector<bool> mask(shape.size(), dim < 0);
  if (dim >= 0 && !shape.empty()) mask[dim] = true;
  return ReducedShape(shape, mask, keepdim);
}

// amax, amin: self's dtype over the dims of `dim` (empty: all); no empty
// reduced dim (a maximum of nothing has no value).
absl::StatusOr<TypeList> ExtremumInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kNumericAndHalfTypes));
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReducedDimsOf(attrs, in[0]));
  ASSIGN_OR_RETURN(bool keepdim, attrs.GetBool("keepdim", false));
  RETURN_IF_ERROR(RequireNonEmptyReduction(in[0], mask, "a maximum or minimum of no elements has no value"));
  return TypeList{{in[0].dtype, ReducedShape(in[0].shape, mask, keepdim)}};
}

// argmax, argmin: int64 positions along `dim`, or in the flattened tensor
// when `dim` is absent (keepdim then keeps every dim as 1).
absl::StatusOr<TypeList> ArgExtremumInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kNumericAndHalfTypes));
  ASSIGN_OR_RETURN(int dim, SingleDimOf(attrs, in[0], /*optional=*/true));
  ASSIGN_OR_RETURN(bool keepdim, attrs.GetBool("keepdim", false));
  if (SplitForDim(in[0].shape, dim).size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("self is ", in[0].ToString(), ": the reduced ",
                                                   dim < 0 ? "tensor" : "dim",
                                                   " is empty, and an empty slice has no extreme"));
  }
  return TypeList{{DType::kInt64, ReducedShapeForDim(in[0].shape, dim, keepdim)}};
}

// max.dim, min.dim: (values of self's dtype, int64 indices) along `dim`.
absl::StatusOr<TypeList> ExtremumDimInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kNumericAndHalfTypes));
  ASSIGN_OR_RETURN(int dim, SingleDimOf(attrs, in[0]));
  ASSIGN_OR_RETURN(bool keepdim, attrs.GetBool("keepdim", false));
  if (SplitAtDim(in[0].shape, dim).size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("self is ", in[0].ToString(), ": dim ", dim, " is empty, and an empty slice has no extreme"));
  }
  const Shape out = ReducedShapeForDim(in[0].shape, dim, keepdim);
  return TypeList{{in[0].dtype, out}, {DType::kInt64, out}};
}

// var.correction, var.dim: floats, over `dim` (absent or empty: all).
absl::StatusOr<TypeList> VarInfer(const std::string& op, const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kFloatAndHalfTypes));
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReducedDimsOf(attrs, in[0]));
  ASSIGN_OR_RETURN(bool keepdim, attrs.GetBool("keepdim", false));
  RETURN_IF_ERROR(VarianceCorrectionOf(op, attrs).status());
  return TypeList{{in[0].dtype, ReducedShape(in[0].shape, mask, keepdim)}};
}

// linalg_vector_norm: floats; `dtype` converts self first (no narrowing).
// The norms without an identity (inf, -inf, negative ord) refuse an empty
// reduced dim, as PyTorch does.
absl::StatusOr<TypeList> VectorNormInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kFloatAndHalfTypes));
  ASSIGN_OR_RETURN(VectorNorm norm, VectorNormOf(attrs));
  ASSIGN_OR_RETURN(DType dtype, ConvertedResultDType(attrs, in[0], /*int_to_float=*/false));
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReducedDimsOf(attrs, in[0]));
  ASSIGN_OR_RETURN(bool keepdim, attrs.GetBool("keepdim", false));
  if (norm.kind == NormKind::kMaxAbs || norm.kind == NormKind::kMinAbs || norm.p < 0) {
    RETURN_IF_ERROR(RequireNonEmptyReduction(in[0], mask, absl::StrCat("the ", norm.p, " norm has no identity")));
  }
  return TypeList{{dtype, ReducedShape(in[0].shape, mask, keepdim)}};
}

// prod (all dims), prod.dim_int (one dim): int64 stays int64.
InferFn ProdInfer(bool has_dim) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kNumericAndHalfTypes));
    ASSIGN_OR_RETURN(DType dtype, ConvertedResultDType(attrs, in[0], /*int_to_float=*/true));
    if (!has_dim) return TypeList{{dtype, {}}};
    ASSIGN_OR_RETURN(int dim, SingleDimOf(attrs, in[0]));
    ASSIGN_OR_RETURN(bool keepdim, attrs.GetBool("keepdim", false));
    return TypeList{{dtype, ReducedShapeForDim(in[0].shape, dim, keepdim)}};
  };
}

// cumsum: self's shape; int64 stays int64.
absl::StatusOr<TypeList> CumsumInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kNumericAndHalfTypes));
  ASSIGN_OR_RETURN(DType dtype, ConvertedResultDType(attrs, in[0], /*int_to_float=*/true));
  RETURN_IF_ERROR(SingleDimOf(attrs, in[0]).status());
  return TypeList{{dtype, in[0].shape}};
}

// sort (and sort.stable: every sort is stable): (values, int64 indices) of
// self's shape along `dim` (default -1).
absl::StatusOr<TypeList> SortInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kNumericAndHalfTypes));
  Attrs with_dim = attrs;
  if (!attrs.Has("dim")) with_dim.Set("dim", int64_t{-1});
  RETURN_IF_ERROR(SingleDimOf(with_dim, in[0]).status());
  RETURN_IF_ERROR(attrs.GetBool("descending", false).status());
  RETURN_IF_ERROR(attrs.GetBool("stable", true).status());
  return TypeList{{in[0].dtype, in[0].shape}, {DType::kInt64, in[0].shape}};
}

// topk: the k largest (smallest) along `dim` (default -1), k in [0, size].
absl::StatusOr<TypeList> TopkInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kNumericAndHalfTypes));
  Attrs with_dim = attrs;
  if (!attrs.Has("dim")) with_dim.Set("dim", int64_t{-1});
  ASSIGN_OR_RETURN(int dim, SingleDimOf(with_dim, in[0]));
  ASSIGN_OR_RETURN(int64_t k, attrs.GetInt("k"));
  RETURN_IF_ERROR(attrs.GetBool("largest", true).status());
  RETURN_IF_ERROR(attrs.GetBool("sorted", true).status());
  const int64_t size = SplitAtDim(in[0].shape, dim).size;
  if (k < 0 || k > size) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'k' is ", k, "; self is ", in[0].ToString(),
                                                   ", whose dim ", dim, " has ", size, " elements"));
  }
  Shape out = in[0].shape;
  if (!out.empty()) out[dim] = k;
  return TypeList{{in[0].dtype, out}, {DType::kInt64, out}};
}

}  // namespace

void RegisterReductionOps(OpRegistry& registry) {
  ops::RegisterOp(registry, "sum.dim_IntList", 1, 1, 1, AliasKind::kNone, ReduceInfer(true, false));
  ops::RegisterOp(registry, "sum", 1, 1, 1, AliasKind::kNone, ReduceInfer(false, false));
  ops::RegisterOp(registry, "mean.dim", 1, 1, 1, AliasKind::kNone, ReduceInfer(true, true));
  ops::RegisterOp(registry, "mean", 1, 1, 1, AliasKind::kNone, ReduceInfer(false, true));
  ops::RegisterOp(registry, "prod", 1, 1, 1, AliasKind::kNone, ProdInfer(false));
  ops::RegisterOp(registry, "prod.dim_int", 1, 1, 1, AliasKind::kNone, ProdInfer(true));
  ops::RegisterOp(registry, "linalg_vector_norm", 1, 1, 1, AliasKind::kNone, VectorNormInfer);
  for (const char* op : {"var.correction", "var.dim"}) {
    ops::RegisterOp(registry, op, 1, 1, 1, AliasKind::kNone,
                    [op = std::string(op)](const Attrs& attrs, absl::Span<const TensorType> in) {
                      return VarInfer(op, attrs, in);
                    });
  }
  ops::RegisterOp(registry, "amax", 1, 1, 1, AliasKind::kNone, ExtremumInfer);
  ops::RegisterOp(registry, "amin", 1, 1, 1, AliasKind::kNone, ExtremumInfer);
  ops::RegisterOp(registry, "argmax", 1, 1, 1, AliasKind::kNone, ArgExtremumInfer);
  ops::RegisterOp(registry, "argmin", 1, 1, 1, AliasKind::kNone, ArgExtremumInfer);
  ops::RegisterOp(registry, "max.dim", 1, 1, 2, AliasKind::kNone, ExtremumDimInfer);
  ops::RegisterOp(registry, "min.dim", 1, 1, 2, AliasKind::kNone, ExtremumDimInfer);
  ops::RegisterOp(registry, "cumsum", 1, 1, 1, AliasKind::kNone, CumsumInfer);
  ops::RegisterOp(registry, "sort", 1, 1, 2, AliasKind::kNone, SortInfer, {"sort.stable"});
  ops::RegisterOp(registry, "topk", 1, 1, 2, AliasKind::kNone, TopkInfer);
}

}  // namespace tandem
