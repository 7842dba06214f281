// The reference CPU kernels of the LSTM, transformer and Adam/AdamW op
// families, part two (softmax, safe softmax, layer norm, bmm, attention, and
// an LSTM cell step built from the decomposed ops): forwards against double
// computations written here, backwards against central finite differences
// (float64).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/sequence_test_util.h"

namespace tandem::seq_test {
namespace {

// ---- normalization ----

TEST_F(SequenceKernelTest, SoftmaxAndLayerNorm) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int dim : {1, 2}) {
      const Shape shape = {3, 5, 6};
      Tensor x = Random(dtype, shape, -4, 4);
      std::vector<double> expected(x.numel());
      for (int64_t i = 0; i < x.numel(); ++i) {
        auto at = Unravel(i, shape);
        double sum = 0;
        for (int64_t j = 0; j < shape[dim]; ++j) {
          auto other = at;
          other[dim] = j;
          sum += std::exp(x.Get(Ravel(other, shape)));
        }
        expected[i] = std::exp(x.Get(i)) / sum;
      }
      ExpectClose(MustRun("_softmax", MakeAttrs({{"dim", int64_t{dim}}}), {x})[0], expected, "_softmax");
    }
    // native_layer_norm over the last two dims.
    Tensor x = Random(dtype, {4, 3, 5}, -2, 2);
    Tensor w = Random(dtype, {3, 5}), b = Random(dtype, {3, 5});
    const Attrs attrs = MakeAttrs({{"normalized_shape", std::vector<int64_t>{3, 5}}, {"eps", 1e-5}});
    std::vector<Tensor> out = MustRun("native_layer_norm", attrs, {x, w, b});
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[1].type.shape, (Shape{4, 1, 1}));
    std::vector<double> y, means, rstds;
    for (int64_t r = 0; r < 4; ++r) {
      double mean = 0, var = 0;
      for (int64_t c = 0; c < 15; ++c) mean += x.Get(r * 15 + c) / 15;
      for (int64_t c = 0; c < 15; ++c) var += (x.Get(r * 15 + c) - mean) * (x.Get(r * 15 + c) - mean) / 15;
      const double rstd = 1 / std::sqrt(var + 1e-5);
      for (int64_t c = 0; c < 15; ++c) y.push_back((x.Get(r * 15 + c) - mean) * rstd * w.Get(c) + b.Get(c));
      means.push_back(mean);
      rstds.push_back(rstd);
    }
    ExpectClose(out[0], y, "layer norm", 1e-5);
    ExpectClose(out[1], means, "layer norm mean", 1e-5);
    ExpectClose(out[2], rstds, "layer norm rstd", 1e-5);
  }
}

TEST_F(SequenceKernelTest, SoftmaxAndLayerNormBackwardsMatchFiniteDifferences) {
  Tensor x = Random(DType::kFloat64, {3, 4, 5}, -2, 2);
  for (int dim : {2, 0}) {
    const Attrs attrs = MakeAttrs({{"dim", int64_t{dim}}});
    Tensor y = MustRun("_softmax", attrs, {x})[0];
    Tensor g = Random(DType::kFloat64, {3, 4, 5});
    ExpectGradient(MustRun("_softmax_backward_data", attrs, {g, y})[0],
                   NumericGradient(Forward("_softmax", attrs), {x}, 0, g.Values()), "_softmax_backward_data");
  }
  const Attrs attrs = MakeAttrs({{"normalized_shape", std::vector<int64_t>{5}}, {"eps", 1e-5}});
  Tensor w = Random(DType::kFloat64, {5}), b = Random(DType::kFloat64, {5});
  std::vector<Tensor> fwd = MustRun("native_layer_norm", attrs, {x, w, b});
  Tensor g = Random(DType::kFloat64, {3, 4, 5});
  std::vector<Tensor> grads = MustRun("native_layer_norm_backward", attrs, {g, x, fwd[1], fwd[2], w, b});
  ASSERT_EQ(grads.size(), 3u);
  const auto f = Forward("native_layer_norm", attrs);
  ExpectGradient(grads[0], NumericGradient(f, {x, w, b}, 0, g.Values()), "layer norm grad_input");
  ExpectGradient(grads[1], NumericGradient(f, {x, w, b}, 1, g.Values()), "layer norm grad_weight");
  ExpectGradient(grads[2], NumericGradient(f, {x, w, b}, 2, g.Values()), "layer norm grad_bias");
  // Without weight and bias.
  std::vector<Tensor> plain = MustRun("native_layer_norm", attrs, {x});
  Tensor dx = MustRun("native_layer_norm_backward", attrs, {g, x, plain[1], plain[2]})[0];
  ExpectGradient(dx, NumericGradient(Forward("native_layer_norm", attrs), {x}, 0, g.Values()),
                 "layer norm grad_input without affine");
}

