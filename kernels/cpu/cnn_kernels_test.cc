// The CNN ops (convolution, pooling, batch norm): registry inference and
// errors; every forward CPU kernel against a direct double-precision
// computation written here (its own index arithmetic, not the kernels'
// helpers); every backward kernel against central finite differences of the
// forward kernel in float64, on random inputs, with stride, padding,
// dilation, groups and ceil-mode cases.
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
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/run_op_test_util.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

// A host tensor of float32, float64 or int64 with 8-byte aligned storage.
struct Tensor {
  TensorType type;
  std::vector<uint64_t> storage;

  Tensor() = default;
  explicit Tensor(TensorType t) : type(std::move(t)), storage(type.bytes() / 8 + 1) {}
  void* data() { return storage.data(); }
  int64_t numel() const { return type.numel(); }
  double at(int64_t i) const {
    switch (type.dtype) {
      case DType::kFloat32:
        return reinterpret_cast<const float*>(storage.data())[i];
      case DType::kFloat64:
        return reinterpret_cast<const double*>(storage.data())[i];
      case DType::kInt64:
        return static_cast<double>(reinterpret_cast<const int64_t*>(storage.data())[i]);
      default:
        ADD_FAILURE() << "dtype not handled by the test";
        return 0;
    }
  }
  void set(int64_t i, double v) {
    switch (type.dtype) {
      case DType::kFloat32:
        reinterpret_cast<float*>(storage.data())[i] = static_cast<float>(v);
        break;
      case DType::kFloat64:
        reinterpret_cast<double*>(storage.data())[i] = v;
        break;
      case DType::kInt64:
        reinterpret_cast<int64_t*>(storage.data())[i] = static_cast<int64_t>(v);
        break;
      default:
        ADD_FAILURE() << "dtype not handled by the test";
    }
  }
  std::vector<double> values() const {
    std::vector<double> v(numel());
    for (int64_t i = 0; i < numel(); ++i) v[i] = at(i);
    return v;
  }
};

absl::StatusOr<std::vector<TensorType>> Infer(const std::string& op, const Attrs& attrs,
                                              const std::vector<TensorType>& inputs) {
  const OpDef* def = OpRegistry::Global().Find(op);
  if (def == nullptr) return absl::NotFoundError("no op " + op);
  if (static_cast<int>(inputs.size()) < def->min_inputs || static_cast<int>(inputs.size()) > def->max_inputs) {
    return absl::InvalidArgumentError("input count out of the op's range");
  }
  return def->infer(attrs, inputs);
}

// Runs `op` on the CPU kernel with outputs of the inferred types, poisoned
// first so that unwritten outputs show.
absl::StatusOr<std::vector<Tensor>> RunOp(const std::string& op, const Attrs& attrs, std::vector<Tensor> inputs) {
  return cpu::RunCpuOp(op, attrs, inputs, 0xFF);
}

std::vector<Tensor> MustRun(const std::string& op, const Attrs& attrs, std::vector<Tensor> inputs) {
  auto result = RunOp(op, attrs, std::move(inputs));
  EXPECT_TRUE(result.ok()) << op << ": " << result.status();
  if (!result.ok()) return {};
  return *std::move(result);
}

// |actual - expected| <= tol * (|expected| + 1) elementwise; NaN never
// passes.
void ExpectClose(const Tensor& actual, const std::vector<double>& expected, const std::string& what, double tol) {
  ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size())) << what;
  int failures = 0;
  for (int64_t i = 0; i < actual.numel() && failures < 5; ++i) {
    const double a = actual.at(i);
    if (!(std::abs(a - expected[i]) <= tol * (std::abs(expected[i]) + 1.0))) {
      ADD_FAILURE() << what << " " << actual.type.ToString() << ": element " << i << " is " << a << ", expected "
                    << expected[i];
      ++failures;
    }
  }
}

double Tolerance(DType dtype) { return dtype == DType::kFloat32 ? 2e-6 : 1e-12; }

