// The channels-last nodes that the layout pass makes (compiler/channels_last.h)
// against the CPU kernels, on fresh random inputs: cuDNN convolutions and
// their backward with NHWC descriptors (float32, TF32, bfloat16, float16;
// grouped, strided, dilated, with bias), batch norms over [N, H, W, C]
// (plain, with the folded ReLU and mask, in eval mode), and a ResNet stem
// and block step written channels-last with its permutes, as the pass
// emits it. The CPU runs each channels-last node as its channels-first
// kernel on permuted copies, so the oracle is the same as for NCHW.
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "ir/make_attrs.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

constexpr double kConv32 = 1e-4;
constexpr double kTf32 = 5e-3;
constexpr double kOther32 = 1e-5;
constexpr double kAny64 = 1e-12;

double UnitRoundoff(DType dtype) { return dtype == DType::kBFloat16 ? 0x1p-8 : 0x1p-11; }

struct ConvSpec {
  std::string name;
  Shape x, w;  // channels-first dims: x [N, C, H, W], w [O, C / g, kH, kW]
  int64_t stride, padding, dilation, groups;
  bool bias;
};

Shape Last(const Shape& s) { return {s[0], s[2], s[3], s[1]}; }

Attrs ConvAttrs(const ConvSpec& c) {
  return MakeAttrs({{"stride", std::vector<int64_t>{c.stride, c.stride}},
                    {"padding", std::vector<int64_t>{c.padding, c.padding}},
                    {"dilation", std::vector<int64_t>{c.dilation, c.dilation}},
                    {"groups", c.groups},
                    {"channels_last", true}});
}

// With `first_1x1`, a 1x1 kernel's weight is given channels-first, as the
// layout pass passes it.
void AddConv(GraphMaker& g, const ConvSpec& c, DType dtype, bool allow_tf32, bool first_1x1 = false) {
  const int x = g.Feed({dtype, Last(c.x)});
  const int w = g.Feed({dtype, first_1x1 ? c.w : Last(c.w)}, Fill::kSmall);
  std::vector<int> inputs = {x, w};
  if (c.bias) inputs.push_back(g.Feed({dtype, {c.w[0]}}));
  Attrs attrs = ConvAttrs(c);
  attrs.Set("allow_tf32", allow_tf32);
  const int y = g.Add1("convolution", inputs, attrs);
  const int grad = g.Feed(g.type(y));
  if (c.bias) attrs.Set("bias_sizes", std::vector<int64_t>{c.w[0]});
  g.Add("convolution_backward", {grad, x, w}, attrs);
}

const std::vector<ConvSpec>& Specs() {
  static const auto* const kSpecs = new std::vector<ConvSpec>{
      {"resnet stem 3->64 7x7 s2", {2, 3, 64, 64}, {64, 3, 7, 7}, 2, 3, 1, 1, false},
      {"resnet 64->64 3x3", {2, 64, 28, 28}, {64, 64, 3, 3}, 1, 1, 1, 1, false},
      {"resnet bottleneck 256->64 1x1", {2, 256, 14, 14}, {64, 256, 1, 1}, 1, 0, 1, 1, false},
      {"resnet downsample 256->512 1x1 s2", {2, 256, 14, 14}, {512, 256, 1, 1}, 2, 0, 1, 1, false},
      {"vgg 512->512 3x3 bias", {2, 512, 7, 7}, {512, 512, 3, 3}, 1, 1, 1, 1, true},
      {"grouped dilated 32->48 g4 d2 bias", {3, 32, 13, 11}, {48, 8, 3, 3}, 1, 2, 2, 4, true},
      {"depthwise 24 3x3", {2, 24, 10, 9}, {24, 1, 3, 3}, 1, 1, 1, 24, false}};
  return *kSpecs;
}

