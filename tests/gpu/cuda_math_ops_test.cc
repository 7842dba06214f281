// The pointwise math family's CUDA kernels (kernels/cuda/math_ops.cc)
// against the CPU kernels, for every op of ir/ops/math_table.h in every
// dtype its registry entry accepts, on fresh random inputs (the seed is
// printed) inside each op's domain, contiguous and broadcast (a row operand
// and a rank-0 operand). Each graph runs op by op and as a replay of its
// captured CUDA graph.
//
// Tolerances (normwise relative): float64 1e-12; float32 1e-5 (CUDA's
// erff, tanf, powf... are within a few ulps of the host's libm); 16-bit
// 2u + 1e-3 (both backends round the same float32 value once; where their
// float32 values differ by an ulp the rounding may land one 16-bit ulp
// apart). Integers and bool match exactly.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "ir/ops/math_table.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return 1e-12;
    case DType::kBFloat16:
      return 2 * std::ldexp(1.0, -8) + 1e-3;
    case DType::kFloat16:
      return 2 * std::ldexp(1.0, -11) + 1e-3;
    default:
      return 1e-5;
  }
}

bool Accepts(const std::string& op, const Attrs& attrs, const std::vector<TensorType>& in) {
  const OpDef* def = OpRegistry::Global().Find(op);
  return def != nullptr && def->infer(attrs, in).ok();
}

// The op's attributes for the test (defaults where the op has them).
Attrs AttrsOf(const MathOpInfo& info, DType dtype) {
  Attrs attrs;
  switch (info.op) {
    case MathOp::kHardtanh:
    case MathOp::kHardtanhBackward:
      attrs.Set("min_val", -0.5);
      attrs.Set("max_val", 0.5);
      break;
    case MathOp::kLeakyRelu:
      attrs.Set("negative_slope", 0.1);
      break;
    case MathOp::kLeakyReluBackward:
      attrs.Set("negative_slope", 0.1);
      attrs.Set("self_is_result", false);
      break;
    case MathOp::kElu:
    case MathOp::kEluBackward:
      attrs.Set("alpha", 1.2);
      attrs.Set("scale", 1.05);
      attrs.Set("input_scale", 0.9);
      if (info.op == MathOp::kEluBackward) attrs.Set("is_result", false);
      break;
    default:
      break;
  }
  if (info.scalar_other) {
    if (dtype == DType::kInt64 || dtype == DType::kInt32 || dtype == DType::kBool) {
      attrs.Set("other", int64_t{3});
    } else {
      attrs.Set("other", 1.7);
    }
  }
  return attrs;
}

// Input 0 of `op` inside its domain: a feed, moved by existing ops where
// the feed fills do not fit (acosh needs x >= 1).
int DomainInput(GraphMaker& maker, MathOp op, TensorType type) {
  const bool integral = type.dtype == DType::kInt64 || type.dtype == DType::kInt32 || type.dtype == DType::kBool;
  switch (op) {
    case MathOp::kLog10:
    case MathOp::kLog2:
      return maker.Feed(type, Fill::kPositive);
    case MathOp::kAcosh:
      if (integral) return maker.Feed(type, Fill::kPositive);
      return maker.Add1("add.Scalar", {maker.Feed(type, Fill::kPositive)}, MakeAttrs({{"other", 1.0}}));
    case MathOp::kAcos:
    case MathOp::kAsin:
    case MathOp::kAtanh:
    case MathOp::kLog1p:
      if (integral) return maker.Feed(type, Fill::kUniform);
      return maker.Add1("mul.Scalar", {maker.Feed(type, Fill::kUniform)}, MakeAttrs({{"other", 0.9}}));
    case MathOp::kReciprocal:
      return maker.Feed(type, Fill::kNonZero);
    default:
      return maker.Feed(type, Fill::kUniform);
  }
}

// Input 1: divisors nonzero, exponents small.
int SecondInput(GraphMaker& maker, MathOp op, TensorType type) {
  switch (op) {
    case MathOp::kFmod:
    case MathOp::kRemainder:
    case MathOp::kDivTrue:
    case MathOp::kDivTrunc:
    case MathOp::kDivFloor:
      return maker.Feed(type, Fill::kNonZero);
    default:
      return maker.Feed(type, Fill::kUniform);
  }
}

// Every table op that accepts `dtype`, in one graph, with operands of
// shape [rows, cols] and (binary ops) a second operand of `other_shape`.
void CheckDType(DType dtype, const Shape& other_shape) {
  const int64_t rows = std::uniform_int_distribution<int64_t>(2, 40)(Rng());
  const int64_t cols = std::uniform_int_distribution<int64_t>(1, 300)(Rng());
  const TensorType type{dtype, {rows, cols}};
  Shape second = other_shape;
  if (second.size() == 1) second = {cols};
  const TensorType other{dtype, second};
  GraphMaker maker;
  int added = 0;
  for (const MathOpInfo& info : kMathOps) {
    const Attrs attrs = AttrsOf(info, dtype);
    const bool binary = MathKindIsBinary(info.kind) && !info.scalar_other;
    // A backward op's operands share one shape.
    const TensorType second_type = info.kind == MathKind::kActivationBackward ? type : other;
    std::vector<TensorType> in = {type};
    if (binary) in.push_back(second_type);
    if (!Accepts(info.name, attrs, in)) continue;
    // pow: floats take positive bases (integers wrap alike on both backends).
    std::vector<int> inputs;
    if (info.op == MathOp::kPow) {
      inputs.push_back(
          maker.Feed(type, dtype == DType::kInt64 || dtype == DType::kInt32 ? Fill::kUniform : Fill::kPositive));
    } else {
      inputs.push_back(DomainInput(maker, info.op, type));
    }
    if (binary) inputs.push_back(SecondInput(maker, info.op, second_type));
    maker.Add1(info.name, inputs, attrs);
    ++added;
  }
  ASSERT_GT(added, 0) << DTypeName(dtype);
  SCOPED_TRACE(std::string(DTypeName(dtype)) + " [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  CompareWithCpu(
      maker,
      [&](const OutputPair& o) {
        const DType out = o.type().dtype;
        EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), Tolerance(out))) << o.Where();
      },
      /*alias=*/{}, /*feeds=*/{}, /*expect_capture=*/false);
}

TEST(CudaMathOpsTest, EveryOpMatchesTheCpuInEveryDtype) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt64, DType::kInt32,
                      DType::kBool}) {
    CheckDType(dtype, {1});  // second operand a row, broadcast
  }
}

TEST(CudaMathOpsTest, RankZeroAndSameShapeOperands) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
    CheckDType(dtype, {});
  }
}

TEST(CudaMathOpsTest, LogicalOpsOfMixedDtypes) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker maker;
  const int f = maker.Feed({DType::kFloat64, {17, 33}});
  const int h = maker.Feed({DType::kBFloat16, {33}});
  const int b = maker.Feed({DType::kBool, {17, 1}});
  const int i = maker.Feed({DType::kInt64, {}});
  maker.Add1("logical_and", {f, h});
  maker.Add1("logical_or", {h, b});
  maker.Add1("logical_xor", {b, i});
  maker.Add1("isnan", {h});
  maker.Add1("sin", {i});  // an integer computes in float32
  CompareWithCpuWithin(maker, 1e-6, 1e-12);
}

}  // namespace
}  // namespace tandem::gpu_test
