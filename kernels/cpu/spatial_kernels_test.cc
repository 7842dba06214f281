// The spatial ops' CPU kernels (group norm, resampling, padding): every
// forward kernel against a direct computation written here (its own index
// arithmetic, in double), every backward kernel against central finite
// differences of the forward kernel in float64, on random inputs (the seed
// is printed; TANDEM_TEST_SEED replays it); the 16-bit kernels against
// float64 computations on the same (rounded) inputs, within the 16-bit
// tolerance. 3-D pooling, 3-D convolution and batch norm over volumes:
// volume_kernels_test.cc.
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
using half_test::Get;
using half_test::HostTensor;
using half_test::MustRun;
using half_test::Set;
using half_test::Values;
using spatial_test::Floats;
using spatial_test::Ints;
using spatial_test::kGradTolerance;
using spatial_test::kHalfTypes;
using spatial_test::Near;
using spatial_test::SpatialKernelTest;
using spatial_test::Tolerance;

// ------------------------------------------------------------ group norm

struct GroupNormRef {
  std::vector<double> y, mean, rstd;
};

GroupNormRef ReferenceGroupNorm(const std::vector<double>& x, const std::vector<double>* w,
                                const std::vector<double>* b, int64_t n, int64_t c, int64_t hw, int64_t groups,
                                double eps) {
  GroupNormRef r;
  r.y.resize(x.size());
  const int64_t cpg = c / groups;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      double sum = 0, count = 0;
      for (int64_t ch = g * cpg; ch < (g + 1) * cpg; ++ch) {
        for (int64_t s = 0; s < hw; ++s) sum += x[(i * c + ch) * hw + s], ++count;
      }
      const double mean = sum / count;
      double var = 0;
      for (int64_t ch = g * cpg; ch < (g + 1) * cpg; ++ch) {
        for (int64_t s = 0; s < hw; ++s) var += std::pow(x[(i * c + ch) * hw + s] - mean, 2);
      }
      const double rstd = 1.0 / std::sqrt(var / count + eps);
      for (int64_t ch = g * cpg; ch < (g + 1) * cpg; ++ch) {
        for (int64_t s = 0; s < hw; ++s) {
          const int64_t at = (i * c + ch) * hw + s;
          r.y[at] = (x[at] - mean) * rstd * (w ? (*w)[ch] : 1.0) + (b ? (*b)[ch] : 0.0);
        }
      }
      r.mean.push_back(mean);
      r.rstd.push_back(rstd);
    }
  }
  return r;
}

Attrs GroupNormAttrs(const Shape& x, int64_t groups, double eps = 1e-5) {
  int64_t hw = 1;
  for (size_t d = 2; d < x.size(); ++d) hw *= x[d];
  return MakeAttrs({{"N", x[0]}, {"C", x[1]}, {"HxW", hw}, {"group", groups}, {"eps", eps}});
}

struct GroupNormCase {
  Shape x;
  int64_t groups;
  int affine;  // inputs after x: 0, 1 (weight) or 2 (weight and bias)
};

const std::vector<GroupNormCase>& GroupNormCases() {
  static const std::vector<GroupNormCase> cases = {
      {{2, 6, 3, 4}, 3, 2}, {{3, 4, 5}, 1, 1}, {{2, 8, 2, 2, 3}, 8, 0}, {{4, 6}, 2, 2}, {{1, 32, 4, 4}, 32, 2}};
  return cases;
}

TEST_F(SpatialKernelTest, GroupNormMatchesDirectComputation) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const GroupNormCase& c : GroupNormCases()) {
      SCOPED_TRACE(ShapeString(c.x) + " groups " + std::to_string(c.groups) + " " + DTypeName(dtype));
      std::vector<HostTensor> in = {Random(dtype, c.x, -2.0, 3.0)};
      for (int k = 0; k < c.affine; ++k) in.push_back(Random(dtype, {c.x[1]}));
      const std::vector<double> w = c.affine > 0 ? Values(in[1]) : std::vector<double>{};
      const std::vector<double> b = c.affine > 1 ? Values(in[2]) : std::vector<double>{};
      const Attrs attrs = GroupNormAttrs(c.x, c.groups, 1e-3);
      auto out = MustRun("native_group_norm", attrs, in);
      ASSERT_EQ(out.size(), 3u);
      int64_t hw = in[0].numel() / (c.x[0] * c.x[1]);
      const GroupNormRef ref = ReferenceGroupNorm(Values(in[0]), c.affine > 0 ? &w : nullptr,
                                                  c.affine > 1 ? &b : nullptr, c.x[0], c.x[1], hw, c.groups, 1e-3);
      EXPECT_TRUE(Near(Values(out[0]), ref.y, 4 * Tolerance(dtype)));
      EXPECT_TRUE(Near(Values(out[1]), ref.mean, Tolerance(dtype)));
      EXPECT_TRUE(Near(Values(out[2]), ref.rstd, Tolerance(dtype)));
      EXPECT_EQ(out[1].type, (TensorType{dtype, {c.x[0], c.groups}}));
    }
  }
}