class CnnKernelTest : public ::testing::Test {
 protected:
  // Uniform in [lo, hi).
  Tensor Random(DType dtype, Shape shape, double lo = -1.0, double hi = 1.0) {
    Tensor t({dtype, std::move(shape)});
    std::uniform_real_distribution<double> u(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng_));
    return t;
  }

  // The gradient of sum(forward(inputs)[output] * weights) with respect to
  // input `which`, by central differences (float64 inputs).
  std::vector<double> NumericGradient(const std::function<Tensor(const std::vector<Tensor>&)>& forward,
                                      std::vector<Tensor> inputs, int which, const std::vector<double>& weights,
                                      double h = 1e-6) {
    auto loss = [&](const std::vector<Tensor>& in) {
      const Tensor out = forward(in);
      double s = 0.0;
      for (int64_t i = 0; i < out.numel(); ++i) s += out.at(i) * weights[i];
      return s;
    };
    std::vector<double> grad(inputs[which].numel());
    for (int64_t j = 0; j < inputs[which].numel(); ++j) {
      const double v = inputs[which].at(j);
      inputs[which].set(j, v + h);
      const double up = loss(inputs);
      inputs[which].set(j, v - h);
      const double down = loss(inputs);
      inputs[which].set(j, v);
      grad[j] = (up - down) / (2 * h);
    }
    return grad;
  }

  std::mt19937_64 rng_{20261201};
};

// ---------------------------------------------------------------- registry

TEST(CnnInferenceTest, ConvolutionShapes) {
  const TensorType x{DType::kFloat32, {2, 3, 224, 224}};
  const TensorType w{DType::kFloat32, {64, 3, 7, 7}};
  const Attrs stem = MakeAttrs({{"stride", std::vector<int64_t>{2, 2}},
                                {"padding", std::vector<int64_t>{3, 3}},
                                {"dilation", std::vector<int64_t>{1, 1}},
                                {"transposed", false},
                                {"output_padding", std::vector<int64_t>{0, 0}},
                                {"groups", int64_t{1}}});
  auto out = Infer("convolution", stem, {x, w});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0], (TensorType{DType::kFloat32, {2, 64, 112, 112}}));
  auto with_bias = Infer("convolution", stem, {x, w, {DType::kFloat32, {64}}});
  ASSERT_TRUE(with_bias.ok()) << with_bias.status();

  // Backward: masked-off outputs are [0].
  Attrs mask = stem;
  mask.Set("output_mask", std::vector<int64_t>{0, 1, 0});
  auto grads = Infer("convolution_backward", mask, {{DType::kFloat32, {2, 64, 112, 112}}, x, w});
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), 3u);
  EXPECT_EQ((*grads)[0].shape, Shape{0});
  EXPECT_EQ((*grads)[1].shape, w.shape);
  EXPECT_EQ((*grads)[2].shape, Shape{0});
  auto all = Infer("convolution_backward", stem, {{DType::kFloat32, {2, 64, 112, 112}}, x, w});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)[0].shape, x.shape);
  EXPECT_EQ((*all)[2].shape, Shape{64});

  // Grouped, dilated, a single int for both dims.
  auto grouped = Infer(
      "convolution",
      MakeAttrs({{"stride", int64_t{1}}, {"padding", int64_t{2}}, {"dilation", int64_t{2}}, {"groups", int64_t{4}}}),
      {{DType::kFloat64, {1, 8, 9, 9}}, {DType::kFloat64, {12, 2, 3, 3}}});
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  EXPECT_EQ((*grouped)[0].shape, (Shape{1, 12, 9, 9}));
}

TEST(CnnInferenceTest, ConvolutionErrors) {
  const TensorType x{DType::kFloat32, {2, 3, 8, 8}};
  const TensorType w{DType::kFloat32, {4, 3, 3, 3}};
  auto transposed = Infer("convolution", MakeAttrs({{"transposed", true}}), {x, w});
  EXPECT_THAT(transposed.status().message(), HasSubstr("transposed"));
  auto channels = Infer("convolution", {}, {x, {DType::kFloat32, {4, 2, 3, 3}}});
  EXPECT_THAT(channels.status().message(), HasSubstr("convolution: input is [2, 3, 8, 8]"));
  auto too_small = Infer("convolution", {}, {{DType::kFloat32, {1, 3, 2, 2}}, w});
  EXPECT_THAT(too_small.status().message(), HasSubstr("smaller than the dilated kernel"));
  auto bias = Infer("convolution", {}, {x, w, {DType::kFloat32, {3}}});
  EXPECT_THAT(bias.status().message(), HasSubstr("bias is float32[3]"));
  auto dtype = Infer("convolution", {}, {x, {DType::kFloat64, {4, 3, 3, 3}}});
  EXPECT_THAT(dtype.status().message(), HasSubstr("dtypes must match"));
  auto grad = Infer("convolution_backward", {}, {{DType::kFloat32, {2, 4, 7, 7}}, x, w});
  EXPECT_THAT(grad.status().message(), HasSubstr("grad_output is float32[2, 4, 7, 7]"));
}

