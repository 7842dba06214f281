// Shape and dtype inference of the fused recurrent layers (lstm,
// lstm_backward, gru, gru_backward), every test run for both layers from a
// table of their inputs and outputs by name: the output types (in float32,
// bfloat16 and float16: every output in the inputs' one dtype), and for
// every input a wrong dtype, a dtype other than x's, and a wrong shape,
// each refused with a message that names the input and its expected shape
// or dtype.
#include <algorithm>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/op_registry.h"

namespace tandem {

void PrintTo(const TensorType& type, std::ostream* os) { *os << type.ToString(); }

namespace {

using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

TensorType F32(Shape shape) { return {DType::kFloat32, std::move(shape)}; }

absl::StatusOr<std::vector<TensorType>> Infer(const std::string& op, const std::vector<TensorType>& inputs) {
  const OpDef* def = OpRegistry::Global().Find(op);
  if (def == nullptr) return absl::NotFoundError("no op " + op);
  return def->infer(Attrs{}, inputs);
}

std::string InferError(const std::string& op, const std::vector<TensorType>& inputs) {
  auto result = Infer(op, inputs);
  EXPECT_FALSE(result.ok()) << op << " unexpectedly inferred";
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  return std::string(result.status().message());
}

// The reference layer: T=35, B=64, I=1024 (embedding), H=1024; and a layer
// with every dim distinct, so that a swapped dim cannot pass.
struct Dims {
  int64_t t, b, i, h;
};
constexpr Dims kReference{35, 64, 1024, 1024};
constexpr Dims kDistinct{5, 3, 7, 2};

// One layer's pair of ops, their inputs and outputs by name (in order).
struct Layer {
  std::string forward, backward;
  int64_t gates;  // the weights' and biases' rows per hidden unit
  int64_t saved;  // saved's width per hidden unit
  std::vector<std::string> forward_in, forward_out, backward_in, backward_out;

