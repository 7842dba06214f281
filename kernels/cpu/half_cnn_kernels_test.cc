// The CNN ops (convolution, batch norm, max / average / adaptive pooling and
// their backwards) in bfloat16 and float16 on the CPU kernels, against
// float64 computations written here on the same 16-bit inputs, on fresh
// random data and shapes (the seed is printed; TANDEM_TEST_SEED replays a
// run).
//
// Bounds: the CPU kernels run a 16-bit op in double on exact widenings of
// its inputs and round each result once to float32 and then to 16 bits, so
// every element lies within one rounding of the float64 value:
// |out - ref| <= (u + 2^-23) |ref| + slack, u = 2^-8 (bfloat16) or 2^-11
// (float16), with an absolute slack of 2^-24 (float16's subnormal spacing
// near zero; double's own error under cancellation is far below it). A
// kernel that rounded its sums or statistics to 16 bits on the way fails
// these bounds. float32 outputs (batch norm's saved statistics, a mixed
// batch norm's parameters' gradients and running statistics) are within
// 2^-23 relative; max pooling's values and indices are exact.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "kernels/cpu/half_test_util.h"
#include "kernels/cpu/run_op_test_util.h"
#include "kernels/half.h"

namespace tandem {
namespace {

using half_test::Get;
using half_test::HostTensor;
using half_test::Make;
using half_test::MustRun;
using half_test::UnitRoundoff;
using half_test::Values;

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// Every element of `out` (of `type`) within one rounding of `ref` (see the
// file comment): 16-bit floats within (u + 2^-23) relative, float32 within
// 2^-23, plus 2^-24 absolute. NaN never passes.
::testing::AssertionResult WithinOneRounding(const HostTensor& out, const std::vector<double>& ref,
                                             const TensorType& type) {
  if (!(out.type == type)) {
    return ::testing::AssertionFailure() << "type " << out.type.ToString() << ", expected " << type.ToString();
  }
  if (out.numel() != static_cast<int64_t>(ref.size())) {
    return ::testing::AssertionFailure() << out.numel() << " elements, reference has " << ref.size();
  }
  const double relative = (IsHalf(type.dtype) ? UnitRoundoff(type.dtype) : 0.0) + std::ldexp(1.0, -23);
  const double slack = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double o = Get(out, i);
    const double r = ref[static_cast<size_t>(i)];
    if (!(std::fabs(o - r) <= relative * std::fabs(r) + slack)) {  // NaN fails here
      return ::testing::AssertionFailure()
             << "element " << i << " is " << o << ", float64 reference " << r << " (bound " << relative << " relative)";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult Exactly(const HostTensor& out, const std::vector<double>& ref, const TensorType& type) {
  if (!(out.type == type)) {
    return ::testing::AssertionFailure() << "type " << out.type.ToString() << ", expected " << type.ToString();
  }
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (!(Get(out, i) == ref[static_cast<size_t>(i)])) {
      return ::testing::AssertionFailure()
             << "element " << i << " is " << Get(out, i) << ", expected " << ref[static_cast<size_t>(i)];
    }
  }
  return ::testing::AssertionSuccess();
}

class HalfCnnTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }

  int64_t Dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }

  // Values uniform in [lo, hi), stored as `dtype` (so the float64
  // references see exactly the kernel's inputs).
  HostTensor Random(DType dtype, Shape shape, double lo = -1.0, double hi = 1.0) {
    return half_test::RandomTensor(rng_, dtype, std::move(shape), lo, hi);
  }

  std::mt19937_64 rng_{half_test::TestSeed("half_cnn_kernels_test") + static_cast<uint64_t>(GetParam())};
};

// ---- convolution ----

struct ConvCase {
  std::string name;
  int64_t c, o, kh, kw;
  int64_t stride[2], padding[2], dilation[2];
  int64_t groups;
  bool bias;
};

struct ConvDims {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
};

Attrs ConvAttrs(const ConvCase& k) {
  return MakeAttrs({{"stride", std::vector<int64_t>{k.stride[0], k.stride[1]}},
                    {"padding", std::vector<int64_t>{k.padding[0], k.padding[1]}},
                    {"dilation", std::vector<int64_t>{k.dilation[0], k.dilation[1]}},
                    {"transposed", false},
                    {"output_padding", std::vector<int64_t>{0, 0}},
                    {"groups", k.groups}});
}

// Input plane position of output `o`'s tap `t` along one dim.
int64_t TapAt(int64_t o, int64_t t, int64_t stride, int64_t pad, int64_t dilation) {
  return o * stride - pad + t * dilation;
}