TEST(CudaChannelsLast, ConvolutionsMatchTheCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (const ConvSpec& c : Specs()) {
    for (bool tf32 : {false, true}) {
      SCOPED_TRACE(c.name + (tf32 ? " tf32" : ""));
      GraphMaker g;
      AddConv(g, c, DType::kFloat32, tf32);
      CompareWithCpuWithin(g, tf32 ? kTf32 : kConv32, kAny64);
      if (c.w[2] * c.w[3] == 1) {
        GraphMaker first;
        AddConv(first, c, DType::kFloat32, tf32, /*first_1x1=*/true);
        CompareWithCpuWithin(first, tf32 ? kTf32 : kConv32, kAny64);
      }
    }
  }
}

TEST(CudaChannelsLast, SixteenBitConvolutionsMatchTheCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (const ConvSpec& c : Specs()) {
      SCOPED_TRACE(c.name + " " + DTypeName(dtype));
      GraphMaker g;
      AddConv(g, c, dtype, false);
      CompareWithCpuWithin(g, 4 * UnitRoundoff(dtype) + 2e-3, kAny64);
    }
  }
}

// Forward (training and eval) and backward over [N, H, W, C], plain and
// with the folded ReLU and its mask.
TEST(CudaChannelsLast, BatchNormsMatchTheCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  const std::vector<Shape> shapes = {{4, 28, 28, 64}, {8, 7, 7, 2048}, {2, 5, 3, 7}, {32, 14, 14, 256}};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const Shape& shape : shapes) {
      for (bool training : {true, false}) {
        SCOPED_TRACE(::testing::Message() << ShapeString(shape) << " " << DTypeName(dtype) << " training " << training);
        const DType param = DType::kFloat32;
        const Shape c = {shape[3]};
        GraphMaker g;
        const int x = g.Feed({dtype, shape});
        const int w = g.Feed({param, c});
        const int b = g.Feed({param, c});
        const int rm = g.Feed({param, c});
        const int rv = g.Feed({param, c}, Fill::kPositive);
        const Attrs attrs =
            MakeAttrs({{"training", training}, {"momentum", 0.1}, {"eps", 1e-5}, {"channels_last", true}});
        const std::vector<int> f = g.Add("_native_batch_norm_legit_functional", {x, w, b, rm, rv}, attrs);
        Attrs relu = attrs;
        relu.Set("relu", true);
        const std::vector<int> r = g.Add("_native_batch_norm_legit_functional", {x, w, b, rm, rv}, relu);
        const int grad = g.Feed({dtype, shape});
        const Attrs back = MakeAttrs({{"train", training}, {"eps", 1e-5}, {"channels_last", true}});
        g.Add("native_batch_norm_backward", {grad, x, w, rm, rv, f[1], f[2]}, back);
        Attrs masked = back;
        masked.Set("mask_threshold", 0.0);
        g.Add("native_batch_norm_backward", {grad, x, w, rm, rv, r[1], r[2], r[0]}, masked);
        CompareWithCpuWithin(g, dtype == DType::kFloat32 ? kOther32 : 2 * UnitRoundoff(dtype) + 1e-3, kAny64);
      }
    }
  }
}

