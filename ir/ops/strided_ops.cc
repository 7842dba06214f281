// Registry entries of the ops that read or write a strided view of self:
// slice_scatter and select_scatter (slice's and select's writing twins),
// as_strided / as_strided_copy and as_strided_scatter (self's contiguous
// bytes read as the storage), diagonal / diagonal_copy and diagonal_scatter,
// flip and repeat.
// They move bytes and accept every dtype; each result is a fresh contiguous
// tensor (views are copies in Tandem).
//
// Every view is resolved and bounds-checked here, at registration
// (index_rules.h, slice_rules.h), with the same functions the kernels use,
// so no attribute can make a kernel read or write outside its tensors.
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/index_rules.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/slice_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::Status WithSelf(const TensorType& self, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat("self is ", self.ToString(), ": ", status.message()));
}

// src has self's dtype and exactly `expected` as its shape.
absl::Status SrcIs(const TensorType& self, const TensorType& src, const Shape& expected) {
  if (src.dtype == self.dtype && src.shape == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("src is ", src.ToString(), "; expected ", DTypeName(self.dtype),
                                                 ShapeString(expected), " for self ", self.ToString()));
}

// slice_scatter(self, src; dim=0, start, end, step=1): self with src in the
// slice (slice.Tensor's attributes and clamping).
absl::StatusOr<TypeList> SliceScatterInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  auto range = ResolveSlice(attrs, in[0].shape);
  RETURN_IF_ERROR(WithSelf(in[0], range.status()));
  Shape expected = in[0].shape;
  expected[range->dim] = range->length;
  RETURN_IF_ERROR(SrcIs(in[0], in[1], expected));
  return TypeList{in[0]};
}

// select_scatter(self, src; dim, index): self with src at index of dim.
absl::StatusOr<TypeList> SelectScatterInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  auto range = ResolveSelect(attrs, in[0].shape);
  RETURN_IF_ERROR(WithSelf(in[0], range.status()));
  Shape expected = in[0].shape;
  expected.erase(expected.begin() + range->dim);
  RETURN_IF_ERROR(SrcIs(in[0], in[1], expected));
  return TypeList{in[0]};
}

// as_strided / as_strided_copy(self; size, stride, storage_offset): [size].
absl::StatusOr<TypeList> AsStridedInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  auto view = ResolveAsStrided(attrs, in[0].shape);
  RETURN_IF_ERROR(WithSelf(in[0], view.status()));
  return TypeList{{in[0].dtype, view->sizes}};
}

// as_strided_scatter(self, src [size]; size, stride, storage_offset): self
// with src written through the view. Where the view overlaps itself (a
// stride of 0), which of the colliding src elements lands is unspecified,
// as in PyTorch.
absl::StatusOr<TypeList> AsStridedScatterInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  auto view = ResolveAsStrided(attrs, in[0].shape);
  RETURN_IF_ERROR(WithSelf(in[0], view.status()));
  RETURN_IF_ERROR(SrcIs(in[0], in[1], view->sizes));
  return TypeList{in[0]};
}

absl::StatusOr<TypeList> DiagonalInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  auto view = ResolveDiagonal(attrs, in[0].shape);
  RETURN_IF_ERROR(WithSelf(in[0], view.status()));
  return TypeList{{in[0].dtype, view->sizes}};
}

// diagonal_scatter(self, src; offset, dim1, dim2): self with src (the
// diagonal's shape) on the diagonal; diagonal's backward.
absl::StatusOr<TypeList> DiagonalScatterInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  auto view = ResolveDiagonal(attrs, in[0].shape);
  RETURN_IF_ERROR(WithSelf(in[0], view.status()));
  RETURN_IF_ERROR(SrcIs(in[0], in[1], view->sizes));
  return TypeList{in[0]};
}

absl::StatusOr<TypeList> FlipInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(WithSelf(in[0], ResolveFlip(attrs, in[0].shape).status()));
  return TypeList{in[0]};
}

absl::StatusOr<TypeList> RepeatInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  auto plan = ResolveRepeat(attrs, in[0].shape);
  RETURN_IF_ERROR(WithSelf(in[0], plan.status()));
  return TypeList{{in[0].dtype, plan->result}};
}

}  // namespace

void RegisterStridedOps(OpRegistry& registry) {
  using ops::RegisterOp;
  constexpr AliasKind kNone = AliasKind::kNone;
  constexpr AliasKind kInPlace = AliasKind::kInPlace;
  // The slice, select and diagonal scatters copy self and then write src into the
  // copy: the output may take self's place (src, of another shape or at
  // the same offsets, is never self's buffer read at other offsets).
  // as_strided_scatter's src may be self itself read through any view, so
  // its output has a buffer of its own.
  RegisterOp(registry, "slice_scatter", 2, 2, 1, kInPlace, SliceScatterInfer);
  RegisterOp(registry, "select_scatter", 2, 2, 1, kInPlace, SelectScatterInfer);
  RegisterOp(registry, "diagonal_scatter", 2, 2, 1, kInPlace, DiagonalScatterInfer);
  RegisterOp(registry, "as_strided_scatter", 2, 2, 1, kNone, AsStridedScatterInfer);
  RegisterOp(registry, "as_strided", 1, 1, 1, kNone, AsStridedInfer, {"as_strided_copy"});
  RegisterOp(registry, "diagonal", 1, 1, 1, kNone, DiagonalInfer, {"diagonal_copy"});
  RegisterOp(registry, "flip", 1, 1, 1, kNone, FlipInfer);
  RegisterOp(registry, "repeat", 1, 1, 1, kNone, RepeatInfer);
}

}  // namespace tandem
