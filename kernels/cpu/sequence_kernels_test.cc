// The reference CPU kernels of the LSTM, transformer and Adam/AdamW op
// families, part one (activations, comparisons, indexing, slicing): each op
// against a computation written here in double with its own index
// arithmetic, backwards against central finite differences of the forward
// kernels (float64), bad indices against INVALID_ARGUMENT. Inputs are random
// from a fixed seed; outputs are poisoned before each run.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/graph_builder.h"
#include "kernels/cpu/sequence_test_util.h"

namespace tandem::seq_test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// ---- activations ----

TEST_F(SequenceKernelTest, UnaryActivationsMatchDoubleFormulas) {
  struct Case {
    std::string op;
    Attrs attrs;
    double lo, hi;
    std::function<double(double)> f;
  };
  const double kPi = 3.14159265358979323846;
  const std::vector<Case> cases = {
      {"sigmoid", {}, -6, 6, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"tanh", {}, -4, 4, [](double x) { return std::tanh(x); }},
      {"exp", {}, -3, 3, [](double x) { return std::exp(x); }},
      {"log", {}, 0.1, 5, [](double x) { return std::log(x); }},
      {"rsqrt", {}, 0.1, 5, [](double x) { return 1 / std::sqrt(x); }},
      {"gelu", {}, -4, 4, [](double x) { return x * 0.5 * std::erfc(-x / std::sqrt(2.0)); }},
      {"gelu", MakeAttrs({{"approximate", std::string("tanh")}}), -4, 4,
       [=](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x))); }},
      {"pow.Tensor_Scalar", MakeAttrs({{"exponent", 2.5}}), 0.1, 3, [](double x) { return std::pow(x, 2.5); }},
      {"pow.Tensor_Scalar", MakeAttrs({{"exponent", int64_t{2}}}), -3, 3, [](double x) { return x * x; }},
      {"pow.Scalar", MakeAttrs({{"self", 0.9}}), 0, 50, [](double x) { return std::pow(0.9, x); }},
  };
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Case& c : cases) {
      Tensor x = Random(dtype, {7, 33}, c.lo, c.hi);
      std::vector<double> expected;
      for (double v : x.Values()) expected.push_back(c.f(v));
      std::vector<Tensor> out = MustRun(c.op, c.attrs, {x});
      ASSERT_EQ(out.size(), 1u);
      ExpectClose(out[0], expected, c.op, 4e-6, 1e-13);
      // In place gives the same.
      std::vector<Tensor> in_place = MustRun(c.op, c.attrs, {x}, /*in_place=*/true);
      ExpectClose(in_place[0], out[0].Values(), c.op + " in place", 0.0, 0.0);
    }
  }
}

TEST_F(SequenceKernelTest, ActivationBackwardsMatchFiniteDifferences) {
  struct Case {
    std::string backward, forward;
    Attrs attrs;
    bool takes_output;  // the backward's second input is the forward's output (else its input)
  };
  const std::vector<Case> cases = {
      {"sigmoid_backward", "sigmoid", {}, true},
      {"tanh_backward", "tanh", {}, true},
      {"gelu_backward", "gelu", {}, false},
      {"gelu_backward", "gelu", MakeAttrs({{"approximate", std::string("tanh")}}), false},
  };
  for (const Case& c : cases) {
    Tensor x = Random(DType::kFloat64, {4, 9}, -3, 3);
    Tensor g = Random(DType::kFloat64, {4, 9});
    const Tensor y = MustRun(c.forward, c.attrs, {x})[0];
    const Tensor analytic = MustRun(c.backward, c.attrs, {g, c.takes_output ? y : x})[0];
    ExpectGradient(analytic, NumericGradient(Forward(c.forward, c.attrs), {x}, 0, g.Values()), c.backward);
  }
}