// _safe_softmax in double: softmax over `dim`, except that a slice of all
// -inf is zeros; a slice with a NaN is NaN.
std::vector<double> ReferenceSafeSoftmax(const Tensor& x, int dim) {
  const Shape& shape = x.type.shape;
  std::vector<double> out(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> other = Unravel(i, shape);
    std::vector<double> slice(shape[dim]);
    for (int64_t j = 0; j < shape[dim]; ++j) {
      other[dim] = j;
      slice[j] = x.Get(Ravel(other, shape));
    }
    if (std::any_of(slice.begin(), slice.end(), [](double v) { return std::isnan(v); })) {
      out[i] = NAN;
      continue;
    }
    const double mx = *std::max_element(slice.begin(), slice.end());
    if (mx == -INFINITY) {
      out[i] = 0.0;
      continue;
    }
    double sum = 0;
    for (double v : slice) sum += std::exp(v - mx);
    out[i] = std::exp(x.Get(i) - mx) / sum;
  }
  return out;
}

// Sets the elements of the slice of `x` along `dim` through the element at
// `index` to `value` where `pick(j)` holds (j: the position along dim).
template <typename Pick>
void SetSlice(Tensor& x, int dim, std::vector<int64_t> index, double value, Pick pick) {
  for (int64_t j = 0; j < x.type.shape[dim]; ++j) {
    index[dim] = j;
    if (pick(j)) x.Set(Ravel(index, x.type.shape), value);
  }
}

// Random [3, 5, 6] input with, along `dim`: one slice all -inf, one with
// every other element -inf, one with a single finite element, one of -inf
// and a NaN. The four slices pass through elements that differ in every
// coordinate, so they are distinct whatever `dim` is.
Tensor MaskedSoftmaxInput(Tensor x, int dim) {
  SetSlice(x, dim, {0, 0, 0}, -INFINITY, [](int64_t) { return true; });
  SetSlice(x, dim, {2, 4, 5}, -INFINITY, [](int64_t j) { return j % 2 == 0; });
  SetSlice(x, dim, {1, 2, 3}, -INFINITY, [](int64_t j) { return j != 1; });
  SetSlice(x, dim, {0, 1, 2}, -INFINITY, [](int64_t) { return true; });
  SetSlice(x, dim, {0, 1, 2}, NAN, [](int64_t j) { return j == 1; });
  return x;
}

TEST_F(SequenceKernelTest, SafeSoftmaxZeroesSlicesOfAllNegativeInfinity) {
  const Shape shape = {3, 5, 6};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int dim : {2, 1, 0, -1}) {
      const int d = dim < 0 ? dim + 3 : dim;
      const std::string what = std::string(DTypeName(dtype)) + " dim " + std::to_string(dim);
      const Tensor x = MaskedSoftmaxInput(Random(dtype, shape, -4, 4), d);
      const std::vector<double> expected = ReferenceSafeSoftmax(x, d);
      // The reference itself: the fully masked slice is zeros, the others sum to 1.
      EXPECT_EQ(expected[0], 0.0) << what;
      const Attrs attrs = MakeAttrs({{"dim", int64_t{dim}}});
      ExpectClose(MustRun("_safe_softmax", attrs, {x})[0], expected, "_safe_softmax " + what);
      ExpectClose(MustRun("_safe_softmax", attrs, {x}, /*in_place=*/true)[0], expected,
                  "_safe_softmax in place " + what);
      ExpectClose(MustRun("_safe_softmax", MakeAttrs({{"dim", int64_t{dim}}, {"dtype", dtype}}), {x})[0], expected,
                  "_safe_softmax with dtype " + what);
      // _softmax agrees except on the fully masked slices, which it leaves NaN.
      std::vector<double> plain = expected;
      for (int64_t i = 0; i < x.numel(); ++i) {
        std::vector<int64_t> at = Unravel(i, shape);
        at[d] = 0;
        if (at == std::vector<int64_t>{0, 0, 0}) plain[i] = NAN;
      }
      ExpectClose(MustRun("_softmax", attrs, {x})[0], plain, "_softmax " + what);
    }
  }
}