// Calls visit(y_index, w_index, x_index) for every product term w * x of
// the convolution, in order (output elements in turn, each one's terms by
// input channel, then tap row and column), skipping taps in the padding.
template <typename Visit>
void ForEachConvTerm(const ConvCase& k, const ConvDims& d, Visit visit) {
  const int64_t cg = d.c / k.groups, og = d.o / k.groups;
  for (int64_t n = 0; n < d.n; ++n) {
    for (int64_t o = 0; o < d.o; ++o) {
      const int64_t group = o / og;
      for (int64_t oy = 0; oy < d.oh; ++oy) {
        for (int64_t ox = 0; ox < d.ow; ++ox) {
          const int64_t yi = ((n * d.o + o) * d.oh + oy) * d.ow + ox;
          for (int64_t ci = 0; ci < cg; ++ci) {
            const int64_t c = group * cg + ci;
            for (int64_t i = 0; i < d.kh; ++i) {
              const int64_t iy = TapAt(oy, i, k.stride[0], k.padding[0], k.dilation[0]);
              if (iy < 0 || iy >= d.h) continue;
              for (int64_t j = 0; j < d.kw; ++j) {
                const int64_t ix = TapAt(ox, j, k.stride[1], k.padding[1], k.dilation[1]);
                if (ix < 0 || ix >= d.w) continue;
                visit(yi, ((o * cg + ci) * d.kh + i) * d.kw + j, ((n * d.c + c) * d.h + iy) * d.w + ix);
              }
            }
          }
        }
      }
    }
  }
}

// y = conv(x, w) + bias in float64 (bias may be null).
std::vector<double> ConvForwardRef(const ConvCase& k, const ConvDims& d, const HostTensor& x, const HostTensor& w,
                                   const HostTensor* bias) {
  std::vector<double> y(static_cast<size_t>(d.n * d.o * d.oh * d.ow), 0.0);
  if (bias != nullptr) {
    for (size_t yi = 0; yi < y.size(); ++yi) y[yi] = Get(*bias, static_cast<int64_t>(yi) / (d.oh * d.ow) % d.o);
  }
  ForEachConvTerm(k, d,
                  [&](int64_t yi, int64_t wi, int64_t xi) { y[static_cast<size_t>(yi)] += Get(w, wi) * Get(x, xi); });
  return y;
}

struct ConvGrads {
  std::vector<double> input, weight, bias;
};

// The three gradients of a convolution from grad_output `gy`, in float64.
ConvGrads ConvBackwardRef(const ConvCase& k, const ConvDims& d, const HostTensor& gy, const HostTensor& x,
                          const HostTensor& w) {
  ConvGrads g;
  g.input.assign(static_cast<size_t>(d.n * d.c * d.h * d.w), 0.0);
  g.weight.assign(static_cast<size_t>(d.o * (d.c / k.groups) * d.kh * d.kw), 0.0);
  g.bias.assign(static_cast<size_t>(d.o), 0.0);
  for (int64_t yi = 0; yi < gy.numel(); ++yi) g.bias[static_cast<size_t>(yi / (d.oh * d.ow) % d.o)] += Get(gy, yi);
  ForEachConvTerm(k, d, [&](int64_t yi, int64_t wi, int64_t xi) {
    const double dy = Get(gy, yi);
    g.input[static_cast<size_t>(xi)] += Get(w, wi) * dy;
    g.weight[static_cast<size_t>(wi)] += Get(x, xi) * dy;
  });
  return g;
}

