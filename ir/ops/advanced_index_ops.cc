// Registry entries of advanced indexing and the reducing scatters:
// index.Tensor (and its alias _unsafe_index.Tensor, which torch 2.x's
// decompositions emit), scatter_add, scatter_reduce.two and masked_scatter.
// index_put, index.Tensor's writing twin, is in indexing_ops.cc and reads
// its indices by the same rule (index_rules.h).
//
// index.Tensor's index tensors are int64 or int32 (each its own); bool
// masks are refused, since they select a data-dependent number of elements
// and every Tandem shape is known at registration. Index values are data,
// checked by the kernels (INVALID_ARGUMENT naming the node and the value,
// never an out-of-bounds read): [-size, size) for index.Tensor (negative
// ones count from the end, as in PyTorch), [0, size) for the scatters.
// masked_scatter checks at run time that source has an element for every
// true mask element.
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/index_rules.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::Status RequireIndexTensor(absl::string_view input, const TensorType& type) {
  if (type.dtype == DType::kInt64 || type.dtype == DType::kInt32) return absl::OkStatus();
  if (type.dtype == DType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat(input, " is ", type.ToString(),
                     "; a bool mask index selects a data-dependent number of elements, which no Tandem shape can hold "
                     "(use where / masked_fill, or int64 indices)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(input, " is ", type.ToString(), "; indices must be int64 or int32"));
}

// index.Tensor(self, indices...; indexed_dims): self[indices] (index_rules.h).
absl::StatusOr<TypeList> IndexInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableAndHalfTypes));
  std::vector<Shape> shapes;
  for (size_t j = 1; j < in.size(); ++j) {
    RETURN_IF_ERROR(RequireIndexTensor(absl::StrCat("indices[", j - 1, "]"), in[j]));
    shapes.push_back(in[j].shape);
  }
  auto index = ResolveAdvancedIndex(attrs, in[0].shape, shapes);
  if (!index.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("self is ", in[0].ToString(), ": ", index.status().message()));
  }
  return TypeList{{in[0].dtype, index->result}};
}

absl::StatusOr<int> DimAttr(const Attrs& attrs, const TensorType& self) {
  ASSIGN_OR_RETURN(int64_t dim, attrs.GetInt("dim"));
  auto d = NormalizeDim(dim, self.rank());
  if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat("self is ", self.ToString(), ": ", d.status().message()));
  return *d;
}

// index.size(d) <= other.size(d) for every d but `skip` (-1: none), as
// PyTorch's scatter requires; ranks equal.
absl::Status IndexFits(const TensorType& index, absl::string_view other_name, const TensorType& other, int skip) {
  if (index.rank() != other.rank()) {
    return absl::InvalidArgumentError(absl::StrCat("index is ", index.ToString(), " but ", other_name, " is ",
                                                   other.ToString(), "; their ranks must match"));
  }
  for (int d = 0; d < index.rank(); ++d) {
    if (d != skip && index.shape[d] > other.shape[d]) {
      return absl::InvalidArgumentError(absl::StrCat("index is ", index.ToString(), " but ", other_name, " is ",
                                                     other.ToString(), "; index is larger in dim ", d));
    }
  }
  return absl::OkStatus();
}

// The dtypes the reducing scatters take: PyTorch's arithmetic types (bool
// has no sum here).
inline constexpr DType kScatterTypes[] = {DType::kFloat32, DType::kFloat64,  DType::kInt64,
                                          DType::kInt32,   DType::kBFloat16, DType::kFloat16};

// scatter_add(self, index, src; dim), scatter_reduce.two(self, index, src;
// dim, reduce, include_self): self's type.
absl::Status ScatterChecks(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], kScatterTypes));
  RETURN_IF_ERROR(RequireIndexTensor("index", in[1]));
  if (in[2].dtype != in[0].dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("self is ", in[0].ToString(), " but src is ", in[2].ToString(), "; dtypes must match"));
  }
  ASSIGN_OR_RETURN(int dim, DimAttr(attrs, in[0]));
  RETURN_IF_ERROR(IndexFits(in[1], "self", in[0], dim));
  return IndexFits(in[1], "src", in[2], -1);
}

absl::StatusOr<TypeList> ScatterAddInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ScatterChecks(attrs, in));
  return TypeList{in[0]};
}

// scatter_reduce.two's second output is the kernels' scratch: the count of
// values each element of self receives (int64 of self's shape) for `mean`,
// int64[0] for the other reductions. The capture names it (lower.py), and
// nothing reads it.
absl::StatusOr<TypeList> ScatterReduceInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ScatterChecks(attrs, in));
  ASSIGN_OR_RETURN(std::string reduce, attrs.GetString("reduce"));
  if (reduce != "sum" && reduce != "prod" && reduce != "mean" && reduce != "amax" && reduce != "amin") {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'reduce' is \"", reduce, "\"; expected sum, prod, mean, amax or amin"));
  }
  RETURN_IF_ERROR(attrs.GetBool("include_self", true).status());
  const TensorType counts{DType::kInt64, reduce == "mean" ? in[0].shape : Shape{0}};
  return TypeList{in[0], counts};
}

// masked_scatter(self, mask bool (broadcasts to self), source (self's
// dtype, any shape)): self's type.
absl::StatusOr<TypeList> MaskedScatterInfer(const Attrs&, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableAndHalfTypes));
  if (in[1].dtype != DType::kBool || !BroadcastsTo(in[1].shape, in[0].shape)) {
    return absl::InvalidArgumentError(absl::StrCat("mask is ", in[1].ToString(),
                                                   "; expected a bool mask broadcasting to ", "self's shape ",
                                                   ShapeString(in[0].shape)));
  }
  if (in[2].dtype != in[0].dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("self is ", in[0].ToString(), " but source is ", in[2].ToString(), "; dtypes must match"));
  }
  return TypeList{in[0]};
}

}  // namespace

void RegisterAdvancedIndexOps(OpRegistry& registry) {
  using ops::RegisterOp;
  constexpr AliasKind kNone = AliasKind::kNone;
  constexpr AliasKind kInPlace = AliasKind::kInPlace;
  RegisterOp(registry, "index.Tensor", 2, -1, 1, kNone, IndexInfer, {"_unsafe_index.Tensor"});
  RegisterOp(registry, "scatter_add", 3, 3, 1, kInPlace, ScatterAddInfer);
  RegisterOp(registry, "scatter_reduce.two", 3, 3, 2, kInPlace, ScatterReduceInfer);
  RegisterOp(registry, "masked_scatter", 3, 3, 1, kInPlace, MaskedScatterInfer);
}

}  // namespace tandem
