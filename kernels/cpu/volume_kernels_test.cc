// The volume ops' CPU kernels (3-D pooling, 3-D convolution, batch norm
// over volumes), as spatial_kernels_test.cc checks the others: every
// forward kernel against a direct computation written here (in double),
// every backward kernel against central finite differences of the forward
// kernel in float64, on random inputs (the seed is printed;
// TANDEM_TEST_SEED replays it); the 16-bit kernels against float64
// computations on the same (rounded) inputs.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/ops/spatial_index.h"
#include "kernels/cpu/half_test_util.h"
#include "kernels/cpu/spatial_test_fixture.h"

namespace tandem {
namespace {

using half_test::Close;
using half_test::HostTensor;
using half_test::MustRun;
using half_test::Values;
using spatial_test::Ints;
using spatial_test::kGradTolerance;
using spatial_test::kHalfTypes;
using spatial_test::Near;
using spatial_test::SpatialKernelTest;
using spatial_test::Tolerance;

// ------------------------------------------------------------ 3-D pooling

struct Pool3dCase {
  Shape x;
  Ints kernel, stride, padding, dilation;
  bool ceil_mode = false;
  bool count_include_pad = true;
  int64_t divisor_override = 0;
};

std::vector<Pool3dCase> Pool3dCases() {
  return {{{2, 3, 4, 6, 5}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}},
          {{1, 2, 5, 7, 6}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, false, false},
          {{2, 5, 6, 7}, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {1, 2, 1}, true, true},
          {{1, 1, 7, 7, 7}, {3, 2, 3}, {2, 3, 2}, {1, 1, 0}, {2, 1, 1}, true, false, 5}};
}

Attrs PoolAttrs(const Pool3dCase& c, bool max) {
  Attrs a =
      MakeAttrs({{"kernel_size", c.kernel}, {"stride", c.stride}, {"padding", c.padding}, {"ceil_mode", c.ceil_mode}});
  if (max) {
    a.Set("dilation", c.dilation);
  } else {
    a.Set("count_include_pad", c.count_include_pad);
    if (c.divisor_override != 0) a.Set("divisor_override", c.divisor_override);
  }
  return a;
}

int64_t OutSize(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const double span = static_cast<double>(in + 2 * p - d * (k - 1) - 1) / s;
  int64_t out = static_cast<int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// Max (with the flat index of the first maximum; NaN-free inputs) or
// average pooling, directly.
void RefPool3d(const Pool3dCase& c, bool max, const std::vector<double>& x, std::vector<double>* y,
               std::vector<double>* indices) {
  const size_t r = c.x.size();
  const int64_t in[3] = {c.x[r - 3], c.x[r - 2], c.x[r - 1]};
  int64_t out[3];
  for (int d = 0; d < 3; ++d) {
    out[d] = OutSize(in[d], c.kernel[d], c.stride[d], c.padding[d], max ? c.dilation[d] : 1, c.ceil_mode);
  }
  const int64_t planes = NumElements(c.x) / (in[0] * in[1] * in[2]);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t a = 0; a < out[0]; ++a) {
      for (int64_t b = 0; b < out[1]; ++b) {
        for (int64_t e = 0; e < out[2]; ++e) {
          const int64_t o[3] = {a, b, e};
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          int64_t best_index = -1, inside = 1, padded = 1;
          for (int d = 0; d < 3; ++d) {
            const int64_t start = o[d] * c.stride[d] - c.padding[d];
            const int64_t end = std::min(start + c.kernel[d], in[d] + c.padding[d]);
            padded *= end - start;
            inside *= std::min(end, in[d]) - std::max<int64_t>(start, 0);
          }
          for (int64_t i = 0; i < c.kernel[0]; ++i) {
            for (int64_t j = 0; j < c.kernel[1]; ++j) {
              for (int64_t k = 0; k < c.kernel[2]; ++k) {
                const int64_t tap[3] = {i, j, k};
                int64_t pos[3];
                bool valid = true;
                for (int d = 0; d < 3; ++d) {
                  pos[d] = o[d] * c.stride[d] - c.padding[d] + tap[d] * (max ? c.dilation[d] : 1);
                  valid = valid && pos[d] >= 0 && pos[d] < in[d];
                }
                if (!valid) continue;
                const int64_t flat = (pos[0] * in[1] + pos[1]) * in[2] + pos[2];
                const double v = x[p * in[0] * in[1] * in[2] + flat];
                sum += v;
                if (v > best) best = v, best_index = flat;
              }
            }
          }
          if (max) {
            y->push_back(best);
            indices->push_back(static_cast<double>(best_index));
          } else {
            const double divisor =
                c.divisor_override != 0 ? c.divisor_override : (c.count_include_pad ? padded : inside);
            y->push_back(sum / divisor);
          }
        }
      }
    }
  }
}