TEST_F(SpatialKernelTest, GroupNormBackwardMatchesFiniteDifferences) {
  for (const GroupNormCase& c : GroupNormCases()) {
    SCOPED_TRACE(ShapeString(c.x) + " groups " + std::to_string(c.groups));
    std::vector<HostTensor> in = {Random(DType::kFloat64, c.x, -2.0, 3.0)};
    for (int k = 0; k < c.affine; ++k) in.push_back(Random(DType::kFloat64, {c.x[1]}, 0.5, 1.5));
    Attrs attrs = GroupNormAttrs(c.x, c.groups, 1e-3);
    auto forward = [&](const std::vector<HostTensor>& inputs) {
      return MustRun("native_group_norm", attrs, inputs)[0];
    };
    auto out = MustRun("native_group_norm", attrs, in);
    const std::vector<double> weights = RandomWeights(out[0].numel());
    Attrs backward = attrs;
    backward.Set("output_mask", Ints{1, 1, 1});
    std::vector<HostTensor> bin = {AsTensor(weights, c.x), in[0], out[1], out[2]};
    if (c.affine > 0) bin.push_back(in[1]);
    auto grads = MustRun("native_group_norm_backward", backward, bin);
    ASSERT_EQ(grads.size(), 3u);
    EXPECT_TRUE(Near(Values(grads[0]), NumericGradient(forward, in, 0, weights), kGradTolerance)) << "grad_input";
    if (c.affine > 0) {
      EXPECT_TRUE(Near(Values(grads[1]), NumericGradient(forward, in, 1, weights), kGradTolerance)) << "grad_weight";
    }
    if (c.affine > 1) {
      EXPECT_TRUE(Near(Values(grads[2]), NumericGradient(forward, in, 2, weights), kGradTolerance)) << "grad_bias";
    }
    // Without affine parameters, grad_weight and grad_bias are those of a
    // weight of ones and a bias of zeros.
    if (c.affine == 0) {
      std::vector<HostTensor> ones = {in[0],
                                      half_test::Make(DType::kFloat64, {c.x[1]}, std::vector<double>(c.x[1], 1.0)),
                                      half_test::Make(DType::kFloat64, {c.x[1]}, std::vector<double>(c.x[1], 0.0))};
      EXPECT_TRUE(Near(Values(grads[1]), NumericGradient(forward, ones, 1, weights), kGradTolerance));
      EXPECT_TRUE(Near(Values(grads[2]), NumericGradient(forward, ones, 2, weights), kGradTolerance));
    }
    // Masked-off outputs are [0] and the others unchanged.
    backward.Set("output_mask", Ints{0, 1, 0});
    auto partial = MustRun("native_group_norm_backward", backward, bin);
    ASSERT_EQ(partial.size(), 3u);
    EXPECT_EQ(partial[0].numel(), 0);
    EXPECT_EQ(partial[2].numel(), 0);
    EXPECT_EQ(Values(partial[1]), Values(grads[1]));
  }
}

