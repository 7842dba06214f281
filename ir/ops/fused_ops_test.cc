// fused_elementwise's inference: output types (float and 16-bit programs),
// and every way a client's program can be malformed (each refused with
// INVALID_ARGUMENT naming the fault, at registration).
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/graph_builder.h"
#include "ir/op_registry.h"
#include "ir/ops/fused_program.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using Ints = std::vector<int64_t>;

constexpr int64_t kAdd = static_cast<int64_t>(FusedOpcode::kAdd);
constexpr int64_t kMul = static_cast<int64_t>(FusedOpcode::kMul);
constexpr int64_t kSubScalar = static_cast<int64_t>(FusedOpcode::kSubScalar);
constexpr int64_t kNeg = static_cast<int64_t>(FusedOpcode::kNeg);
constexpr int64_t kMaximum = static_cast<int64_t>(FusedOpcode::kMaximum);

Attrs Program(Ints code, std::vector<double> consts, Ints outputs) {
  Attrs attrs;
  attrs.Set("code", std::move(code));
  attrs.Set("consts", std::move(consts));
  attrs.Set("outputs", std::move(outputs));
  return attrs;
}

absl::StatusOr<std::vector<TensorType>> Infer(const Attrs& attrs, const std::vector<TensorType>& inputs) {
  const OpDef* def = OpRegistry::Global().Find(kFusedElementwiseOp);
  if (def == nullptr) return absl::NotFoundError("fused_elementwise is not registered");
  return def->infer(attrs, inputs);
}

// r3 = r0 + 0.5 * r1; r4 = r3 * r2; r5 = r4 - 2 * 1.5: a valid program.
Attrs ValidProgram() {
  return Program({kAdd, 3, 0, 1, 0, kMul, 4, 3, 2, -1, kSubScalar, 5, 4, 1, 2}, {0.5, 1.5, 2.0}, {3, 5});
}

const TensorType kMatrix{DType::kFloat32, {2, 3}};
const TensorType kScalar{DType::kFloat32, {}};

TEST(FusedOpsTest, OutputsHaveTheCommonShapeAndDtype) {
  auto types = Infer(ValidProgram(), {kMatrix, kMatrix, kScalar});
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ(*types, (std::vector<TensorType>{kMatrix, kMatrix}));
  // The rank-0 input may come first; all rank 0 gives rank-0 outputs.
  types = Infer(ValidProgram(), {kScalar, kMatrix, kMatrix});
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ((*types)[0], kMatrix);
  types = Infer(ValidProgram(),
                {TensorType{DType::kFloat64, {}}, TensorType{DType::kFloat64, {}}, TensorType{DType::kFloat64, {}}});
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ((*types)[1], (TensorType{DType::kFloat64, {}}));
}

// A 16-bit program takes rank-0 inputs of any float dtype (a float32
// learning rate), converted to its type; its outputs have the 16-bit type.
TEST(FusedOpsTest, SixteenBitProgramsTakeRankZeroInputsOfAnyFloatDType) {
  for (DType half : {DType::kBFloat16, DType::kFloat16}) {
    const TensorType matrix{half, {2, 3}};
    for (DType scalar : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
      auto types = Infer(ValidProgram(), {matrix, matrix, TensorType{scalar, {}}});
      ASSERT_TRUE(types.ok()) << DTypeName(half) << " with " << DTypeName(scalar) << ": " << types.status();
      EXPECT_EQ(*types, (std::vector<TensorType>{matrix, matrix}));
      // The rank-0 input may come first: the shaped inputs fix the type.
      types = Infer(ValidProgram(), {TensorType{scalar, {}}, matrix, matrix});
      ASSERT_TRUE(types.ok()) << types.status();
      EXPECT_EQ((*types)[1], matrix);
    }
    // Only rank-0 inputs: one dtype, as for float programs.
    auto types = Infer(ValidProgram(), {TensorType{half, {}}, TensorType{half, {}}, TensorType{half, {}}});
    ASSERT_TRUE(types.ok()) << types.status();
    EXPECT_EQ((*types)[0], (TensorType{half, {}}));
  }
  // maximum and minimum read two registers.
  auto types = Infer(Program({kMaximum, 2, 0, 1, -1}, {}, {2}), {kMatrix, kScalar});
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ(*types, (std::vector<TensorType>{kMatrix}));
}

struct BadCase {
  std::string what;
  Attrs attrs;
  std::vector<TensorType> inputs;
  std::string message;
};

