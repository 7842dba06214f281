// Every reference CPU kernel against a straightforward double-precision
// computation written here (index arithmetic of its own, not the kernels'
// helpers), on fresh random nonzero inputs from a seeded generator.
#include "kernels/cpu/cpu_kernels.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/make_attrs.h"
#include "ir/op_registry.h"
#include "kernels/cpu/run_op_test_util.h"

namespace tandem {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using HostTensor = cpu::TestTensor;
using cpu::ElementAsDouble;
using cpu::MakeTensor;
using cpu::SetElement;

std::vector<double> Values(const HostTensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = ElementAsDouble(t, i);
  return v;
}

class KernelTest : public ::testing::Test {
 protected:
  // Nonzero values: floats in +-[0.1, 2] (positive only when asked),
  // integers in +-[1, 50].
  HostTensor Random(DType dtype, Shape shape, bool positive = false) {
    HostTensor t({dtype, std::move(shape)});
    std::uniform_real_distribution<double> magnitude(0.1, 2.0);
    std::uniform_int_distribution<int64_t> integer(1, 50);
    std::bernoulli_distribution negative(positive ? 0.0 : 0.5);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double m = IsFloating(dtype) ? magnitude(rng_) : static_cast<double>(integer(rng_));
      SetElement(t, i, negative(rng_) ? -m : m);
    }
    return t;
  }

  std::mt19937_64 rng_{20260101};
};

// Runs `op` through FindCpuKernel with outputs of the inferred types,
// poisoned first (0xA5 bytes catch unwritten outputs). With
// `output_is_input`, output 0 is placed on input 0's buffer, as the planner
// may do for kInPlace and kView ops.
absl::StatusOr<std::vector<HostTensor>> RunOp(const std::string& op, const Attrs& attrs, std::vector<HostTensor> inputs,
                                              bool output_is_input = false) {
  return cpu::RunCpuOp(op, attrs, inputs, 0xA5, output_is_input);
}

std::vector<HostTensor> MustRun(const std::string& op, const Attrs& attrs, std::vector<HostTensor> inputs,
                                bool output_is_input = false) {
  auto result = RunOp(op, attrs, std::move(inputs), output_is_input);
  EXPECT_TRUE(result.ok()) << op << ": " << result.status();
  if (!result.ok()) return {};
  return *std::move(result);
}

// |actual - expected| <= rtol * (|expected| + 1), with rtol by dtype
// (exact for integers). The +1 covers results that cancel to near zero:
// inputs are of magnitude ~1.
void ExpectClose(const HostTensor& actual, const std::vector<double>& expected, const std::string& what,
                 double f32_rtol = 2e-6) {
  ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size())) << what;
  const double rtol = actual.type.dtype == DType::kFloat32   ? f32_rtol
                      : actual.type.dtype == DType::kFloat64 ? 1e-12
                                                             : 0.0;
  int failures = 0;
  for (int64_t i = 0; i < actual.numel() && failures < 5; ++i) {
    const double a = ElementAsDouble(actual, i);
    const double e = expected[i];
    if (std::isnan(e) && std::isnan(a)) continue;
    if (!(std::abs(a - e) <= rtol * (std::abs(e) + 1.0))) {
      ADD_FAILURE() << what << " " << actual.type.ToString() << ": element " << i << " is " << a << ", expected " << e;
      ++failures;
    }
  }
}

std::vector<int64_t> Unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return index;
}

int64_t Ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + index[d];
  return i;
}

// The element of a tensor of shape `in` that broadcasts to `index` of a
// larger shape (aligned at the last dim; size-1 dims repeat).
int64_t BroadcastSource(const std::vector<int64_t>& index, const Shape& in) {
  std::vector<int64_t> own(in.size());
  const size_t lead = index.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) own[d] = in[d] == 1 ? 0 : index[lead + d];
  return Ravel(own, in);
}

// expected[i] = f(a at i, b at i) over the broadcast shape `out`.
std::vector<double> ReferenceBinary(const HostTensor& a, const HostTensor& b, const Shape& out,
                                    const std::function<double(double, double)>& f) {
  std::vector<double> expected(NumElements(out));
  for (int64_t i = 0; i < NumElements(out); ++i) {
    const auto index = Unravel(i, out);
    expected[i] = f(ElementAsDouble(a, BroadcastSource(index, a.type.shape)),
                    ElementAsDouble(b, BroadcastSource(index, b.type.shape)));
  }
  return expected;
}

