// The CPU kernels of the memory-efficient attention ops and _safe_softmax in
// bfloat16 and float16: results against float64 computations written here
// on the same 16-bit inputs, fresh random data every run (the seed is
// printed; TANDEM_TEST_SEED replays one), outputs poisoned (NaN) before the
// kernel runs, and NaN never passes where the result is finite.
//
// Tolerances: the inputs are exact 16-bit values, so a result's only errors
// are the kernel's arithmetic (double, then float32) and its final rounding
// to 16 bits, at most u relative per element (u = 2^-8 for bfloat16, 2^-11
// for float16); normwise 2u plus 4k 2^-24 for sums of k terms. The float32
// log-sum-exp is checked to 1e-6.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/half_test_util.h"
#include "kernels/cpu/run_op_test_util.h"
#include "kernels/half.h"

namespace tandem {
namespace {

using half_test::Close;
using half_test::Get;
using half_test::HostTensor;
using half_test::MustRun;
using half_test::Set;
using half_test::Tolerance;
using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<int64_t> Unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> at(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    at[d] = i % shape[d];
    i /= shape[d];
  }
  return at;
}

// The flat index in a tensor of shape `in` that broadcasts to `index`'s
// shape (trailing dims aligned, size-1 dims read at 0).
int64_t Source(const std::vector<int64_t>& index, const Shape& in) {
  const size_t skip = index.size() - in.size();
  int64_t flat = 0;
  for (size_t d = 0; d < in.size(); ++d) flat = flat * in[d] + (in[d] == 1 ? 0 : index[skip + d]);
  return flat;
}

// Attention in float64 over q [..., L, E], k [..., S, E], v [..., S, Ev]
// with an optional float bias or bool mask (broadcast to [..., L, S]).
struct Reference {
  std::vector<double> out, lse;  // lse per (batch entry, row)
  std::vector<double> dq, dk, dv, dbias;
};

struct AttentionCase {
  const HostTensor* q;
  const HostTensor* k;
  const HostTensor* v;
  const HostTensor* mask = nullptr;
  bool causal = false;
  double scale = 0;
};

// The forward, and with `dout` the backward (D_i from `out16`, the 16-bit
// output the backward is given, as the kernel computes it).
Reference ReferenceAttention(const AttentionCase& c, const HostTensor* dout = nullptr,
                             const HostTensor* out16 = nullptr) {
  const Shape& qs = c.q->type.shape;
  const int r = static_cast<int>(qs.size());
  const int64_t L = qs[r - 2], E = qs[r - 1], S = c.k->type.shape[r - 2], Ev = c.v->type.shape[r - 1];
  const int64_t batch = c.q->numel() / (L * E);
  Shape scores_shape = qs;
  scores_shape[r - 1] = S;
  Reference ref;
  ref.out.assign(static_cast<size_t>(batch * L * Ev), 0.0);
  ref.dq.assign(static_cast<size_t>(c.q->numel()), 0.0);
  ref.dk.assign(static_cast<size_t>(c.k->numel()), 0.0);
  ref.dv.assign(static_cast<size_t>(c.v->numel()), 0.0);
  if (c.mask != nullptr) ref.dbias.assign(static_cast<size_t>(c.mask->numel()), 0.0);
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(static_cast<size_t>(S));
      std::vector<int64_t> mask_at(static_cast<size_t>(S), 0);
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += Get(*c.q, (n * L + i) * E + e) * Get(*c.k, (n * S + j) * E + e);
        s[j] = c.scale * dot;
        if (c.mask != nullptr) {
          mask_at[j] = Source(Unravel((n * L + i) * S + j, scores_shape), c.mask->type.shape);
          const double m = Get(*c.mask, mask_at[j]);
          if (c.mask->type.dtype == DType::kBool) {
            if (m == 0) s[j] = -kInf;
          } else {
            s[j] += m;
          }
        }
        if (c.causal && j > i) s[j] = -kInf;
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double x : s) sum += std::exp(x - mx);
      const double lse = mx + std::log(sum);
      ref.lse.push_back(lse);
      std::vector<double> p(static_cast<size_t>(S));
      for (int64_t j = 0; j < S; ++j) p[j] = std::exp(s[j] - lse);
      for (int64_t e = 0; e < Ev; ++e) {
        for (int64_t j = 0; j < S; ++j) ref.out[(n * L + i) * Ev + e] += p[j] * Get(*c.v, (n * S + j) * Ev + e);
      }
      if (dout == nullptr) continue;
      double d = 0;
      for (int64_t e = 0; e < Ev; ++e) d += Get(*dout, (n * L + i) * Ev + e) * Get(*out16, (n * L + i) * Ev + e);
      for (int64_t j = 0; j < S; ++j) {
        double dp = 0;
        for (int64_t e = 0; e < Ev; ++e) {
          const double g = Get(*dout, (n * L + i) * Ev + e);
          dp += g * Get(*c.v, (n * S + j) * Ev + e);
          ref.dv[(n * S + j) * Ev + e] += p[j] * g;
        }
        const double ds = p[j] * (dp - d);
        for (int64_t e = 0; e < E; ++e) {
          ref.dq[(n * L + i) * E + e] += c.scale * ds * Get(*c.k, (n * S + j) * E + e);
          ref.dk[(n * S + j) * E + e] += c.scale * ds * Get(*c.q, (n * L + i) * E + e);
        }
        if (c.mask != nullptr) ref.dbias[mask_at[j]] += ds;
      }
    }
  }
  return ref;
}

class HalfAttentionTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }

  // Values in [lo, hi), stored as `dtype` (so that the references see
  // exactly the kernel's inputs).
  HostTensor Random(DType dtype, Shape shape, double lo = -1.0, double hi = 1.0) {
    return half_test::RandomTensor(rng_, dtype, std::move(shape), lo, hi);
  }
  HostTensor RandomMask(Shape shape) {
    std::bernoulli_distribution keep(0.7);
    HostTensor t({DType::kBool, std::move(shape)});
    for (int64_t i = 0; i < t.numel(); ++i) Set(t, i, keep(rng_) ? 1.0 : 0.0);
    return t;
  }
  int64_t Dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }

  std::mt19937_64 rng_{half_test::TestSeed("half_attention_kernels_test") + static_cast<uint64_t>(GetParam())};
};

// lse [batch, padded] (float32) against the reference rows (padding 0).
void ExpectLse(const HostTensor& lse, const std::vector<double>& ref, int64_t rows, const std::string& what) {
  ASSERT_EQ(lse.type.dtype, DType::kFloat32) << what;
  const int64_t padded = lse.type.shape.back();
  ASSERT_EQ(padded, (rows + 31) / 32 * 32) << what;
  std::vector<double> expected;
  for (size_t b = 0; b < ref.size() / static_cast<size_t>(rows); ++b) {
    for (int64_t i = 0; i < padded; ++i) expected.push_back(i < rows ? ref[b * rows + i] : 0.0);
  }
  EXPECT_TRUE(Close(lse, expected, 1e-6)) << what;
}

