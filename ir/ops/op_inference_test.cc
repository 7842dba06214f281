// Shape and dtype inference of the first op set, and its error messages.
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/make_attrs.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_rules.h"

namespace tandem {

// Readable gtest output for TensorType comparisons.
void PrintTo(const TensorType& type, std::ostream* os) { *os << type.ToString(); }

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TensorType F32(Shape shape) { return {DType::kFloat32, std::move(shape)}; }
TensorType F64(Shape shape) { return {DType::kFloat64, std::move(shape)}; }
TensorType I64(Shape shape) { return {DType::kInt64, std::move(shape)}; }
TensorType I32(Shape shape) { return {DType::kInt32, std::move(shape)}; }

absl::StatusOr<std::vector<TensorType>> Infer(const std::string& op, const Attrs& attrs,
                                              const std::vector<TensorType>& inputs) {
  const OpDef* def = OpRegistry::Global().Find(op);
  if (def == nullptr) return absl::NotFoundError("no op " + op);
  return def->infer(attrs, inputs);
}

TensorType InferOne(const std::string& op, const Attrs& attrs, const std::vector<TensorType>& inputs) {
  auto result = Infer(op, attrs, inputs);
  EXPECT_TRUE(result.ok()) << op << ": " << result.status();
  if (!result.ok() || result->size() != 1) return {};
  return (*result)[0];
}

std::string InferError(const std::string& op, const Attrs& attrs, const std::vector<TensorType>& inputs) {
  auto result = Infer(op, attrs, inputs);
  EXPECT_FALSE(result.ok()) << op << " unexpectedly inferred " << (result.ok() ? (*result)[0].ToString() : "");
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  return std::string(result.status().message());
}

TEST(OpRegistryTest, HasTheDocumentedOpSetWithItsAliases) {
  const OpRegistry& registry = OpRegistry::Global();
  for (const char* op : {"mm",
                         "addmm",
                         "add.Tensor",
                         "sub.Tensor",
                         "mul.Tensor",
                         "div.Tensor",
                         "add.Scalar",
                         "sub.Scalar",
                         "mul.Scalar",
                         "div.Scalar",
                         "neg",
                         "sqrt",
                         "relu",
                         "threshold_backward",
                         "sum.dim_IntList",
                         "sum",
                         "mean.dim",
                         "t",
                         "t_copy",
                         "transpose.int",
                         "transpose_copy.int",
                         "permute",
                         "permute_copy",
                         "view",
                         "view_copy",
                         "_unsafe_view",
                         "reshape",
                         "_reshape_alias_copy",
                         "unsqueeze",
                         "unsqueeze_copy",
                         "squeeze.dim",
                         "squeeze_copy.dim",
                         "expand",
                         "expand_copy",
                         "clone",
                         "alias",
                         "detach",
                         "contiguous",
                         "copy",
                         "_to_copy",
                         "_log_softmax",
                         "_log_softmax_backward_data",
                         "nll_loss_forward",
                         "nll_loss_backward",
                         "zeros",
                         "ones",
                         "full",
                         "zeros_like",
                         "ones_like",
                         "full_like",
                         "fill.Scalar",
                         "scalar_tensor"}) {
    EXPECT_NE(registry.Find(op), nullptr) << op;
  }
  EXPECT_EQ(registry.Find("t_copy"), registry.Find("t"));
  EXPECT_EQ(registry.Find("_unsafe_view"), registry.Find("view"));
  EXPECT_EQ(registry.Find("conv2d"), nullptr);
}

TEST(OpRegistryTest, AliasKinds) {
  const OpRegistry& registry = OpRegistry::Global();
  EXPECT_EQ(registry.Find("view")->alias, AliasKind::kView);
  EXPECT_EQ(registry.Find("squeeze.dim")->alias, AliasKind::kView);
  EXPECT_EQ(registry.Find("detach")->alias, AliasKind::kView);
  EXPECT_EQ(registry.Find("relu")->alias, AliasKind::kInPlace);
  EXPECT_EQ(registry.Find("add.Tensor")->alias, AliasKind::kInPlace);
  EXPECT_EQ(registry.Find("mm")->alias, AliasKind::kNone);
  EXPECT_EQ(registry.Find("t")->alias, AliasKind::kNone);
  EXPECT_EQ(registry.Find("clone")->alias, AliasKind::kNone);
  EXPECT_EQ(registry.Find("nll_loss_forward")->num_outputs, 2);
  EXPECT_EQ(registry.Find("nll_loss_forward")->min_inputs, 2);
  EXPECT_EQ(registry.Find("nll_loss_forward")->max_inputs, 3);
}

TEST(LinalgInferenceTest, MmAndAddmm) {
  EXPECT_EQ(InferOne("mm", {}, {F32({256, 784}), F32({784, 128})}), F32({256, 128}));
  EXPECT_EQ(InferOne("addmm", {}, {F32({128}), F32({256, 784}), F32({784, 128})}), F32({256, 128}));
  EXPECT_EQ(InferOne("addmm", MakeAttrs({{"beta", 0.5}}), {F64({256, 1}), F64({256, 4}), F64({4, 3})}), F64({256, 3}));
}

TEST(LinalgInferenceTest, MmInnerDimMismatchNamesBothShapes) {
  EXPECT_THAT(InferError("mm", {}, {F32({256, 784}), F32({512, 10})}),
              AllOf(HasSubstr("mm: "), HasSubstr("float32[256, 784]"), HasSubstr("mat2 is float32[512, 10]"),
                    HasSubstr("inner dims 784 and 512 differ")));
  EXPECT_THAT(InferError("mm", {}, {F32({2, 3, 4}), F32({4, 2})}), HasSubstr("rank 3"));
  EXPECT_THAT(InferError("mm", {}, {F32({2, 3}), F64({3, 2})}), HasSubstr("dtypes must match"));
  EXPECT_THAT(InferError("mm", {}, {I64({2, 3}), I64({3, 2})}), HasSubstr("int64"));
  EXPECT_THAT(InferError("addmm", {}, {F32({5}), F32({2, 3}), F32({3, 4})}),
              AllOf(HasSubstr("self is float32[5]"), HasSubstr("[2, 4]")));
}

TEST(LinalgInferenceTest, TransposeFlagsReadAnOperandStoredTransposed) {
  const Attrs ta = MakeAttrs({{"transpose_a", true}});
  const Attrs tb = MakeAttrs({{"transpose_b", true}});
  const Attrs both = MakeAttrs({{"transpose_a", true}, {"transpose_b", true}});
  const Attrs neither = MakeAttrs({{"transpose_a", false}, {"transpose_b", false}});
  EXPECT_EQ(InferOne("mm", ta, {F32({784, 256}), F32({784, 128})}), F32({256, 128}));
  EXPECT_EQ(InferOne("mm", tb, {F32({256, 784}), F32({128, 784})}), F32({256, 128}));
  EXPECT_EQ(InferOne("mm", both, {F64({784, 256}), F64({128, 784})}), F64({256, 128}));
  EXPECT_EQ(InferOne("mm", neither, {F32({256, 784}), F32({784, 128})}), F32({256, 128}));
  EXPECT_EQ(InferOne("addmm", tb, {F32({128}), F32({256, 784}), F32({128, 784})}), F32({256, 128}));
  EXPECT_EQ(InferOne("addmm", ta, {F32({256, 128}), F32({784, 256}), F32({784, 128})}), F32({256, 128}));
  EXPECT_EQ(InferOne("addmm", both, {F64({256, 1}), F64({4, 256}), F64({3, 4})}), F64({256, 3}));
  // Square inner dims: the flags decide the result's shape.
  EXPECT_EQ(InferOne("mm", ta, {F32({3, 2}), F32({3, 3})}), F32({2, 3}));
  EXPECT_EQ(InferOne("mm", tb, {F32({3, 3}), F32({2, 3})}), F32({3, 2}));
}

TEST(LinalgInferenceTest, TransposeFlagMismatchesNameTheFlag) {
  const Attrs ta = MakeAttrs({{"transpose_a", true}});
  const Attrs tb = MakeAttrs({{"transpose_b", true}});
  // Shapes that fit without the flag no longer fit with it.
  EXPECT_THAT(InferError("mm", ta, {F32({256, 784}), F32({784, 128})}),
              AllOf(HasSubstr("mm: "), HasSubstr("self is float32[256, 784] (used transposed: transpose_a)"),
                    HasSubstr("mat2 is float32[784, 128]"), HasSubstr("inner dims 256 and 784 differ")));
  EXPECT_THAT(InferError("mm", tb, {F32({256, 784}), F32({784, 128})}),
              AllOf(HasSubstr("mat2 is float32[784, 128] (used transposed: transpose_b)"),
                    HasSubstr("inner dims 784 and 128 differ")));
  EXPECT_THAT(InferError("addmm", tb, {F32({128}), F32({256, 784}), F32({784, 128})}),
              AllOf(HasSubstr("addmm: "), HasSubstr("mat1 is float32[256, 784]"),
                    HasSubstr("(used transposed: transpose_b)"), HasSubstr("inner dims 784 and 128 differ")));
  // A self that does not broadcast to the product of the transposed operands.
  EXPECT_THAT(InferError("addmm", ta, {F32({784}), F32({784, 256}), F32({784, 128})}),
              AllOf(HasSubstr("self is float32[784]"), HasSubstr("[256, 128]"),
                    HasSubstr("mat1 float32[784, 256] transposed")));
  EXPECT_THAT(InferError("mm", tb, {F32({2, 3}), F64({4, 3})}), HasSubstr("dtypes must match"));
  EXPECT_THAT(InferError("mm", MakeAttrs({{"transpose_a", std::string("yes")}}), {F32({2, 3}), F32({3, 2})}),
              AllOf(HasSubstr("mm: "), HasSubstr("transpose_a"), HasSubstr("bool")));
  EXPECT_THAT(InferError("addmm", MakeAttrs({{"transpose_b", 1.5}}), {F32({2}), F32({2, 3}), F32({3, 2})}),
              AllOf(HasSubstr("transpose_b"), HasSubstr("bool")));
}

TEST(ElementwiseInferenceTest, BroadcastsLikePyTorch) {
  EXPECT_EQ(InferOne("add.Tensor", {}, {F32({4, 1, 3}), F32({2, 1})}), F32({4, 2, 3}));
  EXPECT_EQ(InferOne("mul.Tensor", {}, {F32({}), F32({5})}), F32({5}));
  EXPECT_EQ(InferOne("threshold_backward", MakeAttrs({{"threshold", 0.0}}), {F32({2, 3}), F32({2, 3})}), F32({2, 3}));
  EXPECT_EQ(InferOne("sub.Tensor", MakeAttrs({{"alpha", int64_t{2}}}), {I64({3}), I64({3})}), I64({3}));
}

TEST(ElementwiseInferenceTest, BadBroadcastNamesShapesAndDim) {
  EXPECT_THAT(InferError("add.Tensor", {}, {F32({2, 3}), F32({4})}),
              AllOf(HasSubstr("add.Tensor: "), HasSubstr("self is float32[2, 3]"), HasSubstr("other is float32[4]"),
                    HasSubstr("dim -1 is 3 vs 4")));
}

TEST(ElementwiseInferenceTest, DTypeRules) {
  // A rank-0 operand takes the other operand's dtype.
  EXPECT_EQ(InferOne("mul.Tensor", {}, {F32({3}), F64({})}), F32({3}));
  EXPECT_EQ(InferOne("mul.Tensor", {}, {I64({}), F32({3})}), F32({3}));
  EXPECT_THAT(InferError("add.Tensor", {}, {F32({3}), F64({3})}), HasSubstr("dtypes must match"));
  EXPECT_THAT(InferError("add.Tensor", {}, {I64({3}), F32({})}), HasSubstr("promote"));
  EXPECT_THAT(InferError("div.Tensor", {}, {I64({3}), I64({3})}), HasSubstr("int64"));
  EXPECT_THAT(InferError("add.Tensor", MakeAttrs({{"alpha", 0.5}}), {I64({3}), I64({3})}),
              HasSubstr("attribute 'alpha'"));
  EXPECT_EQ(InferOne("add.Scalar", MakeAttrs({{"other", int64_t{3}}}), {I64({3})}), I64({3}));
  EXPECT_THAT(InferError("add.Scalar", MakeAttrs({{"other", 1.5}}), {I64({3})}), HasSubstr("attribute 'other'"));
  EXPECT_THAT(InferError("sqrt", {}, {I64({3})}), HasSubstr("self is int64[3]"));
  EXPECT_EQ(InferOne("_to_copy", MakeAttrs({{"dtype", DType::kFloat64}}), {F32({2})}), F64({2}));
  EXPECT_EQ(InferOne("_to_copy", {}, {I64({2})}), I64({2}));
}

TEST(ElementwiseInferenceTest, MissingAttribute) {
  EXPECT_THAT(InferError("add.Scalar", {}, {F32({3})}), HasSubstr("missing attribute 'other'"));
  EXPECT_THAT(InferError("threshold_backward", {}, {F32({3}), F32({3})}), HasSubstr("missing attribute 'threshold'"));
  EXPECT_THAT(InferError("add.Tensor", MakeAttrs({{"alpha", std::string("x")}}), {F32({3}), F32({3})}),
              HasSubstr("attribute 'alpha' must be a number"));
}

TEST(ElementwiseInferenceTest, CopyBroadcastsSrcToSelf) {
  EXPECT_EQ(InferOne("copy", {}, {F32({2, 3}), F64({3})}), F32({2, 3}));
  EXPECT_THAT(InferError("copy", {}, {F32({3}), F32({2, 3})}),
              AllOf(HasSubstr("src is float32[2, 3]"), HasSubstr("float32[3]")));
}

TEST(ReductionInferenceTest, SumAndMean) {
  Attrs last = MakeAttrs({{"dim", std::vector<int64_t>{-1}}});
  EXPECT_EQ(InferOne("sum.dim_IntList", last, {F32({2, 3, 4})}), F32({2, 3}));
  Attrs keep = MakeAttrs({{"dim", std::vector<int64_t>{0, 2}}, {"keepdim", true}});
  EXPECT_EQ(InferOne("sum.dim_IntList", keep, {F32({2, 3, 4})}), F32({1, 3, 1}));
  EXPECT_EQ(InferOne("sum.dim_IntList", {}, {I64({2, 3})}), I64({}));
  EXPECT_EQ(InferOne("sum.dim_IntList", MakeAttrs({{"dim", std::vector<int64_t>{}}}), {F32({2, 3})}), F32({}));
  EXPECT_EQ(InferOne("sum", {}, {F64({2, 3})}), F64({}));
  EXPECT_EQ(InferOne("mean.dim", MakeAttrs({{"dim", int64_t{1}}}), {F32({2, 3})}), F32({2}));
  EXPECT_EQ(InferOne("sum", MakeAttrs({{"dtype", DType::kFloat64}}), {F32({2})}), F64({}));
}

TEST(ReductionInferenceTest, BadDims) {
  EXPECT_THAT(InferError("sum.dim_IntList", MakeAttrs({{"dim", std::vector<int64_t>{2}}}), {F32({2, 3})}),
              AllOf(HasSubstr("self is float32[2, 3]"), HasSubstr("dim 2 is out of range"), HasSubstr("rank 2")));
  EXPECT_THAT(InferError("sum.dim_IntList", MakeAttrs({{"dim", std::vector<int64_t>{1, -1}}}), {F32({2, 3})}),
              HasSubstr("appears twice"));
  EXPECT_THAT(InferError("mean.dim", MakeAttrs({{"dim", int64_t{0}}}), {I64({2})}), HasSubstr("int64"));
}

TEST(ShapeInferenceTest, Views) {
  Attrs size = MakeAttrs({{"size", std::vector<int64_t>{-1, 4}}});
  EXPECT_EQ(InferOne("view", size, {F32({2, 3, 4})}), F32({6, 4}));
  EXPECT_EQ(InferOne("_unsafe_view", size, {I64({8})}), I64({2, 4}));
  Attrs with_stride = MakeAttrs({{"size", std::vector<int64_t>{6, 4}}, {"stride", std::vector<int64_t>{4, 1}}});
  EXPECT_EQ(InferOne("_reshape_alias_copy", with_stride, {F32({24})}), F32({6, 4}));
  EXPECT_EQ(InferOne("unsqueeze", MakeAttrs({{"dim", int64_t{-1}}}), {F32({2, 3})}), F32({2, 3, 1}));
  EXPECT_EQ(InferOne("unsqueeze_copy", MakeAttrs({{"dim", int64_t{0}}}), {F32({})}), F32({1}));
  EXPECT_EQ(InferOne("squeeze.dim", MakeAttrs({{"dim", int64_t{-1}}}), {F32({2, 1, 3})}), F32({2, 1, 3}));
  EXPECT_EQ(InferOne("squeeze.dim", MakeAttrs({{"dim", int64_t{-2}}}), {F32({2, 1, 3})}), F32({2, 3}));
  EXPECT_EQ(InferOne("detach", {}, {F64({5})}), F64({5}));
}

TEST(ShapeInferenceTest, ViewErrors) {
  EXPECT_THAT(InferError("view", MakeAttrs({{"size", std::vector<int64_t>{5, 5}}}), {F32({2, 3, 4})}),
              AllOf(HasSubstr("view: "), HasSubstr("[2, 3, 4] (24 elements)"), HasSubstr("[5, 5] (25 elements)")));
  EXPECT_THAT(InferError("view", MakeAttrs({{"size", std::vector<int64_t>{-1, 5}}}), {F32({2, 3, 4})}),
              HasSubstr("cannot be viewed as [-1, 5]"));
  EXPECT_THAT(InferError("view", MakeAttrs({{"size", std::vector<int64_t>{-1, -1}}}), {F32({4})}),
              HasSubstr("more than one -1"));
  EXPECT_THAT(InferError("view", {}, {F32({4})}), HasSubstr("missing attribute 'size'"));
  Attrs strided = MakeAttrs({{"size", std::vector<int64_t>{6, 4}}, {"stride", std::vector<int64_t>{1, 6}}});
  EXPECT_THAT(InferError("_reshape_alias_copy", strided, {F32({24})}), HasSubstr("only contiguous"));
  EXPECT_THAT(InferError("unsqueeze", MakeAttrs({{"dim", int64_t{3}}}), {F32({2, 3})}),
              HasSubstr("dim 3 is out of range"));
}

TEST(ShapeInferenceTest, TransposesAndPermutations) {
  EXPECT_EQ(InferOne("t", {}, {F32({2, 3})}), F32({3, 2}));
  EXPECT_EQ(InferOne("t_copy", {}, {F32({3})}), F32({3}));
  EXPECT_THAT(InferError("t", {}, {F32({2, 3, 4})}), HasSubstr("rank <= 2"));
  Attrs swap = MakeAttrs({{"dim0", int64_t{0}}, {"dim1", int64_t{-1}}});
  EXPECT_EQ(InferOne("transpose.int", swap, {F32({2, 3, 4})}), F32({4, 3, 2}));
  EXPECT_THAT(InferError("transpose.int", MakeAttrs({{"dim0", int64_t{0}}}), {F32({2, 3})}),
              HasSubstr("missing attribute 'dim1'"));
  EXPECT_EQ(InferOne("permute", MakeAttrs({{"dims", std::vector<int64_t>{2, 0, 1}}}), {F32({2, 3, 4})}),
            F32({4, 2, 3}));
  EXPECT_THAT(InferError("permute", MakeAttrs({{"dims", std::vector<int64_t>{0, 0, 1}}}), {F32({2, 3, 4})}),
              HasSubstr("not a permutation"));
  EXPECT_THAT(InferError("permute_copy", MakeAttrs({{"dims", std::vector<int64_t>{1, 0}}}), {F32({2, 3, 4})}),
              HasSubstr("rank 3"));
}

TEST(ShapeInferenceTest, Expand) {
  EXPECT_EQ(InferOne("expand", MakeAttrs({{"size", std::vector<int64_t>{2, -1, 4}}}), {F32({3, 1})}), F32({2, 3, 4}));
  EXPECT_THAT(InferError("expand", MakeAttrs({{"size", std::vector<int64_t>{3, 5}}}), {F32({3, 2})}),
              AllOf(HasSubstr("float32[3, 2]"), HasSubstr("dim 1 is 2, not 1")));
  EXPECT_THAT(InferError("expand_copy", MakeAttrs({{"size", std::vector<int64_t>{-1, 3}}}), {F32({3})}),
              HasSubstr("new leading dim 0"));
}

TEST(LossInferenceTest, LogSoftmax) {
  EXPECT_EQ(InferOne("_log_softmax", MakeAttrs({{"dim", int64_t{1}}, {"half_to_float", false}}), {F32({8, 10})}),
            F32({8, 10}));
  EXPECT_THAT(InferError("_log_softmax", MakeAttrs({{"dim", int64_t{2}}}), {F32({8, 10})}),
              HasSubstr("dim 2 is out of range"));
  EXPECT_THAT(InferError("_log_softmax", MakeAttrs({{"dim", int64_t{1}}, {"half_to_float", true}}), {F32({8, 10})}),
              HasSubstr("half_to_float"));
  Attrs back = MakeAttrs({{"dim", int64_t{1}}, {"input_dtype", DType::kFloat32}});
  EXPECT_EQ(InferOne("_log_softmax_backward_data", back, {F32({8, 10}), F32({8, 10})}), F32({8, 10}));
  EXPECT_THAT(InferError("_log_softmax_backward_data", back, {F32({8, 10}), F32({8, 9})}),
              HasSubstr("output is float32[8, 9]"));
}

TEST(LossInferenceTest, NllLoss) {
  auto mean = Infer("nll_loss_forward", {}, {F32({8, 10}), I64({8})});
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_EQ(*mean, (std::vector<TensorType>{F32({}), F32({})}));
  auto none = Infer("nll_loss_forward", MakeAttrs({{"reduction", int64_t{0}}}), {F64({8, 10}), I64({8}), F64({10})});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, (std::vector<TensorType>{F64({8}), F64({})}));
  auto single = Infer("nll_loss_forward", MakeAttrs({{"reduction", int64_t{0}}}), {F32({10}), I64({})});
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ((*single)[0], F32({}));

