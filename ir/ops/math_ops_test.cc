// The pointwise math family's registry entries (ir/ops/math_table.h): the
// result type of each kind of op, and the refusal of malformed nodes.
#include "ir/ops/math_ops.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/op_registry.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::vector<TensorType>> Infer(const std::string& op, const Attrs& attrs, std::vector<TensorType> in) {
  const OpDef* def = OpRegistry::Global().Find(op);
  if (def == nullptr) return absl::NotFoundError(op);
  return def->infer(attrs, in);
}

TensorType T(DType dtype, Shape shape) { return TensorType{dtype, std::move(shape)}; }

TEST(MathOpsTest, EveryTableEntryIsRegisteredUnderItsName) {
  for (const MathOpInfo& info : kMathOps) {
    const OpDef* def = OpRegistry::Global().Find(info.name);
    ASSERT_NE(def, nullptr) << info.name;
    EXPECT_EQ(def->name, info.name);
    EXPECT_EQ(FindMathOp(info.name), &info);
  }
  EXPECT_EQ(FindMathOp("add.Tensor"), nullptr);
}

TEST(MathOpsTest, ResultTypesFollowPyTorch) {
  const Attrs none;
  // Float math of an integer is float32; of a float, the same float.
  EXPECT_EQ(Infer("sin", none, {T(DType::kInt64, {3})})->at(0), T(DType::kFloat32, {3}));
  EXPECT_EQ(Infer("erf", none, {T(DType::kBFloat16, {2, 3})})->at(0), T(DType::kBFloat16, {2, 3}));
  // abs, sign, round keep integers.
  EXPECT_EQ(Infer("abs", none, {T(DType::kInt64, {4})})->at(0), T(DType::kInt64, {4}));
  EXPECT_EQ(Infer("isnan", none, {T(DType::kFloat16, {5})})->at(0), T(DType::kBool, {5}));
  // Logical ops take any two dtypes and broadcast.
  EXPECT_EQ(Infer("logical_and", none, {T(DType::kFloat32, {2, 1}), T(DType::kBool, {3})})->at(0),
            T(DType::kBool, {2, 3}));
  EXPECT_EQ(Infer("bitwise_or.Tensor", none, {T(DType::kBool, {3}), T(DType::kBool, {1})})->at(0),
            T(DType::kBool, {3}));
  Attrs other;
  other.Set("other", int64_t{7});
  EXPECT_EQ(Infer("fmod.Scalar", other, {T(DType::kInt64, {3})})->at(0), T(DType::kInt64, {3}));
  // div with rounding_mode: true division of integers is float32; trunc and
  // floor keep them.
  EXPECT_EQ(Infer("div.Tensor_mode", none, {T(DType::kInt64, {3}), T(DType::kInt64, {3})})->at(0),
            T(DType::kFloat32, {3}));
  Attrs floor;
  floor.Set("rounding_mode", std::string("floor"));
  EXPECT_EQ(Infer("div.Tensor_mode", floor, {T(DType::kInt64, {3}), T(DType::kInt64, {})})->at(0),
            T(DType::kInt64, {3}));
  Attrs elu;
  for (const char* name : {"alpha", "scale", "input_scale"}) elu.Set(name, 1.0);
  elu.Set("is_result", true);
  EXPECT_EQ(Infer("elu_backward", elu, {T(DType::kFloat32, {2}), T(DType::kFloat32, {2})})->at(0),
            T(DType::kFloat32, {2}));
}

TEST(MathOpsTest, RefusesMalformedNodesWithTheReason) {
  const Attrs none;
  EXPECT_THAT(Infer("bitwise_and.Tensor", none, {T(DType::kFloat32, {2}), T(DType::kFloat32, {2})}).status().message(),
              HasSubstr("the result is float32"));
  EXPECT_THAT(Infer("hardtanh", none, {T(DType::kInt64, {2})}).status().message(), HasSubstr("self is int64"));
  EXPECT_THAT(Infer("logical_or", none, {T(DType::kFloat32, {2}), T(DType::kBool, {3})}).status().message(),
              HasSubstr("other is bool[3]"));
  Attrs round;
  round.Set("rounding_mode", std::string("round"));
  EXPECT_THAT(Infer("div.Tensor_mode", round, {T(DType::kFloat32, {2}), T(DType::kFloat32, {2})}).status().message(),
              HasSubstr("'round'; expected 'trunc' or 'floor'"));
  Attrs fractional;
  fractional.Set("other", 2.5);
  EXPECT_THAT(Infer("remainder.Scalar", fractional, {T(DType::kInt64, {2})}).status().message(),
              HasSubstr("PyTorch would promote the result to float"));
  EXPECT_THAT(Infer("fmod.Scalar", none, {T(DType::kFloat32, {2})}).status().message(), HasSubstr("'other'"));
  Attrs bounds;
  bounds.Set("min_val", -1.0);
  bounds.Set("max_val", 1.0);
  EXPECT_THAT(Infer("hardtanh_backward", bounds, {T(DType::kFloat32, {2}), T(DType::kFloat64, {2})}).status().message(),
              HasSubstr("grad_output is float32[2] but self is float64[2]"));
  EXPECT_THAT(Infer("hardtanh_backward", none, {T(DType::kFloat32, {2}), T(DType::kFloat32, {2})}).status().message(),
              HasSubstr("min_val"));
  Attrs elu;
  for (const char* name : {"alpha", "scale", "input_scale"}) elu.Set(name, 1.0);
  EXPECT_THAT(Infer("elu_backward", elu, {T(DType::kFloat32, {2}), T(DType::kFloat32, {2})}).status().message(),
              HasSubstr("is_result"));
}

}  // namespace
}  // namespace tandem
