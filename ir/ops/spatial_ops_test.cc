// Shape and dtype inference of the spatial ops (group norm, resampling,
// padding, 3-D pooling, 3-D convolution) and the messages of the nodes they
// refuse.
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/make_attrs.h"
#include "ir/op_registry.h"

namespace tandem {

// Readable gtest output for TensorType comparisons.
void PrintTo(const TensorType& type, std::ostream* os) { *os << type.ToString(); }

namespace {

using ::testing::HasSubstr;

TensorType F32(Shape shape) { return {DType::kFloat32, std::move(shape)}; }
TensorType F64(Shape shape) { return {DType::kFloat64, std::move(shape)}; }
TensorType BF16(Shape shape) { return {DType::kBFloat16, std::move(shape)}; }
TensorType F16(Shape shape) { return {DType::kFloat16, std::move(shape)}; }
TensorType I64(Shape shape) { return {DType::kInt64, std::move(shape)}; }
TensorType I32(Shape shape) { return {DType::kInt32, std::move(shape)}; }
TensorType Bool(Shape shape) { return {DType::kBool, std::move(shape)}; }

absl::StatusOr<std::vector<TensorType>> Infer(const std::string& op, const Attrs& attrs,
                                              const std::vector<TensorType>& inputs) {
  const OpDef* def = OpRegistry::Global().Find(op);
  if (def == nullptr) return absl::NotFoundError("no op " + op);
  const int count = static_cast<int>(inputs.size());
  if (count < def->min_inputs || (def->max_inputs >= 0 && count > def->max_inputs)) {
    return absl::OutOfRangeError("input count out of the op's range");
  }
  return def->infer(attrs, inputs);
}

std::vector<TensorType> InferAll(const std::string& op, const Attrs& attrs, const std::vector<TensorType>& inputs) {
  auto result = Infer(op, attrs, inputs);
  EXPECT_TRUE(result.ok()) << op << ": " << result.status();
  return result.ok() ? *result : std::vector<TensorType>{};
}

TensorType InferOne(const std::string& op, const Attrs& attrs, const std::vector<TensorType>& inputs) {
  std::vector<TensorType> out = InferAll(op, attrs, inputs);
  EXPECT_EQ(out.size(), 1u) << op;
  return out.empty() ? TensorType{} : out[0];
}

std::string InferError(const std::string& op, const Attrs& attrs, const std::vector<TensorType>& inputs) {
  auto result = Infer(op, attrs, inputs);
  EXPECT_FALSE(result.ok()) << op << " unexpectedly inferred " << (result.ok() ? (*result)[0].ToString() : "");
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  return std::string(result.status().message());
}

using Ints = std::vector<int64_t>;
using Floats = std::vector<double>;

// ------------------------------------------------------------ group norm

Attrs GroupNormAttrs(int64_t n, int64_t c, int64_t hxw, int64_t group) {
  return MakeAttrs({{"N", n}, {"C", c}, {"HxW", hxw}, {"group", group}, {"eps", 1e-5}});
}

TEST(GroupNormInferenceTest, StatisticsAreNByGroupsInTheInputsDtype) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    const TensorType x{dtype, {2, 6, 4, 5}};
    const TensorType affine{dtype, {6}};
    const TensorType stats{dtype, {2, 3}};
    const Attrs attrs = GroupNormAttrs(2, 6, 20, 3);
    EXPECT_EQ(InferAll("native_group_norm", attrs, {x, affine, affine}), (std::vector<TensorType>{x, stats, stats}));
    EXPECT_EQ(InferAll("native_group_norm", attrs, {x}), (std::vector<TensorType>{x, stats, stats}));
    Attrs backward = GroupNormAttrs(2, 6, 20, 3);
    backward.Set("output_mask", Ints{1, 1, 1});
    EXPECT_EQ(InferAll("native_group_norm_backward", backward, {x, x, stats, stats, affine}),
              (std::vector<TensorType>{x, affine, affine}));
    backward.Set("output_mask", Ints{1, 0, 0});
    EXPECT_EQ(InferAll("native_group_norm_backward", backward, {x, x, stats, stats}),
              (std::vector<TensorType>{x, TensorType{dtype, {0}}, TensorType{dtype, {0}}}));
  }
  // Any rank from 2: [N, C] (HxW 1) and a 3-D volume.
  EXPECT_EQ(InferAll("native_group_norm", GroupNormAttrs(3, 4, 1, 2), {F32({3, 4})})[1], F32({3, 2}));
  EXPECT_EQ(InferAll("native_group_norm", GroupNormAttrs(1, 8, 24, 8), {F32({1, 8, 2, 3, 4})})[2], F32({1, 8}));
}

