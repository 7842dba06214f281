// The spatial ops' CUDA kernels against the CPU kernels (the oracle), on
// fresh random inputs and shapes (the seed is printed), in float32, float64,
// bfloat16 and float16: group norm and its backward, nearest and bilinear
// upsampling (default and .vec forms) and their gathering backward ops,
// constant_pad_nd in every dtype, reflection and replication padding and
// their backward ops, 3-D pooling and its backward ops, 3-D convolution
// through cuDNN (the layers of R3D-18 and R(2+1)D-18) and batch norm over
// volumes. Each graph runs twice on the GPU, op by op and as a replay of the
// captured CUDA graph; outputs are poisoned (0xFF bytes: NaN) before each
// run and NaN never passes.
//
// Tolerances (normwise relative, ||gpu - cpu|| / ||cpu||): float64 1e-12;
// float32 1e-5 (both sides sum in double or round float32 index arithmetic
// identically; bilinear values are float32 on the GPU, as PyTorch computes
// them), 1e-4 for cuDNN convolutions; 16-bit results 2u + 1e-3 (the GPU
// sums in float32, the CPU in double, and both round once: an element lands
// at most an ulp apart; u = 2^-8 for bfloat16, 2^-11 for float16), 4u + 2e-3
// for convolutions. Copies (nearest upsampling, padding, max pooling and its
// indices, constant_pad_nd in every dtype) must match bit for bit. A wrong
// kernel (a misplaced tap, group or window) is off by O(1).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

using Ints = std::vector<int64_t>;
using Floats = std::vector<double>;

constexpr DType kFloatTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16};

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }
double UnitRoundoff(DType dtype) { return dtype == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

int64_t Dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(Rng()); }

// The tolerance of a value of `dtype`; `conv` for cuDNN convolutions.
double ToleranceFor(DType dtype, bool conv = false) {
  if (dtype == DType::kFloat64) return 1e-12;
  if (IsHalf(dtype)) return conv ? 4 * UnitRoundoff(dtype) + 2e-3 : 2 * UnitRoundoff(dtype) + 1e-3;
  return conv ? 1e-4 : 1e-5;
}

enum class Exactness { kTolerance, kBitForBit };

// Every node output on the GPU (op by op and replayed) against the CPU's.
void Check(const GraphMaker& maker, Exactness exactness = Exactness::kTolerance, bool conv = false) {
  CompareWithCpu(maker, [&](const OutputPair& o) {
    EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), ToleranceFor(o.type().dtype, conv))) << o.Where();
    if (exactness == Exactness::kBitForBit) {
      EXPECT_TRUE(SameBytes(*o.gpu, *o.ref)) << o.Where();
    }
  });
}

class CudaSpatialOps : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
};

// ------------------------------------------------------------ group norm

TEST_P(CudaSpatialOps, GroupNormAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  struct Case {
    std::string name;
    Shape x;
    int64_t groups;
    int affine;  // 0, 1 (weight) or 2 (weight and bias)
    Ints mask;
  };
  const std::vector<Case> cases = {
      {"diffusion unet 32 groups", {2, 64, 16, 16}, 32, 2, {1, 1, 1}},
      {"one group (layer norm over C, H, W)", {Dim(1, 3), 8, Dim(3, 20), Dim(3, 20)}, 1, 2, {1, 1, 1}},
      {"instance norm (a group per channel)", {3, 6, 7, 5}, 6, 0, {1, 0, 0}},
      {"weight only, [N, C]", {5, 12}, 4, 1, {1, 1, 0}},
      {"volume", {2, 8, 3, 5, 6}, 2, 2, {0, 1, 1}},
      {"large rows", {1, 32, 64, 64}, 4, 2, {1, 1, 1}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + " " + ShapeString(c.x));
    GraphMaker g;
    const int x = g.Feed({dtype(), c.x});
    std::vector<int> inputs = {x};
    for (int k = 0; k < c.affine; ++k) inputs.push_back(g.Feed({dtype(), {c.x[1]}}));
    int64_t hw = 1;
    for (size_t d = 2; d < c.x.size(); ++d) hw *= c.x[d];
    Attrs attrs = MakeAttrs({{"N", c.x[0]}, {"C", c.x[1]}, {"HxW", hw}, {"group", c.groups}, {"eps", 1e-5}});
    const std::vector<int> out = g.Add("native_group_norm", inputs, attrs);
    const int grad = g.Feed({dtype(), c.x});
    std::vector<int> backward = {grad, x, out[1], out[2]};
    if (c.affine > 0) backward.push_back(inputs[1]);
    attrs.Set("output_mask", c.mask);
    g.Add("native_group_norm_backward", backward, attrs);
    Check(g);
  }
}

