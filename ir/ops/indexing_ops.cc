// Registry entries of the ops that index with data: embedding and its
// backward, gather, scatter (.value and .src), index_select, index_put; and
// the index makers arange and the "empty" constructors.
//
// Index tensors are int64 or int32, as in PyTorch (index_put's may mix the
// two); outputs stay of self's dtype. index_put reads its indices as
// index.Tensor does (advanced_index_ops.cc, index_rules.h). Their values are data, checked by the
// kernels when the iteration runs (INVALID_ARGUMENT naming the op and the
// value; never an out-of-bounds read). Only index_put wraps negative indices, as
// PyTorch's advanced indexing does; the others refuse them, as PyTorch does.
#include <algorithm>
#include <cmath>
#include <variant>

#include "absl/strings/str_cat.h"
#include "base/checked_math.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/index_rules.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::Status RequireIndex(absl::string_view input, const TensorType& type) {
  if (type.dtype == DType::kInt64 || type.dtype == DType::kInt32) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(input, " is ", type.ToString(), "; indices must be int64 or int32"));
}

absl::StatusOr<int> DimAttr(const Attrs& attrs, absl::string_view input, const TensorType& type) {
  ASSIGN_OR_RETURN(int64_t dim, attrs.GetInt("dim"));
  auto d = NormalizeDim(dim, type.rank());
  if (!d.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(input, " is ", type.ToString(), ": ", d.status().message()));
  }
  return *d;
}

// embedding(weight [V, D], indices int64 or int32; padding_idx,
// scale_grad_by_freq, sparse): indices.shape + [D].
absl::StatusOr<TypeList> EmbeddingInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("weight", in[0], ops::kStorableAndHalfTypes));
  RETURN_IF_ERROR(ops::RequireRank("weight", in[0], 2));
  RETURN_IF_ERROR(RequireIndex("indices", in[1]));
  ASSIGN_OR_RETURN(bool sparse, attrs.GetBool("sparse", false));
  if (sparse) return absl::InvalidArgumentError("attribute 'sparse' is true; sparse gradients are not supported");
  RETURN_IF_ERROR(attrs.GetInt("padding_idx", -1).status());
  RETURN_IF_ERROR(attrs.GetBool("scale_grad_by_freq", false).status());
  Shape out = in[1].shape;
  out.push_back(in[0].shape[1]);
  return TypeList{{in[0].dtype, out}};
}

// embedding_dense_backward(grad_output [..., D], indices [...];
// num_weights, padding_idx, scale_grad_by_freq): [num_weights, D].
absl::StatusOr<TypeList> EmbeddingBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("grad_output", in[0], ops::kFloatAndHalfTypes));
  RETURN_IF_ERROR(RequireIndex("indices", in[1]));
  ASSIGN_OR_RETURN(int64_t num_weights, attrs.GetInt("num_weights"));
  ASSIGN_OR_RETURN(int64_t padding_idx, attrs.GetInt("padding_idx", -1));
  ASSIGN_OR_RETURN(bool by_freq, attrs.GetBool("scale_grad_by_freq", false));
  if (by_freq) {
    return absl::InvalidArgumentError(
        "attribute 'scale_grad_by_freq' is true; gradients scaled by frequency are not supported");
  }
  if (num_weights < 0 || padding_idx >= num_weights) {
    return absl::InvalidArgumentError(
        absl::StrCat("attributes num_weights ", num_weights, " and padding_idx ", padding_idx, " are inconsistent"));
  }
  const bool shapes_match =
      in[0].rank() == in[1].rank() + 1 && std::equal(in[1].shape.begin(), in[1].shape.end(), in[0].shape.begin());
  if (!shapes_match) {
    return absl::InvalidArgumentError(absl::StrCat("grad_output is ", in[0].ToString(), " but indices is ",
                                                   in[1].ToString(), "; expected grad_output = indices' shape + [D]"));
  }
  return TypeList{{in[0].dtype, {num_weights, in[0].shape.back()}}};
}

// index.size(d) <= other.size(d) for every d (except `skip`, when >= 0).
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

// gather(self, index; dim, sparse_grad): index's shape, self's dtype.
absl::StatusOr<TypeList> GatherInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableTypes));
  RETURN_IF_ERROR(RequireIndex("index", in[1]));
  ASSIGN_OR_RETURN(int dim, DimAttr(attrs, "self", in[0]));
  RETURN_IF_ERROR(IndexFits(in[1], "self", in[0], dim));
  return TypeList{{in[0].dtype, in[1].shape}};
}

