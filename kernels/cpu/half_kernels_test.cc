// The 16-bit float conversions (half.h) and the CPU kernels' bfloat16 and
// float16 path (half_kernels.h): conversions checked exhaustively against
// the definition of rounding to nearest, ties to even; _to_copy between every
// pair of types; and a few ops against float64 computations written here on
// the same (16-bit) inputs.
//
// Tolerances: with inputs exactly representable in the 16-bit type, the op's
// only errors are its float32 arithmetic (relative eps32 = 2^-24 per
// operation, about k * 2^-24 for a sum of k terms in the worst case) and the
// final rounding to 16 bits (relative u: 2^-8 for bfloat16, 2^-11 for
// float16). Normwise, Tolerance() = 2u + 4 k 2^-24: about 8e-3 for bfloat16
// and 1e-3 for float16 at k <= 256.
#include "kernels/half.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/half_test_util.h"
#include "kernels/cpu/run_op_test_util.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

float NextUp(float f) { return std::nextafter(f, std::numeric_limits<float>::infinity()); }
float NextDown(float f) { return std::nextafter(f, -std::numeric_limits<float>::infinity()); }

// For every pair of adjacent positive finite 16-bit values a < b: the
// midpoint (exact in float) rounds to the one with an even pattern, and the
// floats just below and above it round to a and b. Every pattern widens and
// narrows back to itself.
void CheckRoundingExhaustively(uint16_t (*narrow)(float), float (*widen)(uint16_t), uint16_t infinity) {
  for (uint32_t bits = 0; bits < infinity; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    ASSERT_EQ(narrow(widen(h)), h) << "round trip of " << bits;
    const auto neg = static_cast<uint16_t>(bits | 0x8000u);
    ASSERT_EQ(narrow(widen(neg)), neg) << "round trip of -" << bits;
    const auto next = static_cast<uint16_t>(bits + 1);
    const float a = widen(h);
    const float b = widen(next);  // the infinity after the largest finite value
    // a + (b - a) / 2: (a + b) / 2 would overflow near the largest values.
    const float mid = next == infinity ? a + (a - widen(static_cast<uint16_t>(bits - 1))) / 2 : a + (b - a) / 2;
    ASSERT_EQ(narrow(mid), (h & 1) ? next : h) << "tie between " << bits << " and " << bits + 1;
    ASSERT_EQ(narrow(NextDown(mid)), h) << "below the midpoint after " << bits;
    ASSERT_EQ(narrow(NextUp(mid)), next) << "above the midpoint after " << bits;
    ASSERT_EQ(narrow(-NextUp(mid)), static_cast<uint16_t>(next | 0x8000u)) << "negative, after " << bits;
  }
}

TEST(HalfConversion, BFloat16RoundsToNearestEvenEverywhere) {
  CheckRoundingExhaustively(FloatToBFloat16Bits, BFloat16BitsToFloat, 0x7f80);
}

TEST(HalfConversion, Float16RoundsToNearestEvenEverywhere) {
  CheckRoundingExhaustively(FloatToFloat16Bits, Float16BitsToFloat, 0x7c00);
}