TEST(CpuKernelTableTest, EveryRegisteredOpHasACpuKernel) {
  for (const std::string& op : OpRegistry::Global().Names()) {
    EXPECT_NE(cpu::FindCpuKernel(op), nullptr) << op;
  }
  EXPECT_EQ(cpu::FindCpuKernel("conv2d"), nullptr);
}

struct BinaryCase {
  Shape a, b;
};

TEST_F(KernelTest, ArithmeticTensorOpsBroadcast) {
  const std::vector<BinaryCase> cases = {{{3, 4}, {3, 4}}, {{4, 1, 3}, {2, 1}}, {{2, 3}, {}},
                                         {{}, {2, 3}},     {{5, 1}, {1, 6}},    {{1}, {7}}};
  struct Op {
    std::string name;
    bool ints;
    std::function<double(double, double, double)> f;  // (a, b, alpha)
  };
  const std::vector<Op> ops = {{"add.Tensor", true, [](double a, double b, double al) { return a + al * b; }},
                               {"sub.Tensor", true, [](double a, double b, double al) { return a - al * b; }},
                               {"mul.Tensor", true, [](double a, double b, double) { return a * b; }},
                               {"div.Tensor", false, [](double a, double b, double) { return a / b; }}};
  for (const Op& op : ops) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
      if (dtype == DType::kInt64 && !op.ints) continue;
      for (const BinaryCase& c : cases) {
        for (double alpha : {1.0, 3.0}) {
          const bool has_alpha = op.name == "add.Tensor" || op.name == "sub.Tensor";
          if (!has_alpha && alpha != 1.0) continue;
          Attrs attrs;
          if (alpha != 1.0) attrs.Set("alpha", int64_t{3});
          HostTensor a = Random(dtype, c.a);
          HostTensor b = Random(dtype, c.b);
          auto out = MustRun(op.name, attrs, {a, b});
          ASSERT_EQ(out.size(), 1u);
          ExpectClose(out[0],
                      ReferenceBinary(a, b, out[0].type.shape, [&](double x, double y) { return op.f(x, y, alpha); }),
                      op.name + " " + ShapeString(c.a) + " " + ShapeString(c.b));
        }
      }
    }
  }
}

TEST_F(KernelTest, RankZeroOperandOfAnotherDTypeIsConverted) {
  HostTensor a = Random(DType::kFloat32, {2, 3});
  HostTensor s = MakeTensor(DType::kFloat64, {}, {0.1});  // 0.1 is not a float: converted to float first
  auto out = MustRun("mul.Tensor", {}, {a, s});
  std::vector<double> expected;
  for (double v : Values(a)) expected.push_back(static_cast<float>(v) * static_cast<double>(0.1f));
  ExpectClose(out[0], expected, "float32 * float64[]");
  HostTensor i = MakeTensor(DType::kInt64, {}, {3});
  auto out2 = MustRun("sub.Tensor", {}, {i, a});
  std::vector<double> expected2;
  for (double v : Values(a)) expected2.push_back(3.0 - v);
  ExpectClose(out2[0], expected2, "int64[] - float32");
}

TEST_F(KernelTest, ScalarOps) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    HostTensor x = Random(dtype, {4, 5});
    const bool ints = dtype == DType::kInt64;
    const AttrValue other = ints ? AttrValue(int64_t{7}) : AttrValue(0.75);
    const double o = ints ? 7.0 : 0.75;
    const AttrValue alpha = ints ? AttrValue(int64_t{-2}) : AttrValue(2.5);
    const double al = ints ? -2.0 : 2.5;
    auto expect = [&](const std::string& op, bool with_alpha, std::function<double(double)> f) {
      Attrs attrs = MakeAttrs({{"other", other}});
      if (with_alpha) attrs.Set("alpha", alpha);
      auto out = MustRun(op, attrs, {x});
      std::vector<double> expected;
      for (double v : Values(x)) expected.push_back(f(v));
      ExpectClose(out[0], expected, op);
    };
    expect("add.Scalar", true, [&](double v) { return v + al * o; });
    expect("sub.Scalar", true, [&](double v) { return v - al * o; });
    expect("add.Scalar", false, [&](double v) { return v + o; });
    expect("mul.Scalar", false, [&](double v) { return v * o; });
    if (!ints) expect("div.Scalar", false, [&](double v) { return v / o; });
  }
}