TEST_F(SequenceKernelTest, BroadcastingPointwiseOps) {
  const Shape a_shape = {3, 1, 5}, b_shape = {4, 1}, c_shape = {5}, out_shape = {3, 4, 5};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Tensor a = Random(dtype, a_shape), b = Random(dtype, b_shape), c = Random(dtype, c_shape, 0.5, 2.0);
    Tensor w = Random(dtype, c_shape, 0.0, 1.0);
    auto expect3 = [&](const Tensor& out, const Tensor& x, const Tensor& y, const Tensor* z,
                       const std::function<double(double, double, double)>& f, const std::string& what) {
      std::vector<double> expected(NumElements(out_shape));
      for (int64_t i = 0; i < NumElements(out_shape); ++i) {
        const auto index = Unravel(i, out_shape);
        expected[i] = f(x.Get(Source(index, x.type.shape)), y.Get(Source(index, y.type.shape)),
                        z != nullptr ? z->Get(Source(index, z->type.shape)) : 0.0);
      }
      ExpectClose(out, expected, what, 4e-6);
    };
    expect3(
        MustRun("maximum", {}, {a, b})[0], a, b, nullptr, [](double x, double y, double) { return std::max(x, y); },
        "maximum");
    expect3(
        MustRun("minimum", {}, {a, b})[0], a, b, nullptr, [](double x, double y, double) { return std::min(x, y); },
        "minimum");
    expect3(
        MustRun("addcmul", MakeAttrs({{"value", -0.5}}), {a, b, c})[0], a, b, &c,
        [](double x, double y, double z) { return x - 0.5 * y * z; }, "addcmul");
    expect3(
        MustRun("addcdiv", MakeAttrs({{"value", 0.25}}), {a, b, c})[0], a, b, &c,
        [](double x, double y, double z) { return x + 0.25 * y / z; }, "addcdiv");
    expect3(
        MustRun("lerp.Scalar", MakeAttrs({{"weight", 0.3}}), {a, b})[0], a, b, nullptr,
        [](double x, double y, double) { return x + 0.3 * (y - x); }, "lerp.Scalar");
    expect3(
        MustRun("lerp.Tensor", {}, {a, b, w})[0], a, b, &w,
        [](double x, double y, double z) { return x + z * (y - x); }, "lerp.Tensor");
    std::vector<double> clamped;
    for (double v : a.Values()) clamped.push_back(std::clamp(v, -0.4, 0.6));
    ExpectClose(MustRun("clamp", MakeAttrs({{"min", -0.4}, {"max", 0.6}}), {a})[0], clamped, "clamp");
    clamped.clear();
    for (double v : a.Values()) clamped.push_back(std::min(v, 0.1));
    ExpectClose(MustRun("clamp", MakeAttrs({{"max", 0.1}}), {a})[0], clamped, "clamp max only");
  }
  // NaN propagates through maximum and clamp; integers clamp exactly.
  Tensor nan = Make(DType::kFloat32, {2}, {std::nan(""), 1.0});
  Tensor one = Make(DType::kFloat32, {2}, {0.0, std::nan("")});
  EXPECT_TRUE(std::isnan(MustRun("maximum", {}, {nan, one})[0].Get(0)));
  EXPECT_TRUE(std::isnan(MustRun("maximum", {}, {nan, one})[0].Get(1)));
  EXPECT_TRUE(std::isnan(MustRun("clamp", MakeAttrs({{"min", 0.0}}), {nan})[0].Get(0)));
  Tensor ints = Make(DType::kInt64, {4}, {-9, -1, 3, 12});
  ExpectClose(MustRun("clamp", MakeAttrs({{"min", int64_t{-2}}, {"max", int64_t{5}}}), {ints})[0], {-2, -1, 3, 5},
              "clamp int64");
  // A float bound on an integer tensor would promote in PyTorch: refused.
  EXPECT_FALSE(RunOp("clamp", MakeAttrs({{"min", 0.5}}), {ints}).ok());
}

TEST_F(SequenceKernelTest, AdamWStepFromPointwiseOps) {
  // One AdamW step through lerp/addcmul/addcdiv/pow/sqrt, against the
  // update written out in double.
  const double lr = 1e-2, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.01;
  const int64_t step = 3;
  Tensor p = Random(DType::kFloat64, {6, 5}), g = Random(DType::kFloat64, {6, 5});
  Tensor m = Random(DType::kFloat64, {6, 5}, -0.1, 0.1), v = Random(DType::kFloat64, {6, 5}, 0.0, 0.01);
  Tensor decayed = MustRun("mul.Scalar", MakeAttrs({{"other", 1 - lr * wd}}), {p})[0];
  Tensor m1 = MustRun("lerp.Scalar", MakeAttrs({{"weight", 1 - beta1}}), {m, g})[0];
  Tensor v_scaled = MustRun("mul.Scalar", MakeAttrs({{"other", beta2}}), {v})[0];
  Tensor v1 = MustRun("addcmul", MakeAttrs({{"value", 1 - beta2}}), {v_scaled, g, g})[0];
  const double bias1 = 1 - std::pow(beta1, step), bias2 = 1 - std::pow(beta2, step);
  Tensor denom = MustRun("sqrt", {}, {v1})[0];
  denom = MustRun("div.Scalar", MakeAttrs({{"other", std::sqrt(bias2)}}), {denom})[0];
  denom = MustRun("add.Scalar", MakeAttrs({{"other", eps}}), {denom})[0];
  Tensor p1 = MustRun("addcdiv", MakeAttrs({{"value", -lr / bias1}}), {decayed, m1, denom})[0];
  std::vector<double> expected;
  for (int64_t i = 0; i < p.numel(); ++i) {
    const double mi = beta1 * m.Get(i) + (1 - beta1) * g.Get(i);
    const double vi = beta2 * v.Get(i) + (1 - beta2) * g.Get(i) * g.Get(i);
    const double update = (mi / bias1) / (std::sqrt(vi) / std::sqrt(bias2) + eps);
    expected.push_back(p.Get(i) * (1 - lr * wd) - lr * update);
  }
  ExpectClose(p1, expected, "AdamW step", 0.0, 1e-12);
}