// ------------------------------------------------------------ resampling

TEST_P(CudaSpatialOps, UpsamplingAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  struct Case {
    std::string op;  // forward op
    Shape x;
    Attrs attrs;
  };
  std::vector<Case> cases = {
      {"upsample_nearest2d.vec", {2, 16, 8, 8}, MakeAttrs({{"scale_factors", Floats{2.0, 2.0}}})},
      {"upsample_nearest2d", {1, 3, 5, 7}, MakeAttrs({{"output_size", Ints{13, 4}}})},
      {"upsample_nearest2d", {2, 2, Dim(2, 9), Dim(2, 9)}, MakeAttrs({{"output_size", Ints{Dim(1, 30), Dim(1, 30)}}})},
      {"upsample_nearest2d",
       {1, 2, 5, 7},
       MakeAttrs({{"output_size", Ints{9, 16}}, {"scales_h", 1.9}, {"scales_w", 2.3}})},
  };
  for (bool align : {false, true}) {
    auto with = [&](Attrs a) {
      a.Set("align_corners", align);
      return a;
    };
    // FCN's and LR-ASPP's final upsampling (by 8 to 32), odd sizes, downsampling.
    cases.push_back({"upsample_bilinear2d.vec", {2, 21, 8, 8}, with(MakeAttrs({{"output_size", Ints{64, 64}}}))});
    cases.push_back({"upsample_bilinear2d.vec", {1, 4, 5, 6}, with(MakeAttrs({{"scale_factors", Floats{8.0, 0.5}}}))});
    cases.push_back({"upsample_bilinear2d",
                     {2, 3, Dim(1, 12), Dim(1, 12)},
                     with(MakeAttrs({{"output_size", Ints{Dim(1, 40), Dim(1, 40)}}}))});
    cases.push_back({"upsample_bilinear2d",
                     {1, 2, 5, 4},
                     with(MakeAttrs({{"output_size", Ints{11, 9}}, {"scales_h", 2.2}, {"scales_w", 2.3}}))});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + " " + ShapeString(c.x));
    GraphMaker g;
    const int x = g.Feed({dtype(), c.x});
    const int y = g.Add1(c.op, {x}, c.attrs);
    const int grad = g.Feed(g.type(y));
    const bool vec = c.op.size() > 4 && c.op.substr(c.op.size() - 4) == ".vec";
    const std::string backward = (vec ? c.op.substr(0, c.op.size() - 4) : c.op) + "_backward" + (vec ? ".vec" : "");
    Attrs attrs = c.attrs;
    attrs.Set("input_size", Ints(c.x.begin(), c.x.end()));
    g.Add(backward, {grad}, attrs);
    Check(g);
  }
}

// Nearest upsampling copies: bit for bit in every dtype.
TEST_P(CudaSpatialOps, NearestUpsamplingCopiesExactly) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker g;
  const int x = g.Feed({dtype(), {2, 3, Dim(1, 10), Dim(1, 10)}});
  g.Add("upsample_nearest2d", {x}, MakeAttrs({{"output_size", Ints{Dim(1, 25), Dim(1, 25)}}}));
  Check(g, Exactness::kBitForBit);
}

// ------------------------------------------------------------ padding

TEST(CudaSpatialOpsAnyDtype, ConstantPadEveryDtype) {
  TANDEM_SKIP_WITHOUT_GPU();
  struct Case {
    Shape x;
    Ints pad;
    double value;
  };
  const std::vector<Case> cases = {
      {{3, 4}, {1, 2}, 0.0},
      {{2, 3, 4}, {1, 2, -1, 0, 3, 3}, 1.0},
      {{2, 3, 4, 5}, {0, 0, 2, 1}, -2.0},
      {{5}, {-2, 3}, 3.0},
      {{2, 2, 2, 2, 2, 2, 2, 2, 2, 3}, {1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, 1.0},
      {{4, 6}, {-1, -1, -2, -1}, 0.0},
      {{}, {}, 1.0}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kBool, DType::kBFloat16,
                      DType::kFloat16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(ShapeString(c.x) + " pad " + ShapeString(c.pad) + " " + DTypeName(dtype));
      GraphMaker g;
      const int x = g.Feed({dtype, c.x});
      g.Add("constant_pad_nd", {x}, MakeAttrs({{"pad", c.pad}, {"value", c.value}}));
      Check(g, Exactness::kBitForBit);
    }
  }
  // An int value converts exactly into int64.
  GraphMaker g;
  const int x = g.Feed({DType::kInt64, {3}});
  g.Add("constant_pad_nd", {x}, MakeAttrs({{"pad", Ints{2, 1}}, {"value", int64_t{9007199254740993}}}));
  Check(g, Exactness::kBitForBit);
}