TEST_F(KernelTest, UnaryOps) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    HostTensor x = Random(dtype, {3, 7});
    HostTensor positive = Random(dtype, {3, 7}, /*positive=*/true);
    std::vector<double> neg, relu, root;
    for (double v : Values(x)) {
      neg.push_back(-v);
      relu.push_back(v > 0 ? v : 0.0);
    }
    for (double v : Values(positive)) root.push_back(std::sqrt(v));
    ExpectClose(MustRun("neg", {}, {x})[0], neg, "neg");
    ExpectClose(MustRun("relu", {}, {x})[0], relu, "relu");
    ExpectClose(MustRun("sqrt", {}, {positive})[0], root, "sqrt");
  }
  HostTensor i = Random(DType::kInt64, {9});
  std::vector<double> relu;
  for (double v : Values(i)) relu.push_back(v > 0 ? v : 0.0);
  ExpectClose(MustRun("relu", {}, {i})[0], relu, "relu int64");
}

TEST_F(KernelTest, ThresholdBackward) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    HostTensor grad = Random(dtype, {4, 6});
    HostTensor self = Random(dtype, {6});  // broadcast
    auto out = MustRun("threshold_backward", MakeAttrs({{"threshold", 0.5}}), {grad, self});
    ExpectClose(out[0], ReferenceBinary(grad, self, {4, 6}, [](double g, double s) { return s > 0.5 ? g : 0.0; }),
                "threshold_backward");
  }
}

// Ops whose output may take input 0's place give the same result there.
TEST_F(KernelTest, InPlaceAndViewOpsTolerateOutputOnInput) {
  struct Case {
    std::string op;
    Attrs attrs;
    std::vector<HostTensor> inputs;
  };
  std::vector<Case> cases = {
      {"add.Tensor", MakeAttrs({{"alpha", 2.0}}), {Random(DType::kFloat32, {5, 4}), Random(DType::kFloat32, {4})}},
      {"mul.Tensor", {}, {Random(DType::kFloat64, {3, 4}), Random(DType::kFloat64, {3, 4})}},
      {"div.Tensor", {}, {Random(DType::kFloat32, {6}), Random(DType::kFloat32, {})}},
      {"sub.Tensor", {}, {Random(DType::kInt64, {2, 3}), Random(DType::kInt64, {1, 3})}},
      // float64[] -> float32[2]: same byte size, so the planner may alias it;
      // the scalar must be read before it is overwritten.
      {"add.Tensor", {}, {Random(DType::kFloat64, {}), Random(DType::kFloat32, {2})}},
      {"add.Scalar", MakeAttrs({{"other", 1.5}}), {Random(DType::kFloat32, {7})}},
      {"div.Scalar", MakeAttrs({{"other", 3.0}}), {Random(DType::kFloat64, {7})}},
      {"neg", {}, {Random(DType::kFloat32, {7})}},
      {"relu", {}, {Random(DType::kFloat64, {7})}},
      {"sqrt", {}, {Random(DType::kFloat32, {7}, true)}},
      {"threshold_backward",
       MakeAttrs({{"threshold", 0.0}}),
       {Random(DType::kFloat32, {3, 5}), Random(DType::kFloat32, {3, 5})}},
      {"_log_softmax_backward_data",
       MakeAttrs({{"dim", int64_t{1}}, {"input_dtype", DType::kFloat32}}),
       {Random(DType::kFloat32, {4, 5}), Random(DType::kFloat32, {4, 5})}},
      {"copy", {}, {Random(DType::kFloat32, {3, 4}), Random(DType::kFloat64, {4})}},
      {"fill.Scalar", MakeAttrs({{"value", 2.5}}), {Random(DType::kFloat64, {6})}},
      {"view", MakeAttrs({{"size", std::vector<int64_t>{4, -1}}}), {Random(DType::kFloat32, {2, 6})}},
      {"_unsafe_view", MakeAttrs({{"size", std::vector<int64_t>{12}}}), {Random(DType::kInt64, {2, 6})}},
      {"unsqueeze", MakeAttrs({{"dim", int64_t{-1}}}), {Random(DType::kFloat64, {3})}},
      {"squeeze.dim", MakeAttrs({{"dim", int64_t{0}}}), {Random(DType::kFloat32, {1, 3})}},
      {"alias", {}, {Random(DType::kFloat32, {3})}},
      {"detach", {}, {Random(DType::kFloat32, {3})}},
      {"contiguous", {}, {Random(DType::kFloat32, {3})}},
  };
  for (const Case& c : cases) {
    const OpDef* def = OpRegistry::Global().Find(c.op);
    ASSERT_NE(def, nullptr) << c.op;
    EXPECT_NE(def->alias, AliasKind::kNone) << c.op;
    auto separate = MustRun(c.op, c.attrs, c.inputs);
    auto in_place = MustRun(c.op, c.attrs, c.inputs, /*output_is_input=*/true);
    ASSERT_FALSE(separate.empty()) << c.op;
    ASSERT_FALSE(in_place.empty()) << c.op;
    ExpectClose(in_place[0], Values(separate[0]), c.op + " in place", 0.0);
  }
}