TEST(HalfConversion, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(FloatToBFloat16Bits(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16Bits(-inf), 0xff80);
  EXPECT_EQ(FloatToBFloat16Bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to infinity
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(FloatToBFloat16Bits(nan))));
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(FloatToBFloat16Bits(-nan))));
  EXPECT_EQ(FloatToFloat16Bits(1.0f), 0x3c00);
  EXPECT_EQ(FloatToFloat16Bits(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToFloat16Bits(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToFloat16Bits(65520.0f), 0x7c00);  // the midpoint to 2^16 rounds (to even) to infinity
  EXPECT_EQ(FloatToFloat16Bits(1e10f), 0x7c00);
  EXPECT_EQ(FloatToFloat16Bits(-inf), 0xfc00);
  EXPECT_EQ(FloatToFloat16Bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToFloat16Bits(std::ldexp(1.0f, -25)), 0x0000);  // half of it: tie to even (0)
  EXPECT_EQ(FloatToFloat16Bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie to even (2)
  EXPECT_EQ(FloatToFloat16Bits(NextUp(std::ldexp(1.0f, -25))), 0x0001);
  EXPECT_EQ(FloatToFloat16Bits(-std::ldexp(1.0f, -30)), 0x8000);  // signed zero
  EXPECT_EQ(FloatToFloat16Bits(std::ldexp(1.0f, -14)), 0x0400);   // smallest normal
  EXPECT_EQ(FloatToFloat16Bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_TRUE(std::isnan(Float16BitsToFloat(FloatToFloat16Bits(nan))));
  EXPECT_EQ(Float16BitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Float16BitsToFloat(0x83ff), -std::ldexp(1023.0f, -24));
}

TEST(HalfConversion, DoublesAndIntegersGoThroughFloat) {
  // 1 + 2^-8 + 2^-30 rounds to float as 1 + 2^-8 (a bfloat16 tie, kept even:
  // 1.0), while direct rounding would give 1 + 2^-7: PyTorch's double
  // rounding, kept.
  const double d = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  EXPECT_EQ(BFloat16(d).bits, 0x3f80);
  EXPECT_EQ(static_cast<int64_t>(BFloat16(-2.75f)), -2);           // truncation
  EXPECT_EQ(static_cast<double>(Float16(int64_t{2049})), 2048.0);  // 2049 ties to even in float16
  EXPECT_EQ(static_cast<bool>(BFloat16(0.0f)), false);
  EXPECT_EQ(static_cast<bool>(Float16(-0.5f)), true);
  EXPECT_EQ(Float16(BFloat16(3.0f)).bits, 0x4200);
}

// ---- kernels ----

using half_test::Close;
using half_test::Get;
using half_test::HostTensor;
using half_test::Make;
using half_test::MustRun;
using half_test::Tolerance;
using half_test::UnitRoundoff;
using half_test::Values;

// Runs `op`'s CPU kernel with outputs of the registry's types, poisoned
// first (0xFF bytes: NaN in every float type).
absl::StatusOr<std::vector<HostTensor>> RunOp(const std::string& op, const Attrs& attrs,
                                              std::vector<HostTensor> inputs) {
  return cpu::RunCpuOp(op, attrs, inputs, 0xFF);
}

class HalfKernelTest : public ::testing::TestWithParam<DType> {
 protected:
  // Values in [-1, 1), stored as `dtype` (so the float64 references below
  // see exactly the kernel's inputs).
  HostTensor Random(DType dtype, Shape shape) {
    return half_test::RandomTensor(rng_, dtype, std::move(shape), -1.0, 1.0);
  }
  std::mt19937_64 rng_{20240607};
};

TEST_P(HalfKernelTest, ToCopyConvertsBothWays) {
  const DType half = GetParam();
  const DType other = half == DType::kBFloat16 ? DType::kFloat16 : DType::kBFloat16;
  const std::vector<double> values = {1.0, -2.75, 0.1, 3.0e4, -1e-6, 0.0, 257.0, 100000.0};
  for (DType from : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kBool, other}) {
    SCOPED_TRACE(DTypeName(from));
    HostTensor src = Make(from, {8}, values);
    std::vector<HostTensor> out = MustRun("_to_copy", MakeAttrs({{"dtype", half}}), {src});
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].type, (TensorType{half, {8}}));
    const std::vector<double> in = Values(src);
    for (int64_t i = 0; i < 8; ++i) {
      const float f = static_cast<float>(in[i]);
      const double expected = half == DType::kBFloat16 ? BFloat16BitsToFloat(FloatToBFloat16Bits(f))
                                                       : Float16BitsToFloat(FloatToFloat16Bits(f));
      EXPECT_EQ(Get(out[0], i), expected) << "element " << i;
    }
  }
  HostTensor h = Make(half, {8}, values);
  for (DType to : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kBool, other}) {
    SCOPED_TRACE(DTypeName(to));
    std::vector<HostTensor> out = MustRun("_to_copy", MakeAttrs({{"dtype", to}}), {h});
    ASSERT_EQ(out.size(), 1u);
    for (int64_t i = 0; i < 8; ++i) {
      const float wide = static_cast<float>(Get(h, i));
      double expected = wide;
      if (to == DType::kInt64 || to == DType::kInt32) expected = std::trunc(wide);
      if (to == DType::kBool) expected = wide != 0.0f ? 1.0 : 0.0;
      if (to == DType::kBFloat16) expected = BFloat16BitsToFloat(FloatToBFloat16Bits(wide));
      if (to == DType::kFloat16) expected = Float16BitsToFloat(FloatToFloat16Bits(wide));
      const bool integer = to == DType::kInt64 || to == DType::kInt32;
      if (std::isinf(wide) && integer) continue;  // out of range: undefined in C++
      EXPECT_EQ(Get(out[0], i), expected) << "element " << i;
    }
  }
}