TEST_F(SequenceKernelTest, NativeDropoutIsSeededAndScaled) {
  const double p = 0.3;
  Tensor x = Random(DType::kFloat32, {64, 257});
  Tensor seed = Make(DType::kInt64, {}, {12345});
  const Attrs attrs = MakeAttrs({{"p", p}, {"train", true}, {"seed", int64_t{7}}});
  std::vector<Tensor> a = MustRun("native_dropout", attrs, {x, seed});
  std::vector<Tensor> b = MustRun("native_dropout", attrs, {x, seed});
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[1].type.dtype, DType::kBool);
  EXPECT_EQ(a[0].storage, b[0].storage);  // reproducible from the seed
  EXPECT_EQ(a[1].storage, b[1].storage);
  int64_t kept = 0;
  std::vector<double> expected;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool keep = a[1].Get(i) != 0;
    kept += keep;
    expected.push_back(keep ? x.Get(i) / (1 - p) : 0.0);
  }
  ExpectClose(a[0], expected, "dropout output", 1e-6);
  // 16448 Bernoulli(0.7) draws: the kept fraction is within 5 sigma.
  const double n = static_cast<double>(x.numel()), sigma = std::sqrt(n * p * (1 - p));
  EXPECT_NEAR(static_cast<double>(kept), n * (1 - p), 5 * sigma);
  // Another per-iteration seed gives another mask.
  Tensor other_seed = Make(DType::kInt64, {}, {12346});
  EXPECT_NE(MustRun("native_dropout", attrs, {x, other_seed})[1].storage, a[1].storage);
  // Eval mode and the extremes.
  std::vector<Tensor> eval = MustRun("native_dropout", MakeAttrs({{"p", p}, {"train", false}}), {x});
  ExpectClose(eval[0], x.Values(), "dropout eval", 0.0);
  ExpectClose(eval[1], std::vector<double>(x.numel(), 1.0), "dropout eval mask");
  ExpectClose(MustRun("native_dropout", MakeAttrs({{"p", 1.0}}), {x})[0], std::vector<double>(x.numel(), 0.0),
              "dropout p=1");
  ExpectClose(MustRun("native_dropout", MakeAttrs({{"p", 0.0}}), {x})[0], x.Values(), "dropout p=0", 0.0);
  // The backward is grad * mask * scale.
  Tensor grad = Random(DType::kFloat32, {64, 257});
  Tensor back = MustRun("native_dropout_backward", MakeAttrs({{"scale", 1 / (1 - p)}}), {grad, a[1]})[0];
  expected.clear();
  for (int64_t i = 0; i < x.numel(); ++i) expected.push_back(a[1].Get(i) != 0 ? grad.Get(i) / (1 - p) : 0.0);
  ExpectClose(back, expected, "dropout backward", 1e-6);
}

// ---- comparisons ----