// scatter.value(self, index; dim, value), scatter.src(self, index, src; dim).
InferFn ScatterInfer(bool has_src) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableTypes));
    RETURN_IF_ERROR(RequireIndex("index", in[1]));
    if (attrs.Has("reduce")) {
      return absl::InvalidArgumentError("attribute 'reduce' is not supported (use scatter without a reduction)");
    }
    ASSIGN_OR_RETURN(int dim, DimAttr(attrs, "self", in[0]));
    RETURN_IF_ERROR(IndexFits(in[1], "self", in[0], dim));
    if (has_src) {
      if (in[2].dtype != in[0].dtype) {
        return absl::InvalidArgumentError(
            absl::StrCat("self is ", in[0].ToString(), " but src is ", in[2].ToString(), "; dtypes must match"));
      }
      RETURN_IF_ERROR(IndexFits(in[1], "src", in[2], -1));
    } else {
      RETURN_IF_ERROR(attrs.GetFloat("value").status());
    }
    return TypeList{in[0]};
  };
}

// index_select(self, index [n] or []; dim): self with dim of size n.
absl::StatusOr<TypeList> IndexSelectInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableTypes));
  RETURN_IF_ERROR(RequireIndex("index", in[1]));
  if (in[1].rank() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("index is ", in[1].ToString(), "; expected rank 0 or 1"));
  }
  ASSIGN_OR_RETURN(int dim, DimAttr(attrs, "self", in[0]));
  TensorType out = in[0];
  if (out.rank() > 0) out.shape[dim] = in[1].numel();
  return TypeList{out};
}

// index_put(self, indices..., values; accumulate, indexed_dims): k >= 1
// index tensors (int64 or int32, each its own) on self's dims indexed_dims
// (absent: the first k), read as index.Tensor reads them (index_rules.h);
// values broadcasts to the shape self[indices] has. Any dtype: without
// accumulate the op moves bytes; 16-bit sums are computed in float32.
absl::StatusOr<TypeList> IndexPutInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableAndHalfTypes));
  RETURN_IF_ERROR(attrs.GetBool("accumulate", false).status());
  const int k = static_cast<int>(in.size()) - 2;
  std::vector<Shape> shapes;
  for (int i = 0; i < k; ++i) {
    RETURN_IF_ERROR(RequireIndex(absl::StrCat("indices[", i, "]"), in[1 + i]));
    shapes.push_back(in[1 + i].shape);
  }
  auto index = ResolveAdvancedIndex(attrs, in[0].shape, shapes);
  if (!index.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("self is ", in[0].ToString(), ": ", index.status().message()));
  }
  const TensorType& values = in.back();
  if (values.dtype != in[0].dtype || !BroadcastsTo(values.shape, index->result)) {
    return absl::InvalidArgumentError(absl::StrCat("values is ", values.ToString(), "; expected ",
                                                   DTypeName(in[0].dtype), " broadcasting to ",
                                                   ShapeString(index->result)));
  }
  return TypeList{in[0]};
}

bool IsIntAttr(const Attrs& attrs, const char* name) {
  auto it = attrs.values().find(name);
  return it == attrs.values().end() || std::holds_alternative<int64_t>(it->second);
}

