// The CPU kernels of the random ops (bernoulli, rand, randn) and the
// constructors: the random ops by their statistics over many draws and by
// drawing fresh numbers for a new seed, in several dtypes; the empty
// constructors give zeros, the filling ones their value (outputs are poisoned before each run, so an
// element a kernel leaves unwritten shows).
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "ir/make_attrs.h"
#include "kernels/cpu/run_op_test_util.h"
#include "kernels/half.h"

namespace tandem::cpu {
namespace {

using Ints = std::vector<int64_t>;

constexpr uint8_t kPoison = 0xA7;

std::vector<double> Values(const TestTensor& t) { return ElementsAsDoubles(t); }

// A tensor of `dtype` and `shape` (zeros): the random ops read only its
// type.
TestTensor Shaped(DType dtype, Shape shape) {
  TestTensor t({dtype, std::move(shape)});
  for (int64_t i = 0; i < t.numel(); ++i) SetElement(t, i, 0.0);
  return t;
}

std::vector<TestTensor> RunOp(const std::string& op, const Attrs& attrs, std::vector<TestTensor> inputs) {
  return MustRunCpuOp(op, attrs, std::move(inputs), kPoison);
}

double Mean(const std::vector<double>& v) {
  double sum = 0.0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

double Variance(const std::vector<double>& v) {
  const double m = Mean(v);
  double sum = 0.0;
  for (double x : v) sum += (x - m) * (x - m);
  return sum / static_cast<double>(v.size());
}

TestTensor Seed(int64_t value) { return MakeTensor(DType::kInt64, {}, {static_cast<double>(value)}); }

TEST(RandomKernelTest, BernoulliHasMeanPAndFreshValuesForANewSeed) {
  constexpr int64_t kN = 200000;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64, DType::kBool}) {
    for (double p : {0.1, 0.5, 0.9}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " p " << p);
      const TestTensor self = Shaped(dtype, {kN});
      const Attrs attrs = MakeAttrs({{"p", p}, {"seed", int64_t{11}}});
      auto first = RunOp("bernoulli.p", attrs, {self, Seed(1)});
      auto again = RunOp("bernoulli.p", attrs, {self, Seed(1)});
      auto next = RunOp("bernoulli.p", attrs, {self, Seed(2)});
      ASSERT_EQ(first.size(), 1u);
      ASSERT_EQ(next.size(), 1u);
      const std::vector<double> a = Values(first[0]), b = Values(next[0]);
      for (double v : a) ASSERT_TRUE(v == 0.0 || v == 1.0) << v;
      // 5 standard deviations of a mean of kN draws (at most 0.0012).
      EXPECT_NEAR(Mean(a), p, 5 * std::sqrt(p * (1 - p) / kN));
      EXPECT_NEAR(Mean(b), p, 5 * std::sqrt(p * (1 - p) / kN));
      EXPECT_EQ(a, Values(again[0]));  // reproducible from its seeds
      int64_t differ = 0;
      for (int64_t i = 0; i < kN; ++i) differ += a[i] != b[i];
      // Independent draws differ with probability 2p(1 - p).
      EXPECT_NEAR(static_cast<double>(differ) / kN, 2 * p * (1 - p), 0.01);
    }
  }
  // p = 0 and p = 1 are exact; without a seed tensor the attribute alone keys.
  auto zeros = RunOp("bernoulli.p", MakeAttrs({{"p", 0.0}}), {Shaped(DType::kFloat64, {1000})});
  auto ones = RunOp("bernoulli.p", MakeAttrs({{"p", 1.0}}), {Shaped(DType::kFloat64, {1000})});
  ASSERT_EQ(zeros.size(), 1u);
  ASSERT_EQ(ones.size(), 1u);
  EXPECT_EQ(Values(zeros[0]), std::vector<double>(1000, 0.0));
  EXPECT_EQ(Values(ones[0]), std::vector<double>(1000, 1.0));
  auto other_node =
      RunOp("bernoulli.p", MakeAttrs({{"p", 0.5}, {"seed", int64_t{12}}}), {Shaped(DType::kFloat32, {1000}), Seed(1)});
  auto this_node =
      RunOp("bernoulli.p", MakeAttrs({{"p", 0.5}, {"seed", int64_t{11}}}), {Shaped(DType::kFloat32, {1000}), Seed(1)});
  EXPECT_NE(Values(other_node[0]), Values(this_node[0]));
}