TEST(CnnInferenceTest, PoolingShapes) {
  const TensorType x{DType::kFloat32, {2, 64, 112, 112}};
  const Attrs pool = MakeAttrs({{"kernel_size", std::vector<int64_t>{3, 3}},
                                {"stride", std::vector<int64_t>{2, 2}},
                                {"padding", std::vector<int64_t>{1, 1}}});
  auto out = Infer("max_pool2d_with_indices", pool, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0], (TensorType{DType::kFloat32, {2, 64, 56, 56}}));
  EXPECT_EQ((*out)[1], (TensorType{DType::kInt64, {2, 64, 56, 56}}));
  // Ceil mode: 6 -> ceil((6 - 3) / 2) + 1 = 3, but a window starting past
  // the input is dropped: 5 with k2 s2 ceil gives 3.
  auto ceil = Infer("max_pool2d_with_indices", MakeAttrs({{"kernel_size", int64_t{2}}, {"ceil_mode", true}}),
                    {{DType::kFloat32, {3, 5, 6}}});
  ASSERT_TRUE(ceil.ok()) << ceil.status();
  EXPECT_EQ((*ceil)[0].shape, (Shape{3, 3, 3}));
  auto avg = Infer("avg_pool2d", MakeAttrs({{"kernel_size", int64_t{2}}, {"stride", std::vector<int64_t>{}}}), {x});
  ASSERT_TRUE(avg.ok()) << avg.status();
  EXPECT_EQ((*avg)[0].shape, (Shape{2, 64, 56, 56}));
  auto adaptive = Infer("adaptive_avg_pool2d", MakeAttrs({{"output_size", std::vector<int64_t>{1, 1}}}), {x});
  ASSERT_TRUE(adaptive.ok()) << adaptive.status();
  EXPECT_EQ((*adaptive)[0].shape, (Shape{2, 64, 1, 1}));
  auto back = Infer("_adaptive_avg_pool2d_backward", {}, {{DType::kFloat32, {2, 64, 1, 1}}, x});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)[0], x);

  auto pad = Infer("max_pool2d_with_indices", MakeAttrs({{"kernel_size", int64_t{3}}, {"padding", int64_t{2}}}), {x});
  EXPECT_THAT(pad.status().message(), HasSubstr("at most half the kernel size"));
  auto rank = Infer("avg_pool2d", MakeAttrs({{"kernel_size", int64_t{2}}}), {{DType::kFloat32, {4, 4}}});
  EXPECT_THAT(rank.status().message(), HasSubstr("expected [N, C, H, W] or [C, H, W]"));
  auto indices = Infer("max_pool2d_with_indices_backward", pool, {(*out)[0], x, {DType::kInt32, {2, 64, 56, 56}}});
  EXPECT_THAT(indices.status().message(), HasSubstr("indices is int32"));
}

TEST(CnnInferenceTest, BatchNormShapes) {
  const TensorType x{DType::kFloat32, {4, 8, 5, 5}};
  const TensorType c{DType::kFloat32, {8}};
  const Attrs train = MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}});
  const Attrs eval = MakeAttrs({{"training", false}, {"momentum", 0.1}, {"eps", 1e-5}});
  auto out = Infer("native_batch_norm", train, {x, c, c, c, c});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0], x);
  EXPECT_EQ((*out)[1], c);
  auto eval_out = Infer("native_batch_norm", eval, {x, c, c, c, c});
  ASSERT_TRUE(eval_out.ok());
  EXPECT_EQ((*eval_out)[1].shape, Shape{0});
  auto functional = Infer("_native_batch_norm_legit_functional", train, {x, c, c, c, c});
  ASSERT_TRUE(functional.ok());
  ASSERT_EQ(functional->size(), 5u);
  EXPECT_EQ((*functional)[4], c);
  auto no_stats = Infer("native_batch_norm", train, {x, c, c});
  EXPECT_TRUE(no_stats.ok()) << no_stats.status();
  auto no_stats_eval = Infer("native_batch_norm", eval, {x, c, c});
  EXPECT_THAT(no_stats_eval.status().message(), HasSubstr("needs running_mean"));
  auto four = Infer("native_batch_norm", train, {x, c, c, c});
  EXPECT_THAT(four.status().message(), HasSubstr("got 4 inputs"));
  auto bad_weight = Infer("native_batch_norm", train, {x, {DType::kFloat32, {7}}, c});
  EXPECT_THAT(bad_weight.status().message(), HasSubstr("weight is float32[7]"));

  const Attrs back = MakeAttrs({{"train", true}, {"eps", 1e-5}, {"output_mask", std::vector<int64_t>{1, 1, 0}}});
  auto grads = Infer("native_batch_norm_backward", back, {x, x, c, c, c, c, c});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ((*grads)[0], x);
  EXPECT_EQ((*grads)[1], c);
  EXPECT_EQ((*grads)[2].shape, Shape{0});
  const Attrs back_eval = MakeAttrs({{"train", false}, {"eps", 1e-5}});
  auto eval_grads =
      Infer("native_batch_norm_backward", back_eval, {x, x, c, c, c, {DType::kFloat32, {0}}, {DType::kFloat32, {0}}});
  EXPECT_TRUE(eval_grads.ok()) << eval_grads.status();
}