TEST_F(SpatialKernelTest, Pooling3dMatchesDirectComputation) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Pool3dCase& c : Pool3dCases()) {
      SCOPED_TRACE(ShapeString(c.x) + " kernel " + ShapeString(c.kernel) + " " + DTypeName(dtype));
      const HostTensor x = Random(dtype, c.x);
      auto max = MustRun("max_pool3d_with_indices", PoolAttrs(c, true), {x});
      ASSERT_EQ(max.size(), 2u);
      std::vector<double> y, indices;
      RefPool3d(c, true, Values(x), &y, &indices);
      EXPECT_EQ(Values(max[0]), y);
      EXPECT_EQ(Values(max[1]), indices);
      auto avg = MustRun("avg_pool3d", PoolAttrs(c, false), {x});
      ASSERT_EQ(avg.size(), 1u);
      std::vector<double> mean;
      RefPool3d(c, false, Values(x), &mean, nullptr);
      EXPECT_TRUE(Near(Values(avg[0]), mean, Tolerance(dtype)));
    }
  }
}

TEST_F(SpatialKernelTest, AdaptiveAvgPool3dMatchesDirectComputation) {
  struct Case {
    Shape x;
    Ints out;
  };
  for (const Case& c :
       std::vector<Case>{{{2, 3, 4, 5, 6}, {1, 1, 1}}, {{3, 5, 7, 4}, {2, 3, 4}}, {{1, 2, 3, 3, 3}, {5, 2, 3}}}) {
    SCOPED_TRACE(ShapeString(c.x) + " -> " + ShapeString(c.out));
    const HostTensor x = Random(DType::kFloat64, c.x);
    const Attrs attrs = MakeAttrs({{"output_size", c.out}});
    auto out = MustRun("_adaptive_avg_pool3d", attrs, {x});
    const size_t r = c.x.size();
    const int64_t in[3] = {c.x[r - 3], c.x[r - 2], c.x[r - 1]};
    const int64_t planes = x.numel() / (in[0] * in[1] * in[2]);
    std::vector<double> expected;
    const std::vector<double> v = Values(x);
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t a = 0; a < c.out[0]; ++a) {
        for (int64_t b = 0; b < c.out[1]; ++b) {
          for (int64_t e = 0; e < c.out[2]; ++e) {
            const int64_t o[3] = {a, b, e};
            int64_t lo[3], hi[3];
            for (int d = 0; d < 3; ++d) {
              lo[d] = static_cast<int64_t>(std::floor(static_cast<double>(o[d] * in[d]) / c.out[d]));
              hi[d] = static_cast<int64_t>(std::ceil(static_cast<double>((o[d] + 1) * in[d]) / c.out[d]));
            }
            double sum = 0;
            for (int64_t i = lo[0]; i < hi[0]; ++i) {
              for (int64_t j = lo[1]; j < hi[1]; ++j) {
                for (int64_t k = lo[2]; k < hi[2]; ++k) sum += v[((p * in[0] + i) * in[1] + j) * in[2] + k];
              }
            }
            expected.push_back(sum / ((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2])));
          }
        }
      }
    }
    EXPECT_TRUE(Near(Values(out[0]), expected, 1e-12));
    // The backward against finite differences.
    std::vector<HostTensor> in_list = {x};
    auto forward = [&](const std::vector<HostTensor>& inputs) {
      return MustRun("_adaptive_avg_pool3d", attrs, inputs)[0];
    };
    const std::vector<double> weights = RandomWeights(out[0].numel());
    auto grad = MustRun("_adaptive_avg_pool3d_backward", {}, {AsTensor(weights, out[0].type.shape), x});
    EXPECT_TRUE(Near(Values(grad[0]), NumericGradient(forward, in_list, 0, weights), kGradTolerance));
  }
}