TEST_F(SequenceKernelTest, ComparisonsWhereMaskedFillAny) {
  struct Cmp {
    std::string name;
    std::function<bool(double, double)> f;
  };
  const std::vector<Cmp> cmps = {
      {"eq", [](double a, double b) { return a == b; }}, {"ne", [](double a, double b) { return a != b; }},
      {"lt", [](double a, double b) { return a < b; }},  {"le", [](double a, double b) { return a <= b; }},
      {"gt", [](double a, double b) { return a > b; }},  {"ge", [](double a, double b) { return a >= b; }}};
  const Shape out_shape = {3, 4};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    // Small integers make ties likely.
    Tensor a({dtype, {3, 4}}), b({dtype, {4}});
    std::uniform_int_distribution<int> small(-2, 2);
    for (int64_t i = 0; i < a.numel(); ++i) a.Set(i, small(rng_));
    for (int64_t i = 0; i < b.numel(); ++i) b.Set(i, small(rng_));
    for (const Cmp& c : cmps) {
      std::vector<double> expected(12), expected_scalar(12);
      for (int64_t i = 0; i < 12; ++i) {
        const auto index = Unravel(i, out_shape);
        expected[i] = c.f(a.Get(i), b.Get(Source(index, {4})));
        expected_scalar[i] = c.f(a.Get(i), 1.0);
      }
      ExpectClose(MustRun(c.name + ".Tensor", {}, {a, b})[0], expected, c.name + ".Tensor");
      ExpectClose(MustRun(c.name + ".Scalar", MakeAttrs({{"other", int64_t{1}}}), {a})[0], expected_scalar,
                  c.name + ".Scalar");
    }
  }
  // A float number against an integer tensor compares as float.
  Tensor labels = Make(DType::kInt64, {3}, {0, 1, 2});
  ExpectClose(MustRun("le.Scalar", MakeAttrs({{"other", 0.5}}), {labels})[0], {1, 0, 0}, "le.Scalar 0.5");
  // where.self with a rank-0 int64 operand, as the nll decomposition uses.
  Tensor cond = RandomBool({2, 3});
  Tensor target = RandomIndices({2, 3}, -5, 5);
  Tensor zero = Make(DType::kInt64, {}, {0});
  std::vector<double> expected;
  for (int64_t i = 0; i < 6; ++i) expected.push_back(cond.Get(i) != 0 ? target.Get(i) : 0.0);
  ExpectClose(MustRun("where.self", {}, {cond, target, zero})[0], expected, "where.self");
  // where.self broadcasting all three.
  Tensor c2 = RandomBool({4, 1}), x = Random(DType::kFloat32, {1, 5}), y = Random(DType::kFloat32, {4, 5});
  expected.clear();
  for (int64_t i = 0; i < 20; ++i) {
    const auto index = Unravel(i, {4, 5});
    expected.push_back(c2.Get(index[0]) != 0 ? x.Get(index[1]) : y.Get(i));
  }
  ExpectClose(MustRun("where.self", {}, {c2, x, y})[0], expected, "where.self broadcast");
  // masked_fill: a [L, S] mask over [B, L, S] scores.
  Tensor scores = Random(DType::kFloat32, {2, 3, 4});
  Tensor mask = RandomBool({3, 4});
  expected.clear();
  for (int64_t i = 0; i < 24; ++i) expected.push_back(mask.Get(i % 12) != 0 ? -1e9 : scores.Get(i));
  ExpectClose(MustRun("masked_fill.Scalar", MakeAttrs({{"value", -1e9}}), {scores, mask})[0], expected,
              "masked_fill.Scalar");
  ExpectClose(MustRun("masked_fill.Tensor", {}, {scores, mask, Make(DType::kFloat64, {}, {-1e9})})[0], expected,
              "masked_fill.Tensor");
  // logical_not and any.
  Tensor v = Make(DType::kFloat32, {2, 3}, {0, 0, 0, 0, 2, 0});
  ExpectClose(MustRun("logical_not", {}, {v})[0], {1, 1, 1, 1, 0, 1}, "logical_not");
  ExpectClose(MustRun("any.dim", MakeAttrs({{"dim", int64_t{1}}}), {v})[0], {0, 1}, "any.dim 1");
  ExpectClose(MustRun("any.dim", MakeAttrs({{"dim", int64_t{0}}, {"keepdim", true}}), {v})[0], {0, 1, 0}, "any.dim 0");
  ExpectClose(MustRun("any", {}, {v})[0], {1}, "any");
  EXPECT_EQ(MustRun("any.dim", MakeAttrs({{"dim", int64_t{0}}, {"keepdim", true}}), {v})[0].type.shape, (Shape{1, 3}));
}

// ---- indexing ----

