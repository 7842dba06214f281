// How the CUDA op wrappers of the activation and comparison families
// (kernels/cuda only) describe broadcast operands to their launchers: one
// BinaryOperand per input, read at the output's indices. Header-only;
// stateless and thread-safe.
#ifndef TANDEM_KERNELS_CUDA_OPERAND_LAYOUT_H_
#define TANDEM_KERNELS_CUDA_OPERAND_LAYOUT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/strided_layout.h"
#include "kernels/kernel.h"

namespace tandem::cuda {

// Operand k is read as dtype `expected[k]`: a single element, or a (rank-0)
// operand of another dtype, becomes a scalar operand read once and
// converted; the others are read through their broadcast strides, with dims
// collapsed (layout rank 0: contiguous).
inline absl::StatusOr<std::vector<BinaryOperand>> BroadcastOperands(const std::vector<const TensorArg*>& inputs,
                                                                    const std::vector<DType>& expected,
                                                                    const Shape& out_shape) {
  std::vector<BinaryOperand> operands(inputs.size());
  std::vector<std::vector<int64_t>> strides;
  std::vector<size_t> strided;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const TensorArg& in = *inputs[k];
    operands[k].data = in.data;
    if (in.numel() == 1 || in.type.dtype != expected[k]) {
      operands[k].scalar = true;
      operands[k].scalar_dtype = in.type.dtype;
    } else {
      strides.push_back(BroadcastStrides(in.type.shape, out_shape));
      strided.push_back(k);
    }
  }
  if (!strided.empty()) {
    ASSIGN_OR_RETURN(std::vector<StridedOperand> layouts, CollapseLayouts(out_shape, strides));
    for (size_t j = 0; j < strided.size(); ++j) operands[strided[j]].layout = layouts[j];
  }
  return operands;
}

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_OPERAND_LAYOUT_H_