TEST_P(CudaSpatialOps, ReflectionAndReplicationPadsAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  struct Case {
    std::string op;
    Shape x;
    Ints padding;
  };
  const std::vector<Case> cases = {
      {"reflection_pad1d", {2, 3, 16}, {3, 5}},
      {"reflection_pad2d", {2, 3, 32, 32}, {3, 3, 3, 3}},  // CycleGAN / pix2pix style ReflectionPad2d(3)
      {"reflection_pad2d", {3, Dim(2, 9), Dim(2, 9)}, {1, 1, 1, 1}},
      {"reflection_pad3d", {1, 2, 4, 5, 6}, {1, 2, 3, 1, 2, 3}},
      {"replication_pad1d", {2, 3, 1}, {2, 3}},
      {"replication_pad2d", {2, 4, 7, 9}, {4, 1, 0, 9}},
      {"replication_pad3d", {2, 3, 4, 5}, {1, 2, 2, 1, 3, 0}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + " " + ShapeString(c.x) + " padding " + ShapeString(c.padding));
    const Attrs attrs = MakeAttrs({{"padding", c.padding}});
    GraphMaker forward;
    forward.Add(c.op, {forward.Feed({dtype(), c.x})}, attrs);
    Check(forward, Exactness::kBitForBit);
    GraphMaker g;
    const int x = g.Feed({dtype(), c.x});
    const int y = g.Add1(c.op, {x}, attrs);
    g.Add(c.op + "_backward", {g.Feed(g.type(y)), x}, attrs);
    Check(g);
  }
}

// ------------------------------------------------------------ 3-D pooling

TEST_P(CudaSpatialOps, Pooling3dAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  struct Case {
    Shape x;
    Ints kernel, stride, padding, dilation;
    bool ceil_mode, count_include_pad;
    int64_t divisor_override;
  };
  const std::vector<Case> cases = {// C3D / I3D style max pools: (1, 3, 3) s (1, 2, 2) p (0, 1, 1); (2, 2, 2) s 2.
                                   {{2, 8, 4, 14, 14}, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {1, 1, 1}, false, true, 0},
                                   {{1, 16, 8, 7, 7}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}, true, true, 0},
                                   {{3, 5, 6, 7}, {3, 3, 3}, {2, 1, 2}, {1, 1, 1}, {1, 2, 1}, false, false, 0},
                                   {{1, 2, 7, 7, 7}, {3, 2, 3}, {2, 3, 2}, {1, 1, 0}, {2, 1, 1}, true, false, 5}};
  for (const Case& c : cases) {
    SCOPED_TRACE(ShapeString(c.x) + " kernel " + ShapeString(c.kernel));
    for (bool max : {true, false}) {
      Attrs attrs = MakeAttrs(
          {{"kernel_size", c.kernel}, {"stride", c.stride}, {"padding", c.padding}, {"ceil_mode", c.ceil_mode}});
      if (max) {
        attrs.Set("dilation", c.dilation);
      } else {
        attrs.Set("count_include_pad", c.count_include_pad);
        if (c.divisor_override != 0) attrs.Set("divisor_override", c.divisor_override);
      }
      GraphMaker g;
      const int x = g.Feed({dtype(), c.x});
      const std::vector<int> out = g.Add(max ? "max_pool3d_with_indices" : "avg_pool3d", {x}, attrs);
      const int grad = g.Feed(g.type(out[0]));
      if (max) {
        g.Add("max_pool3d_with_indices_backward", {grad, x, out[1]}, attrs);
      } else {
        g.Add("avg_pool3d_backward", {grad, x}, attrs);
      }
      Check(g);
    }
  }
}

