// Registry entries of the reductions: sum (over dims or all), mean.dim.
#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/shape_rules.h"
#include "base/status_macros.h"

namespace tandem {
namespace {

using ops::TypeList;

// `dim` absent or empty reduces every dim. The optional `dtype` attribute
// is the result's dtype (ATen's dtype argument). 16-bit floats accumulate in
// float32.
InferFn ReduceInfer(bool has_dims, bool float_only) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    const auto allowed =
        float_only ? absl::Span<const DType>(ops::kFloatAndHalfTypes) : ops::kNumericAndHalfTypes;
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

}  // namespace

void RegisterReductionOps(OpRegistry& registry) {
  ops::RegisterOp(registry, "sum.dim_IntList", 1, 1, 1, AliasKind::kNone, ReduceInfer(true, false));
  ops::RegisterOp(registry, "sum", 1, 1, 1, AliasKind::kNone, ReduceInfer(false, false));
  ops::RegisterOp(registry, "mean.dim", 1, 1, 1, AliasKind::kNone, ReduceInfer(true, true));
}

}  // namespace tandem