// ------------------------------------------------------------- convolution

struct ConvCase {
  Shape x, w;
  int64_t stride[2], padding[2], dilation[2], groups;
  bool bias;
};

Attrs ConvAttrs(const ConvCase& c) {
  return MakeAttrs({{"stride", std::vector<int64_t>{c.stride[0], c.stride[1]}},
                    {"padding", std::vector<int64_t>{c.padding[0], c.padding[1]}},
                    {"dilation", std::vector<int64_t>{c.dilation[0], c.dilation[1]}},
                    {"transposed", false},
                    {"output_padding", std::vector<int64_t>{0, 0}},
                    {"groups", c.groups}});
}

// Direct convolution in double.
std::vector<double> ReferenceConv(const ConvCase& c, const Tensor& x, const Tensor& w, const Tensor* b,
                                  const Shape& out) {
  const int64_t n = x.type.shape[0], ci = x.type.shape[1], h = x.type.shape[2], wd = x.type.shape[3];
  const int64_t co = w.type.shape[0], cg = w.type.shape[1], kh = w.type.shape[2], kw = w.type.shape[3];
  const int64_t oh = out[2], ow = out[3], og = co / c.groups;
  std::vector<double> y(NumElements(out));
  for (int64_t b0 = 0; b0 < n; ++b0) {
    for (int64_t o = 0; o < co; ++o) {
      const int64_t group = o / og;
      for (int64_t oy = 0; oy < oh; ++oy) {
        for (int64_t ox = 0; ox < ow; ++ox) {
          double s = b != nullptr ? b->at(o) : 0.0;
          for (int64_t k = 0; k < cg; ++k) {
            const int64_t channel = group * cg + k;
            for (int64_t i = 0; i < kh; ++i) {
              const int64_t iy = oy * c.stride[0] - c.padding[0] + i * c.dilation[0];
              if (iy < 0 || iy >= h) continue;
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ix = ox * c.stride[1] - c.padding[1] + j * c.dilation[1];
                if (ix < 0 || ix >= wd) continue;
                s += x.at(((b0 * ci + channel) * h + iy) * wd + ix) * w.at(((o * cg + k) * kh + i) * kw + j);
              }
            }
          }
          y[((b0 * co + o) * oh + oy) * ow + ox] = s;
        }
      }
    }
  }
  return y;
}

const std::vector<ConvCase>& ConvCases() {
  static const std::vector<ConvCase> cases = {
      {{2, 3, 11, 11}, {4, 3, 7, 7}, {2, 2}, {3, 3}, {1, 1}, 1, false},  // a ResNet stem in small
      {{2, 4, 6, 6}, {5, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
      {{1, 6, 5, 7}, {4, 6, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},   // 1x1 bottleneck
      {{1, 4, 7, 6}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {2, 1}, 2, true},   // groups, dilation, odd strides
      {{2, 4, 5, 5}, {4, 1, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 4, false},  // depthwise, dilated
      {{1, 2, 4, 9}, {3, 2, 2, 3}, {3, 2}, {0, 2}, {1, 3}, 1, true}};
  return cases;
}

TEST_F(CnnKernelTest, ConvolutionMatchesDirectComputation) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const ConvCase& c : ConvCases()) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " x " << ShapeString(c.x) << " w " << ShapeString(c.w)
                                        << " groups " << c.groups);
      Tensor x = Random(dtype, c.x);
      Tensor w = Random(dtype, c.w);
      Tensor b = Random(dtype, {c.w[0]});
      std::vector<Tensor> inputs = {x, w};
      if (c.bias) inputs.push_back(b);
      auto out = MustRun("convolution", ConvAttrs(c), inputs);
      ASSERT_EQ(out.size(), 1u);
      ExpectClose(out[0], ReferenceConv(c, x, w, c.bias ? &b : nullptr, out[0].type.shape), "convolution",
                  Tolerance(dtype) * 10);
    }
  }
}