TEST_F(SpatialKernelTest, GroupNormInHalfTypesMatchesFloat64) {
  for (DType dtype : kHalfTypes) {
    const Shape shape = {2, 8, 5, 6};
    std::vector<HostTensor> in = {Random(dtype, shape, -2.0, 3.0), Random(dtype, {8}), Random(dtype, {8})};
    const Attrs attrs = GroupNormAttrs(shape, 4);
    auto out = MustRun("native_group_norm", attrs, in);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[1].type.dtype, dtype);  // PyTorch's rule: statistics in the input's dtype
    const std::vector<double> w = Values(in[1]), b = Values(in[2]);
    const GroupNormRef ref = ReferenceGroupNorm(Values(in[0]), &w, &b, 2, 8, 30, 4, 1e-5);
    EXPECT_TRUE(Close(out[0], ref.y, half_test::Tolerance(dtype, 60))) << DTypeName(dtype);
    EXPECT_TRUE(Close(out[1], ref.mean, half_test::Tolerance(dtype, 60))) << DTypeName(dtype);
    EXPECT_TRUE(Close(out[2], ref.rstd, half_test::Tolerance(dtype, 60))) << DTypeName(dtype);
    // The backward against the float64 kernel on the same 16-bit values.
    Attrs backward = attrs;
    backward.Set("output_mask", Ints{1, 1, 1});
    const HostTensor dy = Random(dtype, shape);
    auto grads = MustRun("native_group_norm_backward", backward, {dy, in[0], out[1], out[2], in[1]});
    auto wide = [](const HostTensor& t) { return half_test::Make(DType::kFloat64, t.type.shape, Values(t)); };
    auto ref_grads = MustRun("native_group_norm_backward", backward,
                             {wide(dy), wide(in[0]), wide(out[1]), wide(out[2]), wide(in[1])});
    for (int k = 0; k < 3; ++k) {
      EXPECT_TRUE(Close(grads[k], Values(ref_grads[k]), half_test::Tolerance(dtype, 120))) << DTypeName(dtype) << k;
    }
  }
}

// ------------------------------------------------------------ resampling

// PyTorch's nearest source index, written out: float32 scale, floor of the
// float32 product, clamped.
int64_t RefNearest(int64_t dst, int64_t in, int64_t out, double scale_arg) {
  const float scale = scale_arg > 0 ? static_cast<float>(1.0 / scale_arg) : static_cast<float>(in) / out;
  return std::min(static_cast<int64_t>(std::floor(static_cast<float>(dst) * scale)), in - 1);
}

// PyTorch's bilinear taps (area_pixel_compute_source_index) in A.
template <typename A>
void RefLinear(int64_t dst, int64_t in, int64_t out, bool align, double scale_arg, int64_t* i0, int64_t* i1,
               double* lambda) {
  A scale;
  if (align) {
    scale = out > 1 ? static_cast<A>(in - 1) / static_cast<A>(out - 1) : A(0);
  } else {
    scale = scale_arg > 0 ? static_cast<A>(1.0 / scale_arg) : static_cast<A>(in) / static_cast<A>(out);
  }
  A src = align ? scale * static_cast<A>(dst) : scale * (static_cast<A>(dst) + A(0.5)) - A(0.5);
  if (src < 0) src = 0;
  *i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
  *i1 = *i0 < in - 1 ? *i0 + 1 : *i0;
  *lambda = std::clamp(static_cast<double>(src - static_cast<A>(*i0)), 0.0, 1.0);
}

struct ResampleCase {
  std::string op;  // the forward op
  Shape x;
  Attrs attrs;
  Ints out;            // OH, OW
  Floats scales;       // what the kernel uses (0: none)
  bool align = false;  // bilinear
};

std::vector<ResampleCase> NearestCases() {
  return {
      {"upsample_nearest2d", {2, 3, 4, 5}, MakeAttrs({{"output_size", Ints{8, 10}}}), {8, 10}, {0, 0}},
      {"upsample_nearest2d", {1, 2, 5, 7}, MakeAttrs({{"output_size", Ints{13, 3}}}), {13, 3}, {0, 0}},
      {"upsample_nearest2d",
       {1, 2, 5, 7},
       MakeAttrs({{"output_size", Ints{9, 16}}, {"scales_h", 1.9}, {"scales_w", 2.3}}),
       {9, 16},
       {1.9, 2.3}},
      {"upsample_nearest2d.vec", {2, 2, 3, 6}, MakeAttrs({{"scale_factors", Floats{2.0, 1.5}}}), {6, 9}, {2.0, 1.5}},
      {"upsample_nearest2d.vec", {1, 3, 7, 7}, MakeAttrs({{"output_size", Ints{3, 11}}}), {3, 11}, {0, 0}},
  };
}

