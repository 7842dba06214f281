// The pointwise math family's CPU kernels (kernels/cpu/math_kernels.cc)
// against independent computations: the C++ library in float64 on fresh
// random inputs for the float math, PyTorch's results worked by hand for
// the integer and rounding rules, finite differences for the backward ops.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/make_attrs.h"
#include "ir/ops/math_table.h"
#include "kernels/cpu/run_op_test_util.h"
#include "kernels/half.h"

namespace tandem {
namespace {

using HostTensor = cpu::TestTensor;
using cpu::ElementAsDouble;
using cpu::MakeTensor;
using cpu::SetElement;

HostTensor MakeInt64(Shape shape, const std::vector<int64_t>& values) {
  HostTensor t({DType::kInt64, std::move(shape)});
  for (int64_t i = 0; i < t.numel(); ++i) static_cast<int64_t*>(t.data())[i] = values[i];
  return t;
}

std::vector<double> Values(const HostTensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = ElementAsDouble(t, i);
  return v;
}

HostTensor RunOp(const std::string& op, const Attrs& attrs, std::vector<HostTensor> inputs,
                 bool output_is_input = false) {
  auto result = cpu::RunCpuOp(op, attrs, inputs, 0xA5, output_is_input);
  EXPECT_TRUE(result.ok()) << op << ": " << result.status();
  if (!result.ok() || result->empty()) return HostTensor({DType::kFloat32, {0}});
  return std::move((*result)[0]);
}

class MathKernelTest : public ::testing::Test {
 protected:
  HostTensor Uniform(DType dtype, Shape shape, double lo, double hi) {
    HostTensor t({dtype, std::move(shape)});
    std::uniform_real_distribution<double> u(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) SetElement(t, i, u(rng_));
    return t;
  }
  std::mt19937_64 rng_{std::random_device{}()};
};

struct UnaryCase {
  const char* op;
  double lo, hi;  // the input range (inside the op's domain)
  std::function<double(double)> reference;
};

const std::vector<UnaryCase>& UnaryCases() {
  static const auto* cases = new std::vector<UnaryCase>{
      {"abs", -3, 3, [](double x) { return std::fabs(x); }},
      {"acos", -0.99, 0.99, [](double x) { return std::acos(x); }},
      {"acosh", 1.01, 5, [](double x) { return std::acosh(x); }},
      {"asin", -0.99, 0.99, [](double x) { return std::asin(x); }},
      {"asinh", -5, 5, [](double x) { return std::asinh(x); }},
      {"atan", -5, 5, [](double x) { return std::atan(x); }},
      {"atanh", -0.99, 0.99, [](double x) { return std::atanh(x); }},
      {"ceil", -5, 5, [](double x) { return std::ceil(x); }},
      {"cos", -6, 6, [](double x) { return std::cos(x); }},
      {"cosh", -4, 4, [](double x) { return std::cosh(x); }},
      {"erf", -3, 3, [](double x) { return std::erf(x); }},
      {"expm1", -3, 3, [](double x) { return std::expm1(x); }},
      {"floor", -5, 5, [](double x) { return std::floor(x); }},
      {"log10", 0.01, 100, [](double x) { return std::log10(x); }},
      {"log1p", -0.9, 10, [](double x) { return std::log1p(x); }},
      {"log2", 0.01, 100, [](double x) { return std::log2(x); }},
      {"reciprocal", 0.1, 4, [](double x) { return 1.0 / x; }},
      {"round", -5, 5, [](double x) { return std::nearbyint(x); }},
      {"sign", -3, 3, [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }},
      {"sin", -6, 6, [](double x) { return std::sin(x); }},
      {"sinh", -4, 4, [](double x) { return std::sinh(x); }},
      {"tan", -1.4, 1.4, [](double x) { return std::tan(x); }},
      {"trunc", -5, 5, [](double x) { return std::trunc(x); }},
  };
  return *cases;
}

// |actual - expected| <= rtol * (|expected| + atol_scale), elementwise.
void ExpectNear(const std::vector<double>& actual, const std::vector<double>& expected, double rtol,
                const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_LE(std::fabs(actual[i] - expected[i]), rtol * (std::fabs(expected[i]) + 1e-3))
        << what << " element " << i << ": " << actual[i] << " vs " << expected[i];
  }
}

TEST_F(MathKernelTest, FloatMathMatchesTheCppLibraryInEveryFloatDtype) {
  for (const UnaryCase& c : UnaryCases()) {
    for (DType dtype : {DType::kFloat64, DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      HostTensor x = Uniform(dtype, {3, 37}, c.lo, c.hi);
      std::vector<double> expected;
      for (double v : Values(x)) {
        double r = c.reference(v);
        // A 16-bit result is the float32 result rounded once.
        if (dtype == DType::kBFloat16) r = BFloat16(static_cast<float>(r)).ToFloat();
        if (dtype == DType::kFloat16) r = Float16(static_cast<float>(r)).ToFloat();
        if (dtype == DType::kFloat32) r = static_cast<float>(r);
        expected.push_back(r);
      }
      HostTensor out = RunOp(c.op, {}, {x});
      ASSERT_EQ(out.type, x.type) << c.op;
      const double rtol = dtype == DType::kFloat64 ? 1e-14 : dtype == DType::kFloat32 ? 4e-7 : 1e-2;
      ExpectNear(Values(out), expected, rtol, std::string(c.op) + " " + DTypeName(dtype));
    }
  }
}

TEST_F(MathKernelTest, UnaryOpsRunInPlace) {
  HostTensor x = Uniform(DType::kFloat32, {64}, -2, 2);
  const std::vector<double> before = Values(x);
  HostTensor out = RunOp("sin", {}, {x}, /*output_is_input=*/true);
  std::vector<double> expected;
  for (double v : before) expected.push_back(static_cast<float>(std::sin(v)));
  ExpectNear(Values(out), expected, 4e-7, "sin in place");
}

TEST_F(MathKernelTest, IntegerInputsComputeInFloat32) {
  HostTensor out = RunOp("cos", {}, {MakeInt64({3}, {0, 1, 2})});
  ASSERT_EQ(out.type.dtype, DType::kFloat32);
  ExpectNear(Values(out), {1.0, std::cos(1.0), std::cos(2.0)}, 4e-7, "cos of int64");
}

TEST_F(MathKernelTest, RoundingAndSignFollowPyTorch) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  HostTensor x = MakeTensor(DType::kFloat32, {6}, {0.5, 1.5, -0.5, 2.5, -2.5, nan});
  EXPECT_THAT(Values(RunOp("round", {}, {x})), ::testing::ElementsAre(0.0, 2.0, -0.0, 2.0, -2.0, ::testing::IsNan()));
  EXPECT_THAT(Values(RunOp("sign", {}, {x})), ::testing::ElementsAre(1.0, 1.0, -1.0, 1.0, -1.0, 0.0));
  EXPECT_THAT(Values(RunOp("isnan", {}, {x})), ::testing::ElementsAre(0, 0, 0, 0, 0, 1));
  HostTensor y =
      MakeTensor(DType::kFloat64, {4},
                 {std::numeric_limits<double>::infinity(), -1e308, nan, -std::numeric_limits<double>::infinity()});
  EXPECT_THAT(Values(RunOp("isinf", {}, {y})), ::testing::ElementsAre(1, 0, 0, 1));
  // hardtanh clamps and lets NaN through.
  EXPECT_THAT(Values(RunOp("hardtanh", MakeAttrs({{"min_val", 0.0}, {"max_val", 6.0}}),
                           {MakeTensor(DType::kFloat32, {4}, {-1, 3, 7, nan})})),
              ::testing::ElementsAre(0.0, 3.0, 6.0, ::testing::IsNan()));
}

TEST_F(MathKernelTest, IntegerDivisionFollowsPython) {
  // Worked with PyTorch: divisors of both signs.
  HostTensor a = MakeInt64({3}, {-7, 7, -7});
  HostTensor b = MakeInt64({3}, {2, -2, -2});
  EXPECT_THAT(Values(RunOp("div.Tensor_mode", MakeAttrs({{"rounding_mode", std::string("floor")}}), {a, b})),
              ::testing::ElementsAre(-4, -4, 3));
  EXPECT_THAT(Values(RunOp("div.Tensor_mode", MakeAttrs({{"rounding_mode", std::string("trunc")}}), {a, b})),
              ::testing::ElementsAre(-3, -3, 3));
  EXPECT_THAT(Values(RunOp("remainder.Tensor", {}, {a, b})), ::testing::ElementsAre(1, -1, -1));
  EXPECT_THAT(Values(RunOp("fmod.Tensor", {}, {a, b})), ::testing::ElementsAre(-1, 1, -1));
  EXPECT_THAT(Values(RunOp("pow.Tensor_Tensor", {}, {MakeInt64({4}, {2, -1, 3, 5}), MakeInt64({4}, {-1, -3, 2, 0})})),
              ::testing::ElementsAre(0, -1, 9, 1));
  // True division of integers is float32.
  HostTensor q = RunOp("div.Tensor_mode", {}, {a, b});
  EXPECT_EQ(q.type.dtype, DType::kFloat32);
  EXPECT_THAT(Values(q), ::testing::ElementsAre(-3.5, -3.5, 3.5));
  // Division by zero gives 0 and INT64_MIN / -1 wraps: no trap.
  const int64_t min = std::numeric_limits<int64_t>::min();
  HostTensor edge = RunOp("div.Tensor_mode", MakeAttrs({{"rounding_mode", std::string("floor")}}),
                          {MakeInt64({2}, {5, min}), MakeInt64({2}, {0, -1})});
  EXPECT_EQ(static_cast<const int64_t*>(edge.data())[0], 0);
  EXPECT_EQ(static_cast<const int64_t*>(edge.data())[1], min);
  EXPECT_THAT(Values(RunOp("remainder.Tensor", {}, {MakeInt64({2}, {5, min}), MakeInt64({2}, {0, -1})})),
              ::testing::ElementsAre(0, 0));
  // The .Scalar forms take an exact integer.
  EXPECT_THAT(Values(RunOp("fmod.Scalar", MakeAttrs({{"other", int64_t{3}}}), {MakeInt64({4}, {-7, 7, 9, -1})})),
              ::testing::ElementsAre(-1, 1, 0, -1));
  EXPECT_THAT(Values(RunOp("remainder.Scalar", MakeAttrs({{"other", int64_t{3}}}), {MakeInt64({4}, {-7, 7, 9, -1})})),
              ::testing::ElementsAre(2, 1, 0, 2));
}

TEST_F(MathKernelTest, FloatDivisionModesAndRemainderMatchTheirDefinitions) {
  HostTensor a = Uniform(DType::kFloat64, {200}, -10, 10);
  HostTensor b = Uniform(DType::kFloat64, {200}, 0.3, 3);
  // Half the divisors negative.
  for (int64_t i = 0; i < b.numel(); i += 2) SetElement(b, i, -ElementAsDouble(b, i));
  std::vector<double> floor_div, trunc_div, rem, fmod;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = ElementAsDouble(a, i), y = ElementAsDouble(b, i);
    floor_div.push_back(std::floor(x / y));
    trunc_div.push_back(std::trunc(x / y));
    fmod.push_back(std::fmod(x, y));
    rem.push_back(x - std::floor(x / y) * y);
  }
  ExpectNear(Values(RunOp("div.Tensor_mode", MakeAttrs({{"rounding_mode", std::string("floor")}}), {a, b})), floor_div,
             0, "floor division");
  ExpectNear(Values(RunOp("div.Tensor_mode", MakeAttrs({{"rounding_mode", std::string("trunc")}}), {a, b})), trunc_div,
             0, "trunc division");
  ExpectNear(Values(RunOp("fmod.Tensor", {}, {a, b})), fmod, 0, "fmod");
  ExpectNear(Values(RunOp("remainder.Tensor", {}, {a, b})), rem, 1e-12, "remainder");
  HostTensor exponent = Uniform(DType::kFloat64, {200}, -2, 2);
  HostTensor base = Uniform(DType::kFloat64, {200}, 0.1, 3);
  std::vector<double> pow, atan2;
  for (int64_t i = 0; i < base.numel(); ++i) {
    pow.push_back(std::pow(ElementAsDouble(base, i), ElementAsDouble(exponent, i)));
    atan2.push_back(std::atan2(ElementAsDouble(a, i), ElementAsDouble(b, i)));
  }
  ExpectNear(Values(RunOp("pow.Tensor_Tensor", {}, {base, exponent})), pow, 1e-15, "pow");
  ExpectNear(Values(RunOp("atan2", {}, {a, b})), atan2, 1e-15, "atan2");
}