// arange / arange.start / arange.start_step: start (0), end, step (1);
// int64 when all three are integers, else float32, unless `dtype` says.
absl::StatusOr<TypeList> ArangeInfer(const Attrs& attrs, absl::Span<const TensorType>) {
  ASSIGN_OR_RETURN(double start, attrs.GetFloat("start", 0.0));
  ASSIGN_OR_RETURN(double end, attrs.GetFloat("end"));
  ASSIGN_OR_RETURN(double step, attrs.GetFloat("step", 1.0));
  const bool ints = IsIntAttr(attrs, "start") && IsIntAttr(attrs, "end") && IsIntAttr(attrs, "step");
  ASSIGN_OR_RETURN(DType dtype, attrs.GetDType("dtype", ints ? DType::kInt64 : DType::kFloat32));
  RETURN_IF_ERROR(ops::RequireDTypeValue("attribute 'dtype'", dtype, ops::kNumericTypes));
  if (step == 0.0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step) ||
      (end - start) / step < 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("start ", start, ", end ", end, ", step ", step, " do not describe a finite range"));
  }
  // The length is bounded before it becomes an integer: a range of more
  // than 2^53 elements is no tensor the daemon could hold anyway.
  const double steps = std::ceil((end - start) / step);
  if (steps > 9007199254740992.0) {
    return absl::InvalidArgumentError(absl::StrCat("start ", start, ", end ", end, ", step ", step,
                                                   " describe a range of ", steps, " elements; too long"));
  }
  int64_t length = static_cast<int64_t>(steps);
  if (ints) {
    ASSIGN_OR_RETURN(int64_t s, attrs.GetInt("start", 0));
    ASSIGN_OR_RETURN(int64_t e, attrs.GetInt("end"));
    ASSIGN_OR_RETURN(int64_t st, attrs.GetInt("step", 1));
    // Exact in integers; the range's sign was checked above.
    std::optional<int64_t> diff = st > 0 ? CheckedSub(e, s) : CheckedSub(s, e);
    std::optional<int64_t> stride = st > 0 ? std::optional<int64_t>(st) : CheckedSub(0, st);
    if (!diff.has_value() || !stride.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("start ", s, ", end ", e, ", step ", st, " overflow an int64 range"));
    }
    length = *diff <= 0 ? 0 : CeilDiv(*diff, *stride);
  }
  return TypeList{{dtype, {length < 0 ? 0 : length}}};
}

// empty_like(self; dtype), empty_permuted(size, physical_layout; dtype):
// Tandem's "empty" tensors are zeros, so no result depends on stale memory.
// Every tensor is contiguous, so physical_layout only has to be a
// permutation.
absl::StatusOr<TypeList> EmptyLikeInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(DType dtype, attrs.GetDType("dtype", in[0].dtype));
  RETURN_IF_ERROR(ops::RequireDTypeValue("attribute 'dtype'", dtype, ops::kStorableTypes));
  return TypeList{{dtype, in[0].shape}};
}

absl::StatusOr<TypeList> EmptyPermutedInfer(const Attrs& attrs, absl::Span<const TensorType>) {
  ASSIGN_OR_RETURN(std::vector<int64_t> size, attrs.GetInts("size"));
  for (int64_t d : size) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("attribute 'size' has the negative dim ", d));
  }
  if (attrs.Has("physical_layout")) {
    ASSIGN_OR_RETURN(std::vector<int64_t> layout, attrs.GetInts("physical_layout"));
    RETURN_IF_ERROR(NormalizePermutation(layout, static_cast<int>(size.size())).status());
  }
  ASSIGN_OR_RETURN(DType dtype, attrs.GetDType("dtype", DType::kFloat32));
  RETURN_IF_ERROR(ops::RequireDTypeValue("attribute 'dtype'", dtype, ops::kStorableTypes));
  return TypeList{{dtype, Shape(size.begin(), size.end())}};
}

}  // namespace

void RegisterIndexingOps(OpRegistry& registry) {
  using ops::RegisterOp;
  constexpr AliasKind kNone = AliasKind::kNone;
  constexpr AliasKind kInPlace = AliasKind::kInPlace;
  RegisterOp(registry, "embedding", 2, 2, 1, kNone, EmbeddingInfer);
  RegisterOp(registry, "embedding_dense_backward", 2, 2, 1, kNone, EmbeddingBackwardInfer);
  RegisterOp(registry, "gather", 2, 2, 1, kNone, GatherInfer);
  RegisterOp(registry, "scatter.value", 2, 2, 1, kInPlace, ScatterInfer(false));
  RegisterOp(registry, "scatter.src", 3, 3, 1, kInPlace, ScatterInfer(true));
  RegisterOp(registry, "index_select", 2, 2, 1, kNone, IndexSelectInfer);
  RegisterOp(registry, "index_put", 3, -1, 1, kInPlace, IndexPutInfer, {"_unsafe_index_put"});
  RegisterOp(registry, "arange.start_step", 0, 0, 1, kNone, ArangeInfer, {"arange.start", "arange"});
  RegisterOp(registry, "empty_like", 1, 1, 1, kNone, EmptyLikeInfer);
  RegisterOp(registry, "empty_permuted", 0, 0, 1, kNone, EmptyPermutedInfer);
}

}  // namespace tandem
