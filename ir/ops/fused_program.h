// The program of a `fused_elementwise` node: a short straight-line sequence
// of elementwise ops applied to every element index, which replaces a chain
// of elementwise nodes (compiler/fuse_elementwise.h) with one node and one
// kernel. Shared by the op's inference (which validates it), the graph pass
// (which writes it) and the backends' kernels (which run it).
//
// Wire form (node attributes):
//   ints "code":     5 ints per instruction: opcode, dst, a, b, k
//   floats "consts": the instructions' numbers (alpha, other), by index
//   ints "outputs":  the register each node output is read from, in order
// Registers 0..num_inputs-1 hold the node's inputs at the element index
// (a rank-0 input: its one element, converted to the program's dtype).
// Instructions run in order; each writes register `dst` (num_inputs <= dst
// < kFusedMaxRegisters) from registers that are inputs or were written
// before. Per opcode (x = register a, y = register b, alpha = consts[k] or
// 1 when k is -1, other = consts[b]):
//   1 add         x + alpha * y    (add.Tensor)
//   2 sub         x - alpha * y    (sub.Tensor)
//   3 mul         x * y            (mul.Tensor; k = -1)
//   4 div         x / y            (div.Tensor; k = -1)
//   5 add_scalar  x + alpha * other (add.Scalar; b is a const index)
//   6 sub_scalar  x - alpha * other (sub.Scalar; b is a const index)
//   7 mul_scalar  x * other        (mul.Scalar; b is a const index, k = -1)
//   8 div_scalar  x / other        (div.Scalar; b is a const index, k = -1)
//   9 neg         -x               (b = k = -1)
//  10 sqrt        sqrt(x)          (b = k = -1)
//  11 maximum     max(x, y)        (maximum; NaN-propagating; k = -1)
//  12 minimum     min(x, y)        (minimum; NaN-propagating; k = -1)
//  13 relu        x < 0 ? 0 : x    (relu; keeps NaN; b = k = -1)
//  14 threshold_backward  y > t ? x : 0  (threshold_backward(grad = x,
//                 self = y); t = consts[k], required, in the compute type)
// Each backend evaluates an instruction exactly as its kernel of the named
// op does (same constant folding, same rounding), so a fused node computes
// what the nodes it replaced computed, bit for bit. In a 16-bit program
// (bfloat16, float16) registers hold float32 values: inputs widen exactly,
// every instruction computes in float32 as the op's 16-bit kernel does (a
// `.Scalar` op's other rounded to the 16-bit type first, alpha a float32
// number) and its result is rounded to the 16-bit type at once, where the
// unfused op would have stored it.
//
// Plain data and functions; thread-safe.
#ifndef TANDEM_IR_OPS_FUSED_PROGRAM_H_
#define TANDEM_IR_OPS_FUSED_PROGRAM_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/attrs.h"

namespace tandem {

inline constexpr char kFusedElementwiseOp[] = "fused_elementwise";

// Limits of one fused node; the CUDA kernel keeps its program in a launch
// parameter of this size.
inline constexpr int kFusedMaxInputs = 8;
inline constexpr int kFusedMaxInstructions = 32;
inline constexpr int kFusedMaxOutputs = 4;
inline constexpr int kFusedMaxRegisters = kFusedMaxInputs + kFusedMaxInstructions;
inline constexpr int kFusedMaxConsts = 2 * kFusedMaxInstructions;
inline constexpr int kFusedFieldsPerInstruction = 5;

enum class FusedOpcode : int64_t {
  kAdd = 1,
  kSub = 2,
  kMul = 3,
  kDiv = 4,
  kAddScalar = 5,
  kSubScalar = 6,
  kMulScalar = 7,
  kDivScalar = 8,
  kNeg = 9,
  kSqrt = 10,
  kMaximum = 11,
  kMinimum = 12,
  kRelu = 13,
  kThresholdBackward = 14,
};

// The op a fused opcode stands for ("add.Tensor", ...).
const char* FusedOpcodeOpName(FusedOpcode op);

// One decoded instruction: constants resolved to their values.
struct FusedInstruction {
  FusedOpcode op = FusedOpcode::kNeg;
  int dst = 0;
  int a = 0;
  int b = -1;          // a register for add..div, maximum, minimum, threshold_backward; -1 otherwise
  double alpha = 1.0;  // add, sub, add_scalar, sub_scalar; threshold_backward's threshold
  double other = 0.0;  // the *_scalar ops
};

struct FusedProgram {
  int num_inputs = 0;
  std::vector<FusedInstruction> code;
  std::vector<int> outputs;  // registers, one per node output
};

// Decodes and validates the attributes of a fused_elementwise node with
// `num_inputs` inputs. INVALID_ARGUMENT names the instruction or field at
// fault: an unknown opcode, a register out of range or read before it is
// written, a const index out of range, a field that must be -1, an output
// that no instruction writes, or a size over the limits above.
absl::StatusOr<FusedProgram> DecodeFusedProgram(const Attrs& attrs, int num_inputs);

}  // namespace tandem

#endif  // TANDEM_IR_OPS_FUSED_PROGRAM_H_
