// Host-side layout helpers of the CUDA kernels (kernels/cuda only): how each
// operand of a launch is read at the output's indices, with dims collapsed
// so that kernels index as few dims as possible. Plain functions;
// thread-safe.
#ifndef TANDEM_KERNELS_CUDA_STRIDED_LAYOUT_H_
#define TANDEM_KERNELS_CUDA_STRIDED_LAYOUT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "ir/dtype.h"
#include "kernels/cuda/launch.h"

namespace tandem::cuda {

// Layouts for reading operands at the indices of `out_shape`, operand k with
// element strides `strides[k]` (one per dim of out_shape; 0 where it is
// broadcast). Dims of size 1 are dropped and adjacent dims merged where every
// operand walks them contiguously; an operand that ends up reading element i
// at output index i gets rank 0 (contiguous). INVALID_ARGUMENT past
// kMaxDims dims.
absl::StatusOr<std::vector<StridedOperand>> CollapseLayouts(const Shape& out_shape,
                                                            const std::vector<std::vector<int64_t>>& strides);

// The layout for reading a tensor of shape `from` broadcast to `to`.
absl::StatusOr<StridedOperand> BroadcastLayout(const Shape& from, const Shape& to);

// Whether `layout` (of a gather) is a batched matrix transpose: the output
// is [batch, cols, rows] of an input [batch, rows, cols]. Fills the sizes.
bool IsBatchedTranspose(const StridedOperand& layout, int64_t* batch, int64_t* rows, int64_t* cols);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_STRIDED_LAYOUT_H_
