// The bfloat16 / float16 CPU kernels of an optimizer step's ops that the
// first 16-bit op set lacked (sqrt, maximum, minimum, clamp, addcmul,
// addcdiv), of the comparisons and where.self, and of 16-bit
// fused_elementwise programs.
//
// Every 16-bit op computes in float32 and rounds once when it stores, so
// each expected value here is the test's own float32 computation on the
// (exactly widened) 16-bit inputs, rounded by half.h: results must match bit
// for bit, NaN where the float32 kernels give NaN. Inputs are fresh random
// values each run (the seed is printed; TANDEM_TEST_SEED replays one).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/ops/fused_program.h"
#include "kernels/cpu/half_test_util.h"
#include "kernels/cpu/run_op_test_util.h"
#include "kernels/half.h"

namespace tandem {
namespace {

using cpu::TestTensor;
using half_test::MustRun;

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

bool IsHalfDType(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// `v` rounded to the 16-bit `dtype` (through float, as half.h rounds).
uint16_t Bits(DType dtype, float v) {
  return dtype == DType::kBFloat16 ? FloatToBFloat16Bits(v) : FloatToFloat16Bits(v);
}
float Widen(DType dtype, uint16_t bits) {
  return dtype == DType::kBFloat16 ? BFloat16BitsToFloat(bits) : Float16BitsToFloat(bits);
}
float Round(DType dtype, float v) { return Widen(dtype, Bits(dtype, v)); }

// Element i as float (16-bit: widened exactly; bool: 0 or 1).
float At(const TestTensor& t, int64_t i) {
  const void* p = t.data();
  switch (t.type.dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DType::kFloat64:
      return static_cast<float>(static_cast<const double*>(p)[i]);
    case DType::kBool:
      return static_cast<const bool*>(p)[i] ? 1.0f : 0.0f;
    case DType::kBFloat16:
    case DType::kFloat16:
      return Widen(t.type.dtype, static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<float>(static_cast<const int64_t*>(p)[i]);
  }
}

uint16_t BitsAt(const TestTensor& t, int64_t i) { return static_cast<const uint16_t*>(t.data())[i]; }

TestTensor Make(DType dtype, Shape shape, const std::vector<float>& values) {
  TestTensor t({dtype, std::move(shape)});
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (size_t i = 0; i < values.size(); ++i) {
    void* p = t.data();
    switch (dtype) {
      case DType::kFloat32:
        static_cast<float*>(p)[i] = values[i];
        break;
      case DType::kFloat64:
        static_cast<double*>(p)[i] = values[i];
        break;
      case DType::kBool:
        static_cast<bool*>(p)[i] = values[i] != 0.0f;
        break;
      default:
        static_cast<uint16_t*>(p)[i] = Bits(dtype, values[i]);
        break;
    }
  }
  return t;
}

// `out` equals `expected` (float values, rounded to out's 16-bit dtype
// here) bit for bit; a NaN expectation needs a NaN.
::testing::AssertionResult SameAsRounded(const TestTensor& out, const std::vector<float>& expected) {
  if (!IsHalfDType(out.type.dtype)) return ::testing::AssertionFailure() << "output is " << out.type.ToString();
  if (out.numel() != static_cast<int64_t>(expected.size())) {
    return ::testing::AssertionFailure() << out.numel() << " elements, expected " << expected.size();
  }
  for (int64_t i = 0; i < out.numel(); ++i) {
    const float e = expected[i];
    if (std::isnan(e)) {
      if (!std::isnan(At(out, i))) return ::testing::AssertionFailure() << "element " << i << " is not NaN";
      continue;
    }
    if (BitsAt(out, i) != Bits(out.type.dtype, e)) {
      return ::testing::AssertionFailure() << "element " << i << ": " << At(out, i) << " (bits " << BitsAt(out, i)
                                           << "), expected " << Round(out.type.dtype, e);
    }
  }
  return ::testing::AssertionSuccess();
}

class HalfUpdateKernelTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }

  // Values in [lo, hi) stored as `dtype`.
  TestTensor Random(DType dtype, Shape shape, float lo = -2.0f, float hi = 2.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(NumElements(shape)));
    for (float& x : v) x = dist(rng_);
    return Make(dtype, std::move(shape), v);
  }

