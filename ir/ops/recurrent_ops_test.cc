// Shape and dtype inference of lstm and lstm_backward: the output types (in
// float32, bfloat16 and float16: every output in the inputs' one dtype), and
// for every input a wrong dtype, a dtype other than x's, and a wrong shape,
// each refused with a message that names the input and its expected shape
// or dtype.
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/op_registry.h"

namespace tandem {

void PrintTo(const TensorType& type, std::ostream* os) { *os << type.ToString(); }

namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
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

std::vector<TensorType> ForwardInputs(const Dims& d) {
  return {F32({d.t, d.b, d.i}), F32({d.b, d.h}), F32({d.b, d.h}), F32({4 * d.h, d.i}),
          F32({4 * d.h, d.h}),  F32({4 * d.h}),  F32({4 * d.h})};
}

std::vector<TensorType> BackwardInputs(const Dims& d) {
  return {F32({d.t, d.b, d.h}), F32({d.b, d.h}),         F32({d.b, d.h}),     F32({d.t, d.b, d.i}),
          F32({d.b, d.h}),      F32({d.b, d.h}),         F32({4 * d.h, d.i}), F32({4 * d.h, d.h}),
          F32({d.t, d.b, d.h}), F32({d.t, d.b, 5 * d.h})};
}

const char* const kForwardNames[] = {"x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"};
const char* const kBackwardNames[] = {"grad_y", "grad_h_n", "grad_c_n", "x", "h0", "c0", "w_ih", "w_hh", "y", "saved"};

TEST(RecurrentInferenceTest, RegisteredWithTheirArities) {
  const OpDef* lstm = OpRegistry::Global().Find("lstm");
  const OpDef* backward = OpRegistry::Global().Find("lstm_backward");
  ASSERT_NE(lstm, nullptr);
  ASSERT_NE(backward, nullptr);
  EXPECT_EQ(lstm->min_inputs, 7);
  EXPECT_EQ(lstm->max_inputs, 7);
  EXPECT_EQ(lstm->num_outputs, 4);
  EXPECT_EQ(lstm->alias, AliasKind::kNone);
  EXPECT_EQ(backward->min_inputs, 10);
  EXPECT_EQ(backward->max_inputs, 10);
  EXPECT_EQ(backward->num_outputs, 7);
  EXPECT_EQ(backward->alias, AliasKind::kNone);
}

TEST(RecurrentInferenceTest, ForwardOutputTypes) {
  for (const Dims& d : {kReference, kDistinct}) {
    auto out = Infer("lstm", ForwardInputs(d));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_THAT(*out, ElementsAre(F32({d.t, d.b, d.h}), F32({d.b, d.h}), F32({d.b, d.h}), F32({d.t, d.b, 5 * d.h})));
  }
}

TEST(RecurrentInferenceTest, BackwardOutputTypes) {
  for (const Dims& d : {kReference, kDistinct}) {
    auto out = Infer("lstm_backward", BackwardInputs(d));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_THAT(*out, ElementsAre(F32({d.t, d.b, d.i}), F32({d.b, d.h}), F32({d.b, d.h}), F32({4 * d.h, d.i}),
                                  F32({4 * d.h, d.h}), F32({4 * d.h}), F32({d.t, d.b, 4 * d.h})));
  }
}

TEST(RecurrentInferenceTest, TheContractsExampleMessage) {
  std::vector<TensorType> in = ForwardInputs(kReference);
  in[4] = F32({4096, 1000});
  EXPECT_THAT(InferError("lstm", in), AllOf(HasSubstr("lstm: w_hh must be [4H, H] = [4096, 1024], got [4096, 1000]"),
                                            HasSubstr("H=1024 from h0")));
}

// Every input and output in one 16-bit dtype, as in float32.
TEST(RecurrentInferenceTest, SixteenBitLayersKeepTheirDType) {
  for (DType half : {DType::kBFloat16, DType::kFloat16}) {
    for (const Dims& d : {kReference, kDistinct}) {
      auto as_half = [half](std::vector<TensorType> types) {
        for (TensorType& t : types) t.dtype = half;
        return types;
      };
      auto forward = Infer("lstm", as_half(ForwardInputs(d)));
      ASSERT_TRUE(forward.ok()) << forward.status();
      EXPECT_EQ(*forward, as_half({F32({d.t, d.b, d.h}), F32({d.b, d.h}), F32({d.b, d.h}), F32({d.t, d.b, 5 * d.h})}))
          << DTypeName(half);
      auto backward = Infer("lstm_backward", as_half(BackwardInputs(d)));
      ASSERT_TRUE(backward.ok()) << backward.status();
      EXPECT_EQ(*backward, as_half({F32({d.t, d.b, d.i}), F32({d.b, d.h}), F32({d.b, d.h}), F32({4 * d.h, d.i}),
                                    F32({4 * d.h, d.h}), F32({4 * d.h}), F32({d.t, d.b, 4 * d.h})}))
          << DTypeName(half);
    }
  }
}

// One input of another supported dtype than x's is refused, naming it and
// x's dtype; a different x names the first input after it.
TEST(RecurrentInferenceTest, MixedDTypesAreRefused) {
  for (DType other : {DType::kBFloat16, DType::kFloat16}) {
    for (size_t k = 1; k < 7; ++k) {
      std::vector<TensorType> in = ForwardInputs(kDistinct);
      in[k].dtype = other;
      EXPECT_THAT(InferError("lstm", in),
                  AllOf(HasSubstr(std::string("lstm: ") + kForwardNames[k] + " is " + DTypeName(other)),
                        HasSubstr("but x is float32[5, 3, 7]"), HasSubstr("every input must have x's dtype")));
    }
    std::vector<TensorType> in = ForwardInputs(kDistinct);
    in[0].dtype = other;
    EXPECT_THAT(InferError("lstm", in), AllOf(HasSubstr("lstm: h0 is float32[3, 2] but x is "),
                                              HasSubstr(std::string("(") + DTypeName(other) + ")")));
    for (size_t k = 0; k < 10; ++k) {
      if (k == 3) continue;  // x
      std::vector<TensorType> back = BackwardInputs(kDistinct);
      back[k].dtype = other;
      EXPECT_THAT(InferError("lstm_backward", back),
                  AllOf(HasSubstr(std::string("lstm_backward: ") + kBackwardNames[k] + " is " + DTypeName(other)),
                        HasSubstr("but x is float32")))
          << kBackwardNames[k];
    }
  }
}

TEST(RecurrentInferenceTest, EveryForwardInputsDTypeIsChecked) {
  for (size_t k = 0; k < 7; ++k) {
    for (DType wrong : {DType::kFloat64, DType::kInt64}) {
      std::vector<TensorType> in = ForwardInputs(kDistinct);
      in[k].dtype = wrong;
      EXPECT_THAT(InferError("lstm", in), AllOf(HasSubstr(std::string("lstm: ") + kForwardNames[k] + " is "),
                                                HasSubstr(DTypeName(wrong)), HasSubstr("float32")))
          << kForwardNames[k];
    }
  }
}

TEST(RecurrentInferenceTest, EveryBackwardInputsDTypeIsChecked) {
  for (size_t k = 0; k < 10; ++k) {
    std::vector<TensorType> in = BackwardInputs(kDistinct);
    in[k].dtype = DType::kFloat64;
    EXPECT_THAT(InferError("lstm_backward", in),
                AllOf(HasSubstr(std::string("lstm_backward: ") + kBackwardNames[k] + " is "), HasSubstr("float64")))
        << kBackwardNames[k];
  }
}

// Each input (other than x and h0, which define the dims) with one dim off
// by one: refused, naming the input, its symbolic and numeric shape.
TEST(RecurrentInferenceTest, EveryForwardShapeRelationIsChecked) {
  const Dims d = kDistinct;
  const std::vector<std::pair<size_t, std::string>> expected = {{2, "c0 must be [B, H] = [3, 2]"},
                                                                {3, "w_ih must be [4H, I] = [8, 7]"},
                                                                {4, "w_hh must be [4H, H] = [8, 2]"},
                                                                {5, "b_ih must be [4H] = [8]"},
                                                                {6, "b_hh must be [4H] = [8]"}};
  for (const auto& [k, message] : expected) {
    for (size_t dim = 0; dim < ForwardInputs(d)[k].shape.size(); ++dim) {
      std::vector<TensorType> in = ForwardInputs(d);
      in[k].shape[dim] += 1;
      EXPECT_THAT(InferError("lstm", in), AllOf(HasSubstr(message), HasSubstr("got " + ShapeString(in[k].shape))))
          << kForwardNames[k] << " dim " << dim;
    }
    std::vector<TensorType> in = ForwardInputs(d);
    in[k].shape.push_back(1);  // a wrong rank
    EXPECT_THAT(InferError("lstm", in), HasSubstr(message)) << kForwardNames[k];
  }
}

TEST(RecurrentInferenceTest, EveryBackwardShapeRelationIsChecked) {
  const Dims d = kDistinct;
  const std::vector<std::pair<size_t, std::string>> expected = {
      {0, "grad_y must be [T, B, H] = [5, 3, 2]"}, {1, "grad_h_n must be [B, H] = [3, 2]"},
      {2, "grad_c_n must be [B, H] = [3, 2]"},     {5, "c0 must be [B, H] = [3, 2]"},
      {6, "w_ih must be [4H, I] = [8, 7]"},        {7, "w_hh must be [4H, H] = [8, 2]"},
      {8, "y must be [T, B, H] = [5, 3, 2]"},      {9, "saved must be [T, B, 5H] = [5, 3, 10]"}};
  for (const auto& [k, message] : expected) {
    for (size_t dim = 0; dim < BackwardInputs(d)[k].shape.size(); ++dim) {
      std::vector<TensorType> in = BackwardInputs(d);
      in[k].shape[dim] += 1;
      EXPECT_THAT(InferError("lstm_backward", in),
                  AllOf(HasSubstr("lstm_backward: " + message), HasSubstr("got " + ShapeString(in[k].shape))))
          << kBackwardNames[k] << " dim " << dim;
    }
  }
}

TEST(RecurrentInferenceTest, TheDimSourcesAreCheckedThemselves) {
  std::vector<TensorType> in = ForwardInputs(kDistinct);
  in[0] = F32({15, 7});  // x of rank 2 (batch-first data flattened)
  EXPECT_THAT(InferError("lstm", in), AllOf(HasSubstr("x must be [T, B, I]"), HasSubstr("[15, 7]")));
  in = ForwardInputs(kDistinct);
  in[1] = F32({4, 2});  // h0's B differs from x's
  EXPECT_THAT(InferError("lstm", in), AllOf(HasSubstr("h0 must be [B, H] = [3, 2], got [4, 2]"), HasSubstr("B=3")));
  in[1] = F32({1, 3, 2});  // h0 with PyTorch's layer dim
  EXPECT_THAT(InferError("lstm", in), HasSubstr("h0 must be [B, H], got float32[1, 3, 2]"));
  in = BackwardInputs(kDistinct);
  in[3] = F32({5, 3});
  EXPECT_THAT(InferError("lstm_backward", in), HasSubstr("lstm_backward: x must be [T, B, I]"));
}

TEST(RecurrentInferenceTest, EmptyDimsAreRefused) {
  for (int dim = 0; dim < 3; ++dim) {
    std::vector<TensorType> in = ForwardInputs(kDistinct);
    in[0].shape[dim] = 0;
    EXPECT_THAT(InferError("lstm", in), HasSubstr("T, B and I must each be at least 1")) << dim;
  }
  std::vector<TensorType> in = ForwardInputs({5, 3, 7, 0});
  EXPECT_THAT(InferError("lstm", in), HasSubstr("H must be at least 1"));
}

TEST(RecurrentInferenceTest, WrongInputCountsAreRefused) {
  std::vector<TensorType> in = ForwardInputs(kDistinct);
  in.pop_back();
  EXPECT_THAT(InferError("lstm", in), AllOf(HasSubstr("got 6 inputs"), HasSubstr("b_hh")));
  std::vector<TensorType> back = BackwardInputs(kDistinct);
  back.push_back(back.back());
  EXPECT_THAT(InferError("lstm_backward", back), AllOf(HasSubstr("got 11 inputs"), HasSubstr("saved")));
}

}  // namespace
}  // namespace tandem