  EXPECT_THAT(InferError("nll_loss_forward", {}, {F32({8, 10}), F32({8})}),
              AllOf(HasSubstr("target is float32[8]"), HasSubstr("int64[8]")));
  EXPECT_THAT(InferError("nll_loss_forward", {}, {F32({8, 10}), I64({7})}), HasSubstr("target is int64[7]"));
  EXPECT_THAT(InferError("nll_loss_forward", {}, {F32({8, 10}), I64({8}), F32({9})}),
              HasSubstr("weight is float32[9]"));
  EXPECT_THAT(InferError("nll_loss_forward", MakeAttrs({{"reduction", int64_t{3}}}), {F32({8, 10}), I64({8})}),
              HasSubstr("attribute 'reduction' is 3"));

  EXPECT_EQ(InferOne("nll_loss_backward", {}, {F32({}), F32({8, 10}), I64({8}), F32({})}), F32({8, 10}));
  EXPECT_THAT(InferError("nll_loss_backward", MakeAttrs({{"reduction", int64_t{0}}}),
                         {F32({}), F32({8, 10}), I64({8}), F32({})}),
              AllOf(HasSubstr("grad_output is float32[]"), HasSubstr("expected float32[8]")));
}

// Class labels are int64 or int32, as in PyTorch; the outputs keep self's
// dtype either way.
TEST(LossInferenceTest, NllLossTakesInt32Labels) {
  auto mean = Infer("nll_loss_forward", {}, {F32({8, 10}), I32({8})});
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_EQ(*mean, (std::vector<TensorType>{F32({}), F32({})}));
  const TensorType bf16{DType::kBFloat16, {8, 10}};
  auto none =
      Infer("nll_loss_forward", MakeAttrs({{"reduction", int64_t{0}}}), {bf16, I32({8}), {DType::kBFloat16, {10}}});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, (std::vector<TensorType>{{DType::kBFloat16, {8}}, {DType::kBFloat16, {}}}));
  EXPECT_EQ(InferOne("nll_loss_backward", {}, {F64({}), F64({8, 10}), I32({8}), F64({})}), F64({8, 10}));

  // Other label dtypes are refused, naming both accepted ones.
  for (DType dtype : {DType::kFloat32, DType::kBool, DType::kFloat16}) {
    const TensorType target{dtype, {8}};
    EXPECT_THAT(InferError("nll_loss_forward", {}, {F32({8, 10}), target}),
                AllOf(HasSubstr(absl::StrCat("target is ", target.ToString())), HasSubstr("int64[8] or int32[8]")));
    EXPECT_THAT(InferError("nll_loss_backward", {}, {F32({}), F32({8, 10}), target, F32({})}),
                HasSubstr(absl::StrCat("target is ", target.ToString())));
  }
  EXPECT_THAT(InferError("nll_loss_forward", {}, {F32({8, 10}), I32({7})}), HasSubstr("target is int32[7]"));
}