  // A few special values spread over `t` (a 16-bit tensor of >= 8 elements).
  void Sprinkle(TestTensor& t, const std::vector<float>& specials) {
    for (size_t k = 0; k < specials.size(); ++k) {
      const int64_t i = static_cast<int64_t>(k * 7 % static_cast<size_t>(t.numel()));
      static_cast<uint16_t*>(t.data())[i] = Bits(t.type.dtype, specials[k]);
    }
  }

  std::mt19937_64 rng_{half_test::TestSeed("half_update_kernels_test")};
};

TEST_P(HalfUpdateKernelTest, SqrtRoundsTheFloatRootOnce) {
  TestTensor x = Random(dtype(), {300}, 0.0f, 100.0f);
  Sprinkle(x, {0.0f, -0.0f, kInf, -1.0f, kNaN, 1e-30f});
  std::vector<TestTensor> out = MustRun("sqrt", {}, {x});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, x.type);
  std::vector<float> expected(300);
  for (int64_t i = 0; i < 300; ++i) expected[i] = std::sqrt(At(x, i));
  EXPECT_TRUE(SameAsRounded(out[0], expected));
  EXPECT_TRUE(std::isnan(At(out[0], 21))) << "sqrt(-1)";
  // In place (the planner may give sqrt's output its input's buffer).
  std::vector<TestTensor> in_place = MustRun("sqrt", {}, {x}, /*in_place=*/true);
  ASSERT_EQ(in_place.size(), 1u);
  EXPECT_TRUE(SameAsRounded(in_place[0], expected));
}

TEST_P(HalfUpdateKernelTest, MaximumAndMinimumPropagateNaNAndBroadcast) {
  const int64_t rows = 9, cols = 17;
  TestTensor x = Random(dtype(), {rows, cols});
  TestTensor y = Random(dtype(), {cols});
  Sprinkle(x, {kNaN, kInf, -kInf, 0.0f});
  Sprinkle(y, {0.0f, kNaN});  // y[0] = 0, y[7] = NaN: whole columns
  for (const char* op : {"maximum", "minimum"}) {
    SCOPED_TRACE(op);
    const bool max = std::string(op) == "maximum";
    std::vector<TestTensor> out = MustRun(op, {}, {x, y});
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].type, (TensorType{dtype(), {rows, cols}}));
    std::vector<float> expected(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float a = At(x, i), b = At(y, i % cols);
      expected[i] = std::isnan(a) || std::isnan(b) ? kNaN : (max ? (a > b ? a : b) : (a < b ? a : b));
    }
    EXPECT_TRUE(SameAsRounded(out[0], expected));
    EXPECT_TRUE(std::isnan(At(out[0], 7))) << "a NaN in the broadcast operand wins";
    // A float32 rank-0 operand is rounded to the 16-bit type first.
    const float s = 0.3f;
    std::vector<TestTensor> scalar = MustRun(op, {}, {x, Make(DType::kFloat32, {}, {s})});
    ASSERT_EQ(scalar.size(), 1u);
    ASSERT_EQ(scalar[0].type.dtype, dtype());
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float a = At(x, i), b = Round(dtype(), s);
      expected[i] = std::isnan(a) ? kNaN : (max ? (a > b ? a : b) : (a < b ? a : b));
    }
    EXPECT_TRUE(SameAsRounded(scalar[0], expected));
  }
}

