// The CNN ops' CUDA kernels in bfloat16 and float16 (cuDNN convolutions with
// 16-bit tensors and float32 compute, the 16-bit pooling and batch-norm
// kernels) against the CPU kernels (the oracle), on fresh random inputs and
// shapes (the seed is printed), in both 16-bit types. Each graph runs twice
// on the GPU, op by op (which chooses the cuDNN algorithms) and as a replay
// of the captured CUDA graph; outputs are poisoned (0xFF bytes: NaN) before
// each run and NaN never passes.
//
// Tolerances (normwise relative, ||gpu - cpu|| / ||cpu||): the CPU computes
// in double and rounds once; the GPU's pooling sums in float32 and its batch
// norm in double, so both round nearly the same value and an element lands
// at most an ulp apart (2u relative, u = 2^-8 for bfloat16, 2^-11 for
// float16): 2u + 1e-3. cuDNN's 16-bit algorithms accumulate in float32 but
// may keep transformed operands (Winograd, FFT tiles) or split-K partial
// sums in the 16-bit type, a few more roundings of u each, and a biased
// 16-bit convolution rounds twice (the convolution, then the sum with the
// bias, as PyTorch's does): 4u + 2e-3 for convolutions. A wrong result (a
// misplaced group, tap or channel) is off by O(1). Max pooling's values and
// indices must match exactly, and float32 outputs (batch norm's saved
// statistics, a mixed batch norm's parameters and their gradients, all
// computed in double on both sides) to 1e-5.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/shared_graphs.h"

namespace tandem::gpu_test {
namespace {

double UnitRoundoff(DType dtype) { return dtype == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }
double OpTolerance(DType dtype) { return 2 * UnitRoundoff(dtype) + 1e-3; }
double ConvTolerance(DType dtype) { return 4 * UnitRoundoff(dtype) + 2e-3; }
constexpr double kFloat32Tolerance = 1e-5;

int64_t Dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(Rng()); }

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

enum class Exactness { kTolerance, kExactValues };

// Feeds -> CPU oracle; feeds -> GPU (op by op, then graph replay); every
// node output compared: 16-bit floats within `tolerance` (bit for bit with
// kExactValues), float32 within kFloat32Tolerance, indices exactly.
void Check(const GraphMaker& maker, double tolerance, Exactness exactness = Exactness::kTolerance) {
  CompareWithCpu(maker, [&](const OutputPair& o) {
    const DType dtype = o.type().dtype;
    EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), IsHalf(dtype) ? tolerance : kFloat32Tolerance)) << o.Where();
    if (IsHalf(dtype) && exactness == Exactness::kExactValues) {
      EXPECT_TRUE(SameBytes(*o.gpu, *o.ref)) << o.Where();
    }
  });
}

class CudaHalfCnn : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
};

struct ConvSpec {
  std::string name;
  Shape x, w;
  int64_t stride, padding, dilation, groups;
  bool bias;
  std::vector<int64_t> mask = {1, 1, 1};
};

Attrs ConvAttrs(const ConvSpec& c, bool allow_tf32) {
  return MakeAttrs({{"stride", std::vector<int64_t>{c.stride, c.stride}},
                    {"padding", std::vector<int64_t>{c.padding, c.padding}},
                    {"dilation", std::vector<int64_t>{c.dilation, c.dilation}},
                    {"transposed", false},
                    {"output_padding", std::vector<int64_t>{0, 0}},
                    {"groups", c.groups},
                    {"allow_tf32", allow_tf32}});
}

// convolution and its backward with a random grad_output.
void AddConv(GraphMaker& g, const ConvSpec& c, DType dtype, bool allow_tf32, Fill weights) {
  const int x = g.Feed({dtype, c.x});
  const int w = g.Feed({dtype, c.w}, weights);
  std::vector<int> inputs = {x, w};
  if (c.bias) inputs.push_back(g.Feed({dtype, {c.w[0]}}));
  Attrs attrs = ConvAttrs(c, allow_tf32);
  const int y = g.Add1("convolution", inputs, attrs);
  EXPECT_EQ(g.type(y).dtype, dtype);
  const int grad = g.Feed(g.type(y));
  attrs.Set("output_mask", c.mask);
  if (c.bias) attrs.Set("bias_sizes", std::vector<int64_t>{c.w[0]});
  g.Add("convolution_backward", {grad, x, w}, attrs);
}