TEST_P(HalfCnnTest, ConvolutionVariantsAndTheirGradients) {
  const std::vector<ConvCase> cases = {{"3x3 pad 1", 4, 6, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, false},
                                       {"3x3 stride 2 pad 1 bias", 5, 8, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, true},
                                       {"7x7 stride 2 pad 3 (a stem)", 3, 4, 7, 7, {2, 2}, {3, 3}, {1, 1}, 1, false},
                                       {"1x1 stride 2 (a downsample)", 8, 6, 1, 1, {2, 2}, {0, 0}, {1, 1}, 1, false},
                                       {"dilated 2 pad 2 bias", 3, 5, 3, 3, {1, 1}, {2, 2}, {2, 2}, 1, true},
                                       {"grouped 3 bias", 6, 9, 3, 3, {1, 1}, {1, 1}, {1, 1}, 3, true},
                                       {"depthwise stride 2", 4, 4, 3, 3, {2, 2}, {1, 1}, {1, 1}, 4, false},
                                       {"asymmetric 3x1 stride (2, 1) pad (1, 0) dilation (1, 2) groups 2",
                                        4,
                                        6,
                                        3,
                                        2,
                                        {2, 1},
                                        {1, 0},
                                        {1, 2},
                                        2,
                                        true}};
  for (const ConvCase& k : cases) {
    ConvDims d;
    d.n = Dim(1, 3);
    d.c = k.c;
    d.o = k.o;
    d.kh = k.kh;
    d.kw = k.kw;
    const int64_t span_h = k.dilation[0] * (k.kh - 1) + 1 - 2 * k.padding[0];
    const int64_t span_w = k.dilation[1] * (k.kw - 1) + 1 - 2 * k.padding[1];
    d.h = Dim(std::max<int64_t>(1, span_h), std::max<int64_t>(1, span_h) + 9);
    d.w = Dim(std::max<int64_t>(1, span_w), std::max<int64_t>(1, span_w) + 9);
    d.oh = (d.h + 2 * k.padding[0] - k.dilation[0] * (k.kh - 1) - 1) / k.stride[0] + 1;
    d.ow = (d.w + 2 * k.padding[1] - k.dilation[1] * (k.kw - 1) - 1) / k.stride[1] + 1;
    SCOPED_TRACE(::testing::Message() << k.name << ": input [" << d.n << ", " << d.c << ", " << d.h << ", " << d.w
                                      << "]");
    const HostTensor x = Random(dtype(), {d.n, d.c, d.h, d.w});
    const HostTensor w = Random(dtype(), {d.o, d.c / k.groups, d.kh, d.kw});
    const HostTensor bias = Random(dtype(), {d.o});
    std::vector<HostTensor> inputs = {x, w};
    if (k.bias) inputs.push_back(bias);
    Attrs attrs = ConvAttrs(k);
    std::vector<HostTensor> y = MustRun("convolution", attrs, inputs);
    ASSERT_EQ(y.size(), 1u);
    const TensorType out_type{dtype(), {d.n, d.o, d.oh, d.ow}};
    EXPECT_TRUE(WithinOneRounding(y[0], ConvForwardRef(k, d, x, w, k.bias ? &bias : nullptr), out_type));

    const HostTensor gy = Random(dtype(), {d.n, d.o, d.oh, d.ow});
    const ConvGrads ref = ConvBackwardRef(k, d, gy, x, w);
    for (const std::vector<int64_t>& mask :
         {std::vector<int64_t>{1, 1, 1}, std::vector<int64_t>{0, 1, 0}, std::vector<int64_t>{1, 0, 0}}) {
      SCOPED_TRACE(::testing::Message() << "output_mask " << mask[0] << mask[1] << mask[2]);
      Attrs back = attrs;
      back.Set("output_mask", mask);
      if (mask[2] != 0) back.Set("bias_sizes", std::vector<int64_t>{d.o});
      std::vector<HostTensor> grads = MustRun("convolution_backward", back, {gy, x, w});
      ASSERT_EQ(grads.size(), 3u);
      const TensorType types[3] = {x.type, w.type, TensorType{dtype(), {d.o}}};
      const std::vector<double>* refs[3] = {&ref.input, &ref.weight, &ref.bias};
      for (int i = 0; i < 3; ++i) {
        if (mask[static_cast<size_t>(i)] != 0) {
          EXPECT_TRUE(WithinOneRounding(grads[static_cast<size_t>(i)], *refs[i], types[i])) << "gradient " << i;
        } else {
          EXPECT_EQ(grads[static_cast<size_t>(i)].type, (TensorType{dtype(), {0}})) << "gradient " << i;
        }
      }
    }
  }
}

// ---- batch norm ----

// Per-channel statistics of x [N, C, *] in float64.
struct ChannelStats {
  std::vector<double> mean, var;  // var: biased
  int64_t count = 0;
};

ChannelStats StatsOf(const HostTensor& x) {
  const Shape& s = x.type.shape;
  const int64_t n = s[0], c = s[1], inner = x.numel() / (n * c);
  ChannelStats st;
  st.count = n * inner;
  st.mean.assign(static_cast<size_t>(c), 0.0);
  st.var.assign(static_cast<size_t>(c), 0.0);
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t i = 0; i < inner; ++i) sum += Get(x, (b * c + ch) * inner + i);
    }
    const double mean = sum / static_cast<double>(st.count);
    double m2 = 0;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t i = 0; i < inner; ++i) m2 += std::pow(Get(x, (b * c + ch) * inner + i) - mean, 2);
    }
    st.mean[static_cast<size_t>(ch)] = mean;
    st.var[static_cast<size_t>(ch)] = m2 / static_cast<double>(st.count);
  }
  return st;
}