TEST(RandomKernelTest, RandIsUniformInZeroOne) {
  constexpr int64_t kN = 200000;
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Attrs attrs = MakeAttrs({{"size", Ints{kN}}, {"dtype", dtype}, {"seed", int64_t{3}}});
    auto first = RunOp("rand", attrs, {Seed(100)});
    auto next = RunOp("rand", attrs, {Seed(101)});
    ASSERT_EQ(first.size(), 1u);
    ASSERT_EQ(next.size(), 1u);
    const std::vector<double> a = Values(first[0]), b = Values(next[0]);
    for (double v : a) ASSERT_TRUE(v >= 0.0 && v < 1.0) << v;
    // bfloat16 keeps 8 bits: its uniform's mean is 0.5 - 2^-9.
    const double mean = dtype == DType::kBFloat16 ? 0.5 - std::ldexp(1.0, -9) : 0.5;
    EXPECT_NEAR(Mean(a), mean, 5 * std::sqrt(1.0 / 12 / kN));
    EXPECT_NEAR(Variance(a), 1.0 / 12, 0.002);
    int64_t same = 0;
    for (int64_t i = 0; i < kN; ++i) same += a[i] == b[i];
    EXPECT_LT(same, dtype == DType::kBFloat16 ? kN / 100 : kN / 1000);
    // A quarter of the draws below 0.25.
    EXPECT_NEAR(std::count_if(a.begin(), a.end(), [](double v) { return v < 0.25; }) / static_cast<double>(kN), 0.25,
                0.005);
  }
}

TEST(RandomKernelTest, RandnIsStandardNormal) {
  constexpr int64_t kN = 200000;
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Attrs attrs = MakeAttrs({{"size", Ints{kN}}, {"dtype", dtype}});
    auto first = RunOp("randn", attrs, {Seed(7)});
    auto next = RunOp("randn", attrs, {Seed(8)});
    ASSERT_EQ(first.size(), 1u);
    ASSERT_EQ(next.size(), 1u);
    const std::vector<double> a = Values(first[0]);
    for (double v : a) ASSERT_TRUE(std::isfinite(v));
    EXPECT_NEAR(Mean(a), 0.0, 5 / std::sqrt(static_cast<double>(kN)));
    EXPECT_NEAR(Variance(a), 1.0, 0.02);
    // P(|z| < 1) = 0.6827.
    EXPECT_NEAR(std::count_if(a.begin(), a.end(), [](double v) { return std::fabs(v) < 1; }) / static_cast<double>(kN),
                0.6827, 0.005);
    EXPECT_NE(a, Values(next[0]));
  }
}

TEST(RandomKernelTest, EmptyConstructorsAreZeros) {
  auto empty = RunOp("empty.memory_format", MakeAttrs({{"size", Ints{3, 5}}, {"dtype", DType::kFloat16}}), {});
  auto strided = RunOp("empty_strided", MakeAttrs({{"size", Ints{4, 2}}, {"stride", Ints{1, 4}}}), {});
  auto like =
      RunOp("new_empty_strided", MakeAttrs({{"size", Ints{7}}, {"stride", Ints{1}}}), {Shaped(DType::kInt64, {2})});
  ASSERT_EQ(empty.size(), 1u);
  ASSERT_EQ(strided.size(), 1u);
  ASSERT_EQ(like.size(), 1u);
  EXPECT_EQ(Values(empty[0]), std::vector<double>(15, 0.0));
  EXPECT_EQ(Values(strided[0]), std::vector<double>(8, 0.0));
  EXPECT_EQ(like[0].type, (TensorType{DType::kInt64, {7}}));
  EXPECT_EQ(Values(like[0]), std::vector<double>(7, 0.0));
}

// The filling constructors, exactly, in several dtypes.
TEST(FactoryKernelTest, FactoriesFillTheirValue) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kBool}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Ints size = {2, 3};
    EXPECT_EQ(Values(RunOp("zeros", MakeAttrs({{"size", size}, {"dtype", dtype}}), {})[0]),
              std::vector<double>(6, 0.0));
    EXPECT_EQ(Values(RunOp("ones", MakeAttrs({{"size", size}, {"dtype", dtype}}), {})[0]), std::vector<double>(6, 1.0));
    EXPECT_EQ(Values(RunOp("full", MakeAttrs({{"size", size}, {"fill_value", int64_t{1}}, {"dtype", dtype}}), {})[0]),
              std::vector<double>(6, 1.0));
  }
  const TestTensor x = MakeTensor(DType::kFloat64, {4}, {1.5, -2.0, 3.25, 4.0});
  EXPECT_EQ(Values(RunOp("zeros_like", {}, {x})[0]), std::vector<double>(4, 0.0));
  EXPECT_EQ(Values(RunOp("ones_like", {}, {x})[0]), std::vector<double>(4, 1.0));
  EXPECT_EQ(Values(RunOp("full_like", MakeAttrs({{"fill_value", -2.25}}), {x})[0]), std::vector<double>(4, -2.25));
  EXPECT_EQ(Values(RunOp("fill.Scalar", MakeAttrs({{"value", 0.5}}), {x})[0]), std::vector<double>(4, 0.5));
  EXPECT_EQ(Values(RunOp("scalar_tensor", MakeAttrs({{"s", 3.5}, {"dtype", DType::kFloat64}}), {})[0]),
            std::vector<double>{3.5});
  // A float fill of an int64 tensor truncates.
  EXPECT_EQ(Values(RunOp("full", MakeAttrs({{"size", Ints{2}}, {"fill_value", 7.9}, {"dtype", DType::kInt64}}), {})[0]),
            (std::vector<double>{7, 7}));
}

}  // namespace
}  // namespace tandem::cpu
