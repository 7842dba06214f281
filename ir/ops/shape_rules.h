// Shape rules shared by the op registry and every backend's kernels:
// broadcasting, dim normalization (negative dims count from the end), view
// sizes with one -1, reductions and permutations over contiguous row-major
// tensors.
//
// Plain functions without state; thread-safe. Errors are INVALID_ARGUMENT
// messages that name the shapes and dims involved; callers prefix the op and
// the input they concern.
#ifndef TANDEM_IR_OPS_SHAPE_RULES_H_
#define TANDEM_IR_OPS_SHAPE_RULES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/dtype.h"

namespace tandem {

// NumPy/PyTorch broadcasting of two shapes: aligned at the last dim, each
// pair of dims equal or one of them 1.
absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);

// True when `from` broadcasts to exactly `to` (one direction: `to` is kept).
bool BroadcastsTo(const Shape& from, const Shape& to);

// Element strides of contiguous row-major `shape`.
std::vector<int64_t> ContiguousStrides(const Shape& shape);

// Strides to read a contiguous tensor of shape `from` at the indices of
// `to`, which `from` broadcasts to (BroadcastsTo must hold): one per dim of
// `to`, 0 for a dim that `from` lacks or has as 1.
std::vector<int64_t> BroadcastStrides(const Shape& from, const Shape& to);

// Maps `dim` in [-rank, rank) to [0, rank). A rank-0 tensor accepts dims 0
// and -1, as in PyTorch. For unsqueeze, pass rank + 1.
absl::StatusOr<int> NormalizeDim(int64_t dim, int rank);

// The shape of a view of `input` with `size`: one entry may be -1 (inferred
// from the element count); the element counts must match.
absl::StatusOr<Shape> InferViewShape(const Shape& input, absl::Span<const int64_t> size);

// Which dims a reduction over `dims` covers: empty `dims` means all dims.
// Each dim is normalized; a dim named twice is an error.
absl::StatusOr<std::vector<bool>> ReductionMask(absl::Span<const int64_t> dims, int rank);

// The shape after reducing the dims in `mask`: removed, or kept as 1.
Shape ReducedShape(const Shape& input, const std::vector<bool>& mask, bool keepdim);

// Normalizes `dims` and checks it is a permutation of [0, rank).
absl::StatusOr<std::vector<int>> NormalizePermutation(absl::Span<const int64_t> dims, int rank);

// Views a tensor as [outer, size(dim), inner] around `dim` (already
// normalized; a rank-0 tensor is [1, 1, 1]).
struct DimSplit {
  int64_t outer = 1;
  int64_t size = 1;
  int64_t inner = 1;
};
DimSplit SplitAtDim(const Shape& shape, int dim);

}  // namespace tandem

#endif  // TANDEM_IR_OPS_SHAPE_RULES_H_
