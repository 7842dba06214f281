// How the advanced-indexing ops (index.Tensor, index_put) and the strided
// views (as_strided, diagonal, flip, repeat, the slice/select scatters) map
// the elements of their result onto self's contiguous row-major storage:
// resolved once from a node's attributes and shapes, and shared by the op
// registry and every backend's kernels, so that the three agree on what an
// attribute means.
//
// Plain functions without state; thread-safe. Errors are INVALID_ARGUMENT
// messages that name the attribute or the input; callers prefix the op.
#ifndef TANDEM_IR_OPS_INDEX_RULES_H_
#define TANDEM_IR_OPS_INDEX_RULES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/attrs.h"
#include "ir/dtype.h"
#include "ir/ops/slice_rules.h"

namespace tandem {

// self[indices] with k >= 1 index tensors, as PyTorch's advanced indexing
// reads `Tensor?[] indices`: index tensor j indexes self's dim dims[j] (the
// `indexed_dims` attribute, the positions of the list's non-None entries,
// which the capture records because None entries are not inputs; absent, the
// first k dims). The index tensors broadcast to B. The result is self's
// other dims with B in place of the indexed ones: where the indexed dims
// were when they are adjacent, else first (PyTorch's rule).
struct AdvancedIndex {
  std::vector<int> dims;  // self's indexed dims, ascending, one per index tensor
  Shape broadcast;        // B
  int broadcast_at = 0;   // the first of B's dims in `result`
  Shape result;
};
absl::StatusOr<AdvancedIndex> ResolveAdvancedIndex(const Attrs& attrs, const Shape& self,
                                                   const std::vector<Shape>& indices);

// Strides over `index.result`: the element offset in self (contiguous) that
// the dims that are not indexed contribute; 0 on B's dims.
std::vector<int64_t> AdvancedIndexSelfStrides(const AdvancedIndex& index, const Shape& self);
// Strides over `index.result` that read an index tensor of `shape` (which
// broadcasts to B); 0 outside B's dims.
std::vector<int64_t> AdvancedIndexTensorStrides(const AdvancedIndex& index, const Shape& shape);
// Strides over `index.result` that give the position in B (contiguous).
std::vector<int64_t> AdvancedIndexPositionStrides(const AdvancedIndex& index);

// A strided view of a contiguous tensor: the element at index (i_0, ...) of
// `sizes` is at offset + sum(i_d * strides[d]) (strides may be 0 or, for
// flip, negative). Every offset a resolved view names lies inside the
// tensor it was resolved against.
struct StridedView {
  Shape sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

// as_strided(size, stride, storage_offset=0), reading a contiguous tensor
// of `self` as its storage: sizes >= 0, strides >= 0 (PyTorch refuses
// negative ones), and, unless the view is empty, its last element inside
// self.
absl::StatusOr<StridedView> ResolveAsStrided(const Attrs& attrs, const Shape& self);

// diagonal(offset=0, dim1=0, dim2=1): self's other dims, then the diagonal.
absl::StatusOr<StridedView> ResolveDiagonal(const Attrs& attrs, const Shape& self);

// flip(dims): each named dim read backwards (a dim named twice is refused).
absl::StatusOr<StridedView> ResolveFlip(const Attrs& attrs, const Shape& self);

// repeat(repeats): len(repeats) >= rank; the result's dim d (of the
// right-aligned self) is repeats[d] copies of self's dim. `view` reads self
// over [r_0, ..., r_lead-1, r_lead, s_0, r_lead+1, s_1, ...] (repeat dims
// of stride 0), whose row-major order is the result's.
struct RepeatPlan {
  Shape result;
  StridedView view;
};
absl::StatusOr<RepeatPlan> ResolveRepeat(const Attrs& attrs, const Shape& self);

// The part of a tensor of `shape` that `range` (of ResolveSlice or
// ResolveSelect) names; with `drop_dim` (select), without the sliced dim.
StridedView SliceView(const SliceRange& range, const Shape& shape, bool drop_dim);

}  // namespace tandem

#endif  // TANDEM_IR_OPS_INDEX_RULES_H_
