// The launcher of the pointwise math family's CUDA kernels
// (math_kernels.cu), for math_ops.cc: CUDA and project headers only, as
// launch.h. Thread-safe (stateless).
#ifndef TANDEM_KERNELS_CUDA_MATH_LAUNCH_H_
#define TANDEM_KERNELS_CUDA_MATH_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ir/dtype.h"
#include "ir/ops/math_table.h"
#include "kernels/cuda/launch.h"

namespace tandem::cuda {

// An operand read in its own dtype at the output's indices (layout rank 0:
// element i at output index i).
struct MathOperand {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  StridedOperand layout;
};

struct MathLaunch {
  MathOp op = MathOp::kAbs;
  MathCompute compute = MathCompute::kFloat32;
  DType out_dtype = DType::kFloat32;
  int64_t n = 0;  // output elements
  MathOperand x;
  MathOperand y;
  bool has_y = false;  // else y is params.other_f / other_i, as the compute type
  MathParams params;
  void* out = nullptr;
};

// out[i] = ApplyMath(op)(x, y) (kernels/math_functions.h) converted to
// out_dtype (bool: nonzero; 16-bit: rounded to nearest even).
cudaError_t LaunchMath(const MathLaunch& launch, cudaStream_t stream);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_MATH_LAUNCH_H_