TEST(IndexingInferenceTest, IndexTensorsMayBeInt64OrInt32) {
  for (DType index : {DType::kInt64, DType::kInt32}) {
    SCOPED_TRACE(DTypeName(index));
    auto idx = [&](Shape shape) { return TensorType{index, std::move(shape)}; };
    EXPECT_EQ(InferOne("embedding", {}, {F32({10, 4}), idx({3, 5})}), F32({3, 5, 4}));
    const TensorType f16_weight{DType::kFloat16, {10, 4}};
    EXPECT_EQ(InferOne("embedding", {}, {f16_weight, idx({6})}), (TensorType{DType::kFloat16, {6, 4}}));
    const Attrs backward = MakeAttrs({{"num_weights", int64_t{10}}, {"padding_idx", int64_t{0}}});
    EXPECT_EQ(InferOne("embedding_dense_backward", backward, {F64({3, 5, 4}), idx({3, 5})}), F64({10, 4}));
    const TensorType bf16_grad{DType::kBFloat16, {6, 4}};
    EXPECT_EQ(InferOne("embedding_dense_backward", backward, {bf16_grad, idx({6})}),
              (TensorType{DType::kBFloat16, {10, 4}}));
    const Attrs dim1 = MakeAttrs({{"dim", int64_t{1}}});
    EXPECT_EQ(InferOne("gather", dim1, {F32({4, 6}), idx({4, 9})}), F32({4, 9}));
    EXPECT_EQ(InferOne("gather", dim1, {I32({4, 6}), idx({2, 3})}), I32({2, 3}));  // int32 values too
    EXPECT_EQ(InferOne("scatter.value", MakeAttrs({{"dim", int64_t{0}}, {"value", 2.0}}), {F32({4, 6}), idx({1, 6})}),
              F32({4, 6}));
    EXPECT_EQ(InferOne("scatter.src", dim1, {I64({4, 6}), idx({4, 1}), I64({4, 2})}), I64({4, 6}));
    EXPECT_EQ(InferOne("index_select", MakeAttrs({{"dim", int64_t{0}}}), {F32({4, 6}), idx({7})}), F32({7, 6}));
    EXPECT_EQ(InferOne("index_select", dim1, {F32({4, 6}), idx({})}), F32({4, 1}));
    EXPECT_EQ(InferOne("index_put", {}, {F32({5, 4, 3}), idx({2, 1}), idx({4}), F32({3})}), F32({5, 4, 3}));
  }
  // index_put's index tensors may mix the two dtypes.
  EXPECT_EQ(InferOne("index_put", MakeAttrs({{"accumulate", true}}), {F32({5, 4}), I32({3}), I64({3}), F32({3})}),
            F32({5, 4}));
  EXPECT_EQ(InferOne("index_put", {}, {F32({5, 4}), I64({2, 1}), I32({3}), F32({})}), F32({5, 4}));
}