// out = (x - mean) * invstd * w + b per channel, in float64.
std::vector<double> NormalizeRef(const HostTensor& x, const std::vector<double>& mean,
                                 const std::vector<double>& invstd, const HostTensor& w, const HostTensor& b) {
  const Shape& s = x.type.shape;
  const int64_t n = s[0], c = s[1], inner = x.numel() / (n * c);
  std::vector<double> out(static_cast<size_t>(x.numel()));
  for (int64_t bi = 0; bi < n; ++bi) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const size_t k = static_cast<size_t>(ch);
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = (bi * c + ch) * inner + i;
        out[static_cast<size_t>(at)] = (Get(x, at) - mean[k]) * invstd[k] * Get(w, ch) + Get(b, ch);
      }
    }
  }
  return out;
}

struct BatchNormGrads {
  std::vector<double> input, weight, bias;
};

// native_batch_norm_backward in float64 from the given mean and invstd
// (training: the saved statistics; eval: running_mean and the invstd of
// running_var).
BatchNormGrads BatchNormBackwardRef(bool train, const HostTensor& dy, const HostTensor& x, const HostTensor& w,
                                    const std::vector<double>& mean, const std::vector<double>& invstd) {
  const Shape& s = x.type.shape;
  const int64_t n = s[0], c = s[1], inner = x.numel() / (n * c);
  const double count = static_cast<double>(n * inner);
  BatchNormGrads g;
  g.input.assign(static_cast<size_t>(x.numel()), 0.0);
  g.weight.assign(static_cast<size_t>(c), 0.0);
  g.bias.assign(static_cast<size_t>(c), 0.0);
  for (int64_t ch = 0; ch < c; ++ch) {
    const size_t k = static_cast<size_t>(ch);
    double sum_dy = 0, sum_dy_xmu = 0;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = (b * c + ch) * inner + i;
        sum_dy += Get(dy, at);
        sum_dy_xmu += Get(dy, at) * (Get(x, at) - mean[k]);
      }
    }
    g.weight[k] = sum_dy_xmu * invstd[k];
    g.bias[k] = sum_dy;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = (b * c + ch) * inner + i;
        const double scale = invstd[k] * Get(w, ch);
        g.input[static_cast<size_t>(at)] =
            train
                ? (Get(dy, at) - sum_dy / count - (Get(x, at) - mean[k]) * invstd[k] * invstd[k] * sum_dy_xmu / count) *
                      scale
                : Get(dy, at) * scale;
      }
    }
  }
  return g;
}

class HalfBatchNormTest : public HalfCnnTest {
 protected:
  // Shapes of a convolution's output, a linear layer's and a sequence's,
  // with at least two values per channel (training needs them).
  std::vector<Shape> Shapes() {
    return {{Dim(2, 4), Dim(1, 6), Dim(1, 9), Dim(1, 9)}, {Dim(2, 16), Dim(1, 12)}, {Dim(1, 3), Dim(1, 5), Dim(2, 40)}};
  }