// Reference product in double.
std::vector<double> ReferenceMatmul(const HostTensor& a, const HostTensor& b) {
  const int64_t n = a.type.shape[0], k = a.type.shape[1], m = b.type.shape[1];
  std::vector<double> out(n * m, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += ElementAsDouble(a, i * k + p) * ElementAsDouble(b, p * m + j);
      out[i * m + j] = s;
    }
  }
  return out;
}

TEST_F(KernelTest, MmAndAddmm) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    HostTensor a = Random(dtype, {9, 13});
    HostTensor b = Random(dtype, {13, 6});
    const std::vector<double> product = ReferenceMatmul(a, b);
    ExpectClose(MustRun("mm", {}, {a, b})[0], product, "mm");
    for (const Shape& bias_shape : {Shape{6}, Shape{9, 1}, Shape{9, 6}, Shape{}}) {
      HostTensor bias = Random(dtype, bias_shape);
      auto out = MustRun("addmm", MakeAttrs({{"beta", 0.5}, {"alpha", 2.0}}), {bias, a, b});
      std::vector<double> expected(product.size());
      for (size_t i = 0; i < expected.size(); ++i) {
        const auto index = Unravel(static_cast<int64_t>(i), {9, 6});
        expected[i] = 0.5 * ElementAsDouble(bias, BroadcastSource(index, bias_shape)) + 2.0 * product[i];
      }
      ExpectClose(out[0], expected, "addmm bias " + ShapeString(bias_shape));
    }
    // beta = 0 ignores self entirely, NaNs included.
    HostTensor nan_bias = MakeTensor(dtype, {6}, std::vector<double>(6, std::numeric_limits<double>::quiet_NaN()));
    ExpectClose(MustRun("addmm", MakeAttrs({{"beta", 0.0}}), {nan_bias, a, b})[0], product, "addmm beta=0");
  }
}

// Every byte of `actual`'s elements equals `expected`'s.
void ExpectSameBits(const HostTensor& actual, const HostTensor& expected, const std::string& what) {
  ASSERT_TRUE(actual.type == expected.type)
      << what << ": " << actual.type.ToString() << " vs " << expected.type.ToString();
  EXPECT_EQ(std::memcmp(actual.data(), expected.data(), actual.type.bytes()), 0) << what;
}

// transpose_a / transpose_b read an operand stored transposed: the result
// equals, bit for bit, the product of the materialized transposes (same
// terms added in the same order), and the double reference.
TEST_F(KernelTest, MmAndAddmmReadTransposedOperands) {
  const int64_t n = 9, k = 13, m = 6;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    HostTensor a = Random(dtype, {n, k});
    HostTensor b = Random(dtype, {k, m});
    HostTensor a_t = MustRun("t", {}, {a})[0];  // [k, n]
    HostTensor b_t = MustRun("t", {}, {b})[0];  // [m, k]
    const std::vector<double> product = ReferenceMatmul(a, b);
    const HostTensor plain = MustRun("mm", {}, {a, b})[0];
    const std::vector<HostTensor> biases = {Random(dtype, {m}), Random(dtype, {n, m}), Random(dtype, {n, 1})};
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        const std::string what = std::string(DTypeName(dtype)) + " transpose_a=" + (trans_a ? "1" : "0") +
                                 " transpose_b=" + (trans_b ? "1" : "0");
        const Attrs flags = MakeAttrs({{"transpose_a", trans_a}, {"transpose_b", trans_b}});
        const HostTensor& a_in = trans_a ? a_t : a;
        const HostTensor& b_in = trans_b ? b_t : b;
        auto out = MustRun("mm", flags, {a_in, b_in});
        ASSERT_EQ(out.size(), 1u) << what;
        ExpectSameBits(out[0], plain, "mm " + what);
        ExpectClose(out[0], product, "mm " + what);
        for (const HostTensor& bias : biases) {
          Attrs attrs = flags;
          attrs.Set("beta", 0.5);
          attrs.Set("alpha", 2.0);
          const std::string bias_what = what + " self " + ShapeString(bias.type.shape);
          auto folded = MustRun("addmm", attrs, {bias, a_in, b_in});
          auto unfolded = MustRun("addmm", MakeAttrs({{"beta", 0.5}, {"alpha", 2.0}}), {bias, a, b});
          ASSERT_EQ(folded.size(), 1u) << bias_what;
          ASSERT_EQ(unfolded.size(), 1u) << bias_what;
          ExpectSameBits(folded[0], unfolded[0], "addmm " + bias_what);
          std::vector<double> expected(product.size());
          for (size_t i = 0; i < expected.size(); ++i) {
            const auto index = Unravel(static_cast<int64_t>(i), {n, m});
            expected[i] = 0.5 * ElementAsDouble(bias, BroadcastSource(index, bias.type.shape)) + 2.0 * product[i];
          }
          ExpectClose(folded[0], expected, "addmm " + bias_what);
        }
      }
    }
  }
}