TEST_P(CudaSpatialOps, AdaptiveAvgPool3dAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  struct Case {
    Shape x;
    Ints out;
  };
  // R3D-18's head pools [N, 512, 1, 7, 7]-like volumes to 1 x 1 x 1.
  const std::vector<Case> cases = {{{4, 512, 2, 7, 7}, {1, 1, 1}},
                                   {{2, 3, 5, 7, 9}, {2, 3, 4}},
                                   {{3, 4, 3, 3}, {5, 2, 3}},
                                   {{1, 2, 16, 16, 16}, {1, 1, 1}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(ShapeString(c.x) + " -> " + ShapeString(c.out));
    GraphMaker g;
    const int x = g.Feed({dtype(), c.x});
    const int y = g.Add1("_adaptive_avg_pool3d", {x}, MakeAttrs({{"output_size", c.out}}));
    g.Add("_adaptive_avg_pool3d_backward", {g.Feed(g.type(y)), x});
    Check(g);
  }
}

// ------------------------------------------------------------ 3-D CNN layers

struct Conv3dSpec {
  std::string name;
  Shape x, w;
  Ints stride, padding;
  int64_t groups;
  bool bias;
  Ints mask = {1, 1, 1};
};

TEST_P(CudaSpatialOps, Convolution3dLayersOfVideoModels) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t n = Dim(1, 2);
  const std::vector<Conv3dSpec> specs = {
      {"r3d stem 3->64 3x7x7 s(1,2,2)", {n, 3, 8, 32, 32}, {64, 3, 3, 7, 7}, {1, 2, 2}, {1, 3, 3}, 1, false, {0, 1, 0}},
      {"r3d 64->64 3x3x3", {n, 64, 8, 8, 8}, {64, 64, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, false},
      {"r3d downsample 64->128 1x1x1 s2", {n, 64, 8, 8, 8}, {128, 64, 1, 1, 1}, {2, 2, 2}, {0, 0, 0}, 1, false},
      {"r(2+1)d spatial 1x3x3", {n, 64, 4, 8, 8}, {144, 64, 1, 3, 3}, {1, 1, 1}, {0, 1, 1}, 1, false},
      {"r(2+1)d temporal 3x1x1", {n, 144, 4, 8, 8}, {64, 144, 3, 1, 1}, {1, 1, 1}, {1, 0, 0}, 1, false},
      {"odd grouped with bias",
       {n, 9, Dim(3, 7), Dim(3, 9), Dim(3, 9)},
       {9, 3, 2, 3, 3},
       {1, 2, 1},
       {1, 1, 0},
       3,
       true},
      {"bias only grad", {n, 8, 4, 6, 6}, {8, 8, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1, true, {0, 0, 1}}};
  for (const Conv3dSpec& c : specs) {
    SCOPED_TRACE(c.name + " " + ShapeString(c.x));
    GraphMaker g;
    const int x = g.Feed({dtype(), c.x});
    const int w = g.Feed({dtype(), c.w}, c.w[1] * c.w[2] * c.w[3] * c.w[4] > 100 ? Fill::kSmall : Fill::kUniform);
    std::vector<int> inputs = {x, w};
    if (c.bias) inputs.push_back(g.Feed({dtype(), {c.w[0]}}));
    Attrs attrs = MakeAttrs({{"stride", c.stride},
                             {"padding", c.padding},
                             {"dilation", Ints{1, 1, 1}},
                             {"transposed", false},
                             {"output_padding", Ints{0, 0, 0}},
                             {"groups", c.groups}});
    const int y = g.Add1("convolution", inputs, attrs);
    attrs.Set("output_mask", c.mask);
    if (c.bias) attrs.Set("bias_sizes", Ints{c.w[0]});
    g.Add("convolution_backward", {g.Feed(g.type(y)), x, w}, attrs);
    Check(g, Exactness::kTolerance, /*conv=*/true);
  }
}

// Batch norm's kernels over [N, C, D, H, W]: training (with the running
// statistics' update) and its backward, as R3D-18's blocks run them.
TEST_P(CudaSpatialOps, BatchNormOverVolumes) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Shape shape = {2, 16, 4, 7, 7};
  GraphMaker g;
  const int x = g.Feed({dtype(), shape});
  // 16-bit inputs keep float32 parameters here (PyTorch's mixed batch norm);
  // the others their own dtype.
  const DType param = IsHalf(dtype()) ? DType::kFloat32 : dtype();
  const int w = g.Feed({param, {16}}, Fill::kPositive);
  const int b = g.Feed({param, {16}});
  const int rm = g.Feed({param, {16}});
  const int rv = g.Feed({param, {16}}, Fill::kPositive);
  const std::vector<int> out = g.Add("_native_batch_norm_legit_functional", {x, w, b, rm, rv},
                                     MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}}));
  g.Add("native_batch_norm_backward", {g.Feed({dtype(), shape}), x, w, rm, rv, out[1], out[2]},
        MakeAttrs({{"train", true}, {"eps", 1e-5}, {"output_mask", Ints{1, 1, 1}}}));
  Check(g);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaSpatialOps, ::testing::ValuesIn(kFloatTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tandem::gpu_test