TEST(FusedOpsTest, MalformedProgramsAreRefused) {
  const std::vector<TensorType> three = {kMatrix, kMatrix, kScalar};
  Ints too_long;
  for (int i = 0; i < kFusedMaxInstructions + 1; ++i) {
    for (int64_t f : Ints{kNeg, 3 + i, i == 0 ? 0 : 2 + i, -1, -1}) too_long.push_back(f);
  }
  Attrs no_code;
  no_code.Set("outputs", Ints{3});
  std::vector<BadCase> cases = {
      {"no code", no_code, three, "'code'"},
      {"ragged code", Program({kNeg, 3, 0, -1}, {}, {3}), three, "5 per instruction"},
      {"empty code", Program({}, {}, {3}), three, "at least one"},
      {"unknown opcode", Program({99, 3, 0, -1, -1}, {}, {3}), three, "unknown opcode 99"},
      {"opcode 0", Program({0, 3, 0, -1, -1}, {}, {3}), three, "unknown opcode 0"},
      {"writes an input", Program({kNeg, 1, 0, -1, -1}, {}, {1}), three, "writes register 1"},
      {"writes past the registers", Program({kNeg, kFusedMaxRegisters, 0, -1, -1}, {}, {3}), three,
       "writes register 40"},
      {"reads an unwritten register", Program({kNeg, 3, 4, -1, -1}, {}, {3}), three, "reads register 4"},
      {"reads a negative register", Program({kNeg, 3, -1, -1, -1}, {}, {3}), three, "reads register -1"},
      {"reads b unwritten", Program({kMul, 3, 0, 7, -1}, {}, {3}), three, "reads register 7"},
      {"b on a unary op", Program({kNeg, 3, 0, 1, -1}, {}, {3}), three, "no field b"},
      {"k on mul", Program({kMul, 3, 0, 1, 0}, {2.0}, {3}), three, "no field k"},
      {"alpha index out of range", Program({kAdd, 3, 0, 1, 1}, {2.0}, {3}), three, "field k = 1"},
      {"other index out of range", Program({kSubScalar, 3, 0, 5, -1}, {2.0}, {3}), three, "field b = 5"},
      {"scalar op without other", Program({kSubScalar, 3, 0, -1, -1}, {}, {3}), three, "needs field b"},
      {"too many instructions", Program(too_long, {}, {3}), three, "the limit is 32"},
      {"no outputs", Program({kNeg, 3, 0, -1, -1}, {}, {}), three, "1 to 4 outputs"},
      {"too many outputs", Program({kNeg, 3, 0, -1, -1}, {}, {3, 3, 3, 3, 3}), three, "1 to 4 outputs"},
      {"output unwritten", Program({kNeg, 3, 0, -1, -1}, {}, {4}), three, "no instruction writes"},
      {"output is an input", Program({kNeg, 3, 0, -1, -1}, {}, {0}), three, "no instruction writes"},
      {"dtype mix", ValidProgram(), {kMatrix, TensorType{DType::kFloat64, {2, 3}}, kScalar}, "one dtype"},
      {"rank-0 of another dtype", ValidProgram(), {kMatrix, kMatrix, TensorType{DType::kFloat64, {}}}, "one dtype"},
      {"shape mismatch", ValidProgram(), {kMatrix, TensorType{DType::kFloat32, {3, 2}}, kScalar}, "one shape"},
      {"broadcast operand", ValidProgram(), {kMatrix, TensorType{DType::kFloat32, {3}}, kScalar}, "one shape"},
      {"integer inputs",
       ValidProgram(),
       {TensorType{DType::kInt64, {2}}, TensorType{DType::kInt64, {2}}, TensorType{DType::kInt64, {}}},
       "supported dtypes"},
      {"too many inputs", Program({kNeg, 9, 0, -1, -1}, {}, {9}), std::vector<TensorType>(9, kMatrix), "1 to 8 inputs"},
      {"maximum without b", Program({kMaximum, 3, 0, -1, -1}, {}, {3}), three, "reads register -1"},
      {"k on maximum", Program({kMaximum, 3, 0, 1, 0}, {2.0}, {3}), three, "no field k"},
      {"16-bit shaped inputs of two dtypes",
       ValidProgram(),
       {TensorType{DType::kBFloat16, {2, 3}}, TensorType{DType::kFloat16, {2, 3}}, kScalar},
       "one dtype"},
      {"16-bit and float32 shaped inputs",
       ValidProgram(),
       {TensorType{DType::kBFloat16, {2, 3}}, kMatrix, kScalar},
       "one dtype"},
      {"integer rank-0 input of a 16-bit program",
       ValidProgram(),
       {TensorType{DType::kBFloat16, {2, 3}}, TensorType{DType::kBFloat16, {2, 3}}, TensorType{DType::kInt64, {}}},
       "any float"},
      {"16-bit rank-0 input of a float32 program",
       ValidProgram(),
       {kMatrix, kMatrix, TensorType{DType::kBFloat16, {}}},
       "one dtype"},
      {"rank-0 inputs of two dtypes",
       ValidProgram(),
       {TensorType{DType::kBFloat16, {}}, TensorType{DType::kBFloat16, {}}, kScalar},
       "one dtype"},
  };
  for (const BadCase& c : cases) {
    auto types = Infer(c.attrs, c.inputs);
    EXPECT_EQ(types.status().code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << types.status();
    EXPECT_THAT(std::string(types.status().message()), HasSubstr(c.message)) << c.what;
  }
}

// A client's malformed fused node fails registration (BuildGraph) with the
// node named, never later.
TEST(FusedOpsTest, BuildGraphRefusesAMalformedFusedNode) {
  v1::Graph g;
  v1::TensorSpec* x = g.add_feeds();
  x->set_name("x");
  x->set_dtype(v1::FLOAT32);
  x->add_shape(4);
  v1::Node* node = g.add_nodes();
  node->set_op(kFusedElementwiseOp);
  node->set_label("client");
  node->add_inputs("x");
  node->add_outputs("y");
  for (int64_t f : Ints{kMul, 1, 0, 5, -1}) (*node->mutable_attrs())["code"].mutable_ints()->add_values(f);
  (*node->mutable_attrs())["outputs"].mutable_ints()->add_values(1);
  auto built = BuildGraph(g, {});
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(built.status().message()), HasSubstr("fused_elementwise 'client'"));
  EXPECT_THAT(std::string(built.status().message()), HasSubstr("reads register 5"));
  // Fixed, the same node builds.
  (*node->mutable_attrs())["code"].mutable_ints()->set_values(3, 0);
  EXPECT_TRUE(BuildGraph(g, {}).ok());
}

}  // namespace
}  // namespace tandem