std::vector<ResampleCase> BilinearCases() {
  std::vector<ResampleCase> cases;
  for (bool align : {false, true}) {
    auto with = [&](std::vector<std::pair<std::string, AttrValue>> v) {
      Attrs a;
      for (auto& [k, x] : v) a.Set(k, x);
      a.Set("align_corners", align);
      return a;
    };
    cases.push_back(
        {"upsample_bilinear2d", {2, 3, 4, 5}, with({{"output_size", Ints{8, 10}}}), {8, 10}, {0, 0}, align});
    cases.push_back(
        {"upsample_bilinear2d", {1, 2, 7, 6}, with({{"output_size", Ints{3, 13}}}), {3, 13}, {0, 0}, align});
    cases.push_back({"upsample_bilinear2d", {1, 1, 1, 4}, with({{"output_size", Ints{1, 1}}}), {1, 1}, {0, 0}, align});
    cases.push_back({"upsample_bilinear2d",
                     {1, 2, 5, 4},
                     with({{"output_size", Ints{11, 9}}, {"scales_h", 2.2}, {"scales_w", 2.3}}),
                     {11, 9},
                     {2.2, 2.3},
                     align});
    cases.push_back({"upsample_bilinear2d.vec",
                     {2, 2, 5, 6},
                     with({{"scale_factors", Floats{8.0, 0.5}}}),
                     {40, 3},
                     {8.0, 0.5},
                     align});
  }
  return cases;
}

std::vector<double> RefResample(const ResampleCase& c, const std::vector<double>& x, DType dtype) {
  const int64_t planes = c.x[0] * c.x[1], h = c.x[2], w = c.x[3], oh = c.out[0], ow = c.out[1];
  std::vector<double> y(static_cast<size_t>(planes * oh * ow));
  const bool bilinear = c.op.find("bilinear") != std::string::npos;
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        double v;
        if (!bilinear) {
          v = x[(p * h + RefNearest(oy, h, oh, c.scales[0])) * w + RefNearest(ox, w, ow, c.scales[1])];
        } else {
          int64_t y0, y1, x0, x1;
          double ly, lx;
          if (dtype == DType::kFloat64) {
            RefLinear<double>(oy, h, oh, c.align, c.scales[0], &y0, &y1, &ly);
            RefLinear<double>(ox, w, ow, c.align, c.scales[1], &x0, &x1, &lx);
          } else {
            RefLinear<float>(oy, h, oh, c.align, c.scales[0], &y0, &y1, &ly);
            RefLinear<float>(ox, w, ow, c.align, c.scales[1], &x0, &x1, &lx);
          }
          auto at = [&](int64_t yy, int64_t xx) { return x[(p * h + yy) * w + xx]; };
          v = (1 - ly) * ((1 - lx) * at(y0, x0) + lx * at(y0, x1)) + ly * ((1 - lx) * at(y1, x0) + lx * at(y1, x1));
        }
        y[(p * oh + oy) * ow + ox] = v;
      }
    }
  }
  return y;
}

// The backward op of `c` and its attributes (output_size, input_size, and
// the forward's scale attributes).
std::pair<std::string, Attrs> BackwardOf(const ResampleCase& c) {
  const bool vec = c.op.size() > 4 && c.op.substr(c.op.size() - 4) == ".vec";
  const std::string op = (vec ? c.op.substr(0, c.op.size() - 4) : c.op) + "_backward" + (vec ? ".vec" : "");
  Attrs attrs = c.attrs;
  attrs.Set("input_size", Ints(c.x.begin(), c.x.end()));
  return {op, attrs};
}

TEST_F(SpatialKernelTest, UpsamplingMatchesPyTorchsIndexFormulas) {
  std::vector<ResampleCase> cases = NearestCases();
  for (const ResampleCase& c : BilinearCases()) cases.push_back(c);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const ResampleCase& c : cases) {
      SCOPED_TRACE(c.op + " " + ShapeString(c.x) + " -> " + ShapeString(c.out) + " align " + std::to_string(c.align) +
                   " " + DTypeName(dtype));
      const HostTensor x = Random(dtype, c.x);
      auto out = MustRun(c.op, c.attrs, {x});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].type.shape, (Shape{c.x[0], c.x[1], c.out[0], c.out[1]}));
      EXPECT_TRUE(Near(Values(out[0]), RefResample(c, Values(x), dtype), Tolerance(dtype)));
    }
  }
}