TEST_P(CudaHalfCnn, ConvolutionLayers) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t n = Dim(1, 3);
  const std::vector<ConvSpec> specs = {
      {"resnet stem 3->64 7x7 s2", {n, 3, Dim(40, 96), Dim(40, 96)}, {64, 3, 7, 7}, 2, 3, 1, 1, false, {0, 1, 0}},
      {"resnet 64->64 3x3", {n, 64, 28, 28}, {64, 64, 3, 3}, 1, 1, 1, 1, false},
      {"resnet bottleneck 256->64 1x1", {n, 256, 14, 14}, {64, 256, 1, 1}, 1, 0, 1, 1, false},
      {"resnet downsample 256->512 1x1 s2", {n, 256, 14, 14}, {512, 256, 1, 1}, 2, 0, 1, 1, false},
      {"resnet 128->128 3x3 s2", {n, 128, 14, 14}, {128, 128, 3, 3}, 2, 1, 1, 1, false},
      {"vgg 3->64 3x3 bias", {n, 3, 32, 32}, {64, 3, 3, 3}, 1, 1, 1, 1, true},
      {"vgg 512->512 3x3 bias", {n, 512, 7, 7}, {512, 512, 3, 3}, 1, 1, 1, 1, true},
      {"odd sizes 5->7 3x3 s2 bias", {n, 5, Dim(3, 30), Dim(3, 30)}, {7, 5, 3, 3}, 2, 1, 1, 1, true},
      {"grouped dilated 32->48 g4 d2 bias", {n, 32, 13, 11}, {48, 8, 3, 3}, 1, 2, 2, 4, true},
      {"depthwise 32 3x3 s2", {n, 32, 15, 15}, {32, 1, 3, 3}, 2, 1, 1, 32, false},
      {"bias only grad", {n, 16, 9, 9}, {24, 16, 3, 3}, 2, 1, 1, 1, true, {0, 0, 1}},
      // Planes large enough for the bias gradient's cluster channel sum
      // (16-byte loads; then single elements, the plane odd).
      {"large plane bias", {2, 16, 96, 96}, {32, 16, 3, 3}, 1, 1, 1, 1, true},
      {"large odd plane bias", {2, 8, 91, 91}, {8, 8, 3, 3}, 1, 1, 1, 1, true},
      {"input grad only", {n, 16, 9, 9}, {24, 16, 3, 3}, 1, 1, 1, 1, true, {1, 0, 0}}};
  for (const ConvSpec& c : specs) {
    // allow_tf32 concerns float32 data only: both settings must give a
    // 16-bit convolution within the same bound.
    for (bool allow_tf32 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << c.name << " " << ShapeString(c.x) << " allow_tf32 " << allow_tf32);
      GraphMaker g;
      AddConv(g, c, dtype(), allow_tf32, c.w[1] * c.w[2] * c.w[3] > 100 ? Fill::kSmall : Fill::kUniform);
      Check(g, ConvTolerance(dtype()));
    }
  }
}

Attrs PoolAttrs(int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  return MakeAttrs({{"kernel_size", std::vector<int64_t>{k, k}},
                    {"stride", std::vector<int64_t>{s, s}},
                    {"padding", std::vector<int64_t>{p, p}},
                    {"ceil_mode", ceil_mode}});
}