// Forward and backward without a bias, and with a full bias, a bias
// broadcast over the batch dims and a key-padding bias [B, 1, 1, S]; causal
// or not; default and explicit scale. Random shapes with L and S up to 40
// (padded log-sum-exp rows) and head dims E != Ev.
TEST_P(HalfAttentionTest, EfficientAttentionForwardAndBackwardMatchFloat64) {
  const int64_t B = Dim(1, 3), H = Dim(1, 3), L = Dim(1, 40), S = Dim(1, 40), E = Dim(1, 24), Ev = Dim(1, 24);
  SCOPED_TRACE(::testing::Message() << "B " << B << " H " << H << " L " << L << " S " << S << " E " << E << " Ev "
                                    << Ev);
  const HostTensor q = Random(dtype(), {B, H, L, E});
  const HostTensor k = Random(dtype(), {B, H, S, E});
  const HostTensor v = Random(dtype(), {B, H, S, Ev});
  const HostTensor dout = Random(dtype(), {B, H, L, Ev});
  const std::vector<HostTensor> biases = {Random(dtype(), {B, H, L, S}, -2, 2), Random(dtype(), {L, S}, -2, 2),
                                          Random(dtype(), {B, 1, 1, S}, -2, 2)};
  for (int which = -1; which < static_cast<int>(biases.size()); ++which) {
    for (bool causal : {false, true}) {
      for (double scale : {0.0, 0.37}) {  // 0: the default 1/sqrt(E)
        const HostTensor* bias = which >= 0 ? &biases[which] : nullptr;
        const std::string what =
            "bias " + std::to_string(which) + (causal ? " causal" : "") + (scale != 0 ? " scale 0.37" : "");
        SCOPED_TRACE(what);
        Attrs attrs = MakeAttrs({{"compute_log_sumexp", true}, {"is_causal", causal}});
        if (scale != 0) attrs.Set("scale", scale);
        AttentionCase c{&q, &k, &v, bias, causal, scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(E))};
        std::vector<HostTensor> in = {q, k, v};
        if (bias != nullptr) in.push_back(*bias);
        std::vector<HostTensor> fwd = MustRun("_scaled_dot_product_efficient_attention", attrs, in);
        ASSERT_EQ(fwd.size(), 4u);
        EXPECT_EQ(fwd[0].type, (TensorType{dtype(), {B, H, L, Ev}}));
        EXPECT_EQ(fwd[2].type, (TensorType{DType::kInt64, {}}));
        const Reference forward = ReferenceAttention(c);
        EXPECT_TRUE(Close(fwd[0], forward.out, Tolerance(dtype(), S)));
        ExpectLse(fwd[1], forward.lse, L, "logsumexp");

        std::vector<HostTensor> back_in = {dout, q, k, v};
        if (bias != nullptr) back_in.push_back(*bias);
        back_in.insert(back_in.end(), {fwd[0], fwd[1], fwd[2], fwd[3]});
        std::vector<HostTensor> grads = MustRun("_scaled_dot_product_efficient_attention_backward", attrs, back_in);
        ASSERT_EQ(grads.size(), 4u);
        const Reference backward = ReferenceAttention(c, &dout, &fwd[0]);
        EXPECT_EQ(grads[0].type, q.type);
        EXPECT_EQ(grads[1].type, k.type);
        EXPECT_EQ(grads[2].type, v.type);
        EXPECT_TRUE(Close(grads[0], backward.dq, Tolerance(dtype(), S))) << "grad_query";
        EXPECT_TRUE(Close(grads[1], backward.dk, Tolerance(dtype(), L))) << "grad_key";
        EXPECT_TRUE(Close(grads[2], backward.dv, Tolerance(dtype(), L))) << "grad_value";
        if (bias != nullptr) {
          EXPECT_EQ(grads[3].type, bias->type);
          EXPECT_TRUE(Close(grads[3], backward.dbias, Tolerance(dtype(), B * H * L))) << "grad_bias";
        } else {
          EXPECT_EQ(grads[3].type, (TensorType{dtype(), {0}}));
        }
      }
    }
  }
}

// A -inf in a float bias hides a key: with every key but one hidden from a
// row, the row's output is exactly that key's value.
TEST_P(HalfAttentionTest, EfficientAttentionFloatMaskOfMinusInfinityHidesKeys) {
  const int64_t L = Dim(2, 20), S = Dim(2, 20), E = Dim(1, 16);
  const HostTensor q = Random(dtype(), {2, L, E});
  const HostTensor k = Random(dtype(), {2, S, E});
  const HostTensor v = Random(dtype(), {2, S, E});
  HostTensor bias = Random(dtype(), {2, L, S});
  const int64_t visible = Dim(0, S - 1);
  for (int64_t j = 0; j < S; ++j) {
    if (j != visible) Set(bias, j, -kInf);  // batch entry 0, row 0
  }
  std::vector<HostTensor> fwd =
      MustRun("_scaled_dot_product_efficient_attention", MakeAttrs({{"compute_log_sumexp", true}}), {q, k, v, bias});
  ASSERT_EQ(fwd.size(), 4u);
  for (int64_t e = 0; e < E; ++e) EXPECT_EQ(Get(fwd[0], e), Get(v, visible * E + e)) << e;
  const AttentionCase c{&q, &k, &v, &bias, false, 1.0 / std::sqrt(static_cast<double>(E))};
  const Reference ref = ReferenceAttention(c);
  EXPECT_TRUE(Close(fwd[0], ref.out, Tolerance(dtype(), S)));
  ExpectLse(fwd[1], ref.lse, L, "logsumexp");
}