TEST(IndexingInferenceTest, OtherIndexDTypesAreRefusedByName) {
  const Attrs dim0 = MakeAttrs({{"dim", int64_t{0}}});
  EXPECT_THAT(InferError("embedding", {}, {F32({10, 4}), F32({3})}),
              AllOf(HasSubstr("indices is float32[3]"), HasSubstr("indices must be int64 or int32")));
  EXPECT_THAT(InferError("embedding", {}, {F32({10, 4}), {DType::kBFloat16, {3}}}),
              HasSubstr("indices is bfloat16[3]; indices must be int64 or int32"));
  EXPECT_THAT(
      InferError("embedding_dense_backward", MakeAttrs({{"num_weights", int64_t{10}}}), {F32({3, 4}), F64({3})}),
      HasSubstr("indices is float64[3]; indices must be int64 or int32"));
  EXPECT_THAT(InferError("gather", dim0, {F32({4, 6}), {DType::kBool, {2, 6}}}),
              HasSubstr("index is bool[2, 6]; indices must be int64 or int32"));
  EXPECT_THAT(InferError("scatter.value", MakeAttrs({{"dim", int64_t{0}}, {"value", 1.0}}), {F32({4}), F32({2})}),
              HasSubstr("index is float32[2]"));
  EXPECT_THAT(InferError("scatter.src", dim0, {F32({4}), F32({2}), F32({2})}), HasSubstr("index is float32[2]"));
  EXPECT_THAT(InferError("index_select", dim0, {F32({4, 6}), F32({2})}),
              HasSubstr("index is float32[2]; indices must be int64 or int32"));
  // The refused one is named by its position among index_put's indices.
  EXPECT_THAT(InferError("index_put", {}, {F32({5, 4}), I32({3}), F32({3}), F32({3})}),
              HasSubstr("indices[1] is float32[3]; indices must be int64 or int32"));
  // Indices PyTorch defines as int64 outputs stay int64.
  auto pooled = Infer("max_pool2d_with_indices", MakeAttrs({{"kernel_size", int64_t{2}}}), {F32({1, 1, 4, 4})});
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  EXPECT_EQ((*pooled)[1], I64({1, 1, 2, 2}));
}