TEST(GroupNormInferenceTest, RefusesMalformedNodes) {
  const TensorType x = F32({2, 6, 4, 5});
  EXPECT_THAT(InferError("native_group_norm", GroupNormAttrs(2, 6, 20, 4), {x}),
              HasSubstr("native_group_norm: attribute 'group' is 4 but C is 6"));
  EXPECT_THAT(InferError("native_group_norm", GroupNormAttrs(2, 6, 21, 3), {x}),
              HasSubstr("input is [2, 6, 4, 5] but attributes N=2, C=6, HxW=21"));
  EXPECT_THAT(InferError("native_group_norm", GroupNormAttrs(2, 6, 20, 3), {x, F32({5})}),
              HasSubstr("weight is float32[5] but input is float32[2, 6, 4, 5]; expected float32[6]"));
  EXPECT_THAT(InferError("native_group_norm", GroupNormAttrs(2, 6, 20, 3), {BF16({2, 6, 4, 5}), F32({6})}),
              HasSubstr("expected bfloat16[6]"));
  EXPECT_THAT(InferError("native_group_norm", GroupNormAttrs(2, 6, 20, 3), {I64({2, 6, 4, 5})}),
              HasSubstr("input is int64"));
  Attrs negative = GroupNormAttrs(2, 6, 20, 3);
  negative.Set("eps", -1.0);
  EXPECT_THAT(InferError("native_group_norm", negative, {x}), HasSubstr("attribute 'eps' is -1"));
  EXPECT_THAT(InferError("native_group_norm", MakeAttrs({{"N", int64_t{2}}}), {x}), HasSubstr("'C'"));
  const Attrs attrs = GroupNormAttrs(2, 6, 20, 3);
  EXPECT_THAT(InferError("native_group_norm_backward", attrs, {F32({2, 6, 4, 4}), x, F32({2, 3}), F32({2, 3})}),
              HasSubstr("grad_out is float32[2, 6, 4, 4] but input is float32[2, 6, 4, 5]"));
  EXPECT_THAT(InferError("native_group_norm_backward", attrs, {x, x, F32({2, 3}), F32({3, 2})}),
              HasSubstr("rstd is float32[3, 2]; expected float32[2, 3]"));
  EXPECT_THAT(InferError("native_group_norm_backward", attrs, {x, x, F64({2, 3}), F32({2, 3})}),
              HasSubstr("mean is float64[2, 3]"));
  Attrs mask = GroupNormAttrs(2, 6, 20, 3);
  mask.Set("output_mask", Ints{1, 1});
  EXPECT_THAT(InferError("native_group_norm_backward", mask, {x, x, F32({2, 3}), F32({2, 3})}),
              HasSubstr("output_mask"));
}

// ------------------------------------------------------------ resampling