TEST_P(HalfUpdateKernelTest, ClampRoundsItsBoundsAndKeepsNaN) {
  TestTensor x = Random(dtype(), {200}, -3.0f, 3.0f);
  Sprinkle(x, {kNaN, -kInf, kInf});
  struct Case {
    std::string what;
    Attrs attrs;
    bool has_min, has_max;
    float min, max;
  };
  const std::vector<Case> cases = {
      {"both", MakeAttrs({{"min", -0.7}, {"max", 1.3}}), true, true, -0.7f, 1.3f},
      {"min only", MakeAttrs({{"min", 0.1}}), true, false, 0.1f, 0.0f},
      {"max only", MakeAttrs({{"max", int64_t{1}}}), false, true, 0.0f, 1.0f},
      {"min above max", MakeAttrs({{"min", 0.9}, {"max", -0.2}}), true, true, 0.9f, -0.2f},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<TestTensor> out = MustRun("clamp", c.attrs, {x});
    ASSERT_EQ(out.size(), 1u);
    const float lo = Round(dtype(), c.min), hi = Round(dtype(), c.max);
    std::vector<float> expected(200);
    for (int64_t i = 0; i < 200; ++i) {
      float v = At(x, i);
      if (!std::isnan(v)) {
        if (c.has_min && v < lo) v = lo;
        if (c.has_max && v > hi) v = hi;
      }
      expected[i] = v;
    }
    EXPECT_TRUE(SameAsRounded(out[0], expected));
  }
}

// self + value * t1 * t2 (or / t2) in float32 with `value` a float32 number
// (not rounded to 16 bits, as PyTorch uses it), rounded once.
TEST_P(HalfUpdateKernelTest, AddcmulAndAddcdivComputeInFloat) {
  const int64_t rows = 33, cols = 31;
  TestTensor self = Random(dtype(), {rows, cols});
  TestTensor t1 = Random(dtype(), {cols});
  TestTensor t2 = Random(dtype(), {rows, 1}, 0.25f, 2.0f);
  Sprinkle(self, {kNaN});
  // Far from a 16-bit value, so that rounding it would change many results.
  const double value = 1.0035;
  const float v = static_cast<float>(value);
  for (bool div : {false, true}) {
    SCOPED_TRACE(div ? "addcdiv" : "addcmul");
    const std::string op = div ? "addcdiv" : "addcmul";
    std::vector<TestTensor> out = MustRun(op, MakeAttrs({{"value", value}}), {self, t1, t2});
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].type, (TensorType{dtype(), {rows, cols}}));
    std::vector<float> expected(rows * cols), with_rounded_value(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float s = At(self, i), a = At(t1, i % cols), b = At(t2, i / cols);
      expected[i] = div ? s + v * a / b : s + v * a * b;
      const float rv = Round(dtype(), v);
      with_rounded_value[i] = div ? s + rv * a / b : s + rv * a * b;
    }
    EXPECT_TRUE(SameAsRounded(out[0], expected));
    // The test tells the two readings of `value` apart.
    EXPECT_FALSE(SameAsRounded(out[0], with_rounded_value));
    // In place, and with a float32 rank-0 tensor1 (rounded to 16 bits).
    std::vector<TestTensor> in_place = MustRun(op, MakeAttrs({{"value", value}}), {self, t1, t2}, true);
    ASSERT_EQ(in_place.size(), 1u);
    EXPECT_TRUE(SameAsRounded(in_place[0], expected));
    const float s1 = 1.2345f;
    std::vector<TestTensor> scalar =
        MustRun(op, MakeAttrs({{"value", value}}), {self, Make(DType::kFloat32, {}, {s1}), t2});
    ASSERT_EQ(scalar.size(), 1u);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float s = At(self, i), a = Round(dtype(), s1), b = At(t2, i / cols);
      expected[i] = div ? s + v * a / b : s + v * a * b;
    }
    EXPECT_TRUE(SameAsRounded(scalar[0], expected));
  }
}