TEST_F(MathKernelTest, BitwiseAndLogicalOpsBroadcastAcrossDtypes) {
  std::uniform_int_distribution<int64_t> any(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  std::vector<int64_t> xs(12), ys(4);
  for (auto& v : xs) v = any(rng_);
  for (auto& v : ys) v = any(rng_);
  HostTensor x = MakeInt64({3, 4}, xs);
  HostTensor y = MakeInt64({4}, ys);
  struct Case {
    const char* op;
    std::function<int64_t(int64_t, int64_t)> f;
  };
  for (const Case& c : {Case{"bitwise_and.Tensor", [](int64_t p, int64_t q) { return p & q; }},
                        Case{"bitwise_or.Tensor", [](int64_t p, int64_t q) { return p | q; }},
                        Case{"bitwise_xor.Tensor", [](int64_t p, int64_t q) { return p ^ q; }}}) {
    HostTensor out = RunOp(c.op, {}, {x, y});
    ASSERT_EQ(out.type, (TensorType{DType::kInt64, {3, 4}})) << c.op;
    for (int64_t i = 0; i < 12; ++i) {
      EXPECT_EQ(static_cast<const int64_t*>(out.data())[i], c.f(xs[i], ys[i % 4])) << c.op << " " << i;
    }
  }
  HostTensor not_x = RunOp("bitwise_not", {}, {x});
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(static_cast<const int64_t*>(not_x.data())[i], ~xs[i]);
  // bitwise ops on bool are logical.
  HostTensor mask = MakeTensor(DType::kBool, {4}, {1, 0, 1, 0});
  EXPECT_THAT(Values(RunOp("bitwise_not", {}, {mask})), ::testing::ElementsAre(0, 1, 0, 1));
  EXPECT_THAT(Values(RunOp("bitwise_and.Scalar", MakeAttrs({{"other", int64_t{6}}}), {MakeInt64({3}, {3, 4, -1})})),
              ::testing::ElementsAre(2, 4, 6));
  // Logical ops: nonzero is true whatever the dtype (a float64 1e-300 too,
  // NaN too), operands broadcast.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  HostTensor f = MakeTensor(DType::kFloat64, {2, 3}, {0, 1e-300, nan, -2, 0, 0.5});
  HostTensor g = MakeTensor(DType::kBool, {3}, {1, 1, 0});
  EXPECT_THAT(Values(RunOp("logical_and", {}, {f, g})), ::testing::ElementsAre(0, 1, 0, 1, 0, 0));
  EXPECT_THAT(Values(RunOp("logical_or", {}, {f, g})), ::testing::ElementsAre(1, 1, 1, 1, 1, 1));
  EXPECT_THAT(Values(RunOp("logical_xor", {}, {f, g})), ::testing::ElementsAre(1, 0, 1, 0, 1, 1));
}

// Central differences of `forward` (float64) at x.
std::vector<double> Derivative(const std::string& forward, const Attrs& attrs, const HostTensor& x) {
  const double h = 1e-6;
  std::vector<double> d;
  for (int64_t i = 0; i < x.numel(); ++i) {
    HostTensor plus = MakeTensor(DType::kFloat64, {1}, {ElementAsDouble(x, i) + h});
    HostTensor minus = MakeTensor(DType::kFloat64, {1}, {ElementAsDouble(x, i) - h});
    d.push_back(
        (ElementAsDouble(RunOp(forward, attrs, {plus}), 0) - ElementAsDouble(RunOp(forward, attrs, {minus}), 0)) /
        (2 * h));
  }
  return d;
}

TEST_F(MathKernelTest, ActivationBackwardsAreTheForwardsDerivatives) {
  // Inputs away from the kinks, where the finite difference is exact enough.
  HostTensor x = Uniform(DType::kFloat64, {40}, -3, 3);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = ElementAsDouble(x, i);
    if (std::fabs(v) < 0.05 || std::fabs(std::fabs(v) - 1) < 0.05) SetElement(x, i, v + 0.2);
  }
  HostTensor grad = Uniform(DType::kFloat64, {40}, -2, 2);
  auto times_grad = [&](std::vector<double> d) {
    for (int64_t i = 0; i < grad.numel(); ++i) d[i] *= ElementAsDouble(grad, i);
    return d;
  };
  const Attrs bounds = MakeAttrs({{"min_val", -1.0}, {"max_val", 1.0}});
  ExpectNear(Values(RunOp("hardtanh_backward", bounds, {grad, x})), times_grad(Derivative("hardtanh", bounds, x)), 1e-6,
             "hardtanh_backward");
  const Attrs slope = MakeAttrs({{"negative_slope", 0.2}, {"self_is_result", false}});
  ExpectNear(Values(RunOp("leaky_relu_backward", slope, {grad, x})),
             times_grad(Derivative("leaky_relu", MakeAttrs({{"negative_slope", 0.2}}), x)), 1e-6,
             "leaky_relu_backward");
  const Attrs elu = MakeAttrs({{"alpha", 1.3}, {"scale", 1.05}, {"input_scale", 0.7}});
  const std::vector<double> expected = times_grad(Derivative("elu", elu, x));
  Attrs from_input = elu;
  from_input.Set("is_result", false);
  ExpectNear(Values(RunOp("elu_backward", from_input, {grad, x})), expected, 1e-6, "elu_backward of the input");
  // From the forward's output, as PyTorch's ELU(inplace=True) saves it.
  Attrs from_result = elu;
  from_result.Set("is_result", true);
  HostTensor y = RunOp("elu", elu, {x});
  ExpectNear(Values(RunOp("elu_backward", from_result, {grad, y})), expected, 1e-6, "elu_backward of the result");
}

TEST_F(MathKernelTest, EveryTableOpHasACpuKernel) {
  for (const MathOpInfo& info : kMathOps) EXPECT_NE(cpu::FindCpuKernel(info.name), nullptr) << info.name;
}

}  // namespace
}  // namespace tandem