TEST(ResampleInferenceTest, OutputSizesOfEveryForm) {
  const TensorType x = F32({2, 3, 5, 7});
  EXPECT_EQ(InferOne("upsample_nearest2d", MakeAttrs({{"output_size", Ints{10, 14}}}), {x}), F32({2, 3, 10, 14}));
  EXPECT_EQ(InferOne("upsample_nearest2d",
                     MakeAttrs({{"output_size", Ints{9, 3}}, {"scales_h", 1.8}, {"scales_w", 0.5}}), {x}),
            F32({2, 3, 9, 3}));
  // .vec: floor(in * factor).
  EXPECT_EQ(InferOne("upsample_nearest2d.vec", MakeAttrs({{"scale_factors", Floats{2.0, 1.5}}}), {x}),
            F32({2, 3, 10, 10}));
  EXPECT_EQ(InferOne("upsample_nearest2d.vec", MakeAttrs({{"output_size", Ints{4, 4}}}), {BF16({1, 1, 2, 2})}),
            BF16({1, 1, 4, 4}));
  EXPECT_EQ(InferOne("upsample_bilinear2d", MakeAttrs({{"output_size", Ints{3, 8}}, {"align_corners", true}}), {x}),
            F32({2, 3, 3, 8}));
  EXPECT_EQ(InferOne("upsample_bilinear2d.vec",
                     MakeAttrs({{"scale_factors", Floats{0.5, 0.5}}, {"align_corners", false}}), {F16({1, 2, 9, 9})}),
            F16({1, 2, 4, 4}));
  // Backward ops: grad_input has input_size.
  EXPECT_EQ(
      InferOne("upsample_nearest2d_backward",
               MakeAttrs({{"output_size", Ints{10, 14}}, {"input_size", Ints{2, 3, 5, 7}}}), {F32({2, 3, 10, 14})}),
      x);
  EXPECT_EQ(InferOne("upsample_nearest2d_backward.vec",
                     MakeAttrs({{"input_size", Ints{2, 3, 5, 7}}, {"scale_factors", Floats{2.0, 2.0}}}),
                     {F64({2, 3, 10, 14})}),
            F64({2, 3, 5, 7}));
  EXPECT_EQ(
      InferOne("upsample_bilinear2d_backward",
               MakeAttrs({{"output_size", Ints{4, 4}}, {"input_size", Ints{2, 3, 5, 7}}, {"align_corners", true}}),
               {F32({2, 3, 4, 4})}),
      x);
  EXPECT_EQ(
      InferOne("upsample_bilinear2d_backward.vec",
               MakeAttrs({{"output_size", Ints{4, 4}}, {"input_size", Ints{2, 3, 5, 7}}, {"align_corners", false}}),
               {BF16({2, 3, 4, 4})}),
      BF16({2, 3, 5, 7}));
}

TEST(ResampleInferenceTest, RefusesMalformedNodes) {
  const TensorType x = F32({2, 3, 5, 7});
  EXPECT_THAT(InferError("upsample_nearest2d", MakeAttrs({{"output_size", Ints{10}}}), {x}),
              HasSubstr("upsample_nearest2d: attribute 'output_size' is [10]; expected 2 ints"));
  EXPECT_THAT(InferError("upsample_nearest2d", MakeAttrs({{"output_size", Ints{0, 4}}}), {x}),
              HasSubstr("each must be in [1, "));
  EXPECT_THAT(InferError("upsample_nearest2d", MakeAttrs({{"output_size", Ints{4, 4}}}), {F32({3, 5, 7})}),
              HasSubstr("input is [3, 5, 7]; expected [N, C, H, W]"));
  EXPECT_THAT(InferError("upsample_nearest2d", MakeAttrs({{"output_size", Ints{4, 4}}}), {I64({1, 1, 2, 2})}),
              HasSubstr("input is int64"));
  EXPECT_THAT(InferError("upsample_nearest2d", MakeAttrs({{"output_size", Ints{4, 4}}, {"scales_h", 1e-300}}), {x}),
              HasSubstr("attribute 'scales_h' is 1e-300"));
  EXPECT_THAT(InferError("upsample_nearest2d.vec", MakeAttrs({}), {x}),
              HasSubstr("exactly one of the attributes 'output_size' and 'scale_factors'"));
  EXPECT_THAT(InferError("upsample_nearest2d.vec",
                         MakeAttrs({{"output_size", Ints{4, 4}}, {"scale_factors", Floats{2, 2}}}), {x}),
              HasSubstr("exactly one"));
  EXPECT_THAT(InferError("upsample_nearest2d.vec", MakeAttrs({{"scale_factors", Floats{0.1, 2.0}}}), {x}),
              HasSubstr("would resample to 0 in dim 2"));
  EXPECT_THAT(InferError("upsample_nearest2d.vec", MakeAttrs({{"scale_factors", Floats{2.0}}}), {x}),
              HasSubstr("'scale_factors' has 1 entries"));
  EXPECT_THAT(InferError("upsample_bilinear2d", MakeAttrs({{"output_size", Ints{4, 4}}}), {x}),
              HasSubstr("align_corners"));
  EXPECT_THAT(
      InferError("upsample_nearest2d_backward",
                 MakeAttrs({{"output_size", Ints{10, 14}}, {"input_size", Ints{2, 3, 5, 7}}}), {F32({2, 3, 10, 13})}),
      HasSubstr("grad_output is [2, 3, 10, 13] but resampling input_size [2, 3, 5, 7] gives [2, 3, 10, 14]"));
  EXPECT_THAT(
      InferError("upsample_nearest2d_backward",
                 MakeAttrs({{"output_size", Ints{10, 14}}, {"input_size", Ints{2, 3, 5}}}), {F32({2, 3, 10, 14})}),
      HasSubstr("attribute 'input_size' is [2, 3, 5]"));
}