TEST_F(CnnKernelTest, ConvolutionBackwardMatchesFiniteDifferences) {
  for (const ConvCase& c : ConvCases()) {
    SCOPED_TRACE(::testing::Message() << "x " << ShapeString(c.x) << " w " << ShapeString(c.w) << " groups "
                                      << c.groups);
    const Attrs attrs = ConvAttrs(c);
    std::vector<Tensor> inputs = {Random(DType::kFloat64, c.x), Random(DType::kFloat64, c.w),
                                  Random(DType::kFloat64, {c.w[0]})};
    auto forward = [&](const std::vector<Tensor>& in) { return MustRun("convolution", attrs, in)[0]; };
    const Tensor y = forward(inputs);
    const Tensor grad = Random(DType::kFloat64, y.type.shape);
    auto grads = MustRun("convolution_backward", attrs, {grad, inputs[0], inputs[1]});
    ASSERT_EQ(grads.size(), 3u);
    const std::vector<double> weights = grad.values();
    const char* names[3] = {"grad_input", "grad_weight", "grad_bias"};
    for (int k = 0; k < 3; ++k) {
      ExpectClose(grads[k], NumericGradient(forward, inputs, k, weights), names[k], 1e-7);
    }
    // Masked-off outputs are empty; the others are unchanged.
    Attrs masked = attrs;
    masked.Set("output_mask", std::vector<int64_t>{0, 1, 0});
    auto partial = MustRun("convolution_backward", masked, {grad, inputs[0], inputs[1]});
    ASSERT_EQ(partial.size(), 3u);
    EXPECT_EQ(partial[0].numel(), 0);
    EXPECT_EQ(partial[2].numel(), 0);
    ExpectClose(partial[1], grads[1].values(), "masked grad_weight", 0.0);
  }
}

// ----------------------------------------------------------------- pooling

struct PoolCase {
  Shape x;
  int64_t kernel[2], stride[2], padding[2], dilation[2];
  bool ceil_mode;
};

const std::vector<PoolCase>& PoolCases() {
  static const std::vector<PoolCase> cases = {
      {{2, 3, 9, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false},  // ResNet's max pool in small
      {{3, 8, 7}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},     // VGG's
      {{1, 2, 7, 6}, {3, 2}, {2, 1}, {1, 1}, {1, 1}, true},
      {{1, 2, 10, 8}, {3, 3}, {2, 3}, {1, 0}, {2, 1}, true},  // dilated (max only)
      {{2, 1, 5, 5}, {2, 2}, {2, 2}, {1, 0}, {1, 1}, true}};
  return cases;
}

Attrs PoolAttrs(const PoolCase& c, bool max) {
  Attrs a = MakeAttrs({{"kernel_size", std::vector<int64_t>{c.kernel[0], c.kernel[1]}},
                       {"stride", std::vector<int64_t>{c.stride[0], c.stride[1]}},
                       {"padding", std::vector<int64_t>{c.padding[0], c.padding[1]}},
                       {"ceil_mode", c.ceil_mode}});
  if (max) a.Set("dilation", std::vector<int64_t>{c.dilation[0], c.dilation[1]});
  return a;
}

TEST_F(CnnKernelTest, MaxPoolMatchesDirectComputationAndFiniteDifferences) {
  for (const PoolCase& c : PoolCases()) {
    SCOPED_TRACE(::testing::Message() << "x " << ShapeString(c.x) << " k " << c.kernel[0] << "x" << c.kernel[1]);
    const Attrs attrs = PoolAttrs(c, true);
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      Tensor x = Random(dtype, c.x);
      auto out = MustRun("max_pool2d_with_indices", attrs, {x});
      ASSERT_EQ(out.size(), 2u);
      const Shape& os = out[0].type.shape;
      const int64_t h = c.x[c.x.size() - 2], w = c.x.back(), oh = os[os.size() - 2], ow = os.back();
      std::vector<double> expected(out[0].numel()), expected_index(out[0].numel());
      for (int64_t i = 0; i < out[0].numel(); ++i) {
        const int64_t plane = i / (oh * ow), oy = (i / ow) % oh, ox = i % ow;
        double best = -std::numeric_limits<double>::infinity();
        int64_t best_at = -1;
        for (int64_t a = 0; a < c.kernel[0]; ++a) {
          for (int64_t b = 0; b < c.kernel[1]; ++b) {
            const int64_t iy = oy * c.stride[0] - c.padding[0] + a * c.dilation[0];
            const int64_t ix = ox * c.stride[1] - c.padding[1] + b * c.dilation[1];
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const double v = x.at(plane * h * w + iy * w + ix);
            if (best_at < 0 || v > best) {
              best = v;
              best_at = iy * w + ix;
            }
          }
        }
        expected[i] = best;
        expected_index[i] = static_cast<double>(best_at);
      }
      ExpectClose(out[0], expected, "max_pool2d_with_indices", 0.0);
      ExpectClose(out[1], expected_index, "indices", 0.0);
    }
    // Backward against finite differences (distinct values, so the maximum
    // is stable under a small step).
    std::vector<Tensor> inputs = {Random(DType::kFloat64, c.x)};
    auto forward = [&](const std::vector<Tensor>& in) { return MustRun("max_pool2d_with_indices", attrs, in)[0]; };
    auto out = MustRun("max_pool2d_with_indices", attrs, inputs);
    const Tensor grad = Random(DType::kFloat64, out[0].type.shape);
    auto dx = MustRun("max_pool2d_with_indices_backward", attrs, {grad, inputs[0], out[1]});
    ASSERT_EQ(dx.size(), 1u);
    ExpectClose(dx[0], NumericGradient(forward, inputs, 0, grad.values()), "max_pool2d_with_indices_backward", 1e-7);
  }
}