TEST(FactoryInferenceTest, Constants) {
  EXPECT_EQ(InferOne("zeros", MakeAttrs({{"size", std::vector<int64_t>{2, 3}}}), {}), F32({2, 3}));
  EXPECT_EQ(
      InferOne("full",
               MakeAttrs({{"size", std::vector<int64_t>{4}}, {"fill_value", int64_t{7}}, {"dtype", DType::kInt64}}),
               {}),
      I64({4}));
  EXPECT_EQ(InferOne("ones_like", MakeAttrs({{"dtype", DType::kFloat64}}), {F32({2})}), F64({2}));
  EXPECT_EQ(InferOne("full_like", MakeAttrs({{"fill_value", 0.5}}), {F32({2})}), F32({2}));
  EXPECT_EQ(InferOne("fill.Scalar", MakeAttrs({{"value", 2.0}}), {I64({2})}), I64({2}));
  EXPECT_EQ(InferOne("scalar_tensor", MakeAttrs({{"s", 1.0}, {"dtype", DType::kFloat64}}), {}), F64({}));
  EXPECT_THAT(InferError("full", MakeAttrs({{"size", std::vector<int64_t>{4}}}), {}),
              HasSubstr("missing attribute 'fill_value'"));
  EXPECT_THAT(InferError("zeros", MakeAttrs({{"size", std::vector<int64_t>{2, -3}}}), {}),
              HasSubstr("negative dim -3"));
  EXPECT_EQ(InferOne("ones", MakeAttrs({{"size", std::vector<int64_t>{2}}, {"dtype", DType::kFloat16}}), {}),
            (TensorType{DType::kFloat16, {2}}));
  // An op without 16-bit kernels still refuses them, naming the dtype.
  EXPECT_THAT(InferError("rsqrt", {}, {TensorType{DType::kBFloat16, {2}}}), HasSubstr("bfloat16"));
}