  // One forward and its backward, with parameters (weight, bias, running
  // statistics) of `param` dtype, checked against float64.
  void CheckForwardAndBackward(const Shape& shape, DType param, bool training) {
    SCOPED_TRACE(::testing::Message() << ShapeString(shape) << " parameters " << DTypeName(param) << " training "
                                      << training);
    const int64_t c = shape[1];
    const HostTensor x = Random(dtype(), shape);
    const HostTensor w = Random(param, {c}, 0.5, 2.0);
    const HostTensor b = Random(param, {c});
    const HostTensor rm = Random(param, {c});
    const HostTensor rv = Random(param, {c}, 0.5, 2.0);
    const double momentum = 0.1, eps = 1e-5;
    const Attrs attrs = MakeAttrs({{"training", training}, {"momentum", momentum}, {"eps", eps}});
    std::vector<HostTensor> f = MustRun("_native_batch_norm_legit_functional", attrs, {x, w, b, rm, rv});
    ASSERT_EQ(f.size(), 5u);
    std::vector<double> mean(static_cast<size_t>(c)), invstd(static_cast<size_t>(c));
    const Shape saved = training ? Shape{c} : Shape{0};
    const TensorType stats_type{DType::kFloat32, saved};
    if (training) {
      const ChannelStats st = StatsOf(x);
      std::vector<double> new_rm(static_cast<size_t>(c)), new_rv(static_cast<size_t>(c));
      for (size_t k = 0; k < mean.size(); ++k) {
        mean[k] = st.mean[k];
        invstd[k] = 1.0 / std::sqrt(st.var[k] + eps);
        const double n = static_cast<double>(st.count);
        new_rm[k] = (1 - momentum) * Get(rm, static_cast<int64_t>(k)) + momentum * st.mean[k];
        new_rv[k] = (1 - momentum) * Get(rv, static_cast<int64_t>(k)) + momentum * st.var[k] * n / (n - 1);
      }
      EXPECT_TRUE(WithinOneRounding(f[1], mean, stats_type)) << "save_mean";
      EXPECT_TRUE(WithinOneRounding(f[2], invstd, stats_type)) << "save_invstd";
      EXPECT_TRUE(WithinOneRounding(f[3], new_rm, rm.type)) << "new running_mean";
      EXPECT_TRUE(WithinOneRounding(f[4], new_rv, rv.type)) << "new running_var";
    } else {
      for (size_t k = 0; k < mean.size(); ++k) {
        mean[k] = Get(rm, static_cast<int64_t>(k));
        invstd[k] = 1.0 / std::sqrt(Get(rv, static_cast<int64_t>(k)) + eps);
      }
      EXPECT_EQ(f[1].type, stats_type);
      EXPECT_EQ(f[2].type, stats_type);
      EXPECT_TRUE(Exactly(f[3], Values(rm), rm.type)) << "running_mean copied";
      EXPECT_TRUE(Exactly(f[4], Values(rv), rv.type)) << "running_var copied";
    }
    EXPECT_TRUE(WithinOneRounding(f[0], NormalizeRef(x, mean, invstd, w, b), x.type)) << "out";

    // native_batch_norm gives the same three outputs (its running statistics
    // are read, never written).
    std::vector<HostTensor> plain = MustRun("native_batch_norm", attrs, {x, w, b, rm, rv});
    ASSERT_EQ(plain.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(Exactly(plain[i], Values(f[i]), f[i].type)) << "output " << i;

    // The backward from the saved (training) or running (eval) statistics;
    // its reference reads the float32 statistics the kernel reads.
    const HostTensor dy = Random(dtype(), shape);
    std::vector<double> back_mean = mean, back_invstd = invstd;
    if (training) {
      back_mean = Values(f[1]);
      back_invstd = Values(f[2]);
    }
    const BatchNormGrads ref = BatchNormBackwardRef(training, dy, x, w, back_mean, back_invstd);
    for (const std::vector<int64_t>& mask :
         {std::vector<int64_t>{1, 1, 1}, std::vector<int64_t>{1, 0, 0}, std::vector<int64_t>{0, 1, 1}}) {
      SCOPED_TRACE(::testing::Message() << "output_mask " << mask[0] << mask[1] << mask[2]);
      const Attrs back = MakeAttrs({{"train", training}, {"eps", eps}, {"output_mask", mask}});
      std::vector<HostTensor> g = MustRun("native_batch_norm_backward", back, {dy, x, w, rm, rv, f[1], f[2]});
      ASSERT_EQ(g.size(), 3u);
      const TensorType types[3] = {x.type, w.type, w.type};
      const std::vector<double>* refs[3] = {&ref.input, &ref.weight, &ref.bias};
      for (size_t i = 0; i < 3; ++i) {
        if (mask[i] != 0) {
          EXPECT_TRUE(WithinOneRounding(g[i], *refs[i], types[i])) << "gradient " << i;
        } else {
          EXPECT_EQ(g[i].type, (TensorType{types[i].dtype, {0}})) << "gradient " << i;
        }
      }
      if (training) {
        // Without the running statistics (their 5-input form), the same.
        std::vector<HostTensor> g5 = MustRun("native_batch_norm_backward", back, {dy, x, w, f[1], f[2]});
        ASSERT_EQ(g5.size(), 3u);
        for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(Exactly(g5[i], Values(g[i]), g[i].type)) << "gradient " << i;
      }
    }
  }
};

TEST_P(HalfBatchNormTest, TrainingWithSixteenBitParameters) {
  for (const Shape& shape : Shapes()) CheckForwardAndBackward(shape, dtype(), /*training=*/true);
}

TEST_P(HalfBatchNormTest, EvalWithSixteenBitParameters) {
  for (const Shape& shape : Shapes()) CheckForwardAndBackward(shape, dtype(), /*training=*/false);
}

// PyTorch's mixed batch norm: a 16-bit input with float32 weight, bias and
// running statistics (gradients of the parameters in float32).
TEST_P(HalfBatchNormTest, FloatParametersWithSixteenBitInput) {
  for (bool training : {true, false}) {
    for (const Shape& shape : Shapes()) CheckForwardAndBackward(shape, DType::kFloat32, training);
  }
}

// The training forward without running statistics (3 inputs).
TEST_P(HalfBatchNormTest, TrainingWithoutRunningStatistics) {
  const Shape shape = {Dim(2, 5), Dim(1, 7), Dim(1, 6), Dim(1, 6)};
  const int64_t c = shape[1];
  const HostTensor x = Random(dtype(), shape);
  const HostTensor w = Random(dtype(), {c}, 0.5, 2.0);
  const HostTensor b = Random(dtype(), {c});
  std::vector<HostTensor> out =
      MustRun("native_batch_norm", MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-3}}), {x, w, b});
  ASSERT_EQ(out.size(), 3u);
  const ChannelStats st = StatsOf(x);
  std::vector<double> invstd(st.var.size());
  for (size_t k = 0; k < invstd.size(); ++k) invstd[k] = 1.0 / std::sqrt(st.var[k] + 1e-3);
  EXPECT_TRUE(WithinOneRounding(out[0], NormalizeRef(x, st.mean, invstd, w, b), x.type));
  EXPECT_TRUE(WithinOneRounding(out[1], st.mean, TensorType{DType::kFloat32, {c}}));
  EXPECT_TRUE(WithinOneRounding(out[2], invstd, TensorType{DType::kFloat32, {c}}));
}