// Max pooling (with indices, dilation, ceil mode) and average pooling
// (padding counted or not, a divisor override) over [N, H, W, C], forward
// and backward.
TEST(CudaChannelsLast, PoolingMatchesTheCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  struct PoolSpec {
    std::string op;
    Shape x;  // [N, H, W, C]
    Attrs attrs;
  };
  const auto ints = [](int64_t a, int64_t b) { return std::vector<int64_t>{a, b}; };
  const std::vector<PoolSpec> specs = {
      {"max_pool2d_with_indices",
       {2, 28, 28, 64},
       MakeAttrs({{"kernel_size", ints(3, 3)}, {"stride", ints(2, 2)}, {"padding", ints(1, 1)}})},
      {"max_pool2d_with_indices",
       {3, 13, 11, 5},
       MakeAttrs({{"kernel_size", ints(3, 2)}, {"stride", ints(2, 1)}, {"dilation", ints(2, 1)}, {"ceil_mode", true}})},
      {"avg_pool2d", {2, 16, 16, 96}, MakeAttrs({{"kernel_size", ints(2, 2)}, {"stride", ints(2, 2)}})},
      {"avg_pool2d",
       {2, 9, 7, 6},
       MakeAttrs({{"kernel_size", ints(3, 3)},
                  {"stride", ints(2, 2)},
                  {"padding", ints(1, 1)},
                  {"count_include_pad", false}})},
      {"avg_pool2d", {1, 8, 8, 3}, MakeAttrs({{"kernel_size", ints(2, 2)}, {"divisor_override", int64_t{3}}})}};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const PoolSpec& spec : specs) {
      SCOPED_TRACE(spec.op + " " + ShapeString(spec.x) + " " + DTypeName(dtype));
      Attrs attrs = spec.attrs;
      attrs.Set("channels_last", true);
      GraphMaker g;
      const int x = g.Feed({dtype, spec.x});
      const std::vector<int> y = g.Add(spec.op, {x}, attrs);
      const int grad = g.Feed(g.type(y[0]));
      if (spec.op == "avg_pool2d") {
        g.Add1("avg_pool2d_backward", {grad, x}, attrs);
      } else {
        g.Add1("max_pool2d_with_indices_backward", {grad, x, y[1]}, attrs);
      }
      CompareWithCpuWithin(g, dtype == DType::kFloat32 ? kOther32 : 2 * UnitRoundoff(dtype) + 1e-3, kAny64);
    }
  }
}

// A dense block's cat along channels and its backward's slices, as the pass
// remaps them to the last dim: many narrow rows (each pixel's channels),
// which take the row-copy kernel; aligned and unaligned widths and starts,
// float32 and float16, must equal the CPU's bytes.
TEST(CudaChannelsLast, CatAndSliceAlongChannelsMatchTheCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    GraphMaker g;
    const int a = g.Feed({dtype, {4, 14, 14, 64}});
    const int b = g.Feed({dtype, {4, 14, 14, 32}});
    const int c = g.Feed({dtype, {4, 14, 14, 3}});
    const int all = g.Add1("cat", {a, b, c}, MakeAttrs({{"dim", int64_t{3}}}));
    for (const auto& [start, end] : std::vector<std::pair<int64_t, int64_t>>{{0, 64}, {64, 96}, {96, 99}, {3, 35}}) {
      g.Add1("slice.Tensor", {all}, MakeAttrs({{"dim", int64_t{3}}, {"start", start}, {"end", end}}));
    }
    CompareWithCpuWithin(g, 0.0, 0.0);
  }
}

