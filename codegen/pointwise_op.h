// The lowered instructions of a fused_elementwise program, shared by the
// kernel generator (codegen/pointwise_kernel.h, which lowers programs into
// them) and the CUDA interpreter (kernels/cuda/fused_launch.h, which runs
// them). Plain C++ with no dependencies, so that nvcc-compiled files may
// include it.
//
// What one instruction computes from x = r[a], y = r[b] and `param` (a
// value of the compute type held exactly in a double: float32 for float32
// and 16-bit programs, float64 for float64 ones):
//   kFma       fma(param, y, x), one rounding (add.Tensor: param = alpha;
//              sub.Tensor: param = -alpha)
//   kMul, kDiv x * y, x / y (IEEE round to nearest)
//   kAddConst  x + param (add.Scalar: alpha * other in the dtype;
//              sub.Scalar: its negation)
//   kMulConst, kDivConst  x * param, x / param
//   kNeg, kSqrt  -x, sqrt(x) (IEEE round to nearest)
//   kMax, kMin   NaN-propagating maximum / minimum of x and y
//   kRelu        x < 0 ? 0 : x (keeps NaN)
//   kThresholdBackward  y > param ? x : 0
// A 16-bit program computes in float32 and rounds each result to its
// 16-bit type at once.
#ifndef TANDEM_CODEGEN_POINTWISE_OP_H_
#define TANDEM_CODEGEN_POINTWISE_OP_H_

#include <cstdint>

namespace tandem::codegen {

enum class PointwiseOp : int32_t {
  kFma,
  kMul,
  kDiv,
  kAddConst,
  kMulConst,
  kDivConst,
  kNeg,
  kSqrt,
  kMax,
  kMin,
  kRelu,
  kThresholdBackward
};

}  // namespace tandem::codegen

#endif  // TANDEM_CODEGEN_POINTWISE_OP_H_