TEST_F(KernelTest, MmOfAnMlpLayerIsFast) {
  HostTensor a = Random(DType::kFloat32, {256, 784});
  HostTensor b = Random(DType::kFloat32, {784, 128});
  const auto start = std::chrono::steady_clock::now();
  auto out = MustRun("mm", {}, {a, b});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("mm 256x784x128 float32: %.1f ms\n", seconds * 1e3);
  // Tens of ms when built optimized; the bound leaves room for a loaded
  // machine and unoptimized builds, and still catches a naive j-inner loop.
  EXPECT_LT(seconds, 2.0);
  // Spot-check a few entries against the reference.
  for (int64_t i : {0, 100, 255}) {
    for (int64_t j : {0, 77, 127}) {
      double s = 0;
      for (int64_t p = 0; p < 784; ++p) s += ElementAsDouble(a, i * 784 + p) * ElementAsDouble(b, p * 128 + j);
      EXPECT_NEAR(ElementAsDouble(out[0], i * 128 + j), s, 1e-6 * (std::abs(s) + 1.0));
    }
  }
}

// Reference sum over `dims` (normalized here) of `x`.
std::vector<double> ReferenceSum(const HostTensor& x, std::vector<int64_t> dims, const Shape& out_shape, bool mean) {
  const Shape& shape = x.type.shape;
  const int rank = static_cast<int>(shape.size());
  std::vector<bool> reduced(rank, dims.empty());
  for (int64_t d : dims) reduced[(d + rank) % rank] = true;
  Shape kept;
  for (int d = 0; d < rank; ++d) kept.push_back(reduced[d] ? 1 : shape[d]);
  std::vector<double> sums(NumElements(kept), 0.0);
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) count *= reduced[d] ? shape[d] : 1;
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto index = Unravel(i, shape);
    for (int d = 0; d < rank; ++d) {
      if (reduced[d]) index[d] = 0;
    }
    sums[Ravel(index, kept)] += ElementAsDouble(x, i);
  }
  EXPECT_EQ(NumElements(out_shape), static_cast<int64_t>(sums.size()));
  if (mean) {
    for (double& s : sums) s /= static_cast<double>(count);
  }
  return sums;
}

TEST_F(KernelTest, Reductions) {
  struct Case {
    std::vector<int64_t> dims;
    bool keepdim;
  };
  const std::vector<Case> cases = {{{}, false},     {{0}, false}, {{-1}, true},
                                   {{0, 2}, false}, {{1}, true},  {{2, 0, 1}, true}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    HostTensor x = Random(dtype, {3, 4, 5});
    for (const Case& c : cases) {
      Attrs attrs = MakeAttrs({{"dim", c.dims}, {"keepdim", c.keepdim}});
      auto sum = MustRun("sum.dim_IntList", attrs, {x});
      ExpectClose(sum[0], ReferenceSum(x, c.dims, sum[0].type.shape, false), "sum.dim_IntList");
      if (dtype != DType::kInt64) {
        auto mean = MustRun("mean.dim", attrs, {x});
        ExpectClose(mean[0], ReferenceSum(x, c.dims, mean[0].type.shape, true), "mean.dim");
      }
    }
    auto total = MustRun("sum", {}, {x});
    EXPECT_EQ(total[0].type.shape, Shape{});
    ExpectClose(total[0], ReferenceSum(x, {}, {}, false), "sum");
  }
  // float32 summed into float64 (the dtype argument).
  HostTensor x = Random(DType::kFloat32, {100});
  auto wide = MustRun("sum", MakeAttrs({{"dtype", DType::kFloat64}}), {x});
  ExpectClose(wide[0], ReferenceSum(x, {}, {}, false), "sum to float64");
}