TEST_F(SequenceKernelTest, SafeSoftmaxRegistryRules) {
  const OpDef* def = OpRegistry::Global().Find("_safe_softmax");
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(def->alias, AliasKind::kNone);
  const TensorType f32{DType::kFloat32, {4, 7}};
  auto ok = def->infer(MakeAttrs({{"dim", int64_t{-1}}, {"dtype", DType::kFloat32}}), {f32});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, std::vector<TensorType>{f32});
  auto converting = def->infer(MakeAttrs({{"dim", int64_t{1}}, {"dtype", DType::kFloat64}}), {f32});
  EXPECT_EQ(converting.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(converting.status().message().find("_safe_softmax: attribute 'dtype' is float64"), std::string::npos)
      << converting.status();
  EXPECT_NE(converting.status().message().find("_to_copy"), std::string::npos) << converting.status();
  EXPECT_FALSE(def->infer(MakeAttrs({{"dim", int64_t{2}}}), {f32}).ok());
  EXPECT_FALSE(def->infer(MakeAttrs({{"dim", int64_t{0}}}), {TensorType{DType::kInt64, {4, 7}}}).ok());
  EXPECT_FALSE(def->infer({}, {f32}).ok());  // dim is required
}

// Its backward is _softmax_backward_data on its output, masked slices
// included (their gradient is zero).
TEST_F(SequenceKernelTest, SafeSoftmaxBackwardMatchesFiniteDifferences) {
  for (int dim : {2, 0}) {
    Tensor x = Random(DType::kFloat64, {3, 5, 6}, -2, 2);
    SetSlice(x, dim, {0, 0, 0}, -INFINITY, [](int64_t) { return true; });
    SetSlice(x, dim, {2, 4, 5}, -INFINITY, [](int64_t j) { return j % 2 == 0; });
    const Attrs attrs = MakeAttrs({{"dim", int64_t{dim}}});
    Tensor y = MustRun("_safe_softmax", attrs, {x})[0];
    Tensor g = Random(DType::kFloat64, {3, 5, 6});
    const Attrs back = MakeAttrs({{"dim", int64_t{dim}}, {"input_dtype", DType::kFloat64}});
    ExpectGradient(MustRun("_softmax_backward_data", back, {g, y})[0],
                   NumericGradient(Forward("_safe_softmax", attrs), {x}, 0, g.Values()),
                   "_safe_softmax backward dim " + std::to_string(dim));
  }
}

// ---- attention ----

TEST_F(SequenceKernelTest, BmmMatchesDouble) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Tensor a = Random(dtype, {3, 4, 5}), b = Random(dtype, {3, 5, 6});
    std::vector<double> expected;
    for (int64_t n = 0; n < 3; ++n) {
      for (int64_t i = 0; i < 4; ++i) {
        for (int64_t j = 0; j < 6; ++j) {
          double s = 0;
          for (int64_t k = 0; k < 5; ++k) s += a.Get((n * 4 + i) * 5 + k) * b.Get((n * 5 + k) * 6 + j);
          expected.push_back(s);
        }
      }
    }
    ExpectClose(MustRun("bmm", {}, {a, b})[0], expected, "bmm");
  }
}

// Attention written as matrices: S = scale Q K^T + mask, P = softmax(S),
// O = P V, for every batch entry.
std::vector<double> ReferenceAttention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
                                       bool causal, double scale, std::vector<double>* lse) {
  const int r = q.type.rank();
  const int64_t L = q.type.shape[r - 2], E = q.type.shape[r - 1], S = k.type.shape[r - 2], Ev = v.type.shape[r - 1];
  const int64_t batch = q.numel() / (L * E);
  Shape scores_shape = q.type.shape;
  scores_shape[r - 1] = S;
  std::vector<double> out;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(S);
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += q.Get((n * L + i) * E + e) * k.Get((n * S + j) * E + e);
        s[j] = scale * dot;
        if (mask != nullptr) {
          const double m = mask->Get(Source(Unravel((n * L + i) * S + j, scores_shape), mask->type.shape));
          if (mask->type.dtype == DType::kBool) {
            if (m == 0) s[j] = -INFINITY;
          } else {
            s[j] += m;
          }
        }
        if (causal && j > i) s[j] = -INFINITY;
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double x : s) sum += std::exp(x - mx);
      if (lse != nullptr) lse->push_back(mx + std::log(sum));
      for (int64_t e = 0; e < Ev; ++e) {
        double o = 0;
        for (int64_t j = 0; j < S; ++j) o += std::exp(s[j] - mx) / sum * v.Get((n * S + j) * Ev + e);
        out.push_back(o);
      }
    }
  }
  return out;
}