TEST_F(CnnKernelTest, MaxPoolPropagatesNaN) {
  Tensor x = Random(DType::kFloat32, {1, 1, 4, 4});
  x.set(5, std::numeric_limits<double>::quiet_NaN());
  auto out = MustRun("max_pool2d_with_indices", MakeAttrs({{"kernel_size", int64_t{2}}}), {x});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(std::isnan(out[0].at(0)));
  EXPECT_EQ(out[1].at(0), 5.0);
  EXPECT_FALSE(std::isnan(out[0].at(1)));
}

TEST_F(CnnKernelTest, AvgPoolMatchesDirectComputationAndFiniteDifferences) {
  for (const PoolCase& c : PoolCases()) {
    for (bool include_pad : {true, false}) {
      for (int64_t divisor : {int64_t{0}, int64_t{3}}) {
        SCOPED_TRACE(::testing::Message() << "x " << ShapeString(c.x) << " k " << c.kernel[0] << "x" << c.kernel[1]
                                          << " include_pad " << include_pad << " divisor " << divisor);
        Attrs attrs = PoolAttrs(c, false);
        attrs.Set("count_include_pad", include_pad);
        if (divisor != 0) attrs.Set("divisor_override", divisor);
        Tensor x = Random(DType::kFloat64, c.x);
        auto out = MustRun("avg_pool2d", attrs, {x});
        ASSERT_EQ(out.size(), 1u);
        const Shape& os = out[0].type.shape;
        const int64_t h = c.x[c.x.size() - 2], w = c.x.back(), oh = os[os.size() - 2], ow = os.back();
        std::vector<double> expected(out[0].numel());
        for (int64_t i = 0; i < out[0].numel(); ++i) {
          const int64_t plane = i / (oh * ow), oy = (i / ow) % oh, ox = i % ow;
          double sum = 0.0;
          int64_t inside = 0, padded = 0;
          for (int64_t a = 0; a < c.kernel[0]; ++a) {
            for (int64_t b = 0; b < c.kernel[1]; ++b) {
              const int64_t iy = oy * c.stride[0] - c.padding[0] + a;
              const int64_t ix = ox * c.stride[1] - c.padding[1] + b;
              if (iy < h + c.padding[0] && ix < w + c.padding[1]) ++padded;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              ++inside;
              sum += x.at(plane * h * w + iy * w + ix);
            }
          }
          const double d = divisor != 0 ? divisor : include_pad ? padded : inside;
          expected[i] = sum / d;
        }
        ExpectClose(out[0], expected, "avg_pool2d", 1e-12);
        auto forward = [&](const std::vector<Tensor>& in) { return MustRun("avg_pool2d", attrs, in)[0]; };
        const Tensor grad = Random(DType::kFloat64, os);
        auto dx = MustRun("avg_pool2d_backward", attrs, {grad, x});
        ASSERT_EQ(dx.size(), 1u);
        ExpectClose(dx[0], NumericGradient(forward, {x}, 0, grad.values()), "avg_pool2d_backward", 1e-7);
      }
    }
  }
}