TEST_F(SequenceKernelTest, EmbeddingAndItsBackward) {
  const int64_t vocab = 50, width = 7;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Tensor weight = Random(dtype, {vocab, width});
    Tensor ids = RandomIndices({5, 6}, 0, vocab);
    ids.Set(3, 4);
    ids.Set(4, 4);  // a repeated id accumulates in the backward
    Tensor out = MustRun("embedding", {}, {weight, ids})[0];
    ASSERT_EQ(out.type.shape, (Shape{5, 6, width}));
    std::vector<double> expected;
    for (int64_t n = 0; n < 30; ++n) {
      for (int64_t c = 0; c < width; ++c) expected.push_back(weight.Get(static_cast<int64_t>(ids.Get(n)) * width + c));
    }
    ExpectClose(out, expected, "embedding", 0.0, 0.0);
    // Backward: sums by id; padding_idx's row stays zero.
    Tensor grad = Random(dtype, {5, 6, width});
    const int64_t padding = static_cast<int64_t>(ids.Get(0));
    Tensor back = MustRun("embedding_dense_backward", MakeAttrs({{"num_weights", vocab}, {"padding_idx", padding}}),
                          {grad, ids})[0];
    std::vector<double> sums(vocab * width, 0.0);
    for (int64_t n = 0; n < 30; ++n) {
      const int64_t id = static_cast<int64_t>(ids.Get(n));
      if (id == padding) continue;
      for (int64_t c = 0; c < width; ++c) sums[id * width + c] += grad.Get(n * width + c);
    }
    ExpectClose(back, sums, "embedding_dense_backward");
  }
  // The backward is the gradient of the forward (float64 finite differences).
  Tensor weight = Random(DType::kFloat64, {9, 3});
  Tensor ids = Make(DType::kInt64, {4}, {2, 8, 2, 0});
  Tensor g = Random(DType::kFloat64, {4, 3});
  Tensor back = MustRun("embedding_dense_backward", MakeAttrs({{"num_weights", int64_t{9}}}), {g, ids})[0];
  auto f = [&](const std::vector<Tensor>& in) { return MustRun("embedding", {}, {in[0], ids})[0].Values(); };
  ExpectGradient(back, NumericGradient(f, {weight}, 0, g.Values()), "embedding gradient");
}