// ------------------------------------------------------------ padding

TEST(PaddingInferenceTest, ConstantPadAnyRankAndDtypeWithCrops) {
  EXPECT_EQ(InferOne("constant_pad_nd", MakeAttrs({{"pad", Ints{1, 2}}, {"value", 0.5}}), {F32({3, 4})}), F32({3, 7}));
  EXPECT_EQ(InferOne("constant_pad_nd", MakeAttrs({{"pad", Ints{1, 2, -1, 0, 3, 3}}}), {I64({2, 3, 4})}),
            I64({8, 2, 7}));
  EXPECT_EQ(InferOne("constant_pad_nd", MakeAttrs({{"pad", Ints{-2, -2}}, {"value", int64_t{1}}}), {Bool({5, 4})}),
            Bool({5, 0}));
  EXPECT_EQ(InferOne("constant_pad_nd", MakeAttrs({{"pad", Ints{}}}), {BF16({})}), BF16({}));
  EXPECT_EQ(InferOne("constant_pad_nd", MakeAttrs({{"pad", Ints{0, 1}}, {"value", 7.9}}), {I32({2})}), I32({3}));
  EXPECT_THAT(InferError("constant_pad_nd", MakeAttrs({{"pad", Ints{1, 2, 3}}}), {F32({3, 4})}),
              HasSubstr("constant_pad_nd: attribute 'pad' is [1, 2, 3] and self is [3, 4]"));
  EXPECT_THAT(InferError("constant_pad_nd", MakeAttrs({{"pad", Ints{1, 1, 1, 1, 1, 1}}}), {F32({3, 4})}),
              HasSubstr("at most every dim"));
  EXPECT_THAT(InferError("constant_pad_nd", MakeAttrs({{"pad", Ints{-3, -2}}}), {F32({3, 4})}),
              HasSubstr("dim 1 would have size -1"));
  EXPECT_THAT(InferError("constant_pad_nd", MakeAttrs({{"pad", Ints{1, 1}}, {"value", 1e30}}), {I32({3})}),
              HasSubstr("attribute 'value' is 1e+30; it does not fit self's dtype int32"));
  EXPECT_THAT(InferError("constant_pad_nd", MakeAttrs({{"pad", Ints{1, 1}}, {"value", std::nan("")}}), {I64({3})}),
              HasSubstr("does not fit"));
}