// Nearest upsampling copies: known results by hand.
TEST_F(SpatialKernelTest, NearestUpsamplingByHand) {
  const HostTensor x = half_test::Make(DType::kFloat32, {1, 1, 2, 3}, {1, 2, 3, 4, 5, 6});
  auto twice = MustRun("upsample_nearest2d.vec", MakeAttrs({{"scale_factors", Floats{2.0, 1.0}}}), {x});
  EXPECT_EQ(Values(twice[0]), (std::vector<double>{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}));
  // 3 -> 2 columns: scale 1.5, sources floor(0) = 0 and floor(1.5) = 1.
  auto fewer = MustRun("upsample_nearest2d", MakeAttrs({{"output_size", Ints{1, 2}}}), {x});
  EXPECT_EQ(Values(fewer[0]), (std::vector<double>{1, 2}));
  // align_corners bilinear 3 -> 5 columns: the midpoints.
  auto mid = MustRun("upsample_bilinear2d", MakeAttrs({{"output_size", Ints{2, 5}}, {"align_corners", true}}), {x});
  EXPECT_EQ(Values(mid[0]), (std::vector<double>{1, 1.5, 2, 2.5, 3, 4, 4.5, 5, 5.5, 6}));
}

TEST_F(SpatialKernelTest, UpsamplingBackwardMatchesFiniteDifferences) {
  std::vector<ResampleCase> cases = NearestCases();
  for (const ResampleCase& c : BilinearCases()) cases.push_back(c);
  for (const ResampleCase& c : cases) {
    SCOPED_TRACE(c.op + " " + ShapeString(c.x) + " -> " + ShapeString(c.out) + " align " + std::to_string(c.align));
    std::vector<HostTensor> in = {Random(DType::kFloat64, c.x)};
    auto forward = [&](const std::vector<HostTensor>& inputs) { return MustRun(c.op, c.attrs, inputs)[0]; };
    const Shape out_shape = {c.x[0], c.x[1], c.out[0], c.out[1]};
    const std::vector<double> weights = RandomWeights(NumElements(out_shape));
    const auto [op, attrs] = BackwardOf(c);
    auto grad = MustRun(op, attrs, {AsTensor(weights, out_shape)});
    ASSERT_EQ(grad.size(), 1u);
    EXPECT_EQ(grad[0].type.shape, c.x);
    EXPECT_TRUE(Near(Values(grad[0]), NumericGradient(forward, in, 0, weights), kGradTolerance)) << op;
  }
}

TEST_F(SpatialKernelTest, UpsamplingInHalfTypesMatchesFloat64) {
  std::vector<ResampleCase> cases = NearestCases();
  for (const ResampleCase& c : BilinearCases()) cases.push_back(c);
  for (DType dtype : kHalfTypes) {
    for (const ResampleCase& c : cases) {
      SCOPED_TRACE(c.op + " " + ShapeString(c.x) + " " + DTypeName(dtype));
      const HostTensor x = Random(dtype, c.x);
      auto out = MustRun(c.op, c.attrs, {x});
      // Float32 index arithmetic, as for a float32 tensor.
      EXPECT_TRUE(Close(out[0], RefResample(c, Values(x), DType::kFloat32), half_test::Tolerance(dtype, 4)));
      const Shape out_shape = {c.x[0], c.x[1], c.out[0], c.out[1]};
      const HostTensor dy = Random(dtype, out_shape);
      const auto [op, attrs] = BackwardOf(c);
      auto grad = MustRun(op, attrs, {dy});
      auto ref = MustRun(op, attrs, {half_test::Make(DType::kFloat32, out_shape, Values(dy))});
      EXPECT_TRUE(Close(grad[0], Values(ref[0]), half_test::Tolerance(dtype, 64))) << op;
    }
  }
}

// Reflection mirrors at the edges (without repeating them), replication
// clamps: the source of output position o, by walking.
int64_t RefPadSourceForIndexTest(bool reflect, int64_t o, int64_t before, int64_t in) {
  int64_t x = o - before;
  if (!reflect) return std::clamp<int64_t>(x, 0, in - 1);
  while (x < 0 || x >= in) x = x < 0 ? -x : 2 * (in - 1) - x;
  return x;
}