TEST_F(SequenceKernelTest, BadIndicesAreInvalidArgument) {
  Tensor weight = Random(DType::kFloat32, {10, 4});
  Tensor ids = Make(DType::kInt64, {3}, {1, 10, 2});
  auto status = RunOp("embedding", {}, {weight, ids}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("embedding"), HasSubstr("10"), HasSubstr("[0, 10)")));
  Tensor negative = Make(DType::kInt64, {3}, {1, -1, 2});
  EXPECT_EQ(RunOp("embedding", {}, {weight, negative}).status().code(), absl::StatusCode::kInvalidArgument);
  Tensor grad = Random(DType::kFloat32, {3, 4});
  EXPECT_EQ(RunOp("embedding_dense_backward", MakeAttrs({{"num_weights", int64_t{10}}}), {grad, ids}).status().code(),
            absl::StatusCode::kInvalidArgument);
  Tensor self = Random(DType::kFloat32, {3, 5});
  Tensor index = Make(DType::kInt64, {3, 1}, {0, 5, 1});
  EXPECT_EQ(RunOp("gather", MakeAttrs({{"dim", int64_t{1}}}), {self, index}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunOp("scatter.value", MakeAttrs({{"dim", int64_t{1}}, {"value", 1.0}}), {self, index}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RunOp("index_select", MakeAttrs({{"dim", int64_t{0}}}), {self, Make(DType::kInt64, {2}, {0, 3})}).status().code(),
      absl::StatusCode::kInvalidArgument);
  Tensor rows = Make(DType::kInt64, {2}, {0, -4});  // -4 is outside [-3, 3)
  EXPECT_EQ(RunOp("index_put", {}, {self, rows, Random(DType::kFloat32, {2, 5})}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SequenceKernelTest, GatherScatterIndexSelect) {
  const Shape shape = {4, 6};
  for (int dim : {0, 1}) {
    Tensor self = Random(DType::kFloat64, shape);
    const Shape index_shape = {3, 4};
    Tensor index = RandomIndices(index_shape, 0, shape[dim]);
    Tensor out = MustRun("gather", MakeAttrs({{"dim", int64_t{dim}}}), {self, index})[0];
    std::vector<double> expected;
    for (int64_t i = 0; i < index.numel(); ++i) {
      auto at = Unravel(i, index_shape);
      at[dim] = static_cast<int64_t>(index.Get(i));
      expected.push_back(self.Get(Ravel(at, shape)));
    }
    ExpectClose(out, expected, "gather dim " + std::to_string(dim), 0.0, 0.0);
    // scatter.src with a larger src; scatter.value; a unique index per row so
    // that the result does not depend on the order of writes.
    Tensor unique({DType::kInt64, index_shape});
    for (int64_t i = 0; i < unique.numel(); ++i) {
      const auto at = Unravel(i, index_shape);
      unique.Set(i, static_cast<double>((at[dim] + at[1 - dim]) % shape[dim]));
    }
    Tensor src = Random(DType::kFloat64, {5, 5});
    std::vector<double> scattered = self.Values(), filled = self.Values();
    for (int64_t i = 0; i < unique.numel(); ++i) {
      auto at = Unravel(i, index_shape);
      const double s = src.Get(Ravel(at, {5, 5}));
      at[dim] = static_cast<int64_t>(unique.Get(i));
      scattered[Ravel(at, shape)] = s;
      filled[Ravel(at, shape)] = -3.0;
    }
    ExpectClose(MustRun("scatter.src", MakeAttrs({{"dim", int64_t{dim}}}), {self, unique, src})[0], scattered,
                "scatter.src", 0.0, 0.0);
    ExpectClose(MustRun("scatter.value", MakeAttrs({{"dim", int64_t{dim}}, {"value", -3.0}}), {self, unique},
                        /*in_place=*/true)[0],
                filled, "scatter.value in place", 0.0, 0.0);
    // index_select with repeats.
    Tensor pick = RandomIndices({5}, 0, shape[dim]);
    Shape out_shape = shape;
    out_shape[dim] = 5;
    expected.clear();
    for (int64_t i = 0; i < NumElements(out_shape); ++i) {
      auto at = Unravel(i, out_shape);
      at[dim] = static_cast<int64_t>(pick.Get(at[dim]));
      expected.push_back(self.Get(Ravel(at, shape)));
    }
    ExpectClose(MustRun("index_select", MakeAttrs({{"dim", int64_t{dim}}}), {self, pick})[0], expected, "index_select",
                0.0, 0.0);
  }
}

TEST_F(SequenceKernelTest, IndexPutAccumulatesAndWrapsNegativeIndices) {
  Tensor self = Random(DType::kFloat64, {5, 3, 2});
  // Two index tensors broadcasting to [2, 2]; values broadcast to [2, 2, 2].
  Tensor i0 = Make(DType::kInt64, {2, 1}, {1, -1});
  Tensor i1 = Make(DType::kInt64, {2}, {0, 2});
  Tensor values = Random(DType::kFloat64, {2});
  std::vector<double> expected = self.Values();
  for (int64_t a = 0; a < 2; ++a) {
    for (int64_t b = 0; b < 2; ++b) {
      const int64_t r = a == 0 ? 1 : 4, c = b == 0 ? 0 : 2;
      for (int64_t t = 0; t < 2; ++t) expected[(r * 3 + c) * 2 + t] = values.Get(t);
    }
  }
  ExpectClose(MustRun("index_put", {}, {self, i0, i1, values})[0], expected, "index_put", 0.0, 0.0);
  // accumulate=true with repeated rows: the decomposed embedding backward.
  Tensor zeros = Make(DType::kFloat64, {6, 3}, std::vector<double>(18, 0.0));
  Tensor ids = Make(DType::kInt64, {5}, {2, 0, 2, 5, 2});
  Tensor grad = Random(DType::kFloat64, {5, 3});
  std::vector<double> sums(18, 0.0);
  for (int64_t n = 0; n < 5; ++n) {
    for (int64_t c = 0; c < 3; ++c) sums[static_cast<int64_t>(ids.Get(n)) * 3 + c] += grad.Get(n * 3 + c);
  }
  ExpectClose(MustRun("index_put", MakeAttrs({{"accumulate", true}}), {zeros, ids, grad}, /*in_place=*/true)[0], sums,
              "index_put accumulate");
}

TEST_F(SequenceKernelTest, ArangeAndEmpty) {
  ExpectClose(MustRun("arange.start_step",
                      MakeAttrs({{"start", int64_t{2}}, {"end", int64_t{11}}, {"step", int64_t{3}}}), {})[0],
              {2, 5, 8}, "arange int");
  Tensor f = MustRun("arange.start_step", MakeAttrs({{"start", 0.5}, {"end", 2.0}, {"step", 0.5}}), {})[0];
  EXPECT_EQ(f.type, (TensorType{DType::kFloat32, {3}}));
  ExpectClose(f, {0.5, 1.0, 1.5}, "arange float");
  Tensor down = MustRun("arange.start_step",
                        MakeAttrs({{"start", int64_t{5}}, {"end", int64_t{0}}, {"step", int64_t{-2}}}), {})[0];
  ExpectClose(down, {5, 3, 1}, "arange down");
  EXPECT_EQ(MustRun("arange", MakeAttrs({{"end", int64_t{4}}}), {})[0].type, (TensorType{DType::kInt64, {4}}));
  EXPECT_FALSE(
      RunOp("arange.start_step", MakeAttrs({{"start", int64_t{0}}, {"end", int64_t{3}}, {"step", int64_t{0}}}), {})
          .ok());
  Tensor like = MustRun("empty_like", MakeAttrs({{"dtype", DType::kInt64}}), {Random(DType::kFloat32, {2, 3})})[0];
  EXPECT_EQ(like.type, (TensorType{DType::kInt64, {2, 3}}));
  ExpectClose(like, std::vector<double>(6, 0.0), "empty_like");
  Tensor permuted = MustRun(
      "empty_permuted",
      MakeAttrs({{"size", std::vector<int64_t>{2, 4}}, {"physical_layout", std::vector<int64_t>{1, 0}}}), {})[0];
  ExpectClose(permuted, std::vector<double>(8, 0.0), "empty_permuted");
}

// ---- slicing ----

TEST_F(SequenceKernelTest, SelectSliceAndTheirBackwards) {
  const Shape shape = {3, 7, 4};
  Tensor x = Random(DType::kFloat64, shape);
  for (int64_t index : {int64_t{2}, int64_t{-1}}) {
    Tensor out = MustRun("select.int", MakeAttrs({{"dim", int64_t{1}}, {"index", index}}), {x})[0];
    ASSERT_EQ(out.type.shape, (Shape{3, 4}));
    const int64_t j = index < 0 ? index + 7 : index;
    std::vector<double> expected;
    for (int64_t a = 0; a < 3; ++a) {
      for (int64_t c = 0; c < 4; ++c) expected.push_back(x.Get((a * 7 + j) * 4 + c));
    }
    ExpectClose(out, expected, "select", 0.0, 0.0);
  }
  EXPECT_FALSE(RunOp("select.int", MakeAttrs({{"dim", int64_t{1}}, {"index", int64_t{7}}}), {x}).ok());
  // slice with negative and clamped bounds and a step.
  struct SliceCase {
    Attrs attrs;
    int64_t start, length, step;
  };
  const std::vector<SliceCase> cases = {
      {MakeAttrs({{"dim", int64_t{1}}, {"start", int64_t{1}}, {"end", int64_t{6}}, {"step", int64_t{2}}}), 1, 3, 2},
      {MakeAttrs({{"dim", int64_t{1}}, {"start", int64_t{-3}}}), 4, 3, 1},
      {MakeAttrs({{"dim", int64_t{1}}, {"end", int64_t{100}}, {"step", int64_t{3}}}), 0, 3, 3},
      {MakeAttrs({{"dim", int64_t{1}}, {"start", int64_t{5}}, {"end", int64_t{2}}}), 5, 0, 1},
  };
  for (const SliceCase& c : cases) {
    Tensor out = MustRun("slice.Tensor", c.attrs, {x})[0];
    ASSERT_EQ(out.type.shape, (Shape{3, c.length, 4}));
    std::vector<double> expected;
    for (int64_t a = 0; a < 3; ++a) {
      for (int64_t j = 0; j < c.length; ++j) {
        for (int64_t e = 0; e < 4; ++e) expected.push_back(x.Get((a * 7 + c.start + j * c.step) * 4 + e));
      }
    }
    ExpectClose(out, expected, "slice", 0.0, 0.0);
  }
  // The backwards are the gradients of the forwards.
  Attrs sel = MakeAttrs({{"dim", int64_t{1}}, {"index", int64_t{3}}, {"input_sizes", std::vector<int64_t>(shape)}});
  Tensor g = Random(DType::kFloat64, {3, 4});
  ExpectGradient(MustRun("select_backward", sel, {g})[0],
                 NumericGradient(Forward("select.int", sel), {x}, 0, g.Values()), "select_backward");
  Attrs sl = MakeAttrs({{"dim", int64_t{1}},
                        {"start", int64_t{1}},
                        {"end", int64_t{6}},
                        {"step", int64_t{2}},
                        {"input_sizes", std::vector<int64_t>(shape)}});
  Tensor g2 = Random(DType::kFloat64, {3, 3, 4});
  ExpectGradient(MustRun("slice_backward", sl, {g2})[0],
                 NumericGradient(Forward("slice.Tensor", sl), {x}, 0, g2.Values()), "slice_backward");
}

TEST_F(SequenceKernelTest, CatStackSplitUnbind) {
  Tensor a = Random(DType::kFloat32, {2, 3, 4}), b = Random(DType::kFloat32, {2, 1, 4});
  Tensor c = Random(DType::kFloat32, {2, 2, 4});
  Tensor empty({DType::kFloat32, {0}});
  Tensor cat = MustRun("cat", MakeAttrs({{"dim", int64_t{-2}}}), {a, empty, b, c})[0];
  ASSERT_EQ(cat.type.shape, (Shape{2, 6, 4}));
  std::vector<double> expected;
  for (int64_t o = 0; o < 2; ++o) {
    for (const Tensor* t : {&a, &b, &c}) {
      const int64_t rows = t->type.shape[1];
      for (int64_t i = 0; i < rows * 4; ++i) expected.push_back(t->Get(o * rows * 4 + i));
    }
  }
  ExpectClose(cat, expected, "cat", 0.0);
  // split undoes cat; split_with_sizes too.
  std::vector<Tensor> pieces = MustRun(
      "split_with_sizes", MakeAttrs({{"split_sizes", std::vector<int64_t>{3, 1, 2}}, {"dim", int64_t{1}}}), {cat});
  ASSERT_EQ(pieces.size(), 3u);
  ExpectClose(pieces[0], a.Values(), "split_with_sizes 0", 0.0);
  ExpectClose(pieces[1], b.Values(), "split_with_sizes 1", 0.0);
  ExpectClose(pieces[2], c.Values(), "split_with_sizes 2", 0.0);
  std::vector<Tensor> split =
      MustRun("split.Tensor", MakeAttrs({{"split_size", int64_t{4}}, {"dim", int64_t{1}}}), {cat});
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[1].type.shape, (Shape{2, 2, 4}));
  ExpectClose(split[1], c.Values(), "split tail", 0.0);
  // stack at a middle dim; unbind undoes it.
  Tensor stacked = MustRun("stack", MakeAttrs({{"dim", int64_t{1}}}), {a, a, a})[0];
  ASSERT_EQ(stacked.type.shape, (Shape{2, 3, 3, 4}));
  expected.clear();
  for (int64_t o = 0; o < 2; ++o) {
    for (int s = 0; s < 3; ++s) {
      for (int64_t i = 0; i < 12; ++i) expected.push_back(a.Get(o * 12 + i));
    }
  }
  ExpectClose(stacked, expected, "stack", 0.0);
  std::vector<Tensor> unbound = MustRun("unbind.int", MakeAttrs({{"dim", int64_t{2}}}), {a});
  ASSERT_EQ(unbound.size(), 4u);
  for (int64_t k = 0; k < 4; ++k) {
    expected.clear();
    for (int64_t i = 0; i < 6; ++i) expected.push_back(a.Get(i * 4 + k));
    ExpectClose(unbound[k], expected, "unbind " + std::to_string(k), 0.0);
  }
  // squeeze.dims drops only size-1 dims among those named.
  EXPECT_EQ(MustRun("squeeze.dims", MakeAttrs({{"dim", std::vector<int64_t>{0, 1}}}), {b})[0].type.shape,
            (Shape{2, 4}));
  EXPECT_EQ(MustRun("squeeze", {}, {Random(DType::kFloat32, {1, 3, 1})})[0].type.shape, (Shape{3}));
}

void SetSpec(v1::TensorSpec* spec, const std::string& name, const Shape& shape) {
  spec->set_name(name);
  spec->set_dtype(v1::FLOAT32);
  for (int64_t d : shape) spec->add_shape(d);
}

// split's output count follows its attributes: a node must name exactly
// that many outputs.
TEST(SequenceGraphTest, VariableOutputCounts) {
  google::protobuf::RepeatedPtrField<v1::Tensor> persistent;
  for (int outputs : {3, 2}) {
    v1::Graph g;
    SetSpec(g.add_feeds(), "x", {5, 2});
    v1::Node* node = g.add_nodes();
    node->set_op("split.Tensor");
    node->add_inputs("x");
    for (int i = 0; i < outputs; ++i) node->add_outputs("piece" + std::to_string(i));
    (*node->mutable_attrs())["split_size"].set_i(2);
    auto built = BuildGraph(g, persistent);
    if (outputs == 3) {
      ASSERT_TRUE(built.ok()) << built.status();
      EXPECT_EQ(built->values[built->Find("piece2")].type.shape, (Shape{1, 2}));
    } else {
      EXPECT_THAT(built.status().message(), HasSubstr("defines 3 outputs"));
    }
  }
}

}  // namespace
}  // namespace tandem::seq_test