// Reference gather: out[index] = x[permuted index].
std::vector<double> ReferencePermute(const HostTensor& x, const std::vector<int>& perm) {
  Shape out_shape;
  for (int p : perm) out_shape.push_back(x.type.shape[p]);
  std::vector<double> out(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const auto out_index = Unravel(i, out_shape);
    std::vector<int64_t> in_index(perm.size());
    for (size_t d = 0; d < perm.size(); ++d) in_index[perm[d]] = out_index[d];
    out[i] = ElementAsDouble(x, Ravel(in_index, x.type.shape));
  }
  return out;
}

TEST_F(KernelTest, TransposesAndPermutations) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    HostTensor m = Random(dtype, {5, 7});
    ExpectClose(MustRun("t", {}, {m})[0], ReferencePermute(m, {1, 0}), "t");
    ExpectClose(MustRun("t_copy", {}, {m})[0], ReferencePermute(m, {1, 0}), "t_copy");
    HostTensor v = Random(dtype, {7});
    ExpectClose(MustRun("t", {}, {v})[0], Values(v), "t of a vector");
    HostTensor x = Random(dtype, {2, 3, 4});
    ExpectClose(MustRun("transpose.int", MakeAttrs({{"dim0", int64_t{-1}}, {"dim1", int64_t{0}}}), {x})[0],
                ReferencePermute(x, {2, 1, 0}), "transpose.int");
    ExpectClose(MustRun("transpose_copy.int", MakeAttrs({{"dim0", int64_t{1}}, {"dim1", int64_t{1}}}), {x})[0],
                Values(x), "transpose of a dim with itself");
    ExpectClose(MustRun("permute", MakeAttrs({{"dims", std::vector<int64_t>{1, -1, 0}}}), {x})[0],
                ReferencePermute(x, {1, 2, 0}), "permute");
  }
}

TEST_F(KernelTest, ViewsAndCopiesKeepTheBytes) {
  HostTensor x = Random(DType::kFloat32, {2, 3, 4});
  const std::vector<double> values = Values(x);
  for (const char* op : {"view", "view_copy", "reshape", "_unsafe_view", "_reshape_alias_copy"}) {
    auto out = MustRun(op, MakeAttrs({{"size", std::vector<int64_t>{-1, 6}}}), {x});
    EXPECT_EQ(out[0].type.shape, (Shape{4, 6})) << op;
    ExpectClose(out[0], values, op, 0.0);
  }
  ExpectClose(MustRun("unsqueeze_copy", MakeAttrs({{"dim", int64_t{1}}}), {x})[0], values, "unsqueeze", 0.0);
  ExpectClose(MustRun("squeeze_copy.dim", MakeAttrs({{"dim", int64_t{1}}}), {x})[0], values, "squeeze", 0.0);
  for (const char* op : {"clone", "alias", "detach", "contiguous"}) {
    ExpectClose(MustRun(op, {}, {x})[0], values, op, 0.0);
  }
}

TEST_F(KernelTest, Expand) {
  for (DType dtype : {DType::kFloat32, DType::kInt64}) {
    HostTensor x = Random(dtype, {3, 1});
    auto out = MustRun("expand", MakeAttrs({{"size", std::vector<int64_t>{2, -1, 4}}}), {x});
    ASSERT_EQ(out[0].type.shape, (Shape{2, 3, 4}));
    std::vector<double> expected;
    for (int64_t i = 0; i < 24; ++i)
      expected.push_back(ElementAsDouble(x, BroadcastSource(Unravel(i, {2, 3, 4}), {3, 1})));
    ExpectClose(out[0], expected, "expand");
  }
}