TEST_P(HalfKernelTest, MatmulAccumulatesInFloatAndRoundsOnce) {
  const DType dtype = GetParam();
  const int64_t n = 7, k = 256, m = 9;
  HostTensor a = Random(dtype, {n, k});
  HostTensor b = Random(dtype, {k, m});
  HostTensor bias = Random(dtype, {m});
  std::vector<double> ref(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += Get(a, i * k + p) * Get(b, p * m + j);
      ref[i * m + j] = 0.5 * Get(bias, j) + 2.0 * s;
    }
  }
  std::vector<HostTensor> out = MustRun("addmm", MakeAttrs({{"beta", 0.5}, {"alpha", 2.0}}), {bias, a, b});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, (TensorType{dtype, {n, m}}));
  EXPECT_TRUE(Close(out[0], ref, Tolerance(dtype, k)));
  // The result is exactly the rounding of its float32 value: never further
  // than half a 16-bit ulp (u relative) from the float64 reference.
  for (int64_t i = 0; i < n * m; ++i) {
    EXPECT_LE(std::fabs(Get(out[0], i) - ref[i]), UnitRoundoff(dtype) * std::fabs(ref[i]) + 1e-4) << i;
  }
}

TEST_P(HalfKernelTest, ElementwiseComputesInFloat) {
  const DType dtype = GetParam();
  HostTensor x = Random(dtype, {5, 6});
  HostTensor y = Random(dtype, {6});
  std::vector<HostTensor> out = MustRun("sub.Tensor", MakeAttrs({{"alpha", 0.3}}), {x, y});
  ASSERT_EQ(out.size(), 1u);
  std::vector<double> ref(30);
  for (int64_t i = 0; i < 30; ++i) ref[i] = Get(x, i) - 0.3 * Get(y, i % 6);
  EXPECT_TRUE(Close(out[0], ref, Tolerance(dtype, 2)));
  out = MustRun("gelu", {}, {x});
  for (int64_t i = 0; i < 30; ++i) ref[i] = 0.5 * Get(x, i) * (1 + std::erf(Get(x, i) / std::sqrt(2.0)));
  EXPECT_TRUE(Close(out[0], ref, Tolerance(dtype, 4)));
}

// PyTorch converts a rank-0 operand of another dtype, and a .Scalar op's
// number, to the 16-bit result's type before using it; alpha stays float.
TEST_P(HalfKernelTest, ScalarOperandsRoundToTheResultType) {
  const DType dtype = GetParam();
  const auto round = [&](double v) { return Get(Make(dtype, {}, {v}), 0); };
  HostTensor x = Random(dtype, {16});
  const double s = 0.1003;
  const HostTensor f32_scalar = Make(DType::kFloat32, {}, {s});
  std::vector<double> ref(16);
  std::vector<HostTensor> out = MustRun("mul.Tensor", {}, {x, f32_scalar});
  for (int64_t i = 0; i < 16; ++i) ref[i] = round(static_cast<float>(Get(x, i)) * static_cast<float>(round(s)));
  EXPECT_TRUE(Close(out[0], ref, 0.0));
  out = MustRun("add.Scalar", MakeAttrs({{"other", s}, {"alpha", 3.0}}), {x});
  for (int64_t i = 0; i < 16; ++i) {
    ref[i] = round(static_cast<float>(Get(x, i)) + 3.0f * static_cast<float>(round(s)));
  }
  EXPECT_TRUE(Close(out[0], ref, 0.0));
  // A float32 op reads a 16-bit rank-0 operand exactly.
  HostTensor f = Make(DType::kFloat32, {3}, {1.0, -2.0, 0.5});
  HostTensor h = Make(dtype, {}, {0.1});
  out = MustRun("mul.Tensor", {}, {f, h});
  ASSERT_EQ(out[0].type.dtype, DType::kFloat32);
  EXPECT_EQ(Get(out[0], 1), static_cast<float>(-2.0 * Get(h, 0)));
  EXPECT_NE(Get(h, 0), 0.0);
}

