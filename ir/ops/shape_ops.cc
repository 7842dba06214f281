// Registry entries of the shape ops: views (same bytes, new shape),
// transposes and permutations, expand, and the identity copies. They accept
// every dtype: their kernels move bytes.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::Status WithInput(const TensorType& self, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat("self is ", self.ToString(), ": ", status.message()));
}

absl::StatusOr<TypeList> TInfer(const Attrs&, absl::Span<const TensorType> in) {
  if (in[0].rank() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("self is ", in[0].ToString(), "; t expects a tensor of rank <= 2 (use transpose.int)"));
  }
  TensorType out = in[0];
  if (out.rank() == 2) std::swap(out.shape[0], out.shape[1]);
  return TypeList{out};
}

absl::StatusOr<TypeList> TransposeInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(int64_t dim0, attrs.GetInt("dim0"));
  ASSIGN_OR_RETURN(int64_t dim1, attrs.GetInt("dim1"));
  auto d0 = NormalizeDim(dim0, in[0].rank());
  RETURN_IF_ERROR(WithInput(in[0], d0.status()));
  auto d1 = NormalizeDim(dim1, in[0].rank());
  RETURN_IF_ERROR(WithInput(in[0], d1.status()));
  TensorType out = in[0];
  if (out.rank() > 0) std::swap(out.shape[*d0], out.shape[*d1]);
  return TypeList{out};
}

absl::StatusOr<TypeList> PermuteInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("dims"));
  auto perm = NormalizePermutation(dims, in[0].rank());
  RETURN_IF_ERROR(WithInput(in[0], perm.status()));
  TensorType out = in[0];
  for (size_t i = 0; i < perm->size(); ++i) out.shape[i] = in[0].shape[(*perm)[i]];
  return TypeList{out};
}

// view and its variants. `stride` (of _reshape_alias_copy), when given,
// must describe the contiguous layout: Tandem's tensors have no other.
absl::StatusOr<TypeList> ViewInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(std::vector<int64_t> size, attrs.GetInts("size"));
  auto shape = InferViewShape(in[0].shape, size);
  RETURN_IF_ERROR(WithInput(in[0], shape.status()));
  if (attrs.Has("stride")) {
    ASSIGN_OR_RETURN(std::vector<int64_t> stride, attrs.GetInts("stride"));
    if (stride != ContiguousStrides(*shape)) {
      return absl::InvalidArgumentError(absl::StrCat("attribute 'stride' [", absl::StrJoin(stride, ", "),
                                                     "] is not the contiguous stride [",
                                                     absl::StrJoin(ContiguousStrides(*shape), ", "), "] of ",
                                                     ShapeString(*shape), "; only contiguous tensors are supported"));
    }
  }
  return TypeList{{in[0].dtype, *shape}};
}

absl::StatusOr<TypeList> UnsqueezeInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(int64_t dim, attrs.GetInt("dim"));
  auto d = NormalizeDim(dim, in[0].rank() + 1);
  RETURN_IF_ERROR(WithInput(in[0], d.status()));
  TensorType out = in[0];
  out.shape.insert(out.shape.begin() + *d, 1);
  return TypeList{out};
}

// Removes `dim` when its size is 1; otherwise the shape is unchanged (as in
// PyTorch).
absl::StatusOr<TypeList> SqueezeInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(int64_t dim, attrs.GetInt("dim"));
  auto d = NormalizeDim(dim, in[0].rank());
  RETURN_IF_ERROR(WithInput(in[0], d.status()));
  TensorType out = in[0];
  if (out.rank() > 0 && out.shape[*d] == 1) out.shape.erase(out.shape.begin() + *d);
  return TypeList{out};
}

// `size` has at least self's rank; -1 keeps a dim; a dim of self may only
// grow from 1; new leading dims need explicit sizes.
absl::StatusOr<TypeList> ExpandInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(std::vector<int64_t> size, attrs.GetInts("size"));
  const Shape& self = in[0].shape;
  const std::string size_text = absl::StrCat("[", absl::StrJoin(size, ", "), "]");
  if (size.size() < self.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("self is ", in[0].ToString(), "; size ", size_text, " has fewer dims than self"));
  }
  const size_t lead = size.size() - self.size();
  Shape out(size.size());
  for (size_t i = 0; i < size.size(); ++i) {
    const int64_t want = size[i];
    if (i < lead) {
      if (want < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("size ", size_text, ": new leading dim ", i, " must be given explicitly, not ", want));
      }
      out[i] = want;
      continue;
    }
    const int64_t have = self[i - lead];
    if (want == -1 || want == have) {
      out[i] = have;
    } else if (have == 1 && want >= 0) {
      out[i] = want;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("self is ", in[0].ToString(), " and cannot expand to ", size_text,
                                                     ": dim ", i, " is ", have, ", not 1"));
    }
  }
  return TypeList{{in[0].dtype, out}};
}

absl::StatusOr<TypeList> IdentityInfer(const Attrs&, absl::Span<const TensorType> in) { return TypeList{in[0]}; }

}  // namespace

void RegisterShapeOps(OpRegistry& registry) {
  using ops::RegisterOp;
  constexpr AliasKind kNone = AliasKind::kNone;
  constexpr AliasKind kView = AliasKind::kView;
  RegisterOp(registry, "t", 1, 1, 1, kNone, TInfer, {"t_copy"});
  RegisterOp(registry, "transpose.int", 1, 1, 1, kNone, TransposeInfer, {"transpose_copy.int"});
  RegisterOp(registry, "permute", 1, 1, 1, kNone, PermuteInfer, {"permute_copy"});
  RegisterOp(registry, "view", 1, 1, 1, kView, ViewInfer,
             {"view_copy", "_unsafe_view", "reshape", "_reshape_alias_copy"});
  RegisterOp(registry, "unsqueeze", 1, 1, 1, kView, UnsqueezeInfer, {"unsqueeze_copy"});
  RegisterOp(registry, "squeeze.dim", 1, 1, 1, kView, SqueezeInfer, {"squeeze_copy.dim"});
  RegisterOp(registry, "expand", 1, 1, 1, kNone, ExpandInfer, {"expand_copy"});
  // As in PyTorch: alias, detach and contiguous (of a contiguous tensor) share
  // their input's storage; clone makes a copy of its own.
  RegisterOp(registry, "alias", 1, 1, 1, kView, IdentityInfer, {"detach", "contiguous"});
  RegisterOp(registry, "clone", 1, 1, 1, kNone, IdentityInfer);
}

}  // namespace tandem
