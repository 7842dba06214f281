#include "kernels/cuda/strided_layout.h"

#include "absl/strings/str_cat.h"
#include "ir/ops/shape_rules.h"

namespace tandem::cuda {

absl::StatusOr<std::vector<StridedOperand>> CollapseLayouts(const Shape& out_shape,
                                                            const std::vector<std::vector<int64_t>>& strides) {
  const size_t operands = strides.size();
  // Keep the dims of size > 1; merge a dim into the previous kept one when
  // every operand steps over it contiguously.
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> merged(operands);
  for (size_t d = 0; d < out_shape.size(); ++d) {
    if (out_shape[d] == 1) continue;
    bool mergeable = !sizes.empty();
    for (size_t k = 0; k < operands && mergeable; ++k) {
      mergeable = merged[k].back() == strides[k][d] * out_shape[d];
    }
    if (mergeable) {
      sizes.back() *= out_shape[d];
      for (size_t k = 0; k < operands; ++k) merged[k].back() = strides[k][d];
    } else {
      sizes.push_back(out_shape[d]);
      for (size_t k = 0; k < operands; ++k) merged[k].push_back(strides[k][d]);
    }
  }
  if (sizes.size() > static_cast<size_t>(kMaxDims)) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(out_shape), " needs ", sizes.size(),
                                                   " strided dims; kernels index at most ", kMaxDims));
  }
  const std::vector<int64_t> contiguous = ContiguousStrides(sizes);
  std::vector<StridedOperand> layouts(operands);
  for (size_t k = 0; k < operands; ++k) {
    if (merged[k] == contiguous) continue;  // rank 0: element i
    StridedOperand& layout = layouts[k];
    layout.rank = static_cast<int>(sizes.size());
    for (size_t d = 0; d < sizes.size(); ++d) {
      layout.sizes[d] = sizes[d];
      layout.strides[d] = merged[k][d];
    }
  }
  return layouts;
}

absl::StatusOr<StridedOperand> BroadcastLayout(const Shape& from, const Shape& to) {
  auto layouts = CollapseLayouts(to, {BroadcastStrides(from, to)});
  if (!layouts.ok()) return layouts.status();
  return (*layouts)[0];
}

bool IsBatchedTranspose(const StridedOperand& layout, int64_t* batch, int64_t* rows, int64_t* cols) {
  // Output [cols, rows] reading input [rows, cols]: out(i, j) = in(j, i) at
  // offset j * cols + i, so strides are [1, cols].
  if (layout.rank == 2 && layout.strides[0] == 1 && layout.strides[1] == layout.sizes[0]) {
    *batch = 1;
    *cols = layout.sizes[0];
    *rows = layout.sizes[1];
    return true;
  }
  if (layout.rank == 3 && layout.strides[1] == 1 && layout.strides[2] == layout.sizes[1] &&
      layout.strides[0] == layout.sizes[1] * layout.sizes[2]) {
    *batch = layout.sizes[0];
    *cols = layout.sizes[1];
    *rows = layout.sizes[2];
    return true;
  }
  return false;
}

}  // namespace tandem::cuda
