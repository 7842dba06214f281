// Registry entries of the matrix products: mm and addmm.
#include "absl/strings/str_cat.h"
#include "adaptor/op_registry.h"
#include "adaptor/ops/infer_util.h"
#include "adaptor/ops/shape_rules.h"
#include "base/status_macros.h"

namespace tandem {
namespace {

using ops::TypeList;

// [n, k] @ [k, m] -> [n, m], with the names the op gives its matrices.
absl::StatusOr<TensorType> MatmulType(absl::string_view a_name, const TensorType& a, absl::string_view b_name,
                                      const TensorType& b) {
  RETURN_IF_ERROR(ops::RequireDType(a_name, a, ops::kFloatTypes));
  RETURN_IF_ERROR(ops::RequireRank(a_name, a, 2));
  RETURN_IF_ERROR(ops::RequireRank(b_name, b, 2));
  if (a.dtype != b.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(a_name, " is ", a.ToString(), " but ", b_name, " is ", b.ToString(), "; dtypes must match"));
  }
  if (a.shape[1] != b.shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat(a_name, " is ", a.ToString(), " but ", b_name, " is ",
                                                   b.ToString(), "; inner dims ", a.shape[1], " and ", b.shape[0],
                                                   " differ"));
  }
  return TensorType{a.dtype, {a.shape[0], b.shape[1]}};
}

absl::StatusOr<TypeList> MmInfer(const Attrs&, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(TensorType out, MatmulType("self", in[0], "mat2", in[1]));
  return TypeList{out};
}

absl::StatusOr<TypeList> AddmmInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(attrs.GetFloat("beta", 1.0).status());
  RETURN_IF_ERROR(attrs.GetFloat("alpha", 1.0).status());
  ASSIGN_OR_RETURN(TensorType out, MatmulType("mat1", in[1], "mat2", in[2]));
  if (in[0].dtype != out.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("self is ", in[0].ToString(), " but mat1 is ", in[1].ToString(),
                                                   "; dtypes must match"));
  }
  if (!BroadcastsTo(in[0].shape, out.shape)) {
    return absl::InvalidArgumentError(absl::StrCat("self is ", in[0].ToString(), " and does not broadcast to ",
                                                   ShapeString(out.shape), " (mat1 ", in[1].ToString(), " @ mat2 ",
                                                   in[2].ToString(), ")"));
  }
  return TypeList{out};
}

}  // namespace

void RegisterLinalgOps(OpRegistry& registry) {
  ops::RegisterOp(registry, "mm", 2, 2, 1, AliasKind::kNone, MmInfer);
  ops::RegisterOp(registry, "addmm", 3, 3, 1, AliasKind::kNone, AddmmInfer);
}

}  // namespace tandem