// The efficient attention ops and _safe_softmax take bfloat16 and float16;
// the log-sum-exp is float32 then (float64 stays float64).
TEST(AttentionInferenceTest, SixteenBitEfficientAttentionAndSafeSoftmax) {
  const Attrs lse_attrs = MakeAttrs({{"compute_log_sumexp", true}});
  for (DType half : {DType::kBFloat16, DType::kFloat16}) {
    const TensorType q{half, {2, 4, 40, 8}}, kv{half, {2, 4, 7, 8}}, bias{half, {40, 7}};
    auto fwd = Infer("_scaled_dot_product_efficient_attention", lse_attrs, {q, kv, kv, bias});
    ASSERT_TRUE(fwd.ok()) << fwd.status();
    EXPECT_EQ(*fwd, (std::vector<TensorType>{q, F32({2, 4, 64}), I64({}), I64({})}));
    auto no_lse = Infer("_scaled_dot_product_efficient_attention", {}, {q, kv, kv});
    ASSERT_TRUE(no_lse.ok()) << no_lse.status();
    EXPECT_EQ((*no_lse)[1], F32({2, 4, 0}));
    auto back = Infer("_scaled_dot_product_efficient_attention_backward", lse_attrs,
                      {q, q, kv, kv, bias, q, F32({2, 4, 64}), I64({}), I64({})});
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, (std::vector<TensorType>{q, kv, kv, bias}));
    EXPECT_THAT(InferError("_scaled_dot_product_efficient_attention_backward", lse_attrs,
                           {q, q, kv, kv, bias, q, TensorType{half, {2, 4, 64}}, I64({}), I64({})}),
                HasSubstr("expected float32[2, 4, 40]"));
    EXPECT_THAT(InferError("_scaled_dot_product_efficient_attention", lse_attrs, {q, kv, kv, F32({40, 7})}),
                HasSubstr("the mask is float32[40, 7]"));
    EXPECT_EQ(InferOne("_safe_softmax", MakeAttrs({{"dim", int64_t{-1}}}), {TensorType{half, {3, 5}}}),
              (TensorType{half, {3, 5}}));
  }
  auto f64 =
      Infer("_scaled_dot_product_efficient_attention", lse_attrs, {F64({3, 5, 2}), F64({3, 6, 2}), F64({3, 6, 2})});
  ASSERT_TRUE(f64.ok()) << f64.status();
  EXPECT_EQ((*f64)[1], F64({3, 32}));
}