// The CUDA backward kernels gather: each source reads the destinations in
// the ranges spatial_index.h computes. Here, on the host, those ranges must
// be exactly the destinations whose forward map names the source.
TEST(SpatialIndexTest, GatherRangesAreTheForwardMapsPreimages) {
  struct Case {
    int64_t in, out;
    double scale;
  };
  std::vector<Case> cases;
  for (int64_t in : {1, 2, 3, 5, 7, 16, 33}) {
    for (int64_t out : {1, 2, 3, 4, 6, 9, 13, 32, 64, 100}) cases.push_back({in, out, 0.0});
    for (double scale : {0.5, 1.0, 1.3, 2.0, 2.2, 3.0, 8.0}) {
      cases.push_back({in, static_cast<int64_t>(std::floor(in * scale)), scale});
    }
  }
  for (const Case& c : cases) {
    if (c.out < 1) continue;
    SCOPED_TRACE(std::to_string(c.in) + " -> " + std::to_string(c.out) + " scale " + std::to_string(c.scale));
    const float nearest = spatial::ResampleScale<float>(c.in, c.out, c.scale);
    for (int64_t s = 0; s < c.in; ++s) {
      std::vector<int64_t> expected, got;
      for (int64_t d = 0; d < c.out; ++d) {
        if (spatial::NearestSource(nearest, d, c.in) == s) expected.push_back(d);
      }
      for (int64_t d = spatial::NearestFirstAtLeast(nearest, s, c.in, c.out);
           d < spatial::NearestFirstAtLeast(nearest, s + 1, c.in, c.out); ++d) {
        got.push_back(d);
      }
      ASSERT_EQ(got, expected) << "nearest source " << s;
    }
    for (bool align : {false, true}) {
      const float f = spatial::LinearScale<float>(c.in, c.out, align, c.scale);
      const double g = spatial::LinearScale<double>(c.in, c.out, align, c.scale);
      for (int64_t s = 0; s < c.in; ++s) {
        std::vector<int64_t> expected_f, got_f, expected_d, got_d;
        for (int64_t d = 0; d < c.out; ++d) {
          const auto tf = spatial::LinearTapAt<float>(f, d, c.in, align);
          if (tf.i0 == s || tf.i1 == s) expected_f.push_back(d);
          const auto td = spatial::LinearTapAt<double>(g, d, c.in, align);
          if (td.i0 == s || td.i1 == s) expected_d.push_back(d);
        }
        for (int64_t d = spatial::LinearFirstAtLeast<float>(f, s - 1, c.in, c.out, align);
             d < spatial::LinearFirstAtLeast<float>(f, s + 1, c.in, c.out, align); ++d) {
          got_f.push_back(d);
        }
        for (int64_t d = spatial::LinearFirstAtLeast<double>(g, s - 1, c.in, c.out, align);
             d < spatial::LinearFirstAtLeast<double>(g, s + 1, c.in, c.out, align); ++d) {
          got_d.push_back(d);
        }
        ASSERT_EQ(got_f, expected_f) << "bilinear (float) source " << s << " align " << align;
        ASSERT_EQ(got_d, expected_d) << "bilinear (double) source " << s << " align " << align;
      }
    }
  }
  // Padding: every output position whose source is x, in ascending order.
  for (int64_t in : {1, 2, 3, 6}) {
    for (int64_t before = 0; before < 7; ++before) {
      for (int64_t after = 0; after < 7; ++after) {
        const int64_t out = in + before + after;
        for (bool reflect : {true, false}) {
          if (reflect && (before >= in || after >= in)) continue;
          for (int64_t x = 0; x < in; ++x) {
            std::vector<int64_t> expected, got;
            for (int64_t o = 0; o < out; ++o) {
              const int64_t src =
                  reflect ? spatial::ReflectSource(o, before, in) : spatial::ReplicateSource(o, before, in);
              if (src == x) expected.push_back(o);
              EXPECT_EQ(src, RefPadSourceForIndexTest(reflect, o, before, in));
            }
            const spatial::PadPreimage p =
                reflect ? spatial::ReflectPreimage(x, before, in, out) : spatial::ReplicatePreimage(x, before, in, out);
            for (int k = 0; k < p.count; ++k) {
              for (int64_t o = p.begin[k]; o < p.end[k]; ++o) got.push_back(o);
            }
            ASSERT_EQ(got, expected) << (reflect ? "reflect" : "replicate") << " in " << in << " before " << before
                                     << " after " << after << " x " << x;
          }
        }
      }
    }
  }
}