TEST_F(CnnKernelTest, AdaptiveAvgPoolMatchesDirectComputationAndFiniteDifferences) {
  struct Case {
    Shape x;
    int64_t oh, ow;
  };
  const std::vector<Case> cases = {{{2, 3, 7, 7}, 1, 1}, {{1, 2, 7, 5}, 3, 2}, {{3, 5, 6}, 4, 6}, {{1, 1, 4, 4}, 7, 5}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << ShapeString(c.x) << " -> " << c.oh << "x" << c.ow);
    const Attrs attrs = MakeAttrs({{"output_size", std::vector<int64_t>{c.oh, c.ow}}});
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      Tensor x = Random(dtype, c.x);
      auto out = MustRun("_adaptive_avg_pool2d", attrs, {x});
      ASSERT_EQ(out.size(), 1u);
      const int64_t h = c.x[c.x.size() - 2], w = c.x.back();
      std::vector<double> expected(out[0].numel());
      for (int64_t i = 0; i < out[0].numel(); ++i) {
        const int64_t plane = i / (c.oh * c.ow), oy = (i / c.ow) % c.oh, ox = i % c.ow;
        const auto lo = [](int64_t o, int64_t in, int64_t out) {
          return static_cast<int64_t>(std::floor(static_cast<double>(o * in) / static_cast<double>(out)));
        };
        const auto hi = [](int64_t o, int64_t in, int64_t out) {
          return static_cast<int64_t>(std::ceil(static_cast<double>((o + 1) * in) / static_cast<double>(out)));
        };
        double sum = 0.0;
        int64_t count = 0;
        for (int64_t iy = lo(oy, h, c.oh); iy < hi(oy, h, c.oh); ++iy) {
          for (int64_t ix = lo(ox, w, c.ow); ix < hi(ox, w, c.ow); ++ix) {
            sum += x.at(plane * h * w + iy * w + ix);
            ++count;
          }
        }
        expected[i] = sum / static_cast<double>(count);
      }
      ExpectClose(out[0], expected, "_adaptive_avg_pool2d", Tolerance(dtype));
    }
    Tensor x = Random(DType::kFloat64, c.x);
    auto forward = [&](const std::vector<Tensor>& in) { return MustRun("adaptive_avg_pool2d", attrs, in)[0]; };
    const Tensor grad = Random(DType::kFloat64, forward({x}).type.shape);
    auto dx = MustRun("_adaptive_avg_pool2d_backward", {}, {grad, x});
    ASSERT_EQ(dx.size(), 1u);
    ExpectClose(dx[0], NumericGradient(forward, {x}, 0, grad.values()), "_adaptive_avg_pool2d_backward", 1e-7);
  }
}

// -------------------------------------------------------------- batch norm

// Per-channel batch mean and biased variance of [N, C, *], in double.
void ChannelStats(const Tensor& x, std::vector<double>& mean, std::vector<double>& var) {
  const Shape& s = x.type.shape;
  const int64_t n = s[0], c = s[1], inner = x.numel() / (n * c);
  mean.assign(c, 0.0);
  var.assign(c, 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) mean[(i / inner) % c] += x.at(i);
  for (int64_t k = 0; k < c; ++k) mean[k] /= static_cast<double>(n * inner);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double d = x.at(i) - mean[(i / inner) % c];
    var[(i / inner) % c] += d * d;
  }
  for (int64_t k = 0; k < c; ++k) var[k] /= static_cast<double>(n * inner);
}