TEST_P(CudaHalfCnn, MaxPooling) {
  TANDEM_SKIP_WITHOUT_GPU();
  struct MaxCase {
    std::string name;
    Shape x;
    int64_t k, s, p, d;
    bool ceil_mode;
  };
  const std::vector<MaxCase> cases = {{"resnet 3x3 s2 p1", {Dim(1, 4), 64, 56, 56}, 3, 2, 1, 1, false},
                                      {"vgg 2x2 s2", {Dim(1, 4), 128, 28, 28}, 2, 2, 0, 1, false},
                                      {"ceil, dilated, odd", {3, 5, Dim(5, 30), Dim(5, 30)}, 3, 2, 1, 2, true},
                                      {"[C, H, W], overlapping", {7, Dim(3, 20), Dim(3, 20)}, 3, 1, 1, 1, false}};
  for (const MaxCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.name << " " << ShapeString(c.x));
    GraphMaker g;
    Attrs attrs = PoolAttrs(c.k, c.s, c.p, c.ceil_mode);
    attrs.Set("dilation", std::vector<int64_t>{c.d, c.d});
    const int x = g.Feed({dtype(), c.x});
    const std::vector<int> out = g.Add("max_pool2d_with_indices", {x}, attrs);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(g.type(out[1]).dtype, DType::kInt64);
    // Values and indices are exact; the backward sums (float32 vs double).
    GraphMaker forward_only = g;
    Check(forward_only, 0.0, Exactness::kExactValues);
    const int grad = g.Feed(g.type(out[0]));
    g.Add1("max_pool2d_with_indices_backward", {grad, x, out[1]}, attrs);
    Check(g, OpTolerance(dtype()));
  }
}

TEST_P(CudaHalfCnn, AverageAndAdaptivePooling) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (bool include_pad : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "avg_pool2d include_pad " << include_pad);
    GraphMaker g;
    Attrs attrs = PoolAttrs(3, 2, 1, true);
    attrs.Set("count_include_pad", include_pad);
    const int x = g.Feed({dtype(), {Dim(1, 3), 16, Dim(3, 30), Dim(3, 30)}});
    const int y = g.Add1("avg_pool2d", {x}, attrs);
    g.Add1("avg_pool2d_backward", {g.Feed(g.type(y)), x}, attrs);
    Check(g, OpTolerance(dtype()));
  }
  {
    SCOPED_TRACE("avg_pool2d divisor_override");
    GraphMaker g;
    Attrs attrs = PoolAttrs(2, 2, 0, false);
    attrs.Set("divisor_override", int64_t{3});
    const int x = g.Feed({dtype(), {2, 8, Dim(2, 20), Dim(2, 20)}});
    const int y = g.Add1("avg_pool2d", {x}, attrs);
    g.Add1("avg_pool2d_backward", {g.Feed(g.type(y)), x}, attrs);
    Check(g, OpTolerance(dtype()));
  }
  struct AdaptiveCase {
    Shape x;
    int64_t oh, ow;
  };
  for (const AdaptiveCase& c : std::vector<AdaptiveCase>{{{Dim(1, 4), 2048, 7, 7}, 1, 1},
                                                         {{2, 512, Dim(7, 15), Dim(7, 15)}, 7, 7},
                                                         {{9, Dim(1, 20), Dim(1, 20)}, Dim(1, 6), Dim(1, 6)}}) {
    SCOPED_TRACE(::testing::Message() << "adaptive " << ShapeString(c.x) << " -> " << c.oh << "x" << c.ow);
    GraphMaker g;
    const int x = g.Feed({dtype(), c.x});
    const int y = g.Add1("_adaptive_avg_pool2d", {x}, MakeAttrs({{"output_size", std::vector<int64_t>{c.oh, c.ow}}}));
    g.Add1("_adaptive_avg_pool2d_backward", {g.Feed(g.type(y)), x});
    Check(g, OpTolerance(dtype()));
  }
}