TEST_F(SpatialKernelTest, Pooling3dBackwardMatchesFiniteDifferences) {
  for (const Pool3dCase& c : Pool3dCases()) {
    SCOPED_TRACE(ShapeString(c.x) + " kernel " + ShapeString(c.kernel));
    std::vector<HostTensor> in = {Random(DType::kFloat64, c.x)};
    for (bool max : {true, false}) {
      const Attrs attrs = PoolAttrs(c, max);
      const std::string op = max ? "max_pool3d_with_indices" : "avg_pool3d";
      auto forward = [&](const std::vector<HostTensor>& inputs) { return MustRun(op, attrs, inputs)[0]; };
      auto out = MustRun(op, attrs, in);
      const std::vector<double> weights = RandomWeights(out[0].numel());
      std::vector<HostTensor> bin = {AsTensor(weights, out[0].type.shape), in[0]};
      if (max) bin.push_back(out[1]);
      auto grad = MustRun(op == "avg_pool3d" ? "avg_pool3d_backward" : "max_pool3d_with_indices_backward", attrs, bin);
      ASSERT_EQ(grad.size(), 1u);
      EXPECT_TRUE(Near(Values(grad[0]), NumericGradient(forward, in, 0, weights), kGradTolerance)) << op;
    }
  }
}

TEST_F(SpatialKernelTest, Pooling3dInHalfTypesMatchesFloat64) {
  for (DType dtype : kHalfTypes) {
    for (const Pool3dCase& c : Pool3dCases()) {
      SCOPED_TRACE(ShapeString(c.x) + " " + DTypeName(dtype));
      const HostTensor x = Random(dtype, c.x);
      const HostTensor x64 = half_test::Make(DType::kFloat64, c.x, Values(x));
      auto max = MustRun("max_pool3d_with_indices", PoolAttrs(c, true), {x});
      auto max64 = MustRun("max_pool3d_with_indices", PoolAttrs(c, true), {x64});
      EXPECT_EQ(Values(max[0]), Values(max64[0]));  // a maximum is exact
      EXPECT_EQ(Values(max[1]), Values(max64[1]));
      auto avg = MustRun("avg_pool3d", PoolAttrs(c, false), {x});
      auto avg64 = MustRun("avg_pool3d", PoolAttrs(c, false), {x64});
      EXPECT_TRUE(Close(avg[0], Values(avg64[0]), half_test::Tolerance(dtype, 27)));
      const HostTensor dy = Random(dtype, avg[0].type.shape);
      auto g = MustRun("avg_pool3d_backward", PoolAttrs(c, false), {dy, x});
      auto g64 = MustRun("avg_pool3d_backward", PoolAttrs(c, false),
                         {half_test::Make(DType::kFloat64, dy.type.shape, Values(dy)), x64});
      EXPECT_TRUE(Close(g[0], Values(g64[0]), half_test::Tolerance(dtype, 27)));
    }
  }
}

// ------------------------------------------------------------ 3-D convolution

struct Conv3dCase {
  Shape x, w;
  Ints stride, padding, dilation;
  int64_t groups;
  bool bias;
};

std::vector<Conv3dCase> Conv3dCases() {
  return {// r3d_18's stem (3 x 7 x 7, stride 1 x 2 x 2), small.
          {{2, 3, 3, 9, 9}, {4, 3, 3, 7, 7}, {1, 2, 2}, {1, 3, 3}, {1, 1, 1}, 1, false},
          // R(2+1)D's factorized kernels: spatial 1 x 3 x 3, then temporal 3 x 1 x 1.
          {{1, 4, 4, 5, 5}, {6, 4, 1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1, true},
          {{1, 6, 4, 5, 5}, {4, 6, 3, 1, 1}, {2, 1, 1}, {1, 0, 0}, {1, 1, 1}, 1, false},
          // Grouped and dilated, a 1 x 1 x 1 downsample.
          {{2, 4, 5, 6, 4}, {6, 2, 2, 3, 2}, {1, 2, 1}, {1, 1, 0}, {2, 1, 2}, 2, true},
          {{1, 4, 4, 4, 4}, {8, 4, 1, 1, 1}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}, 1, false}};
}

Attrs ConvAttrs(const Conv3dCase& c) {
  return MakeAttrs({{"stride", c.stride},
                    {"padding", c.padding},
                    {"dilation", c.dilation},
                    {"transposed", false},
                    {"output_padding", Ints{0, 0, 0}},
                    {"groups", c.groups}});
}