TEST_P(HalfKernelTest, SumAndSoftmaxAccumulateInFloat) {
  const DType dtype = GetParam();
  const int64_t rows = 6, cols = 200;
  HostTensor x = Random(dtype, {rows, cols});
  std::vector<HostTensor> sum = MustRun("sum.dim_IntList", MakeAttrs({{"dim", std::vector<int64_t>{1}}}), {x});
  ASSERT_EQ(sum.size(), 1u);
  std::vector<double> ref_sum(rows, 0.0), ref_softmax(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    double max = -1e300, total = 0;
    for (int64_t c = 0; c < cols; ++c) {
      ref_sum[r] += Get(x, r * cols + c);
      max = std::max(max, Get(x, r * cols + c));
    }
    for (int64_t c = 0; c < cols; ++c) total += std::exp(Get(x, r * cols + c) - max);
    for (int64_t c = 0; c < cols; ++c) ref_softmax[r * cols + c] = std::exp(Get(x, r * cols + c) - max) / total;
  }
  EXPECT_TRUE(Close(sum[0], ref_sum, Tolerance(dtype, cols)));
  std::vector<HostTensor> softmax = MustRun("_softmax", MakeAttrs({{"dim", int64_t{1}}}), {x});
  ASSERT_EQ(softmax.size(), 1u);
  EXPECT_TRUE(Close(softmax[0], ref_softmax, Tolerance(dtype, cols)));
}

TEST_P(HalfKernelTest, LayerNormHasFloatStatistics) {
  const DType dtype = GetParam();
  const int64_t rows = 4, cols = 96;
  HostTensor x = Random(dtype, {rows, cols});
  HostTensor w = Random(dtype, {cols});
  HostTensor b = Random(dtype, {cols});
  std::vector<HostTensor> out = MustRun(
      "native_layer_norm", MakeAttrs({{"normalized_shape", std::vector<int64_t>{cols}}, {"eps", 1e-5}}), {x, w, b});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].type, (TensorType{DType::kFloat32, {rows, 1}}));
  std::vector<double> ref(rows * cols), ref_mean(rows), ref_rstd(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += Get(x, r * cols + c) / cols;
    for (int64_t c = 0; c < cols; ++c) var += std::pow(Get(x, r * cols + c) - mean, 2) / cols;
    ref_mean[r] = mean;
    ref_rstd[r] = 1 / std::sqrt(var + 1e-5);
    for (int64_t c = 0; c < cols; ++c) {
      ref[r * cols + c] = (Get(x, r * cols + c) - mean) * ref_rstd[r] * Get(w, c) + Get(b, c);
    }
  }
  EXPECT_TRUE(Close(out[0], ref, Tolerance(dtype, cols)));
  // float32 statistics: far tighter than any 16-bit rounding.
  EXPECT_TRUE(Close(out[1], ref_mean, 1e-5));
  EXPECT_TRUE(Close(out[2], ref_rstd, 1e-6));
}

TEST_P(HalfKernelTest, OpsWithoutSixteenBitKernelsRefuseAtRegistration) {
  const DType dtype = GetParam();
  HostTensor x = Random(dtype, {4});
  for (const char* op : {"rsqrt", "exp", "log"}) {
    auto out = RunOp(op, {}, {x});
    ASSERT_FALSE(out.ok()) << op;
    EXPECT_THAT(out.status().message(), HasSubstr(DTypeName(dtype))) << op;
    EXPECT_THAT(out.status().message(), HasSubstr("supported dtypes are float32, float64")) << op;
  }
}

INSTANTIATE_TEST_SUITE_P(SixteenBit, HalfKernelTest, ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tandem