TEST(PaddingInferenceTest, ReflectionAndReplication) {
  const Attrs pad1 = MakeAttrs({{"padding", Ints{2, 1}}});
  const Attrs pad2 = MakeAttrs({{"padding", Ints{1, 2, 3, 0}}});
  const Attrs pad3 = MakeAttrs({{"padding", Ints{1, 1, 2, 2, 0, 1}}});
  EXPECT_EQ(InferOne("reflection_pad1d", pad1, {F32({2, 3, 5})}), F32({2, 3, 8}));
  EXPECT_EQ(InferOne("reflection_pad1d", pad1, {F32({3, 5})}), F32({3, 8}));
  EXPECT_EQ(InferOne("reflection_pad2d", pad2, {F32({2, 3, 4, 5})}), F32({2, 3, 7, 8}));
  EXPECT_EQ(InferOne("replication_pad2d", pad2, {BF16({3, 1, 1})}), BF16({3, 4, 4}));
  EXPECT_EQ(InferOne("reflection_pad3d", pad3, {F16({1, 2, 3, 4, 5})}), F16({1, 2, 4, 8, 7}));
  EXPECT_EQ(InferOne("replication_pad3d", pad3, {F64({2, 3, 4, 5})}), F64({2, 4, 8, 7}));
  EXPECT_EQ(InferOne("replication_pad1d", pad1, {F32({1, 1, 1})}), F32({1, 1, 4}));
  EXPECT_EQ(InferOne("reflection_pad2d_backward", pad2, {F32({2, 3, 7, 8}), F32({2, 3, 4, 5})}), F32({2, 3, 4, 5}));
  EXPECT_EQ(InferOne("replication_pad3d_backward", pad3, {F32({2, 4, 8, 7}), F32({2, 3, 4, 5})}), F32({2, 3, 4, 5}));

  EXPECT_THAT(InferError("reflection_pad2d", pad2, {F32({2, 3, 3, 5})}),
              HasSubstr("reflection_pad2d: self is [2, 3, 3, 5] and padding is [1, 2, 3, 0]; reflection padding must "
                        "be smaller than the padded dim (dim 2)"));
  EXPECT_THAT(InferError("replication_pad2d", pad2, {F32({2, 3, 0, 5})}), HasSubstr("non-empty padded dim"));
  EXPECT_THAT(InferError("reflection_pad2d", pad1, {F32({2, 3, 4, 5})}),
              HasSubstr("attribute 'padding' is [2, 1]; expected 4 ints"));
  EXPECT_THAT(InferError("reflection_pad2d", pad2, {F32({4, 5})}), HasSubstr("expected rank 3 or 4"));
  EXPECT_THAT(InferError("reflection_pad1d", MakeAttrs({{"padding", Ints{-1, 1}}}), {F32({2, 5})}),
              HasSubstr("each must be at least 0"));
  EXPECT_THAT(InferError("reflection_pad1d", pad1, {I64({2, 5})}), HasSubstr("self is int64"));
  EXPECT_THAT(InferError("reflection_pad2d_backward", pad2, {F32({2, 3, 7, 7}), F32({2, 3, 4, 5})}),
              HasSubstr("grad_output is float32[2, 3, 7, 7] but self float32[2, 3, 4, 5] gives float32[2, 3, 7, 8]"));
}

// ------------------------------------------------------------ 3-D pooling

TEST(Pooling3dInferenceTest, Shapes) {
  const TensorType x = F32({2, 3, 8, 9, 10});
  const Attrs max = MakeAttrs({{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}});
  const std::vector<TensorType> out = InferAll("max_pool3d_with_indices", max, {x});
  EXPECT_EQ(out, (std::vector<TensorType>{F32({2, 3, 4, 5, 5}), I64({2, 3, 4, 5, 5})}));
  EXPECT_EQ(InferOne("max_pool3d_with_indices_backward", max, {out[0], x, out[1]}), x);
  const Attrs ceil = MakeAttrs({{"kernel_size", Ints{2, 3, 3}}, {"stride", Ints{}}, {"ceil_mode", true}});
  EXPECT_EQ(InferOne("avg_pool3d", ceil, {BF16({3, 7, 7, 7})}), BF16({3, 4, 3, 3}));
  EXPECT_EQ(InferOne("avg_pool3d_backward", ceil, {F32({3, 4, 3, 3}), F32({3, 7, 7, 7})}), F32({3, 7, 7, 7}));
  EXPECT_EQ(InferOne("_adaptive_avg_pool3d", MakeAttrs({{"output_size", Ints{1}}}), {x}), F32({2, 3, 1, 1, 1}));
  EXPECT_EQ(InferOne("adaptive_avg_pool3d", MakeAttrs({{"output_size", Ints{2, 3, 4}}}), {F64({3, 5, 5, 5})}),
            F64({3, 2, 3, 4}));
  EXPECT_EQ(InferOne("_adaptive_avg_pool3d_backward", {}, {F32({2, 3, 1, 1, 1}), x}), x);

  EXPECT_THAT(InferError("max_pool3d_with_indices", max, {F32({3, 8, 8})}),
              HasSubstr("self is [3, 8, 8]; expected [N, C, D, H, W] or [C, D, H, W]"));
  EXPECT_THAT(InferError("avg_pool3d", MakeAttrs({{"kernel_size", Ints{3, 3}}}), {x}),
              HasSubstr("attribute 'kernel_size' is [3, 3]; expected one or 3 ints"));
  EXPECT_THAT(InferError("avg_pool3d", MakeAttrs({{"kernel_size", Ints{2}}, {"padding", Ints{2}}}), {x}),
              HasSubstr("padding must be at most half the kernel size"));
  EXPECT_THAT(InferError("avg_pool3d", MakeAttrs({{"kernel_size", Ints{9}}}), {x}), HasSubstr("must not be empty"));
  EXPECT_THAT(InferError("max_pool3d_with_indices_backward", max, {out[0], x, I32({2, 3, 4, 5, 5})}),
              HasSubstr("indices is int32[2, 3, 4, 5, 5]; expected int64[2, 3, 4, 5, 5]"));
  EXPECT_THAT(InferError("_adaptive_avg_pool3d", MakeAttrs({{"output_size", Ints{0}}}), {x}),
              HasSubstr("each must be at least 1"));
  EXPECT_THAT(InferError("_adaptive_avg_pool3d_backward", {}, {F32({2, 4, 1, 1, 1}), x}),
              HasSubstr("expected self's dtype and leading dims"));
}