TEST_P(HalfAttentionTest, EfficientAttentionWithoutLogSumExp) {
  const HostTensor q = Random(dtype(), {3, 5, 8}), k = Random(dtype(), {3, 6, 8}), v = Random(dtype(), {3, 6, 4});
  std::vector<HostTensor> fwd = MustRun("_scaled_dot_product_efficient_attention", {}, {q, k, v});
  ASSERT_EQ(fwd.size(), 4u);
  EXPECT_EQ(fwd[1].type, (TensorType{DType::kFloat32, {3, 0}}));
  const Reference ref = ReferenceAttention({&q, &k, &v, nullptr, false, 1.0 / std::sqrt(8.0)});
  EXPECT_TRUE(Close(fwd[0], ref.out, Tolerance(dtype(), 6)));
}

// _safe_softmax over the last and a middle dim: slices of all -inf are
// zeros, partly masked slices a softmax over the rest, a NaN slice stays NaN.
TEST_P(HalfAttentionTest, SafeSoftmaxZeroesFullyMaskedSlices) {
  const int64_t a = Dim(2, 5), n = Dim(2, 300), c = Dim(2, 6);
  const Shape shape = {a, n, c};
  for (int dim : {2, 1}) {
    SCOPED_TRACE(::testing::Message() << "[" << a << ", " << n << ", " << c << "] dim " << dim);
    HostTensor x = Random(dtype(), shape, -8, 8);
    // Slice (o, i) of [outer, size, inner]; element j of it.
    const int64_t size = shape[dim], outer = dim == 2 ? a * n : a, inner = dim == 2 ? 1 : c;
    const auto slice_at = [&](int64_t o, int64_t i, int64_t j) { return (o * size + j) * inner + i; };
    for (int64_t j = 0; j < size; ++j) Set(x, slice_at(0, 0, j), -kInf);     // fully masked
    for (int64_t j = 0; j < size; j += 2) Set(x, slice_at(1, 0, j), -kInf);  // partly masked
    Set(x, slice_at(outer - 1, inner - 1, Dim(0, size - 1)), std::numeric_limits<double>::quiet_NaN());
    std::vector<HostTensor> y = MustRun("_safe_softmax", MakeAttrs({{"dim", int64_t{dim}}}), {x});
    ASSERT_EQ(y.size(), 1u);
    ASSERT_EQ(y[0].type, x.type);
    std::vector<double> ref(static_cast<size_t>(x.numel()));
    std::vector<bool> nan_slice(static_cast<size_t>(x.numel()), false);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        double mx = -kInf;
        bool has_nan = false;
        for (int64_t j = 0; j < size; ++j) {
          const double value = Get(x, slice_at(o, i, j));
          has_nan = has_nan || std::isnan(value);
          mx = std::max(mx, value);
        }
        double sum = 0;
        for (int64_t j = 0; j < size; ++j) sum += mx == -kInf ? 0.0 : std::exp(Get(x, slice_at(o, i, j)) - mx);
        for (int64_t j = 0; j < size; ++j) {
          const int64_t e = slice_at(o, i, j);
          nan_slice[e] = has_nan;
          ref[e] = has_nan || mx == -kInf ? 0.0 : std::exp(Get(x, e) - mx) / sum;
        }
      }
    }
    int64_t nan_count = 0;
    HostTensor finite({DType::kFloat64, shape});
    for (int64_t e = 0; e < x.numel(); ++e) {
      if (nan_slice[e]) {
        EXPECT_TRUE(std::isnan(Get(y[0], e))) << "element " << e << " of the NaN slice";
        ++nan_count;
        static_cast<double*>(finite.data())[e] = 0.0;
      } else {
        static_cast<double*>(finite.data())[e] = Get(y[0], e);
      }
    }
    EXPECT_EQ(nan_count, size);
    EXPECT_TRUE(Close(finite, ref, Tolerance(dtype(), size)));
    // The fully masked slice is exactly zero, not NaN (as _softmax gives).
    for (int64_t j = 0; j < size; ++j) EXPECT_EQ(Get(y[0], slice_at(0, 0, j)), 0.0) << j;
    std::vector<HostTensor> plain = MustRun("_softmax", MakeAttrs({{"dim", int64_t{dim}}}), {x});
    ASSERT_EQ(plain.size(), 1u);
    EXPECT_TRUE(std::isnan(Get(plain[0], slice_at(0, 0, 0))));
  }
}