TEST_F(KernelTest, CopiesConvertAndBroadcast) {
  HostTensor self = Random(DType::kFloat32, {3, 4});
  HostTensor src = Random(DType::kFloat64, {4});
  std::vector<double> expected;
  for (int64_t i = 0; i < 12; ++i) expected.push_back(static_cast<float>(ElementAsDouble(src, i % 4)));
  ExpectClose(MustRun("copy", {}, {self, src})[0], expected, "copy", 0.0);

  HostTensor f = MakeTensor(DType::kFloat64, {5}, {1.9, -1.9, 0.0, 2.5, -0.4});
  ExpectClose(MustRun("_to_copy", MakeAttrs({{"dtype", DType::kInt64}}), {f})[0], {1, -1, 0, 2, 0},
              "to int64 truncates");
  ExpectClose(MustRun("_to_copy", MakeAttrs({{"dtype", DType::kBool}}), {f})[0], {1, 1, 0, 1, 1}, "to bool");
  HostTensor g = Random(DType::kFloat32, {6});
  ExpectClose(MustRun("_to_copy", MakeAttrs({{"dtype", DType::kFloat64}}), {g})[0], Values(g), "to float64", 0.0);
  ExpectClose(MustRun("_to_copy", {}, {g})[0], Values(g), "same dtype", 0.0);
}

// Reference log-softmax of x over `dim` (normalized) in double.
std::vector<double> ReferenceLogSoftmax(const HostTensor& x, int dim) {
  const Shape& shape = x.type.shape;
  std::vector<double> out(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto index = Unravel(i, shape);
    double sum = 0;
    for (int64_t d = 0; d < shape[dim]; ++d) {
      index[dim] = d;
      sum += std::exp(ElementAsDouble(x, Ravel(index, shape)));
    }
    out[i] = ElementAsDouble(x, i) - std::log(sum);
  }
  return out;
}

TEST_F(KernelTest, LogSoftmaxAndBackward) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    HostTensor x = Random(dtype, {3, 4, 5});
    for (int64_t dim : {0, 1, -1}) {
      const int d = static_cast<int>((dim + 3) % 3);
      Attrs attrs = MakeAttrs({{"dim", dim}, {"half_to_float", false}});
      auto out = MustRun("_log_softmax", attrs, {x});
      ExpectClose(out[0], ReferenceLogSoftmax(x, d), "_log_softmax dim " + std::to_string(dim));

      HostTensor grad = Random(dtype, {3, 4, 5});
      auto back =
          MustRun("_log_softmax_backward_data", MakeAttrs({{"dim", dim}, {"input_dtype", dtype}}), {grad, out[0]});
      std::vector<double> expected(x.numel());
      for (int64_t i = 0; i < x.numel(); ++i) {
        auto index = Unravel(i, x.type.shape);
        double sum = 0;
        for (int64_t k = 0; k < x.type.shape[d]; ++k) {
          index[d] = k;
          sum += ElementAsDouble(grad, Ravel(index, x.type.shape));
        }
        expected[i] = ElementAsDouble(grad, i) - std::exp(ElementAsDouble(out[0], i)) * sum;
      }
      ExpectClose(back[0], expected, "_log_softmax_backward_data dim " + std::to_string(dim), 1e-5);
    }
  }
}

struct NllReference {
  std::vector<double> output;
  double total_weight = 0;
  std::vector<double> grad_input;
};

// Reference nll_loss forward and backward (grad_output g) for self [N, C].
NllReference ReferenceNll(const HostTensor& self, const std::vector<int64_t>& target, const HostTensor* weight,
                          int64_t reduction, int64_t ignore_index, const std::vector<double>& g) {
  const int64_t n = static_cast<int64_t>(target.size());
  const int64_t c = self.type.shape.back();
  NllReference r;
  r.grad_input.assign(n * c, 0.0);
  double total = 0;
  std::vector<double> rows(n, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] == ignore_index) continue;
    const double w = weight != nullptr ? ElementAsDouble(*weight, target[i]) : 1.0;
    rows[i] = -w * ElementAsDouble(self, i * c + target[i]);
    total += rows[i];
    r.total_weight += w;
  }
  if (reduction == 0) {
    r.output = rows;
  } else {
    r.output = {reduction == 1 ? total / r.total_weight : total};
  }
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] == ignore_index) continue;
    const double w = weight != nullptr ? ElementAsDouble(*weight, target[i]) : 1.0;
    const double gi = reduction == 0 ? g[i] : g[0];
    r.grad_input[i * c + target[i]] = -w * gi / (reduction == 1 ? r.total_weight : 1.0);
  }
  return r;
}