// A ResNet stem and basic block, forward and backward, as the layout pass
// writes it: the image and the 3x3 weights permuted in, the 1x1 weight read
// channels-first, channels-last convolutions and batch norms, a pooling
// between them channels-first (permutes around it), the residual and the
// pooled mean channels-last, the weight gradients permuted back. Captured and
// replayed as one CUDA graph.
TEST(CudaChannelsLast, AResNetStepWrittenChannelsLastMatchesTheCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  const DType f32 = DType::kFloat32;
  const Attrs to_last = MakeAttrs({{"dims", std::vector<int64_t>{0, 2, 3, 1}}});
  const Attrs to_first = MakeAttrs({{"dims", std::vector<int64_t>{0, 3, 1, 2}}});
  GraphMaker g;
  const int x = g.Feed({f32, {2, 3, 64, 64}});
  const int w1 = g.Feed({f32, {16, 3, 7, 7}}, Fill::kSmall);
  const int w2 = g.Feed({f32, {16, 16, 3, 3}}, Fill::kSmall);
  const int w3 = g.Feed({f32, {16, 16, 1, 1}}, Fill::kSmall);
  const int gamma = g.Feed({f32, {16}}, Fill::kPositive);
  const int beta = g.Feed({f32, {16}});
  const int rm = g.Feed({f32, {16}});
  const int rv = g.Feed({f32, {16}}, Fill::kPositive);
  const auto conv = [](int64_t stride, int64_t pad) {
    return MakeAttrs({{"stride", std::vector<int64_t>{stride, stride}},
                      {"padding", std::vector<int64_t>{pad, pad}},
                      {"dilation", std::vector<int64_t>{1, 1}},
                      {"groups", int64_t{1}},
                      {"allow_tf32", false},
                      {"channels_last", true}});
  };
  const Attrs bn = MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}, {"channels_last", true}});
  const Attrs pool = MakeAttrs({{"kernel_size", std::vector<int64_t>{3, 3}},
                                {"stride", std::vector<int64_t>{2, 2}},
                                {"padding", std::vector<int64_t>{1, 1}}});
  const int xl = g.Add1("permute", {x}, to_last);
  const int w1l = g.Add1("permute", {w1}, to_last);
  const int w2l = g.Add1("permute", {w2}, to_last);
  const int c1 = g.Add1("convolution", {xl, w1l}, conv(2, 3));
  Attrs bn_relu = bn;
  bn_relu.Set("relu", true);
  const std::vector<int> n1 = g.Add("_native_batch_norm_legit_functional", {c1, gamma, beta, rm, rv}, bn_relu);
  const int r1 = g.Add1("permute", {n1[0]}, to_first);
  const std::vector<int> p1 = g.Add("max_pool2d_with_indices", {r1}, pool);
  const int p1l = g.Add1("permute", {p1[0]}, to_last);
  const int c2 = g.Add1("convolution", {p1l, w2l}, conv(1, 1));
  const int c3 = g.Add1("convolution", {c2, w3}, conv(1, 0));
  const int s = g.Add1("add.Tensor", {c3, p1l});
  const int m = g.Add1("mean.dim", {s}, MakeAttrs({{"dim", std::vector<int64_t>{1, 2}}, {"keepdim", true}}));
  // Backward from d(m) = ones, expanded over H and W.
  const int gm = g.Add1("ones_like", {m});
  const int gme = g.Add1("expand", {gm}, MakeAttrs({{"size", std::vector<int64_t>{2, 16, 16, 16}}}));
  const int gs = g.Add1("div.Scalar", {gme}, MakeAttrs({{"other", 256.0}}));
  Attrs back = conv(1, 0);
  back.Set("output_mask", std::vector<int64_t>{1, 1, 0});
  const std::vector<int> gc3 = g.Add("convolution_backward", {gs, c2, w3}, back);
  Attrs back2 = conv(1, 1);
  back2.Set("output_mask", std::vector<int64_t>{1, 1, 0});
  const std::vector<int> gc2 = g.Add("convolution_backward", {gc3[0], p1l, w2l}, back2);
  const int gp1 = g.Add1("add.Tensor", {gc2[0], gs});
  const int gp1f = g.Add1("permute", {gp1}, to_first);
  const int gr1 = g.Add1("max_pool2d_with_indices_backward", {gp1f, r1, p1[1]}, pool);
  const int gr1l = g.Add1("permute", {gr1}, to_last);
  const std::vector<int> gbn =
      g.Add("native_batch_norm_backward", {gr1l, c1, gamma, rm, rv, n1[1], n1[2], n1[0]},
            MakeAttrs({{"train", true}, {"eps", 1e-5}, {"channels_last", true}, {"mask_threshold", 0.0}}));
  Attrs back1 = conv(2, 3);
  back1.Set("output_mask", std::vector<int64_t>{0, 1, 0});
  const std::vector<int> gc1 = g.Add("convolution_backward", {gbn[0], xl, w1l}, back1);
  g.Add1("permute", {gc1[1]}, to_first);
  g.Add1("permute", {gc2[1]}, to_first);
  CompareWithCpuWithin(g, kConv32, kAny64);
}

}  // namespace
}  // namespace tandem::gpu_test