TEST_F(SequenceKernelTest, ScaledDotProductAttentionForwards) {
  const Shape qs = {2, 3, 5, 4}, ks = {2, 3, 6, 4}, vs = {2, 3, 6, 7};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Tensor q = Random(dtype, qs), k = Random(dtype, ks), v = Random(dtype, vs);
    Tensor bias = Random(dtype, {5, 6});
    Tensor bool_mask = RandomBool({2, 1, 5, 6});
    for (int i = 0; i < 5; ++i) bool_mask.Set(i * 6, 1.0);  // no fully hidden row
    for (int i = 0; i < 5; ++i) bool_mask.Set(30 + i * 6, 1.0);
    for (bool causal : {false, true}) {
      // The efficient kernel's form with a float bias and the log-sum-exp.
      std::vector<double> lse;
      const std::vector<double> expected = ReferenceAttention(q, k, v, &bias, causal, 0.3, &lse);
      std::vector<Tensor> eff =
          MustRun("_scaled_dot_product_efficient_attention",
                  MakeAttrs({{"compute_log_sumexp", true}, {"is_causal", causal}, {"scale", 0.3}}), {q, k, v, bias});
      ASSERT_EQ(eff.size(), 4u);
      ExpectClose(eff[0], expected, "efficient attention", 1e-5);
      ASSERT_EQ(eff[1].type.shape, (Shape{2, 3, 32}));
      std::vector<double> padded;
      for (int64_t n = 0; n < 6; ++n) {
        for (int64_t i = 0; i < 32; ++i) padded.push_back(i < 5 ? lse[n * 5 + i] : 0.0);
      }
      ExpectClose(eff[1], padded, "efficient attention logsumexp", 1e-5);
      ExpectClose(eff[2], {0}, "philox seed");
      // The CPU flash form with a bool mask and the default scale.
      std::vector<Tensor> flash = MustRun("_scaled_dot_product_flash_attention_for_cpu",
                                          MakeAttrs({{"is_causal", causal}}), {q, k, v, bool_mask});
      ExpectClose(flash[0], ReferenceAttention(q, k, v, &bool_mask, causal, 0.5, nullptr), "flash attention", 1e-5);
      EXPECT_EQ(flash[1].type.shape, (Shape{2, 3, 5}));
    }
  }
  // Dropout inside attention is refused at registration.
  Tensor q = Random(DType::kFloat32, qs);
  EXPECT_FALSE(RunOp("_scaled_dot_product_flash_attention_for_cpu", MakeAttrs({{"dropout_p", 0.1}}),
                     {q, Random(DType::kFloat32, ks), Random(DType::kFloat32, vs)})
                   .ok());
}

TEST_F(SequenceKernelTest, ScaledDotProductAttentionBackwardsMatchFiniteDifferences) {
  const Shape qs = {2, 4, 3}, ks = {2, 5, 3}, vs = {2, 5, 2};
  Tensor q = Random(DType::kFloat64, qs), k = Random(DType::kFloat64, ks), v = Random(DType::kFloat64, vs);
  Tensor bias = Random(DType::kFloat64, {2, 4, 5});
  Tensor go = Random(DType::kFloat64, {2, 4, 2});
  for (bool causal : {false, true}) {
    const Attrs attrs = MakeAttrs({{"compute_log_sumexp", true}, {"is_causal", causal}});
    std::vector<Tensor> fwd = MustRun("_scaled_dot_product_efficient_attention", attrs, {q, k, v, bias});
    std::vector<Tensor> grads = MustRun("_scaled_dot_product_efficient_attention_backward", attrs,
                                        {go, q, k, v, bias, fwd[0], fwd[1], fwd[2], fwd[3]});
    ASSERT_EQ(grads.size(), 4u);
    const auto f = Forward("_scaled_dot_product_efficient_attention", attrs);
    const char* names[] = {"grad_query", "grad_key", "grad_value", "grad_bias"};
    for (size_t which = 0; which < 4; ++which) {
      ExpectGradient(grads[which], NumericGradient(f, {q, k, v, bias}, which, go.Values()),
                     std::string("efficient ") + names[which] + (causal ? " causal" : ""));
    }
    // The CPU flash form, without a mask.
    const Attrs flash_attrs = MakeAttrs({{"is_causal", causal}});
    std::vector<Tensor> flash = MustRun("_scaled_dot_product_flash_attention_for_cpu", flash_attrs, {q, k, v});
    std::vector<Tensor> flash_grads =
        MustRun("_scaled_dot_product_flash_attention_for_cpu_backward", flash_attrs, {go, q, k, v, flash[0], flash[1]});
    ASSERT_EQ(flash_grads.size(), 3u);
    const auto ff = Forward("_scaled_dot_product_flash_attention_for_cpu", flash_attrs);
    for (size_t which = 0; which < 3; ++which) {
      ExpectGradient(flash_grads[which], NumericGradient(ff, {q, k, v}, which, go.Values()),
                     std::string("flash ") + names[which]);
    }
  }
  // A bias broadcast over the batch sums its gradient.
  Tensor shared_bias = Random(DType::kFloat64, {4, 5});
  const Attrs attrs = MakeAttrs({{"compute_log_sumexp", true}});
  std::vector<Tensor> fwd = MustRun("_scaled_dot_product_efficient_attention", attrs, {q, k, v, shared_bias});
  std::vector<Tensor> grads = MustRun("_scaled_dot_product_efficient_attention_backward", attrs,
                                      {go, q, k, v, shared_bias, fwd[0], fwd[1], fwd[2], fwd[3]});
  ExpectGradient(grads[3],
                 NumericGradient(Forward("_scaled_dot_product_efficient_attention", attrs), {q, k, v, shared_bias}, 3,
                                 go.Values()),
                 "broadcast bias gradient");
}