TEST_F(KernelTest, NllLossForwardAndBackward) {
  const int64_t n = 6, c = 5;
  std::uniform_int_distribution<int64_t> label(0, c - 1);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t reduction : {0, 1, 2}) {
      for (bool with_weight : {false, true}) {
        HostTensor self = Random(dtype, {n, c});
        std::vector<int64_t> labels(n);
        for (int64_t& l : labels) l = label(rng_);
        labels[2] = -100;  // the default ignore_index
        HostTensor target = MakeTensor(DType::kInt64, {n}, std::vector<double>(labels.begin(), labels.end()));
        HostTensor weight = Random(dtype, {c}, /*positive=*/true);
        std::vector<HostTensor> inputs = {self, target};
        if (with_weight) inputs.push_back(weight);
        Attrs attrs = MakeAttrs({{"reduction", reduction}, {"ignore_index", int64_t{-100}}});
        auto out = MustRun("nll_loss_forward", attrs, inputs);
        ASSERT_EQ(out.size(), 2u);
        HostTensor grad_output = Random(dtype, out[0].type.shape);
        const NllReference ref =
            ReferenceNll(self, labels, with_weight ? &weight : nullptr, reduction, -100, Values(grad_output));
        const std::string what = "reduction " + std::to_string(reduction) + (with_weight ? " weighted" : "");
        ExpectClose(out[0], ref.output, "nll_loss_forward " + what);
        ExpectClose(out[1], {ref.total_weight}, "total_weight " + what);

        std::vector<HostTensor> back_inputs = {grad_output, self, target, out[1]};
        if (with_weight) back_inputs.push_back(weight);
        auto grad = MustRun("nll_loss_backward", attrs, back_inputs);
        ExpectClose(grad[0], ref.grad_input, "nll_loss_backward " + what);
      }
    }
  }
}

TEST_F(KernelTest, NllLossOfOneSampleAndAllIgnored) {
  HostTensor self = Random(DType::kFloat64, {4});
  HostTensor target = MakeTensor(DType::kInt64, {}, {2});
  auto out = MustRun("nll_loss_forward", MakeAttrs({{"reduction", int64_t{0}}}), {self, target});
  ExpectClose(out[0], {-ElementAsDouble(self, 2)}, "one sample");

  HostTensor batch = Random(DType::kFloat32, {2, 3});
  HostTensor ignored = MakeTensor(DType::kInt64, {2}, {7, 7});
  auto mean = MustRun("nll_loss_forward", MakeAttrs({{"ignore_index", int64_t{7}}}), {batch, ignored});
  EXPECT_TRUE(std::isnan(ElementAsDouble(mean[0], 0))) << "mean over no samples is NaN, as in PyTorch";
  EXPECT_EQ(ElementAsDouble(mean[1], 0), 0.0);
}

TEST_F(KernelTest, BadLabelsAreInvalidArgumentNotOutOfBoundsReads) {
  HostTensor self = Random(DType::kFloat32, {4, 10});
  for (int64_t bad : {10, -1, 1000000}) {
    HostTensor target = MakeTensor(DType::kInt64, {4}, {1, 2, 3, static_cast<double>(bad)});
    auto forward = RunOp("nll_loss_forward", {}, {self, target});
    ASSERT_FALSE(forward.ok());
    EXPECT_EQ(forward.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        std::string(forward.status().message()),
        AllOf(HasSubstr("nll_loss_forward"), HasSubstr("target[3] is " + std::to_string(bad)), HasSubstr("[0, 10)")));
    HostTensor grad = MakeTensor(DType::kFloat32, {}, {1.0});
    HostTensor total = MakeTensor(DType::kFloat32, {}, {4.0});
    auto backward = RunOp("nll_loss_backward", {}, {grad, self, target, total});
    ASSERT_FALSE(backward.ok());
    EXPECT_EQ(backward.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(backward.status().message()), HasSubstr("target[3] is " + std::to_string(bad)));
  }
  // ignore_index is not a class label: any value is fine there.
  HostTensor target = MakeTensor(DType::kInt64, {4}, {1, -5, 3, 0});
  EXPECT_TRUE(RunOp("nll_loss_forward", MakeAttrs({{"ignore_index", int64_t{-5}}}), {self, target}).ok());
}

}  // namespace
}  // namespace tandem
