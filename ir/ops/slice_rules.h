// How the slicing ops (select, slice, split, unbind, cat, stack and their
// backwards) read their attributes: PyTorch's defaults, negative indices and
// clamping, resolved once and shared by the op registry and every backend's
// kernels. Plain functions; thread-safe. Errors are INVALID_ARGUMENT messages
// that name the attribute; callers prefix the op.
#ifndef TANDEM_IR_OPS_SLICE_RULES_H_
#define TANDEM_IR_OPS_SLICE_RULES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/attrs.h"
#include "ir/dtype.h"

namespace tandem {

// Elements start, start + step, ... (length of them) of dim `dim`.
struct SliceRange {
  int dim = 0;
  int64_t start = 0;
  int64_t length = 0;
  int64_t step = 1;
};

// select(dim, index) of a tensor of `shape`: one element of `dim` (index may
// be negative, counting from the end). An index outside the dim is an error.
absl::StatusOr<SliceRange> ResolveSelect(const Attrs& attrs, const Shape& shape);

// slice(dim=0, start=None, end=None, step=1) of `shape`: absent start/end
// are the dim's ends; negative ones count from the end; both are clamped to
// the dim, as PyTorch does. step must be positive.
absl::StatusOr<SliceRange> ResolveSlice(const Attrs& attrs, const Shape& shape);

// The pieces of split.Tensor (split_size; dim=0) and split_with_sizes
// (split_sizes; dim=0) of `shape`: the dim and each piece's size. split of a
// dim of size 0 gives one empty piece, as PyTorch does.
struct SplitPieces {
  int dim = 0;
  std::vector<int64_t> sizes;
};
absl::StatusOr<SplitPieces> ResolveSplit(const Attrs& attrs, const Shape& shape, bool with_sizes);

// The input_sizes attribute of select_backward / slice_backward.
absl::StatusOr<Shape> InputSizesAttr(const Attrs& attrs);

// cat's inputs that take part: PyTorch skips 1-D empty tensors ([0]) when the
// other inputs have another rank. Indices into `inputs`.
std::vector<int> CatParticipants(const std::vector<Shape>& inputs);

}  // namespace tandem

#endif  // TANDEM_IR_OPS_SLICE_RULES_H_