std::vector<double> RefConv3d(const Conv3dCase& c, const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<double>* b, const Shape& out) {
  std::vector<double> y(static_cast<size_t>(NumElements(out)));
  const int64_t cg = c.x[1] / c.groups, og = c.w[0] / c.groups;
  for (int64_t n = 0; n < out[0]; ++n) {
    for (int64_t oc = 0; oc < out[1]; ++oc) {
      const int64_t grp = oc / og;
      for (int64_t a = 0; a < out[2]; ++a) {
        for (int64_t bb = 0; bb < out[3]; ++bb) {
          for (int64_t e = 0; e < out[4]; ++e) {
            double sum = b ? (*b)[oc] : 0.0;
            for (int64_t ci = 0; ci < cg; ++ci) {
              for (int64_t i = 0; i < c.w[2]; ++i) {
                for (int64_t j = 0; j < c.w[3]; ++j) {
                  for (int64_t k = 0; k < c.w[4]; ++k) {
                    const int64_t z = a * c.stride[0] - c.padding[0] + i * c.dilation[0];
                    const int64_t yy = bb * c.stride[1] - c.padding[1] + j * c.dilation[1];
                    const int64_t xx = e * c.stride[2] - c.padding[2] + k * c.dilation[2];
                    if (z < 0 || z >= c.x[2] || yy < 0 || yy >= c.x[3] || xx < 0 || xx >= c.x[4]) continue;
                    const int64_t channel = grp * cg + ci;
                    sum += x[(((n * c.x[1] + channel) * c.x[2] + z) * c.x[3] + yy) * c.x[4] + xx] *
                           w[(((oc * cg + ci) * c.w[2] + i) * c.w[3] + j) * c.w[4] + k];
                  }
                }
              }
            }
            y[(((n * out[1] + oc) * out[2] + a) * out[3] + bb) * out[4] + e] = sum;
          }
        }
      }
    }
  }
  return y;
}

TEST_F(SpatialKernelTest, Convolution3dMatchesDirectComputation) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Conv3dCase& c : Conv3dCases()) {
      SCOPED_TRACE(ShapeString(c.x) + " * " + ShapeString(c.w) + " " + DTypeName(dtype));
      std::vector<HostTensor> in = {Random(dtype, c.x), Random(dtype, c.w)};
      if (c.bias) in.push_back(Random(dtype, {c.w[0]}));
      auto out = MustRun("convolution", ConvAttrs(c), in);
      ASSERT_EQ(out.size(), 1u);
      const std::vector<double> b = c.bias ? Values(in[2]) : std::vector<double>{};
      const std::vector<double> expected =
          RefConv3d(c, Values(in[0]), Values(in[1]), c.bias ? &b : nullptr, out[0].type.shape);
      EXPECT_TRUE(Near(Values(out[0]), expected, dtype == DType::kFloat32 ? 1e-5 : 1e-12));
    }
  }
}

TEST_F(SpatialKernelTest, Convolution3dBackwardMatchesFiniteDifferences) {
  for (const Conv3dCase& c : Conv3dCases()) {
    SCOPED_TRACE(ShapeString(c.x) + " * " + ShapeString(c.w));
    std::vector<HostTensor> in = {Random(DType::kFloat64, c.x), Random(DType::kFloat64, c.w)};
    if (c.bias) in.push_back(Random(DType::kFloat64, {c.w[0]}));
    Attrs attrs = ConvAttrs(c);
    auto forward = [&](const std::vector<HostTensor>& inputs) { return MustRun("convolution", attrs, inputs)[0]; };
    const HostTensor y = forward(in);
    const std::vector<double> weights = RandomWeights(y.numel());
    attrs.Set("output_mask", Ints{1, 1, c.bias ? 1 : 0});
    auto grads = MustRun("convolution_backward", attrs, {AsTensor(weights, y.type.shape), in[0], in[1]});
    ASSERT_EQ(grads.size(), 3u);
    EXPECT_TRUE(Near(Values(grads[0]), NumericGradient(forward, in, 0, weights), kGradTolerance)) << "grad_input";
    EXPECT_TRUE(Near(Values(grads[1]), NumericGradient(forward, in, 1, weights), kGradTolerance)) << "grad_weight";
    if (c.bias) {
      EXPECT_TRUE(Near(Values(grads[2]), NumericGradient(forward, in, 2, weights), kGradTolerance)) << "grad_bias";
    } else {
      EXPECT_EQ(grads[2].numel(), 0);
    }
  }
}

