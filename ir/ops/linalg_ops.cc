// Registry entries of the matrix products: mm and addmm, of float32,
// float64, bfloat16 or float16 matrices (16-bit ones accumulate in float32).
//
// Both take optional bool attributes `transpose_a` and `transpose_b`
// (default false): the first or second matrix operand is stored transposed
// and the product uses its transpose, so that a transpose feeding a product
// needs no copy (compiler/fold_transposes.h). With transpose_a the first
// matrix is [k, n]; with transpose_b the second is [m, k].
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

// One matrix operand of a product: the op's name for it, its stored type,
// and whether the product uses its transpose (and through which attribute).
struct MatrixOperand {
  absl::string_view name;
  const TensorType& type;
  bool transposed;
  absl::string_view attr;

  int64_t rows() const { return type.shape[transposed ? 1 : 0]; }
  int64_t cols() const { return type.shape[transposed ? 0 : 1]; }
  std::string Describe() const {
    if (!transposed) return absl::StrCat(name, " is ", type.ToString());
    return absl::StrCat(name, " is ", type.ToString(), " (used transposed: ", attr, ")");
  }
};

// op(a) [n, k] @ op(b) [k, m] -> [n, m].
absl::StatusOr<TensorType> MatmulType(const MatrixOperand& a, const MatrixOperand& b) {
  RETURN_IF_ERROR(ops::RequireDType(a.name, a.type, ops::kFloatAndHalfTypes));
  RETURN_IF_ERROR(ops::RequireRank(a.name, a.type, 2));
  RETURN_IF_ERROR(ops::RequireRank(b.name, b.type, 2));
  if (a.type.dtype != b.type.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(a.Describe(), " but ", b.Describe(), "; dtypes must match"));
  }
  if (a.cols() != b.rows()) {
    return absl::InvalidArgumentError(
        absl::StrCat(a.Describe(), " but ", b.Describe(), "; inner dims ", a.cols(), " and ", b.rows(), " differ"));
  }
  return TensorType{a.type.dtype, {a.rows(), b.cols()}};
}

struct TransposeFlags {
  bool a = false;
  bool b = false;
};

absl::StatusOr<TransposeFlags> GetTransposeFlags(const Attrs& attrs) {
  TransposeFlags flags;
  ASSIGN_OR_RETURN(flags.a, attrs.GetBool("transpose_a", false));
  ASSIGN_OR_RETURN(flags.b, attrs.GetBool("transpose_b", false));
  return flags;
}

absl::StatusOr<TypeList> MmInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(TransposeFlags flags, GetTransposeFlags(attrs));
  ASSIGN_OR_RETURN(TensorType out,
                   MatmulType({"self", in[0], flags.a, "transpose_a"}, {"mat2", in[1], flags.b, "transpose_b"}));
  return TypeList{out};
}

absl::StatusOr<TypeList> AddmmInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(attrs.GetFloat("beta", 1.0).status());
  RETURN_IF_ERROR(attrs.GetFloat("alpha", 1.0).status());
  ASSIGN_OR_RETURN(TransposeFlags flags, GetTransposeFlags(attrs));
  const MatrixOperand mat1{"mat1", in[1], flags.a, "transpose_a"};
  const MatrixOperand mat2{"mat2", in[2], flags.b, "transpose_b"};
  ASSIGN_OR_RETURN(TensorType out, MatmulType(mat1, mat2));
  if (in[0].dtype != out.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("self is ", in[0].ToString(), " but mat1 is ", in[1].ToString(), "; dtypes must match"));
  }
  if (!BroadcastsTo(in[0].shape, out.shape)) {
    return absl::InvalidArgumentError(absl::StrCat("self is ", in[0].ToString(), " and does not broadcast to ",
                                                   ShapeString(out.shape), " (mat1 ", in[1].ToString(),
                                                   flags.a ? " transposed" : "", " @ mat2 ", in[2].ToString(),
                                                   flags.b ? " transposed" : "", ")"));
  }
  return TypeList{out};
}

}  // namespace

void RegisterLinalgOps(OpRegistry& registry) {
  ops::RegisterOp(registry, "mm", 2, 2, 1, AliasKind::kNone, MmInfer);
  ops::RegisterOp(registry, "addmm", 3, 3, 1, AliasKind::kNone, AddmmInfer);
}

}  // namespace tandem