TEST_F(CnnKernelTest, BatchNormForwardMatchesDirectComputation) {
  const double momentum = 0.1, eps = 1e-5;
  for (const Shape& shape : {Shape{4, 3, 5, 5}, Shape{6, 4}, Shape{2, 3, 7}}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (bool training : {true, false}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape) << " training " << training);
        const int64_t c = shape[1], inner = NumElements(shape) / (shape[0] * c);
        Tensor x = Random(dtype, shape, -2.0, 3.0);
        Tensor w = Random(dtype, {c});
        Tensor b = Random(dtype, {c});
        Tensor rm = Random(dtype, {c});
        Tensor rv = Random(dtype, {c}, 0.5, 2.0);
        const Attrs attrs = MakeAttrs({{"training", training}, {"momentum", momentum}, {"eps", eps}});
        std::vector<double> mean, var;
        ChannelStats(x, mean, var);
        if (!training) {
          mean = rm.values();
          var = rv.values();
        }
        std::vector<double> expected(x.numel());
        for (int64_t i = 0; i < x.numel(); ++i) {
          const int64_t k = (i / inner) % c;
          expected[i] = (x.at(i) - mean[k]) / std::sqrt(var[k] + eps) * w.at(k) + b.at(k);
        }
        for (const char* op : {"native_batch_norm", "_native_batch_norm_legit_functional"}) {
          auto out = MustRun(op, attrs, {x, w, b, rm, rv});
          ASSERT_GE(out.size(), 3u);
          ExpectClose(out[0], expected, std::string(op) + " out", Tolerance(dtype) * 4);
          if (training) {
            std::vector<double> invstd(c);
            for (int64_t k = 0; k < c; ++k) invstd[k] = 1.0 / std::sqrt(var[k] + eps);
            ExpectClose(out[1], mean, "save_mean", Tolerance(dtype));
            ExpectClose(out[2], invstd, "save_invstd", Tolerance(dtype));
          } else {
            EXPECT_EQ(out[1].numel(), 0);
            EXPECT_EQ(out[2].numel(), 0);
          }
          if (out.size() == 5) {
            std::vector<double> new_mean(c), new_var(c);
            const double count = static_cast<double>(shape[0] * inner);
            for (int64_t k = 0; k < c; ++k) {
              new_mean[k] = training ? (1 - momentum) * rm.at(k) + momentum * mean[k] : rm.at(k);
              new_var[k] = training ? (1 - momentum) * rv.at(k) + momentum * var[k] * count / (count - 1) : rv.at(k);
            }
            ExpectClose(out[3], new_mean, "running_mean", Tolerance(dtype));
            ExpectClose(out[4], new_var, "running_var", Tolerance(dtype));
          }
        }
        if (training) {  // without running statistics
          auto out = MustRun("native_batch_norm", attrs, {x, w, b});
          ASSERT_EQ(out.size(), 3u);
          ExpectClose(out[0], expected, "native_batch_norm without running stats", Tolerance(dtype) * 4);
        }
      }
    }
  }
}

TEST_F(CnnKernelTest, BatchNormBackwardMatchesFiniteDifferences) {
  const double eps = 1e-5;
  for (const Shape& shape : {Shape{3, 2, 3, 4}, Shape{5, 3}}) {
    for (bool training : {true, false}) {
      SCOPED_TRACE(::testing::Message() << ShapeString(shape) << " training " << training);
      const int64_t c = shape[1];
      std::vector<Tensor> inputs = {Random(DType::kFloat64, shape, -2.0, 3.0), Random(DType::kFloat64, {c}),
                                    Random(DType::kFloat64, {c}), Random(DType::kFloat64, {c}),
                                    Random(DType::kFloat64, {c}, 0.5, 2.0)};
      const Attrs attrs = MakeAttrs({{"training", training}, {"momentum", 0.1}, {"eps", eps}});
      auto forward = [&](const std::vector<Tensor>& in) { return MustRun("native_batch_norm", attrs, in)[0]; };
      auto fwd = MustRun("native_batch_norm", attrs, inputs);
      ASSERT_EQ(fwd.size(), 3u);
      const Tensor grad = Random(DType::kFloat64, shape);
      const Attrs back = MakeAttrs({{"train", training}, {"eps", eps}});
      auto grads = MustRun("native_batch_norm_backward", back,
                           {grad, inputs[0], inputs[1], inputs[3], inputs[4], fwd[1], fwd[2]});
      ASSERT_EQ(grads.size(), 3u);
      const std::vector<double> weights = grad.values();
      ExpectClose(grads[0], NumericGradient(forward, inputs, 0, weights), "grad_input", 1e-6);
      ExpectClose(grads[1], NumericGradient(forward, inputs, 1, weights), "grad_weight", 1e-6);
      ExpectClose(grads[2], NumericGradient(forward, inputs, 2, weights), "grad_bias", 1e-6);
      if (training) {  // the 5-input form (no running statistics) and a mask
        const Attrs masked = MakeAttrs({{"train", true}, {"eps", eps}, {"output_mask", std::vector<int64_t>{1, 0, 1}}});
        auto partial = MustRun("native_batch_norm_backward", masked, {grad, inputs[0], inputs[1], fwd[1], fwd[2]});
        ASSERT_EQ(partial.size(), 3u);
        ExpectClose(partial[0], grads[0].values(), "5-input grad_input", 0.0);
        EXPECT_EQ(partial[1].numel(), 0);
        ExpectClose(partial[2], grads[2].values(), "5-input grad_bias", 0.0);
      }
    }
  }
}

}  // namespace
}  // namespace tandem