// ------------------------------------------------------------ padding

TEST_F(SpatialKernelTest, ConstantPadMatchesDirectIndexing) {
  struct Case {
    Shape x;
    Ints pad;
  };
  const std::vector<Case> cases = {{{3, 4}, {1, 2}},
                                   {{2, 3, 4}, {1, 2, -1, 0, 3, 3}},
                                   {{2, 3, 4, 5}, {0, 0, 2, 1}},
                                   {{5}, {-2, 3}},
                                   {{2, 2, 2, 2, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
                                   {{4, 4}, {-1, -1, -2, -1}}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kBool, DType::kBFloat16,
                      DType::kFloat16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(ShapeString(c.x) + " pad " + ShapeString(c.pad) + " " + DTypeName(dtype));
      const HostTensor x = dtype == DType::kBool ? Random(DType::kFloat32, c.x, 0, 2) : Random(dtype, c.x, -50, 50);
      HostTensor in({dtype, c.x});
      for (int64_t i = 0; i < x.numel(); ++i) Set(in, i, dtype == DType::kBool ? std::floor(Get(x, i)) : Get(x, i));
      const double value = dtype == DType::kBool ? 1.0 : 7.0;
      auto out = MustRun("constant_pad_nd", MakeAttrs({{"pad", c.pad}, {"value", value}}), {in});
      ASSERT_EQ(out.size(), 1u);
      const int rank = static_cast<int>(c.x.size());
      Shape out_shape = c.x;
      std::vector<int64_t> before(c.x.size(), 0);
      for (size_t k = 0; 2 * k < c.pad.size(); ++k) {
        out_shape[rank - 1 - k] += c.pad[2 * k] + c.pad[2 * k + 1];
        before[rank - 1 - k] = c.pad[2 * k];
      }
      ASSERT_EQ(out[0].type.shape, out_shape);
      std::vector<double> expected;
      std::vector<int64_t> index(out_shape.size(), 0);
      for (int64_t i = 0; i < NumElements(out_shape); ++i) {
        int64_t r = i, src = 0, stride = 1;
        bool inside = true;
        for (int d = rank - 1; d >= 0; --d) {
          const int64_t o = r % out_shape[d];
          r /= out_shape[d];
          const int64_t s = o - before[d];
          inside = inside && s >= 0 && s < c.x[d];
          src += s * stride;
          stride *= c.x[d];
        }
        expected.push_back(inside ? Get(in, src) : value);
      }
      EXPECT_EQ(Values(out[0]), expected);
    }
  }
  // An int attribute converts exactly into int64.
  const HostTensor big({DType::kInt64, {1}});
  auto exact =
      MustRun("constant_pad_nd", MakeAttrs({{"pad", Ints{1, 0}}, {"value", int64_t{9007199254740993}}}), {big});
  EXPECT_EQ(static_cast<const int64_t*>(exact[0].data())[0], 9007199254740993);
}

// The source of output position o: reflection mirrors at the edges (without
// repeating them), replication clamps.
int64_t RefPadSource(bool reflect, int64_t o, int64_t before, int64_t in) {
  return RefPadSourceForIndexTest(reflect, o, before, in);
}

struct PadCase {
  std::string op;
  Shape x;
  Ints padding;
};

std::vector<PadCase> PadCases() {
  return {{"reflection_pad1d", {2, 3, 6}, {2, 5}},
          {"reflection_pad1d", {3, 4}, {3, 0}},
          {"reflection_pad2d", {2, 2, 4, 5}, {1, 2, 3, 1}},
          {"reflection_pad2d", {3, 4, 6}, {4, 4, 0, 2}},
          {"reflection_pad3d", {1, 2, 3, 4, 5}, {1, 1, 2, 3, 2, 0}},
          {"replication_pad1d", {2, 3, 1}, {2, 3}},
          {"replication_pad2d", {2, 2, 3, 4}, {3, 1, 0, 4}},
          {"replication_pad2d", {3, 1, 1}, {2, 2, 2, 2}},
          {"replication_pad3d", {2, 2, 3, 4}, {1, 2, 2, 1, 3, 0}}};
}

int PadDims(const std::string& op) { return op[op.find("_pad") + 4] - '0'; }

std::vector<double> RefPad(const PadCase& c, const std::vector<double>& x, Shape* out_shape) {
  const bool reflect = c.op.rfind("reflection", 0) == 0;
  const int dims = PadDims(c.op);
  const int rank = static_cast<int>(c.x.size());
  Shape out = c.x;
  for (int k = 0; k < dims; ++k) out[rank - 1 - k] += c.padding[2 * k] + c.padding[2 * k + 1];
  *out_shape = out;
  std::vector<double> y;
  for (int64_t i = 0; i < NumElements(out); ++i) {
    int64_t r = i, src = 0, stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t o = r % out[d];
      r /= out[d];
      const int k = rank - 1 - d;
      const int64_t s = k < dims ? RefPadSource(reflect, o, c.padding[2 * k], c.x[d]) : o;
      src += s * stride;
      stride *= c.x[d];
    }
    y.push_back(x[src]);
  }
  return y;
}