// The CNN ops take bfloat16 and float16 (PyTorch's CUDA dtypes): convolution
// and pooling keep one dtype throughout (max pooling's indices int64); batch
// norm's saved statistics are float32, its weight, bias and running
// statistics are all the input's dtype or all float32, and the parameters'
// gradients take the weight's dtype.
TEST(CnnInferenceTest, SixteenBitConvolutionPoolingAndBatchNorm) {
  for (DType half : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(half));
    const auto H = [half](Shape shape) { return TensorType{half, std::move(shape)}; };
    const TensorType x = H({2, 4, 8, 8});
    const Attrs conv = MakeAttrs({{"padding", std::vector<int64_t>{1, 1}}, {"stride", std::vector<int64_t>{2, 2}}});
    EXPECT_EQ(InferOne("convolution", conv, {x, H({6, 4, 3, 3}), H({6})}), H({2, 6, 4, 4}));
    auto conv_grads = Infer("convolution_backward", conv, {H({2, 6, 4, 4}), x, H({6, 4, 3, 3})});
    ASSERT_TRUE(conv_grads.ok()) << conv_grads.status();
    EXPECT_EQ(*conv_grads, (std::vector<TensorType>{x, H({6, 4, 3, 3}), H({6})}));
    EXPECT_THAT(InferError("convolution", conv, {x, F32({6, 4, 3, 3})}), HasSubstr("dtypes must match"));
    EXPECT_THAT(InferError("convolution", conv, {x, H({6, 4, 3, 3}), F32({6})}), HasSubstr("dtypes must match"));

    const Attrs pool = MakeAttrs({{"kernel_size", int64_t{2}}});
    auto max = Infer("max_pool2d_with_indices", pool, {x});
    ASSERT_TRUE(max.ok()) << max.status();
    EXPECT_EQ(*max, (std::vector<TensorType>{H({2, 4, 4, 4}), I64({2, 4, 4, 4})}));
    EXPECT_EQ(InferOne("max_pool2d_with_indices_backward", pool, {H({2, 4, 4, 4}), x, I64({2, 4, 4, 4})}), x);
    EXPECT_EQ(InferOne("avg_pool2d", pool, {x}), H({2, 4, 4, 4}));
    EXPECT_EQ(InferOne("avg_pool2d_backward", pool, {H({2, 4, 4, 4}), x}), x);
    const Attrs adaptive = MakeAttrs({{"output_size", std::vector<int64_t>{3, 3}}});
    EXPECT_EQ(InferOne("_adaptive_avg_pool2d", adaptive, {x}), H({2, 4, 3, 3}));
    EXPECT_EQ(InferOne("_adaptive_avg_pool2d_backward", {}, {H({2, 4, 3, 3}), x}), x);
    EXPECT_THAT(InferError("avg_pool2d_backward", pool, {F32({2, 4, 4, 4}), x}), HasSubstr("grad_output is float32"));

    const TensorType c = H({4});
    const Attrs train = MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}});
    const Attrs eval = MakeAttrs({{"training", false}, {"momentum", 0.1}, {"eps", 1e-5}});
    auto bn = Infer("_native_batch_norm_legit_functional", train, {x, c, c, c, c});
    ASSERT_TRUE(bn.ok()) << bn.status();
    EXPECT_EQ(*bn, (std::vector<TensorType>{x, F32({4}), F32({4}), c, c}));
    auto bn_eval = Infer("native_batch_norm", eval, {x, c, c, c, c});
    ASSERT_TRUE(bn_eval.ok()) << bn_eval.status();
    EXPECT_EQ(*bn_eval, (std::vector<TensorType>{x, F32({0}), F32({0})}));
    auto mixed = Infer("_native_batch_norm_legit_functional", train, {x, F32({4}), F32({4}), F32({4}), F32({4})});
    ASSERT_TRUE(mixed.ok()) << mixed.status();
    EXPECT_EQ(*mixed, (std::vector<TensorType>{x, F32({4}), F32({4}), F32({4}), F32({4})}));
    const Attrs back = MakeAttrs({{"train", true}, {"eps", 1e-5}});
    auto bn_grads = Infer("native_batch_norm_backward", back, {x, x, c, c, c, F32({4}), F32({4})});
    ASSERT_TRUE(bn_grads.ok()) << bn_grads.status();
    EXPECT_EQ(*bn_grads, (std::vector<TensorType>{x, c, c}));
    auto mixed_grads = Infer("native_batch_norm_backward", back, {x, x, F32({4}), F32({4}), F32({4})});
    ASSERT_TRUE(mixed_grads.ok()) << mixed_grads.status();
    EXPECT_EQ(*mixed_grads, (std::vector<TensorType>{x, F32({4}), F32({4})}));
    // Wrong dtypes name the rule.
    EXPECT_THAT(InferError("native_batch_norm", train, {x, F64({4}), F64({4})}),
                HasSubstr(absl::StrCat("weight is float64[4] but input is ", x.ToString(), "; expected ",
                                       DTypeName(half), "[4] or float32[4]")));
    EXPECT_THAT(InferError("native_batch_norm", train, {x, F32({4}), c}),
                HasSubstr(absl::StrCat("bias is ", c.ToString(), " but input is ", x.ToString(),
                                       "; expected float32[4] (the weight's dtype)")));
    EXPECT_THAT(InferError("native_batch_norm_backward", back, {x, x, c, c, c, c, c}),
                HasSubstr(absl::StrCat("save_mean is ", c.ToString(), " but input is ", x.ToString(),
                                       "; expected float32[4]")));
  }
  // float32 keeps its statistics and parameters in float32, and refuses a
  // float64 weight as before.
  auto f32 = Infer("native_batch_norm", MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}}),
                   {F32({2, 3}), F32({3}), F32({3})});
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ(*f32, (std::vector<TensorType>{F32({2, 3}), F32({3}), F32({3})}));
  EXPECT_THAT(InferError("native_batch_norm", MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}}),
                         {F32({2, 3}), F64({3}), F64({3})}),
              HasSubstr("weight is float64[3] but input is float32[2, 3]; expected float32[3]"));
}