// Both forward ops and the backward (with and without the running
// statistics, output masks), in training and eval mode, with 16-bit and with
// float32 parameters (PyTorch's mixed batch norm).
TEST_P(CudaHalfCnn, BatchNormTrainingEvalAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  // Conv outputs (inner a multiple of 8: 16-byte vector accesses; and not),
  // a linear layer's, a sequence's; then [M, C] with M = N*H*W (the
  // channels-last layout, the column kernels): C a multiple of 8 (16-byte
  // units; one tile of a row or many) and not.
  const std::vector<Shape> shapes = {{Dim(1, 4), 64, 28, 28}, {Dim(1, 8), 256, 7, 7}, {Dim(2, 64), 96},
                                     {3, 5, Dim(1, 1000)},    {Dim(1000, 6000), 64},  {Dim(50, 300), 2048},
                                     {Dim(100, 3000), 24},    {Dim(1, 200), 3}};
  for (DType param : {dtype(), DType::kFloat32}) {
    for (const Shape& shape : shapes) {
      for (bool training : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << ShapeString(shape) << " parameters " << DTypeName(param) << " training " << training);
        const Shape c = {shape[1]};
        GraphMaker g;
        const int x = g.Feed({dtype(), shape});
        const int w = g.Feed({param, c}, Fill::kPositive);
        const int b = g.Feed({param, c});
        const int rm = g.Feed({param, c});
        const int rv = g.Feed({param, c}, Fill::kPositive);
        const Attrs attrs = MakeAttrs({{"training", training}, {"momentum", 0.1}, {"eps", 1e-5}});
        const std::vector<int> f = g.Add("_native_batch_norm_legit_functional", {x, w, b, rm, rv}, attrs);
        ASSERT_EQ(f.size(), 5u);
        EXPECT_EQ(g.type(f[1]).dtype, DType::kFloat32);
        EXPECT_EQ(g.type(f[3]).dtype, param);
        g.Add("native_batch_norm", {x, w, b, rm, rv}, attrs);
        const int grad = g.Feed({dtype(), shape});
        const std::vector<int> back = g.Add("native_batch_norm_backward", {grad, x, w, rm, rv, f[1], f[2]},
                                            MakeAttrs({{"train", training}, {"eps", 1e-5}}));
        EXPECT_EQ(g.type(back[1]).dtype, param);
        if (training) {
          g.Add("native_batch_norm_backward", {grad, x, w, f[1], f[2]},
                MakeAttrs({{"train", true}, {"eps", 1e-5}, {"output_mask", std::vector<int64_t>{0, 1, 1}}}));
          g.Add("native_batch_norm_backward", {grad, x, w, f[1], f[2]},
                MakeAttrs({{"train", true}, {"eps", 1e-5}, {"output_mask", std::vector<int64_t>{1, 0, 0}}}));
          g.Add("native_batch_norm", {x, w, b}, attrs);
        }
        Check(g, OpTolerance(dtype()));
      }
    }
  }
}

// A ResNet basic block and stem in small, forward and backward, as one
// 16-bit graph: many cuDNN calls and own kernels captured and replayed
// together. Errors of one op feed the next, so the bound is a few ops'.
TEST_P(CudaHalfCnn, ResNetBlockStep) {
  TANDEM_SKIP_WITHOUT_GPU();
  const DType h = dtype();
  GraphMaker g;
  AddResNetBlockStep(g, h);
  // The max pool's indices: its input (conv, batch norm, relu) differs from
  // the CPU's by an ulp here and there, and 16-bit windows often hold
  // near-ties, so an index may move to the runner-up; at most 1 in 1000 may.
  CompareWithCpu(g, [&](const OutputPair& o) {
    const DType dtype = o.type().dtype;
    if (dtype == DType::kInt64) {
      const auto* gpu = reinterpret_cast<const int64_t*>(o.gpu->data());
      const auto* ref = reinterpret_cast<const int64_t*>(o.ref->data());
      const int64_t n = o.type().numel();
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i) differ += gpu[i] != ref[i] ? 1 : 0;
      EXPECT_LE(differ, n / 1000) << o.Where() << ": " << differ << " of " << n << " indices differ";
      return;
    }
    // The float32 outputs (batch statistics, kept in float32 as PyTorch
    // does) are means of 16-bit activations that already differ from the
    // CPU's by the convolutions' rounding; a channel mean near zero turns
    // that into a relative error of 1e-5 and more (seed 1796046626860258631:
    // 1.13e-5, 3e-8 absolute), so their bound is the 16-bit one.
    EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), IsHalf(dtype) ? 4 * ConvTolerance(h) : ConvTolerance(h)))
        << o.Where();
  });
}

INSTANTIATE_TEST_SUITE_P(SixteenBit, CudaHalfCnn, ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tandem::gpu_test