// One LSTM cell step as the 1.13 trace decomposes it (addmm, split into
// gates, sigmoid/tanh, mul, add), against the cell written in double.
TEST_F(SequenceKernelTest, DecomposedLstmCellStep) {
  const int64_t batch = 3, in = 4, hidden = 5;
  Tensor x = Random(DType::kFloat64, {batch, in}), h = Random(DType::kFloat64, {batch, hidden});
  Tensor c = Random(DType::kFloat64, {batch, hidden});
  Tensor w_ih = Random(DType::kFloat64, {in, 4 * hidden}), w_hh = Random(DType::kFloat64, {hidden, 4 * hidden});
  Tensor bias = Random(DType::kFloat64, {4 * hidden});
  Tensor gates = MustRun("addmm", {}, {bias, x, w_ih})[0];
  Tensor hh = MustRun("mm", {}, {h, w_hh})[0];
  gates = MustRun("add.Tensor", {}, {gates, hh})[0];
  std::vector<Tensor> chunks =
      MustRun("unsafe_split.Tensor", MakeAttrs({{"split_size", hidden}, {"dim", int64_t{1}}}), {gates});
  ASSERT_EQ(chunks.size(), 4u);
  Tensor i = MustRun("sigmoid", {}, {chunks[0]})[0], f = MustRun("sigmoid", {}, {chunks[1]})[0];
  Tensor g = MustRun("tanh", {}, {chunks[2]})[0], o = MustRun("sigmoid", {}, {chunks[3]})[0];
  Tensor c1 =
      MustRun("add.Tensor", {}, {MustRun("mul.Tensor", {}, {f, c})[0], MustRun("mul.Tensor", {}, {i, g})[0]})[0];
  Tensor h1 = MustRun("mul.Tensor", {}, {o, MustRun("tanh", {}, {c1})[0]})[0];
  Tensor hs = MustRun("stack", {}, {h1, h1})[0];
  EXPECT_EQ(hs.type.shape, (Shape{2, batch, hidden}));
  std::vector<double> expected_h, expected_c;
  auto sig = [](double z) { return 1 / (1 + std::exp(-z)); };
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> z(4 * hidden);
    for (int64_t j = 0; j < 4 * hidden; ++j) {
      z[j] = bias.Get(j);
      for (int64_t k = 0; k < in; ++k) z[j] += x.Get(b * in + k) * w_ih.Get(k * 4 * hidden + j);
      for (int64_t k = 0; k < hidden; ++k) z[j] += h.Get(b * hidden + k) * w_hh.Get(k * 4 * hidden + j);
    }
    for (int64_t j = 0; j < hidden; ++j) {
      const double cc = sig(z[hidden + j]) * c.Get(b * hidden + j) + sig(z[j]) * std::tanh(z[2 * hidden + j]);
      expected_c.push_back(cc);
      expected_h.push_back(sig(z[3 * hidden + j]) * std::tanh(cc));
    }
  }
  ExpectClose(c1, expected_c, "lstm c", 0.0, 1e-12);
  ExpectClose(h1, expected_h, "lstm h", 0.0, 1e-12);
}

}  // namespace
}  // namespace tandem::seq_test