TEST_F(SpatialKernelTest, ReflectionAndReplicationPadsMatchDirectIndexing) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    for (const PadCase& c : PadCases()) {
      SCOPED_TRACE(c.op + " " + ShapeString(c.x) + " padding " + ShapeString(c.padding) + " " + DTypeName(dtype));
      const HostTensor x = Random(dtype, c.x);
      auto out = MustRun(c.op, MakeAttrs({{"padding", c.padding}}), {x});
      ASSERT_EQ(out.size(), 1u);
      Shape out_shape;
      const std::vector<double> expected = RefPad(c, Values(x), &out_shape);
      EXPECT_EQ(out[0].type.shape, out_shape);
      EXPECT_EQ(Values(out[0]), expected);  // copies are exact
    }
  }
  // By hand: [1, 2, 3] reflected by (2, 1) and replicated by (2, 1).
  const HostTensor x = half_test::Make(DType::kFloat32, {1, 3}, {1, 2, 3});
  EXPECT_EQ(Values(MustRun("reflection_pad1d", MakeAttrs({{"padding", Ints{2, 1}}}), {x})[0]),
            (std::vector<double>{3, 2, 1, 2, 3, 2}));
  EXPECT_EQ(Values(MustRun("replication_pad1d", MakeAttrs({{"padding", Ints{2, 1}}}), {x})[0]),
            (std::vector<double>{1, 1, 1, 2, 3, 3}));
}

TEST_F(SpatialKernelTest, PadBackwardMatchesFiniteDifferences) {
  for (const PadCase& c : PadCases()) {
    SCOPED_TRACE(c.op + " " + ShapeString(c.x) + " padding " + ShapeString(c.padding));
    const Attrs attrs = MakeAttrs({{"padding", c.padding}});
    std::vector<HostTensor> in = {Random(DType::kFloat64, c.x)};
    auto forward = [&](const std::vector<HostTensor>& inputs) { return MustRun(c.op, attrs, inputs)[0]; };
    const HostTensor y = forward(in);
    const std::vector<double> weights = RandomWeights(y.numel());
    auto grad = MustRun(c.op + "_backward", attrs, {AsTensor(weights, y.type.shape), in[0]});
    ASSERT_EQ(grad.size(), 1u);
    EXPECT_TRUE(Near(Values(grad[0]), NumericGradient(forward, in, 0, weights), kGradTolerance));
    // 16-bit backward against float64 on the same values.
    for (DType dtype : kHalfTypes) {
      const HostTensor dy = Random(dtype, y.type.shape);
      const HostTensor x16 = Random(dtype, c.x);
      auto g16 = MustRun(c.op + "_backward", attrs, {dy, x16});
      auto g64 =
          MustRun(c.op + "_backward", attrs, {half_test::Make(DType::kFloat64, y.type.shape, Values(dy)), in[0]});
      EXPECT_TRUE(Close(g16[0], Values(g64[0]), half_test::Tolerance(dtype, 16))) << DTypeName(dtype);
    }
  }
}

}  // namespace
}  // namespace tandem