  size_t BackwardX() const {
    return static_cast<size_t>(std::find(backward_in.begin(), backward_in.end(), "x") - backward_in.begin());
  }
};

const Layer kLstm{"lstm",
                  "lstm_backward",
                  4,
                  5,
                  {"x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"},
                  {"y", "h_n", "c_n", "saved"},
                  {"grad_y", "grad_h_n", "grad_c_n", "x", "h0", "c0", "w_ih", "w_hh", "y", "saved"},
                  {"grad_x", "grad_h0", "grad_c0", "grad_w_ih", "grad_w_hh", "grad_b", "grad_gates"}};
const Layer kGru{
    "gru",
    "gru_backward",
    3,
    4,
    {"x", "h0", "w_ih", "w_hh", "b_ih", "b_hh"},
    {"y", "h_n", "saved"},
    {"grad_y", "grad_h_n", "x", "h0", "w_ih", "w_hh", "y", "saved"},
    {"grad_x", "grad_h0", "grad_w_ih", "grad_w_hh", "grad_b_ih", "grad_b_hh", "grad_gates_x", "grad_gates_h"}};

// A tensor's shape by its name, symbolically (as the messages write it) and
// in numbers.
struct NamedShape {
  std::string symbolic;
  Shape shape;
};

NamedShape ShapeOf(const std::string& name, const Layer& layer, const Dims& d) {
  const std::string g = std::to_string(layer.gates) + "H";
  const int64_t rows = layer.gates * d.h;
  if (name == "x" || name == "grad_x") return {"[T, B, I]", {d.t, d.b, d.i}};
  if (name == "y" || name == "grad_y") return {"[T, B, H]", {d.t, d.b, d.h}};
  if (name == "saved") return {"[T, B, " + std::to_string(layer.saved) + "H]", {d.t, d.b, layer.saved * d.h}};
  if (name == "w_ih" || name == "grad_w_ih") return {"[" + g + ", I]", {rows, d.i}};
  if (name == "w_hh" || name == "grad_w_hh") return {"[" + g + ", H]", {rows, d.h}};
  if (name.rfind("grad_gates", 0) == 0) return {"[T, B, " + g + "]", {d.t, d.b, rows}};
  if (name == "b_ih" || name == "b_hh" || name.rfind("grad_b", 0) == 0) return {"[" + g + "]", {rows}};
  return {"[B, H]", {d.b, d.h}};  // h0, c0, h_n, c_n and their gradients
}

std::vector<TensorType> Types(const std::vector<std::string>& names, const Layer& layer, const Dims& d) {
  std::vector<TensorType> types;
  for (const std::string& name : names) types.push_back(F32(ShapeOf(name, layer, d).shape));
  return types;
}

std::vector<TensorType> As(DType dtype, std::vector<TensorType> types) {
  for (TensorType& t : types) t.dtype = dtype;
  return types;
}

class RecurrentInferenceTest : public ::testing::TestWithParam<Layer> {
 protected:
  const Layer& layer() const { return GetParam(); }
  std::vector<TensorType> ForwardInputs(const Dims& d) const { return Types(layer().forward_in, layer(), d); }
  std::vector<TensorType> BackwardInputs(const Dims& d) const { return Types(layer().backward_in, layer(), d); }
  // "lstm: " and the like: every message starts with the op's name.
  std::string Forward(const std::string& message) const { return layer().forward + ": " + message; }
  std::string Backward(const std::string& message) const { return layer().backward + ": " + message; }
};

TEST_P(RecurrentInferenceTest, RegisteredWithTheirArities) {
  for (const auto& [op, in, out] : {std::tuple{layer().forward, layer().forward_in, layer().forward_out},
                                    std::tuple{layer().backward, layer().backward_in, layer().backward_out}}) {
    const OpDef* def = OpRegistry::Global().Find(op);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_EQ(def->min_inputs, static_cast<int>(in.size())) << op;
    EXPECT_EQ(def->max_inputs, static_cast<int>(in.size())) << op;
    EXPECT_EQ(def->num_outputs, static_cast<int>(out.size())) << op;
    EXPECT_EQ(def->alias, AliasKind::kNone) << op;
  }
}

TEST_P(RecurrentInferenceTest, OutputTypes) {
  for (const Dims& d : {kReference, kDistinct}) {
    auto forward = Infer(layer().forward, ForwardInputs(d));
    ASSERT_TRUE(forward.ok()) << forward.status();
    EXPECT_THAT(*forward, ElementsAreArray(Types(layer().forward_out, layer(), d)));
    auto backward = Infer(layer().backward, BackwardInputs(d));
    ASSERT_TRUE(backward.ok()) << backward.status();
    EXPECT_THAT(*backward, ElementsAreArray(Types(layer().backward_out, layer(), d)));
  }
}

// The output shapes written out for the distinct layer, so that the table
// above cannot hide a slip that the registry shares.
TEST(RecurrentInferenceLiteralTest, GruOutputShapes) {
  std::vector<TensorType> in = {F32({5, 3, 7}), F32({3, 2}), F32({6, 7}), F32({6, 2}), F32({6}), F32({6})};
  auto forward = Infer("gru", in);
  ASSERT_TRUE(forward.ok()) << forward.status();
  EXPECT_THAT(*forward, ElementsAreArray({F32({5, 3, 2}), F32({3, 2}), F32({5, 3, 8})}));
  in = {F32({5, 3, 2}), F32({3, 2}), F32({5, 3, 7}), F32({3, 2}),
        F32({6, 7}),    F32({6, 2}), F32({5, 3, 2}), F32({5, 3, 8})};
  auto backward = Infer("gru_backward", in);
  ASSERT_TRUE(backward.ok()) << backward.status();
  EXPECT_THAT(*backward, ElementsAreArray({F32({5, 3, 7}), F32({3, 2}), F32({6, 7}), F32({6, 2}), F32({6}), F32({6}),
                                           F32({5, 3, 6}), F32({5, 3, 6})}));
}

TEST(RecurrentInferenceLiteralTest, TheContractsExampleMessages) {
  std::vector<TensorType> in = Types(kLstm.forward_in, kLstm, kReference);
  in[4] = F32({4096, 1000});
  EXPECT_THAT(InferError("lstm", in), AllOf(HasSubstr("lstm: w_hh must be [4H, H] = [4096, 1024], got [4096, 1000]"),
                                            HasSubstr("H=1024 from h0")));
  in = Types(kGru.forward_in, kGru, kReference);
  in[3] = F32({3072, 1000});
  EXPECT_THAT(InferError("gru", in), AllOf(HasSubstr("gru: w_hh must be [3H, H] = [3072, 1024], got [3072, 1000]"),
                                           HasSubstr("(T=35, B=64, I=1024 from x; H=1024 from h0)")));
}

// Every input and output in one 16-bit dtype, as in float32.
TEST_P(RecurrentInferenceTest, SixteenBitLayersKeepTheirDType) {
  for (DType half : {DType::kBFloat16, DType::kFloat16}) {
    for (const Dims& d : {kReference, kDistinct}) {
      auto forward = Infer(layer().forward, As(half, ForwardInputs(d)));
      ASSERT_TRUE(forward.ok()) << forward.status();
      EXPECT_EQ(*forward, As(half, Types(layer().forward_out, layer(), d))) << DTypeName(half);
      auto backward = Infer(layer().backward, As(half, BackwardInputs(d)));
      ASSERT_TRUE(backward.ok()) << backward.status();
      EXPECT_EQ(*backward, As(half, Types(layer().backward_out, layer(), d))) << DTypeName(half);
    }
  }
}

// One input of another supported dtype than x's is refused, naming it and
// x's dtype; a different x names the first input after it.
TEST_P(RecurrentInferenceTest, MixedDTypesAreRefused) {
  for (DType other : {DType::kBFloat16, DType::kFloat16}) {
    for (size_t k = 1; k < layer().forward_in.size(); ++k) {
      std::vector<TensorType> in = ForwardInputs(kDistinct);
      in[k].dtype = other;
      EXPECT_THAT(InferError(layer().forward, in),
                  AllOf(HasSubstr(Forward(layer().forward_in[k] + " is " + DTypeName(other))),
                        HasSubstr("but x is float32[5, 3, 7]"), HasSubstr("every input must have x's dtype")));
    }
    std::vector<TensorType> in = ForwardInputs(kDistinct);
    in[0].dtype = other;
    EXPECT_THAT(InferError(layer().forward, in), AllOf(HasSubstr(Forward("h0 is float32[3, 2] but x is ")),
                                                       HasSubstr(std::string("(") + DTypeName(other) + ")")));
    for (size_t k = 0; k < layer().backward_in.size(); ++k) {
      if (k == layer().BackwardX()) continue;
      std::vector<TensorType> back = BackwardInputs(kDistinct);
      back[k].dtype = other;
      EXPECT_THAT(
          InferError(layer().backward, back),
          AllOf(HasSubstr(Backward(layer().backward_in[k] + " is " + DTypeName(other))), HasSubstr("but x is float32")))
          << layer().backward_in[k];
    }
  }
}

TEST_P(RecurrentInferenceTest, EveryInputsDTypeIsChecked) {
  for (size_t k = 0; k < layer().forward_in.size(); ++k) {
    for (DType wrong : {DType::kFloat64, DType::kInt64}) {
      std::vector<TensorType> in = ForwardInputs(kDistinct);
      in[k].dtype = wrong;
      EXPECT_THAT(InferError(layer().forward, in), AllOf(HasSubstr(Forward(layer().forward_in[k] + " is ")),
                                                         HasSubstr(DTypeName(wrong)), HasSubstr("float32")))
          << layer().forward_in[k];
    }
  }
  for (size_t k = 0; k < layer().backward_in.size(); ++k) {
    std::vector<TensorType> in = BackwardInputs(kDistinct);
    in[k].dtype = DType::kFloat64;
    EXPECT_THAT(InferError(layer().backward, in),
                AllOf(HasSubstr(Backward(layer().backward_in[k] + " is ")), HasSubstr("float64")))
        << layer().backward_in[k];
  }
}

// Each input (other than x and h0, which define the dims) with one dim off
// by one, and with one dim too many: refused, naming the input, its
// symbolic and numeric shape.
TEST_P(RecurrentInferenceTest, EveryShapeRelationIsChecked) {
  for (const auto& [op, names] :
       {std::pair{layer().forward, layer().forward_in}, std::pair{layer().backward, layer().backward_in}}) {
    const std::vector<TensorType> good = Types(names, layer(), kDistinct);
    for (size_t k = 0; k < names.size(); ++k) {
      if (names[k] == "x" || names[k] == "h0") continue;
      const NamedShape expected = ShapeOf(names[k], layer(), kDistinct);
      const std::string message =
          op + ": " + names[k] + " must be " + expected.symbolic + " = " + ShapeString(expected.shape);
      for (size_t dim = 0; dim < good[k].shape.size(); ++dim) {
        std::vector<TensorType> in = good;
        in[k].shape[dim] += 1;
        EXPECT_THAT(InferError(op, in), AllOf(HasSubstr(message), HasSubstr("got " + ShapeString(in[k].shape)),
                                              HasSubstr("(T=5, B=3, I=7 from x; H=2 from h0)")))
            << names[k] << " dim " << dim;
      }
      std::vector<TensorType> in = good;
      in[k].shape.push_back(1);  // a wrong rank
      EXPECT_THAT(InferError(op, in), HasSubstr(message)) << names[k];
    }
  }
}

TEST_P(RecurrentInferenceTest, TheDimSourcesAreCheckedThemselves) {
  std::vector<TensorType> in = ForwardInputs(kDistinct);
  in[0] = F32({15, 7});  // x of rank 2 (batch-first data flattened)
  EXPECT_THAT(InferError(layer().forward, in), AllOf(HasSubstr(Forward("x must be [T, B, I]")), HasSubstr("[15, 7]")));
  in = ForwardInputs(kDistinct);
  in[1] = F32({4, 2});  // h0's B differs from x's
  EXPECT_THAT(InferError(layer().forward, in),
              AllOf(HasSubstr(Forward("h0 must be [B, H] = [3, 2], got [4, 2]")), HasSubstr("B=3")));
  in[1] = F32({1, 3, 2});  // h0 with PyTorch's layer dim
  EXPECT_THAT(InferError(layer().forward, in), HasSubstr(Forward("h0 must be [B, H], got float32[1, 3, 2]")));
  in = BackwardInputs(kDistinct);
  in[layer().BackwardX()] = F32({5, 3});
  EXPECT_THAT(InferError(layer().backward, in), HasSubstr(Backward("x must be [T, B, I]")));
}

TEST_P(RecurrentInferenceTest, EmptyDimsAreRefused) {
  for (int dim = 0; dim < 3; ++dim) {
    std::vector<TensorType> in = ForwardInputs(kDistinct);
    in[0].shape[dim] = 0;
    EXPECT_THAT(InferError(layer().forward, in), HasSubstr("T, B and I must each be at least 1")) << dim;
    in = BackwardInputs(kDistinct);
    in[layer().BackwardX()].shape[dim] = 0;
    EXPECT_THAT(InferError(layer().backward, in), HasSubstr("T, B and I must each be at least 1")) << dim;
  }
  EXPECT_THAT(InferError(layer().forward, ForwardInputs({5, 3, 7, 0})), HasSubstr("H must be at least 1"));
  EXPECT_THAT(InferError(layer().backward, BackwardInputs({5, 3, 7, 0})), HasSubstr("H must be at least 1"));
}

TEST_P(RecurrentInferenceTest, WrongInputCountsAreRefused) {
  const size_t forward_count = layer().forward_in.size(), backward_count = layer().backward_in.size();
  std::vector<TensorType> in = ForwardInputs(kDistinct);
  in.pop_back();
  EXPECT_THAT(InferError(layer().forward, in),
              AllOf(HasSubstr("got " + std::to_string(forward_count - 1) + " inputs"), HasSubstr("b_hh")));
  std::vector<TensorType> back = BackwardInputs(kDistinct);
  back.push_back(back.back());
  EXPECT_THAT(InferError(layer().backward, back),
              AllOf(HasSubstr("got " + std::to_string(backward_count + 1) + " inputs"), HasSubstr("saved")));
}

INSTANTIATE_TEST_SUITE_P(Layers, RecurrentInferenceTest, ::testing::Values(kLstm, kGru),
                         [](const ::testing::TestParamInfo<Layer>& info) { return info.param.forward; });

}  // namespace
}  // namespace tandem