// ---- pooling ----

struct PoolCase {
  std::string name;
  int64_t kernel[2], stride[2], padding[2], dilation[2];
  bool ceil_mode;
  bool count_include_pad = true;
  int64_t divisor_override = 0;
};

Attrs PoolAttrs(const PoolCase& p, bool max) {
  Attrs attrs = MakeAttrs({{"kernel_size", std::vector<int64_t>{p.kernel[0], p.kernel[1]}},
                           {"stride", std::vector<int64_t>{p.stride[0], p.stride[1]}},
                           {"padding", std::vector<int64_t>{p.padding[0], p.padding[1]}},
                           {"ceil_mode", p.ceil_mode}});
  if (max) {
    attrs.Set("dilation", std::vector<int64_t>{p.dilation[0], p.dilation[1]});
  } else {
    attrs.Set("count_include_pad", p.count_include_pad);
    if (p.divisor_override != 0) attrs.Set("divisor_override", p.divisor_override);
  }
  return attrs;
}

// A pooling input [planes, h, w] (rank 3 or 4) and its output's sizes.
struct PoolDims {
  int64_t planes, h, w, oh, ow;
};

PoolDims DimsOf(const Shape& in, const Shape& out) {
  const size_t r = in.size();
  return {NumElements(in) / (in[r - 2] * in[r - 1]), in[r - 2], in[r - 1], out[r - 2], out[r - 1]};
}

// The reference of one averaging window of plane `pl`, rows [h0, h1) and
// columns [w0, w1) of x: writes ref[at] = sum / divisor and adds the
// window's share of gy[at] to each of its elements' gradient.
void AverageWindow(const HostTensor& x, const HostTensor& gy, const PoolDims& d, int64_t pl, int64_t h0, int64_t h1,
                   int64_t w0, int64_t w1, int64_t at, double divisor, std::vector<double>& ref,
                   std::vector<double>& grad) {
  double sum = 0;
  for (int64_t iy = h0; iy < h1; ++iy) {
    for (int64_t ix = w0; ix < w1; ++ix) {
      sum += Get(x, (pl * d.h + iy) * d.w + ix);
      grad[static_cast<size_t>((pl * d.h + iy) * d.w + ix)] += Get(gy, at) / divisor;
    }
  }
  ref[static_cast<size_t>(at)] = sum / divisor;
}

