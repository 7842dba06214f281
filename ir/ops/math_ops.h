// The pointwise math family's rules (ir/ops/math_table.h lists its ops):
// how a node of it is typed, and what its kernels compute from its
// attributes. The registry entries are RegisterMathOps's; the backends call
// MathCallOf once per node. Thread-safe (constant data).
#ifndef TANDEM_IR_OPS_MATH_OPS_H_
#define TANDEM_IR_OPS_MATH_OPS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/attrs.h"
#include "ir/dtype.h"
#include "ir/ops/math_table.h"

namespace tandem {

// The table entry of the op named `op` (canonical name), or nullptr.
const MathOpInfo* FindMathOp(absl::string_view op);

// What a node of `info` computes: its MathOp (div's rounding_mode resolved)
// and the numbers its kernels take, for a result of dtype `out`.
struct MathCall {
  MathOp op = MathOp::kAbs;
  MathParams params;
};
absl::StatusOr<MathCall> MathCallOf(const MathOpInfo& info, const Attrs& attrs, DType out);

// The type in which an element of a node with result dtype `out` (and
// input dtypes in0, in1) is computed, as PyTorch computes it: float64 for
// float64, int64 for the integers and bool, float32 otherwise (the 16-bit
// floats compute in float32 and round once). Logical ops and predicates
// compute in their operands' widest float, else in int64 (their result is
// bool).
MathCompute MathComputeOf(MathKind kind, DType out, DType in0, DType in1);

}  // namespace tandem

#endif  // TANDEM_IR_OPS_MATH_OPS_H_