// Its backward is the 16-bit _softmax_backward_data on its output.
TEST_P(HalfAttentionTest, SafeSoftmaxBackwardIsSoftmaxBackward) {
  HostTensor x = Random(dtype(), {4, 33}, -4, 4);
  for (int64_t j = 0; j < 33; ++j) Set(x, j, -kInf);
  const HostTensor g = Random(dtype(), {4, 33});
  std::vector<HostTensor> y = MustRun("_safe_softmax", MakeAttrs({{"dim", int64_t{-1}}}), {x});
  ASSERT_EQ(y.size(), 1u);
  std::vector<HostTensor> dx =
      MustRun("_softmax_backward_data", MakeAttrs({{"dim", int64_t{-1}}, {"input_dtype", dtype()}}), {g, y[0]});
  ASSERT_EQ(dx.size(), 1u);
  std::vector<double> ref(4 * 33);
  for (int64_t r = 0; r < 4; ++r) {
    double dot = 0;
    for (int64_t j = 0; j < 33; ++j) dot += Get(g, r * 33 + j) * Get(y[0], r * 33 + j);
    for (int64_t j = 0; j < 33; ++j) ref[r * 33 + j] = Get(y[0], r * 33 + j) * (Get(g, r * 33 + j) - dot);
  }
  EXPECT_TRUE(Close(dx[0], ref, Tolerance(dtype(), 33)));
  for (int64_t j = 0; j < 33; ++j) EXPECT_EQ(Get(dx[0], j), 0.0) << j;  // the masked row's gradient
}

// The registry's 16-bit rules of these ops.
TEST_P(HalfAttentionTest, RegistryRules) {
  const OpDef* forward = OpRegistry::Global().Find("_scaled_dot_product_efficient_attention");
  const OpDef* backward = OpRegistry::Global().Find("_scaled_dot_product_efficient_attention_backward");
  ASSERT_NE(forward, nullptr);
  ASSERT_NE(backward, nullptr);
  const TensorType q{dtype(), {2, 40, 8}}, kv{dtype(), {2, 7, 8}};
  const Attrs attrs = MakeAttrs({{"compute_log_sumexp", true}});
  // A float32 bias on a 16-bit query is refused (PyTorch's kernel takes the
  // query's dtype).
  auto mixed = forward->infer(attrs, {q, kv, kv, TensorType{DType::kFloat32, {40, 7}}});
  ASSERT_FALSE(mixed.ok());
  EXPECT_THAT(mixed.status().message(), HasSubstr("the mask is float32[40, 7]"));
  // The backward wants the float32 log-sum-exp of the forward.
  const TensorType seed{DType::kInt64, {}};
  auto half_lse = backward->infer(attrs, {q, q, kv, kv, q, TensorType{dtype(), {2, 64}}, seed, seed});
  ASSERT_FALSE(half_lse.ok());
  EXPECT_THAT(half_lse.status().message(), HasSubstr("expected float32[2, 40]"));
  auto ok = backward->infer(attrs, {q, q, kv, kv, q, TensorType{DType::kFloat32, {2, 64}}, seed, seed});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[3], (TensorType{dtype(), {0}}));
  // The CPU flash kernel's form stays float32 / float64.
  auto flash = OpRegistry::Global().Find("_scaled_dot_product_flash_attention_for_cpu")->infer({}, {q, kv, kv});
  ASSERT_FALSE(flash.ok());
  EXPECT_THAT(flash.status().message(), HasSubstr(DTypeName(dtype())));
}

INSTANTIATE_TEST_SUITE_P(SixteenBit, HalfAttentionTest, ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tandem