TEST_P(HalfCnnTest, MaxPoolingAndItsBackward) {
  const std::vector<PoolCase> cases = {{"3x3 s2 p1 (ResNet)", {3, 3}, {2, 2}, {1, 1}, {1, 1}, false},
                                       {"2x2 s2 (VGG)", {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
                                       {"3x2 s(1,2) p(1,0) d(2,1) ceil", {3, 2}, {1, 2}, {1, 0}, {2, 1}, true},
                                       {"overlapping 3x3 s1", {3, 3}, {1, 1}, {1, 1}, {1, 1}, false}};
  for (const PoolCase& p : cases) {
    for (bool batched : {true, false}) {
      const int64_t lo = std::max(p.dilation[0] * (p.kernel[0] - 1) + 1, p.dilation[1] * (p.kernel[1] - 1) + 1);
      Shape shape = {Dim(1, 4), Dim(lo, lo + 12), Dim(lo, lo + 12)};
      if (batched) shape.insert(shape.begin(), Dim(1, 3));
      SCOPED_TRACE(::testing::Message() << p.name << " " << ShapeString(shape));
      const Attrs attrs = PoolAttrs(p, /*max=*/true);
      // Few distinct values, so that windows hold ties (the first one wins).
      std::vector<double> values(static_cast<size_t>(NumElements(shape)));
      for (double& v : values) v = static_cast<double>(Dim(-8, 8)) / 8.0 + (Dim(0, 3) == 0 ? 0.0 : 1e-2 * Dim(0, 99));
      const HostTensor x = Make(dtype(), shape, values);
      std::vector<HostTensor> out = MustRun("max_pool2d_with_indices", attrs, {x});
      ASSERT_EQ(out.size(), 2u);
      const PoolDims d = DimsOf(shape, out[0].type.shape);
      std::vector<double> ref(static_cast<size_t>(d.planes * d.oh * d.ow)), ref_index(ref.size());
      for (int64_t pl = 0; pl < d.planes; ++pl) {
        for (int64_t oy = 0; oy < d.oh; ++oy) {
          for (int64_t ox = 0; ox < d.ow; ++ox) {
            double best = -std::numeric_limits<double>::infinity();
            int64_t best_index = -1;
            for (int64_t i = 0; i < p.kernel[0]; ++i) {
              const int64_t iy = TapAt(oy, i, p.stride[0], p.padding[0], p.dilation[0]);
              if (iy < 0 || iy >= d.h) continue;
              for (int64_t j = 0; j < p.kernel[1]; ++j) {
                const int64_t ix = TapAt(ox, j, p.stride[1], p.padding[1], p.dilation[1]);
                if (ix < 0 || ix >= d.w) continue;
                const double v = Get(x, (pl * d.h + iy) * d.w + ix);
                if (best_index < 0 || v > best) {
                  best = v;
                  best_index = iy * d.w + ix;
                }
              }
            }
            const size_t at = static_cast<size_t>((pl * d.oh + oy) * d.ow + ox);
            ref[at] = best;
            ref_index[at] = static_cast<double>(best_index);
          }
        }
      }
      EXPECT_TRUE(Exactly(out[0], ref, TensorType{dtype(), out[0].type.shape})) << "values";
      EXPECT_TRUE(Exactly(out[1], ref_index, TensorType{DType::kInt64, out[0].type.shape})) << "indices";

      const HostTensor gy = Random(dtype(), out[0].type.shape);
      std::vector<double> grad(static_cast<size_t>(x.numel()), 0.0);
      for (int64_t pl = 0; pl < d.planes; ++pl) {
        for (int64_t k = 0; k < d.oh * d.ow; ++k) {
          const int64_t at = pl * d.oh * d.ow + k;
          grad[static_cast<size_t>(pl * d.h * d.w + static_cast<int64_t>(ref_index[static_cast<size_t>(at)]))] +=
              Get(gy, at);
        }
      }
      std::vector<HostTensor> back = MustRun("max_pool2d_with_indices_backward", attrs, {gy, x, out[1]});
      ASSERT_EQ(back.size(), 1u);
      EXPECT_TRUE(WithinOneRounding(back[0], grad, x.type)) << "grad_input";
    }
  }
}

TEST_P(HalfCnnTest, AveragePoolingAndItsBackward) {
  const std::vector<PoolCase> cases = {{"3x3 s2 p1 ceil, pad counted", {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, true},
                                       {"3x3 s2 p1 ceil, pad not counted", {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false},
                                       {"2x3 s(2, 1) p(1, 1)", {2, 3}, {2, 1}, {1, 1}, {1, 1}, false, true},
                                       {"2x2 s2 divisor 3", {2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true, 3}};
  for (const PoolCase& p : cases) {
    Shape shape = {Dim(1, 3), Dim(1, 4), Dim(p.kernel[0], p.kernel[0] + 12), Dim(p.kernel[1], p.kernel[1] + 12)};
    SCOPED_TRACE(::testing::Message() << p.name << " " << ShapeString(shape));
    const Attrs attrs = PoolAttrs(p, /*max=*/false);
    const HostTensor x = Random(dtype(), shape);
    std::vector<HostTensor> out = MustRun("avg_pool2d", attrs, {x});
    ASSERT_EQ(out.size(), 1u);
    const PoolDims d = DimsOf(shape, out[0].type.shape);
    const HostTensor gy = Random(dtype(), out[0].type.shape);
    std::vector<double> ref(static_cast<size_t>(d.planes * d.oh * d.ow)), grad(static_cast<size_t>(x.numel()), 0.0);
    for (int64_t pl = 0; pl < d.planes; ++pl) {
      for (int64_t oy = 0; oy < d.oh; ++oy) {
        for (int64_t ox = 0; ox < d.ow; ++ox) {
          const int64_t hs = oy * p.stride[0] - p.padding[0], ws = ox * p.stride[1] - p.padding[1];
          const int64_t he = std::min(hs + p.kernel[0], d.h + p.padding[0]);
          const int64_t we = std::min(ws + p.kernel[1], d.w + p.padding[1]);
          const int64_t h0 = std::max<int64_t>(hs, 0), w0 = std::max<int64_t>(ws, 0);
          const int64_t h1 = std::min(he, d.h), w1 = std::min(we, d.w);
          const double divisor = p.divisor_override != 0 ? static_cast<double>(p.divisor_override)
                                 : p.count_include_pad   ? static_cast<double>((he - hs) * (we - ws))
                                                         : static_cast<double>((h1 - h0) * (w1 - w0));
          AverageWindow(x, gy, d, pl, h0, h1, w0, w1, (pl * d.oh + oy) * d.ow + ox, divisor, ref, grad);
        }
      }
    }
    EXPECT_TRUE(WithinOneRounding(out[0], ref, TensorType{dtype(), out[0].type.shape})) << "avg_pool2d";
    std::vector<HostTensor> back = MustRun("avg_pool2d_backward", attrs, {gy, x});
    ASSERT_EQ(back.size(), 1u);
    EXPECT_TRUE(WithinOneRounding(back[0], grad, x.type)) << "avg_pool2d_backward";
  }
}

TEST_P(HalfCnnTest, AdaptiveAveragePoolingAndItsBackward) {
  for (int trial = 0; trial < 4; ++trial) {
    Shape shape = {Dim(1, 3), Dim(1, 5), Dim(1, 15), Dim(1, 15)};
    if (trial == 3) shape.erase(shape.begin());  // [C, H, W]
    const int64_t oh = trial == 0 ? 1 : Dim(1, 7), ow = trial == 0 ? 1 : Dim(1, 7);
    SCOPED_TRACE(::testing::Message() << ShapeString(shape) << " -> " << oh << "x" << ow);
    const HostTensor x = Random(dtype(), shape);
    const Attrs attrs = MakeAttrs({{"output_size", std::vector<int64_t>{oh, ow}}});
    std::vector<HostTensor> out = MustRun("_adaptive_avg_pool2d", attrs, {x});
    ASSERT_EQ(out.size(), 1u);
    const PoolDims d = DimsOf(shape, out[0].type.shape);
    ASSERT_EQ(d.oh, oh);
    ASSERT_EQ(d.ow, ow);
    const HostTensor gy = Random(dtype(), out[0].type.shape);
    std::vector<double> ref(static_cast<size_t>(d.planes * oh * ow)), grad(static_cast<size_t>(x.numel()), 0.0);
    for (int64_t pl = 0; pl < d.planes; ++pl) {
      for (int64_t oy = 0; oy < oh; ++oy) {
        // [floor(o * in / out), ceil((o + 1) * in / out))
        const int64_t h0 = oy * d.h / oh, h1 = ((oy + 1) * d.h + oh - 1) / oh;
        for (int64_t ox = 0; ox < ow; ++ox) {
          const int64_t w0 = ox * d.w / ow, w1 = ((ox + 1) * d.w + ow - 1) / ow;
          const double count = static_cast<double>((h1 - h0) * (w1 - w0));
          AverageWindow(x, gy, d, pl, h0, h1, w0, w1, (pl * oh + oy) * ow + ox, count, ref, grad);
        }
      }
    }
    EXPECT_TRUE(WithinOneRounding(out[0], ref, TensorType{dtype(), out[0].type.shape}));
    std::vector<HostTensor> back = MustRun("_adaptive_avg_pool2d_backward", {}, {gy, x});
    ASSERT_EQ(back.size(), 1u);
    EXPECT_TRUE(WithinOneRounding(back[0], grad, x.type));
  }
}

std::string DTypeParamName(const ::testing::TestParamInfo<DType>& info) { return std::string(DTypeName(info.param)); }

INSTANTIATE_TEST_SUITE_P(SixteenBit, HalfCnnTest, ::testing::Values(DType::kBFloat16, DType::kFloat16), DTypeParamName);
INSTANTIATE_TEST_SUITE_P(SixteenBit, HalfBatchNormTest, ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         DTypeParamName);

}  // namespace
}  // namespace tandem