// The comparisons give bool results from float32 comparisons of the 16-bit
// values; a rank-0 operand or a .Scalar number of another dtype is rounded to
// the 16-bit type first, so x == 0.1 holds where x is 0.1's 16-bit value.
TEST_P(HalfUpdateKernelTest, ComparisonsCompareThe16BitValues) {
  const int64_t rows = 6, cols = 40;
  // Few distinct values, so that ties happen; NaN compares unequal.
  std::uniform_int_distribution<int> pick(0, 4);
  const std::vector<float> palette = {-1.0f, 0.1f, 0.5f, 2.0f, 0.1f};
  std::vector<float> xv(rows * cols), yv(cols);
  for (float& f : xv) f = palette[pick(rng_)];
  for (float& f : yv) f = palette[pick(rng_)];
  xv[3] = kNaN;
  TestTensor x = Make(dtype(), {rows, cols}, xv);
  TestTensor y = Make(dtype(), {cols}, yv);
  const auto check = [&](const TestTensor& out, auto&& want) -> ::testing::AssertionResult {
    if (out.type.dtype != DType::kBool || out.numel() != rows * cols) {
      return ::testing::AssertionFailure() << "output is " << out.type.ToString();
    }
    int trues = 0;
    for (int64_t i = 0; i < rows * cols; ++i) {
      const bool got = static_cast<const bool*>(out.data())[i];
      if (got != want(i)) return ::testing::AssertionFailure() << "element " << i << " is " << got;
      trues += got;
    }
    if (trues == 0 || trues == rows * cols) return ::testing::AssertionFailure() << "all " << (trues != 0);
    return ::testing::AssertionSuccess();
  };
  const float tenth = Round(dtype(), 0.1f);
  ASSERT_NE(tenth, 0.1f);
  for (const char* name : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    SCOPED_TRACE(name);
    const std::string op = name;
    auto cmp = [&](float a, float b) {
      if (op == "eq") return a == b;
      if (op == "ne") return a != b;
      if (op == "lt") return a < b;
      if (op == "le") return a <= b;
      if (op == "gt") return a > b;
      return a >= b;
    };
    std::vector<TestTensor> out = MustRun(op + ".Tensor", {}, {x, y});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(check(out[0], [&](int64_t i) { return cmp(At(x, i), At(y, i % cols)); }));
    out = MustRun(op + ".Tensor", {}, {x, Make(DType::kFloat32, {}, {0.1f})});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(check(out[0], [&](int64_t i) { return cmp(At(x, i), tenth); }));
    out = MustRun(op + ".Scalar", MakeAttrs({{"other", 0.1}}), {x});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(check(out[0], [&](int64_t i) { return cmp(At(x, i), tenth); }));
  }
  // A float32 tensor against a 16-bit rank-0 operand compares in float32,
  // reading the 16-bit value exactly (0.1f itself is not 0.1's 16-bit value).
  TestTensor f = Make(DType::kFloat32, {rows, cols}, xv);
  std::vector<TestTensor> out = MustRun("eq.Tensor", {}, {f, Make(dtype(), {}, {0.5f})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(check(out[0], [&](int64_t i) { return At(f, i) == 0.5f; }));
  // 0.1f lies strictly between 0.1's 16-bit value and the next one on its
  // side, so one of lt and gt tells a float32 comparison from a 16-bit one.
  out = MustRun("lt.Tensor", {}, {f, Make(dtype(), {}, {0.1f})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(check(out[0], [&](int64_t i) { return At(f, i) < tenth; }));
  out = MustRun("gt.Tensor", {}, {f, Make(dtype(), {}, {0.1f})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(check(out[0], [&](int64_t i) { return At(f, i) > tenth; }));
}

TEST_P(HalfUpdateKernelTest, WhereSelectsAndRoundsOnlyOtherDTypes) {
  const int64_t rows = 7, cols = 19;
  TestTensor x = Random(dtype(), {rows, cols});
  TestTensor y = Random(dtype(), {cols});
  Sprinkle(x, {kNaN, -0.0f});
  std::vector<float> cv(rows * cols);
  std::bernoulli_distribution coin(0.5);
  for (float& c : cv) c = coin(rng_) ? 1.0f : 0.0f;
  TestTensor cond = Make(DType::kBool, {rows, cols}, cv);
  std::vector<TestTensor> out = MustRun("where.self", {}, {cond, x, y});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].type, (TensorType{dtype(), {rows, cols}}));
  std::vector<float> expected(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) expected[i] = cv[i] != 0.0f ? At(x, i) : At(y, i % cols);
  EXPECT_TRUE(SameAsRounded(out[0], expected));
  // -0 keeps its sign (a select, not arithmetic).
  if (cv[7] != 0.0f) {
    EXPECT_EQ(BitsAt(out[0], 7), BitsAt(x, 7));
  }
  // A float32 rank-0 other is rounded to the 16-bit type; a rank-0 condition
  // broadcasts.
  out = MustRun("where.self", {}, {cond, x, Make(DType::kFloat32, {}, {1.0e-3f})});
  ASSERT_EQ(out.size(), 1u);
  for (int64_t i = 0; i < rows * cols; ++i) expected[i] = cv[i] != 0.0f ? At(x, i) : Round(dtype(), 1.0e-3f);
  EXPECT_TRUE(SameAsRounded(out[0], expected));
  out = MustRun("where.self", {}, {Make(DType::kBool, {}, {0.0f}), x, y});
  ASSERT_EQ(out.size(), 1u);
  for (int64_t i = 0; i < rows * cols; ++i) expected[i] = At(y, i % cols);
  EXPECT_TRUE(SameAsRounded(out[0], expected));
}

// masked_fill keeps the bits it does not fill and fills with the value
// rounded to the 16-bit type; logical_not and any test against zero, where
// -0 is zero and NaN is not.
TEST_P(HalfUpdateKernelTest, MaskedFillLogicalNotAndAny) {
  const int64_t rows = 6, cols = 23;
  TestTensor x = Random(dtype(), {rows, cols});
  std::vector<float> zv(rows * cols);
  std::bernoulli_distribution coin(0.5);
  for (int64_t i = 0; i < rows * cols; ++i) zv[i] = coin(rng_) ? 0.0f : At(x, i);
  for (int64_t c = 0; c < cols; ++c) zv[2 * cols + c] = (c % 2) ? -0.0f : 0.0f;  // row 2: only zeros
  zv[4 * cols + 5] = kNaN;                                                       // row 4: a NaN among zeros
  for (int64_t c = 0; c < cols; ++c) {
    if (c != 5) zv[4 * cols + c] = 0.0f;
  }
  TestTensor z = Make(dtype(), {rows, cols}, zv);
  std::vector<float> mv(cols);
  for (float& m : mv) m = coin(rng_) ? 1.0f : 0.0f;
  mv[0] = 1.0f;
  mv[1] = 0.0f;
  TestTensor mask = Make(DType::kBool, {cols}, mv);  // broadcast over the rows

  std::vector<TestTensor> out = MustRun("masked_fill.Scalar", MakeAttrs({{"value", 0.1}}), {x, mask});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].type, (TensorType{dtype(), {rows, cols}}));
  const uint16_t tenth = Bits(dtype(), 0.1f);
  for (int64_t i = 0; i < rows * cols; ++i) {
    ASSERT_EQ(BitsAt(out[0], i), mv[i % cols] != 0.0f ? tenth : BitsAt(x, i)) << "element " << i;
  }
  // A float32 rank-0 value is rounded to the 16-bit type; a 16-bit one is
  // copied.
  out = MustRun("masked_fill.Tensor", {}, {z, mask, Make(DType::kFloat32, {}, {-1.0e-3f})});
  ASSERT_EQ(out.size(), 1u);
  const uint16_t small = Bits(dtype(), -1.0e-3f);
  for (int64_t i = 0; i < rows * cols; ++i) {
    ASSERT_EQ(BitsAt(out[0], i), mv[i % cols] != 0.0f ? small : BitsAt(z, i)) << "element " << i;
  }
  TestTensor h = Make(dtype(), {}, {0.75f});
  out = MustRun("masked_fill.Tensor", {}, {x, mask, h});
  ASSERT_EQ(out.size(), 1u);
  for (int64_t i = 0; i < rows * cols; ++i) {
    ASSERT_EQ(BitsAt(out[0], i), mv[i % cols] != 0.0f ? BitsAt(h, 0) : BitsAt(x, i)) << "element " << i;
  }

  out = MustRun("logical_not", {}, {z});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].type, (TensorType{DType::kBool, {rows, cols}}));
  int trues = 0;
  for (int64_t i = 0; i < rows * cols; ++i) {
    const bool got = static_cast<const bool*>(out[0].data())[i];
    ASSERT_EQ(got, zv[i] == 0.0f) << "element " << i << " (" << zv[i] << ")";
    trues += got;
  }
  EXPECT_GT(trues, 0);
  EXPECT_LT(trues, rows * cols);

  out = MustRun("any.dim", MakeAttrs({{"dim", int64_t{1}}}), {z});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].type, (TensorType{DType::kBool, {rows}}));
  for (int64_t r = 0; r < rows; ++r) {
    bool want = false;
    for (int64_t c = 0; c < cols; ++c) want = want || zv[r * cols + c] != 0.0f;  // NaN != 0
    EXPECT_EQ(static_cast<const bool*>(out[0].data())[r], want) << "row " << r;
  }
  EXPECT_FALSE(static_cast<const bool*>(out[0].data())[2]) << "a row of +0 and -0";
  EXPECT_TRUE(static_cast<const bool*>(out[0].data())[4]) << "a row whose only nonzero is NaN";
  out = MustRun("any", {}, {Make(dtype(), {3}, {0.0f, -0.0f, 0.0f})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(static_cast<const bool*>(out[0].data())[0]);
}

// A 16-bit fused_elementwise program against the unfused ops it stands for,
// run one by one on the same inputs: bit for bit, in place too.
TEST_P(HalfUpdateKernelTest, FusedProgramMatchesTheUnfusedOpsBitForBit) {
  using enum FusedOpcode;
  constexpr auto Op = [](FusedOpcode op) { return static_cast<int64_t>(op); };
  const int64_t n = 1000;  // several chunks of the CPU kernel, and a tail
  // Inputs: x, y (> 0), z, lr (float32 rank 0), s (float64 rank 0), h (16-bit rank 0).
  TestTensor x = Random(dtype(), {n});
  TestTensor y = Random(dtype(), {n}, 0.25f, 2.0f);
  TestTensor z = Random(dtype(), {n});
  Sprinkle(x, {kNaN});
  TestTensor lr = Make(DType::kFloat32, {}, {std::uniform_real_distribution<float>(0.01f, 0.3f)(rng_)});
  TestTensor s = Make(DType::kFloat64, {}, {std::uniform_real_distribution<float>(0.5f, 1.5f)(rng_)});
  TestTensor h = Make(dtype(), {}, {std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng_)});
  Attrs program;
  program.Set("code", std::vector<int64_t>{
                          Op(kAdd),       6,  0,  1,  0,   // r6 = x + 0.37 y
                          Op(kMul),       7,  6,  3,  -1,  // r7 = r6 * lr
                          Op(kSub),       8,  2,  7,  1,   // r8 = z - 1.7 r7
                          Op(kDiv),       9,  8,  1,  -1,  // r9 = r8 / y
                          Op(kAddScalar), 10, 9,  2,  3,   // r10 = r9 + 0.55 * 0.1
                          Op(kSubScalar), 11, 10, 4,  -1,  // r11 = r10 - 1e-3
                          Op(kMulScalar), 12, 11, 5,  -1,  // r12 = r11 * 0.9
                          Op(kDivScalar), 13, 12, 6,  -1,  // r13 = r12 / 3
                          Op(kNeg),       14, 13, -1, -1,  // r14 = -r13
                          Op(kSqrt),      15, 1,  -1, -1,  // r15 = sqrt(y)
                          Op(kMaximum),   16, 14, 5,  -1,  // r16 = max(r14, h)
                          Op(kMinimum),   17, 16, 4,  -1,  // r17 = min(r16, s)
                          Op(kMul),       18, 17, 15, -1,  // r18 = r17 * r15
                      });
  program.Set("consts", std::vector<double>{0.37, 1.7, 0.1, 0.55, 1e-3, 0.9, 3.0});
  program.Set("outputs", std::vector<int64_t>{18, 7, 15});
  const std::vector<TestTensor> inputs = {x, y, z, lr, s, h};
  std::vector<TestTensor> fused = MustRun(kFusedElementwiseOp, program, inputs);
  ASSERT_EQ(fused.size(), 3u);
  for (const TestTensor& t : fused) EXPECT_EQ(t.type, (TensorType{dtype(), {n}}));

  auto one = [&](const std::string& op, std::vector<TestTensor> in, Attrs attrs = {}) {
    std::vector<TestTensor> out = MustRun(op, attrs, std::move(in));
    EXPECT_EQ(out.size(), 1u) << op;
    return out.empty() ? TestTensor({dtype(), {n}}) : out[0];
  };
  const TestTensor r6 = one("add.Tensor", {x, y}, MakeAttrs({{"alpha", 0.37}}));
  const TestTensor r7 = one("mul.Tensor", {r6, lr});
  const TestTensor r8 = one("sub.Tensor", {z, r7}, MakeAttrs({{"alpha", 1.7}}));
  const TestTensor r9 = one("div.Tensor", {r8, y});
  const TestTensor r10 = one("add.Scalar", {r9}, MakeAttrs({{"other", 0.1}, {"alpha", 0.55}}));
  const TestTensor r11 = one("sub.Scalar", {r10}, MakeAttrs({{"other", 1e-3}}));
  const TestTensor r12 = one("mul.Scalar", {r11}, MakeAttrs({{"other", 0.9}}));
  const TestTensor r13 = one("div.Scalar", {r12}, MakeAttrs({{"other", 3.0}}));
  const TestTensor r14 = one("neg", {r13});
  const TestTensor r15 = one("sqrt", {y});
  const TestTensor r16 = one("maximum", {r14, h});
  const TestTensor r17 = one("minimum", {r16, s});
  const TestTensor r18 = one("mul.Tensor", {r17, r15});
  const auto same = [](const TestTensor& a, const TestTensor& b) {
    return a.type == b.type && std::memcmp(a.data(), b.data(), a.type.bytes()) == 0;
  };
  EXPECT_TRUE(same(fused[0], r18));
  EXPECT_TRUE(same(fused[1], r7));
  EXPECT_TRUE(same(fused[2], r15));
  // The chain computes something: not all NaN, not all zero.
  int finite_nonzero = 0;
  for (int64_t i = 0; i < n; ++i) finite_nonzero += std::isfinite(At(r18, i)) && At(r18, i) != 0.0f;
  EXPECT_GT(finite_nonzero, n / 4);
  // Output 0 on input 0's buffer.
  std::vector<TestTensor> in_place_inputs = inputs;
  auto in_place = cpu::RunCpuOp(kFusedElementwiseOp, program, in_place_inputs, 0xFF, /*output_is_input=*/true);
  ASSERT_TRUE(in_place.ok()) << in_place.status();
  EXPECT_TRUE(same((*in_place)[0], r18));
  EXPECT_TRUE(same((*in_place)[1], r7));
}

INSTANTIATE_TEST_SUITE_P(SixteenBit, HalfUpdateKernelTest, ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tandem