// The LSTM's cell math takes bfloat16 and float16: sigmoid, tanh and their
// backwards keep the dtype; the backwards still need equal types.
TEST(ActivationInferenceTest, SixteenBitSigmoidTanhAndBackwards) {
  for (DType half : {DType::kBFloat16, DType::kFloat16}) {
    const TensorType x{half, {4, 6}};
    EXPECT_EQ(InferOne("sigmoid", {}, {x}), x);
    EXPECT_EQ(InferOne("tanh", {}, {x}), x);
    EXPECT_EQ(InferOne("sigmoid_backward", {}, {x, x}), x);
    EXPECT_EQ(InferOne("tanh_backward", {}, {x, x}), x);
    EXPECT_THAT(InferError("tanh_backward", {}, {x, F32({4, 6})}), HasSubstr("they must have the same type"));
  }
  EXPECT_THAT(InferError("sigmoid", {}, {I64({2})}), HasSubstr("int64"));
}

TEST(ShapeRulesTest, Helpers) {
  EXPECT_EQ(BroadcastStrides({3, 1}, {2, 3, 4}), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(ContiguousStrides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_TRUE(BroadcastsTo({1, 4}, {3, 4}));
  EXPECT_FALSE(BroadcastsTo({3, 4}, {4}));
  EXPECT_EQ(*NormalizeDim(-1, 0), 0);
  EXPECT_FALSE(NormalizeDim(1, 0).ok());
  DimSplit split = SplitAtDim({2, 3, 4}, 1);
  EXPECT_EQ(split.outer, 2);
  EXPECT_EQ(split.size, 3);
  EXPECT_EQ(split.inner, 4);
}

}  // namespace
}  // namespace tandem