TEST_F(SpatialKernelTest, Convolution3dInHalfTypesMatchesFloat64) {
  for (DType dtype : kHalfTypes) {
    const Conv3dCase c = Conv3dCases()[3];
    std::vector<HostTensor> in = {Random(dtype, c.x), Random(dtype, c.w), Random(dtype, {c.w[0]})};
    auto out = MustRun("convolution", ConvAttrs(c), in);
    const std::vector<double> b = Values(in[2]);
    EXPECT_TRUE(Close(out[0], RefConv3d(c, Values(in[0]), Values(in[1]), &b, out[0].type.shape),
                      half_test::Tolerance(dtype, 24)))
        << DTypeName(dtype);
  }
}

// ------------------------------------------------------------ batch norm over volumes

TEST_F(SpatialKernelTest, BatchNormOverVolumesMatchesDirectComputation) {
  const Shape shape = {3, 4, 2, 3, 5};
  std::vector<HostTensor> in = {Random(DType::kFloat64, shape, -1.0, 2.0), Random(DType::kFloat64, {4}),
                                Random(DType::kFloat64, {4}), Random(DType::kFloat64, {4}),
                                Random(DType::kFloat64, {4}, 0.5, 1.5)};
  const Attrs attrs = MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}});
  auto out = MustRun("_native_batch_norm_legit_functional", attrs, in);
  ASSERT_EQ(out.size(), 5u);
  const std::vector<double> x = Values(in[0]), w = Values(in[1]), b = Values(in[2]), rm = Values(in[3]),
                            rv = Values(in[4]);
  const int64_t inner = 2 * 3 * 5, count = 3 * inner;
  std::vector<double> y(x.size()), mean(4), invstd(4), new_rm(4), new_rv(4);
  for (int64_t c = 0; c < 4; ++c) {
    double sum = 0, sq = 0;
    for (int64_t n = 0; n < 3; ++n) {
      for (int64_t s = 0; s < inner; ++s) sum += x[(n * 4 + c) * inner + s];
    }
    mean[c] = sum / count;
    for (int64_t n = 0; n < 3; ++n) {
      for (int64_t s = 0; s < inner; ++s) sq += std::pow(x[(n * 4 + c) * inner + s] - mean[c], 2);
    }
    invstd[c] = 1.0 / std::sqrt(sq / count + 1e-5);
    new_rm[c] = 0.9 * rm[c] + 0.1 * mean[c];
    new_rv[c] = 0.9 * rv[c] + 0.1 * sq / (count - 1);
    for (int64_t n = 0; n < 3; ++n) {
      for (int64_t s = 0; s < inner; ++s) {
        const int64_t at = (n * 4 + c) * inner + s;
        y[at] = (x[at] - mean[c]) * invstd[c] * w[c] + b[c];
      }
    }
  }
  EXPECT_TRUE(Near(Values(out[0]), y, 1e-12));
  EXPECT_TRUE(Near(Values(out[1]), mean, 1e-12));
  EXPECT_TRUE(Near(Values(out[2]), invstd, 1e-12));
  EXPECT_TRUE(Near(Values(out[3]), new_rm, 1e-12));
  EXPECT_TRUE(Near(Values(out[4]), new_rv, 1e-12));
  // The backward against finite differences of the training forward.
  auto forward = [&](const std::vector<HostTensor>& inputs) {
    return MustRun("_native_batch_norm_legit_functional", attrs, inputs)[0];
  };
  const std::vector<double> weights = RandomWeights(out[0].numel());
  const Attrs backward = MakeAttrs({{"train", true}, {"eps", 1e-5}, {"output_mask", Ints{1, 1, 1}}});
  auto grads = MustRun("native_batch_norm_backward", backward,
                       {AsTensor(weights, shape), in[0], in[1], in[3], in[4], out[1], out[2]});
  ASSERT_EQ(grads.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(Near(Values(grads[k]), NumericGradient(forward, in, k, weights), kGradTolerance)) << k;
  }
}

}  // namespace
}  // namespace tandem