// ------------------------------------------------------------ 3-D convolution

TEST(Convolution3dInferenceTest, ShapesAndErrors) {
  // r3d_18's stem: 3 -> 64, kernel (3, 7, 7), stride (1, 2, 2), padding (1, 3, 3).
  const TensorType x = F32({2, 3, 8, 32, 32});
  const TensorType w = F32({64, 3, 3, 7, 7});
  const Attrs stem = MakeAttrs({{"stride", Ints{1, 2, 2}},
                                {"padding", Ints{1, 3, 3}},
                                {"dilation", Ints{1, 1, 1}},
                                {"transposed", false},
                                {"output_padding", Ints{0, 0, 0}},
                                {"groups", int64_t{1}}});
  EXPECT_EQ(InferOne("convolution", stem, {x, w}), F32({2, 64, 8, 16, 16}));
  EXPECT_EQ(InferOne("convolution", stem, {x, w, F32({64})}), F32({2, 64, 8, 16, 16}));
  Attrs backward = stem;
  backward.Set("output_mask", Ints{1, 1, 0});
  EXPECT_EQ(InferAll("convolution_backward", backward, {F32({2, 64, 8, 16, 16}), x, w}),
            (std::vector<TensorType>{x, w, F32({0})}));
  // One int stands for every spatial dim; grouped (2+1)-D factorized kernels.
  EXPECT_EQ(
      InferOne("convolution", MakeAttrs({{"stride", Ints{2}}, {"padding", Ints{0, 1, 1}}, {"groups", int64_t{2}}}),
               {BF16({1, 4, 5, 6, 6}), BF16({6, 2, 1, 3, 3})}),
      BF16({1, 6, 3, 3, 3}));

  EXPECT_THAT(InferError("convolution", MakeAttrs({{"stride", Ints{1, 2}}}), {x, w}),
              HasSubstr("convolution: attribute 'stride' is [1, 2]; expected one or 3 ints (3-D)"));
  EXPECT_THAT(InferError("convolution", stem, {x, F32({64, 3, 7, 7})}),
              HasSubstr("weight is [64, 3, 7, 7]; expected [out_channels, in_channels / groups, kD, kH, kW]"));
  EXPECT_THAT(InferError("convolution", stem, {F32({2, 3, 32}), F32({64, 3, 7})}),
              HasSubstr("input is [2, 3, 32]; expected [N, C, H, W] or [N, C, D, H, W]"));
  EXPECT_THAT(InferError("convolution", {}, {F32({2, 3, 2, 9, 9}), w}),
              HasSubstr("spatial dim 0 padded to 2 is smaller than the dilated kernel (3)"));
  EXPECT_THAT(InferError("convolution_backward", backward, {F32({2, 64, 8, 16, 15}), x, w}),
              HasSubstr("grad_output is float32[2, 64, 8, 16, 15]"));
}

// Batch norm takes [N, C, *]: the 5-D inputs of 3-D CNNs.
TEST(BatchNorm5dInferenceTest, TakesVolumes) {
  const TensorType x = F32({2, 4, 3, 5, 5});
  const TensorType c = F32({4});
  const Attrs attrs = MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}});
  EXPECT_EQ(InferAll("_native_batch_norm_legit_functional", attrs, {x, c, c, c, c}),
            (std::vector<TensorType>{x, c, c, c, c}));
  const Attrs backward = MakeAttrs({{"train", true}, {"eps", 1e-5}, {"output_mask", Ints{1, 1, 1}}});
  EXPECT_EQ(InferAll("native_batch_norm_backward", backward, {x, x, c, c, c, c, c}),
            (std::vector<TensorType>{x, c, c}));
}

}  // namespace
}  // namespace tandem
