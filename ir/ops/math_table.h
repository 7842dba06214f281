// The pointwise math family: one table of Core ATen ops (unary math,
// predicates, bitwise and logical ops, integer-aware binary math, the
// parameterized activations and their backwards) that the registry
// (ir/ops/math_ops.cc), both backends' kernels (kernels/math_functions.h,
// kernels/cpu/math_kernels.cc, kernels/cuda/math_ops.cc) and any code
// generator read, so that an op added here is named, typed and computed in
// one place per concern.
//
// Plain C++ (no absl, no CUDA): the CUDA .cu files include it. Constant
// data; thread-safe.
#ifndef TANDEM_IR_OPS_MATH_TABLE_H_
#define TANDEM_IR_OPS_MATH_TABLE_H_

#include <cstdint>

namespace tandem {

// What an element computes. x is input 0, y input 1 (or the `.Scalar`
// form's `other`), p the op's number attributes (MathParams).
enum class MathOp : int {
  // x -> f(x); floats (an integer or bool x computes in float32), and the
  // integers too where marked (int).
  kAbs,  // int
  kAcos,
  kAcosh,
  kAsin,
  kAsinh,
  kAtan,
  kAtanh,
  kCeil,  // int: identity
  kCos,
  kCosh,
  kErf,
  kExpm1,
  kFloor,  // int: identity
  kLog10,
  kLog1p,
  kLog2,
  kReciprocal,
  kRound,  // half to even, as PyTorch's round; int: identity
  kSign,   // int
  kSin,
  kSinh,
  kTan,
  kTrunc,  // int: identity
  // x -> bool.
  kIsNan,
  kIsInf,
  // Activations with number attributes: hardtanh (a = min_val, b =
  // max_val), leaky_relu (a = negative_slope), elu (a = alpha, b = scale,
  // c = input_scale).
  kHardtanh,
  kLeakyRelu,
  kElu,
  // Integers and bool (bool: logical).
  kBitwiseNot,
  kBitwiseAnd,
  kBitwiseOr,
  kBitwiseXor,
  // Any dtypes -> bool: nonzero(x) op nonzero(y).
  kLogicalAnd,
  kLogicalOr,
  kLogicalXor,
  // (x, y) -> z.
  kAtan2,
  kFmod,       // sign of x (C fmod)
  kRemainder,  // sign of y (Python %)
  kPow,
  kDivTrue,   // div with rounding_mode None: floats (integers divide in float32)
  kDivTrunc,  // rounding_mode "trunc"
  kDivFloor,  // rounding_mode "floor" (Python //)
  // (grad_output, self) -> grad_input.
  kHardtanhBackward,   // a = min_val, b = max_val
  kLeakyReluBackward,  // a = negative_slope
  kEluBackward,        // a = alpha, b = scale, c = input_scale; is_result: y is the forward's output
  kCount,
};

// The type rule of an op.
enum class MathKind : int {
  kFloatUnary,          // float or 16-bit float -> same; bool or integer -> float32
  kNumericUnary,        // float, 16-bit float or integer -> same (abs, sign, ceil, ...)
  kPredicate,           // any -> bool
  kActivation,          // float or 16-bit float -> same
  kBitwiseUnary,        // integer or bool -> same
  kBitwise,             // integer or bool operands (binary dtype rule) -> that dtype
  kLogical,             // any dtypes, broadcast -> bool
  kFloatBinary,         // floats (binary dtype rule; integers -> float32)
  kNumericBinary,       // numbers (binary dtype rule) -> that dtype
  kDivMode,             // div with rounding_mode: None like kFloatBinary, else like kNumericBinary
  kActivationBackward,  // grad_output and self of one float type, same shape -> that type
};

// The type an element is computed in (MathComputeOf, ir/ops/math_ops.h).
enum class MathCompute : int { kFloat32, kFloat64, kInt64 };

// An op's number attributes, as the kernels take them. `other` is the
// `.Scalar` form's second operand: `other_f` for floating results, `other_i`
// (exact) for integer ones.
struct MathParams {
  double a = 0.0;
  double b = 0.0;
  double c = 0.0;
  double other_f = 0.0;
  int64_t other_i = 0;
  bool is_result = false;  // elu_backward: y is the forward's output, not its input
  bool bool_out = false;   // the result's dtype is bool (bitwise_not of bool is logical not)
};

// One registered op of the family.
struct MathOpInfo {
  const char* name;  // canonical ATen overload name
  MathOp op;         // for kDivMode: kDivTrue, resolved by rounding_mode
  MathKind kind;
  bool scalar_other;  // the `.Scalar` form: input 1 is the attribute 'other'
};

inline constexpr MathOpInfo kMathOps[] = {
    {"abs", MathOp::kAbs, MathKind::kNumericUnary, false},
    {"acos", MathOp::kAcos, MathKind::kFloatUnary, false},
    {"acosh", MathOp::kAcosh, MathKind::kFloatUnary, false},
    {"asin", MathOp::kAsin, MathKind::kFloatUnary, false},
    {"asinh", MathOp::kAsinh, MathKind::kFloatUnary, false},
    {"atan", MathOp::kAtan, MathKind::kFloatUnary, false},
    {"atanh", MathOp::kAtanh, MathKind::kFloatUnary, false},
    {"ceil", MathOp::kCeil, MathKind::kNumericUnary, false},
    {"cos", MathOp::kCos, MathKind::kFloatUnary, false},
    {"cosh", MathOp::kCosh, MathKind::kFloatUnary, false},
    {"erf", MathOp::kErf, MathKind::kFloatUnary, false},
    {"expm1", MathOp::kExpm1, MathKind::kFloatUnary, false},
    {"floor", MathOp::kFloor, MathKind::kNumericUnary, false},
    {"log10", MathOp::kLog10, MathKind::kFloatUnary, false},
    {"log1p", MathOp::kLog1p, MathKind::kFloatUnary, false},
    {"log2", MathOp::kLog2, MathKind::kFloatUnary, false},
    {"reciprocal", MathOp::kReciprocal, MathKind::kFloatUnary, false},
    {"round", MathOp::kRound, MathKind::kNumericUnary, false},
    {"sign", MathOp::kSign, MathKind::kNumericUnary, false},
    {"sin", MathOp::kSin, MathKind::kFloatUnary, false},
    {"sinh", MathOp::kSinh, MathKind::kFloatUnary, false},
    {"tan", MathOp::kTan, MathKind::kFloatUnary, false},
    {"trunc", MathOp::kTrunc, MathKind::kNumericUnary, false},
    {"isnan", MathOp::kIsNan, MathKind::kPredicate, false},
    {"isinf", MathOp::kIsInf, MathKind::kPredicate, false},
    {"hardtanh", MathOp::kHardtanh, MathKind::kActivation, false},
    {"leaky_relu", MathOp::kLeakyRelu, MathKind::kActivation, false},
    {"elu", MathOp::kElu, MathKind::kActivation, false},
    {"bitwise_not", MathOp::kBitwiseNot, MathKind::kBitwiseUnary, false},
    {"bitwise_and.Tensor", MathOp::kBitwiseAnd, MathKind::kBitwise, false},
    {"bitwise_and.Scalar", MathOp::kBitwiseAnd, MathKind::kBitwise, true},
    {"bitwise_or.Tensor", MathOp::kBitwiseOr, MathKind::kBitwise, false},
    {"bitwise_or.Scalar", MathOp::kBitwiseOr, MathKind::kBitwise, true},
    {"bitwise_xor.Tensor", MathOp::kBitwiseXor, MathKind::kBitwise, false},
    {"bitwise_xor.Scalar", MathOp::kBitwiseXor, MathKind::kBitwise, true},
    {"logical_and", MathOp::kLogicalAnd, MathKind::kLogical, false},
    {"logical_or", MathOp::kLogicalOr, MathKind::kLogical, false},
    {"logical_xor", MathOp::kLogicalXor, MathKind::kLogical, false},
    {"atan2", MathOp::kAtan2, MathKind::kFloatBinary, false},
    {"fmod.Tensor", MathOp::kFmod, MathKind::kNumericBinary, false},
    {"fmod.Scalar", MathOp::kFmod, MathKind::kNumericBinary, true},
    {"remainder.Tensor", MathOp::kRemainder, MathKind::kNumericBinary, false},
    {"remainder.Scalar", MathOp::kRemainder, MathKind::kNumericBinary, true},
    {"pow.Tensor_Tensor", MathOp::kPow, MathKind::kNumericBinary, false},
    {"div.Tensor_mode", MathOp::kDivTrue, MathKind::kDivMode, false},
    {"div.Scalar_mode", MathOp::kDivTrue, MathKind::kDivMode, true},
    {"hardtanh_backward", MathOp::kHardtanhBackward, MathKind::kActivationBackward, false},
    {"leaky_relu_backward", MathOp::kLeakyReluBackward, MathKind::kActivationBackward, false},
    {"elu_backward", MathOp::kEluBackward, MathKind::kActivationBackward, false},
};

// Whether ops of `kind` take two operands (a tensor, or the `.Scalar` form's
// attribute 'other').
constexpr bool MathKindIsBinary(MathKind kind) {
  return kind == MathKind::kBitwise || kind == MathKind::kLogical || kind == MathKind::kFloatBinary ||
         kind == MathKind::kNumericBinary || kind == MathKind::kDivMode || kind == MathKind::kActivationBackward;
}

}  // namespace tandem

#endif  // TANDEM_IR_OPS_MATH_TABLE_H_
