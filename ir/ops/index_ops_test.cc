// Registry entries of advanced indexing (index.Tensor and index_put with
// indexed_dims), the scatters, the strided views and the random ops: their
// output types against PyTorch's (shapes worked out with torch), the aliases,
// and the messages of refused nodes.
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/make_attrs.h"
#include "ir/op_registry.h"
#include "ir/ops/index_rules.h"

namespace tandem {

void PrintTo(const TensorType& type, std::ostream* os) { *os << type.ToString(); }

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TensorType F32(Shape shape) { return {DType::kFloat32, std::move(shape)}; }
TensorType F64(Shape shape) { return {DType::kFloat64, std::move(shape)}; }
TensorType I64(Shape shape) { return {DType::kInt64, std::move(shape)}; }
TensorType I32(Shape shape) { return {DType::kInt32, std::move(shape)}; }
TensorType Bool(Shape shape) { return {DType::kBool, std::move(shape)}; }
TensorType BF16(Shape shape) { return {DType::kBFloat16, std::move(shape)}; }

using Ints = std::vector<int64_t>;

absl::StatusOr<std::vector<TensorType>> Infer(const std::string& op, const Attrs& attrs,
                                              const std::vector<TensorType>& inputs) {
  const OpDef* def = OpRegistry::Global().Find(op);
  if (def == nullptr) return absl::NotFoundError("no op " + op);
  return def->infer(attrs, inputs);
}

TensorType InferOne(const std::string& op, const Attrs& attrs, const std::vector<TensorType>& inputs) {
  auto result = Infer(op, attrs, inputs);
  EXPECT_TRUE(result.ok()) << op << ": " << result.status();
  if (!result.ok() || result->empty()) return {};
  return (*result)[0];
}

std::string InferError(const std::string& op, const Attrs& attrs, const std::vector<TensorType>& inputs) {
  auto result = Infer(op, attrs, inputs);
  EXPECT_FALSE(result.ok()) << op << " unexpectedly inferred " << (result.ok() ? (*result)[0].ToString() : "");
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  return std::string(result.status().message());
}

Attrs Dims(Ints dims) { return MakeAttrs({{"indexed_dims", dims}}); }

TEST(IndexOpsRegistryTest, NamesAliasesAndDataChecks) {
  const OpRegistry& registry = OpRegistry::Global();
  for (const char* op : {"index.Tensor",
                         "_unsafe_index.Tensor",
                         "_unsafe_index_put",
                         "scatter_add",
                         "scatter_reduce.two",
                         "masked_scatter",
                         "slice_scatter",
                         "select_scatter",
                         "as_strided",
                         "as_strided_copy",
                         "as_strided_scatter",
                         "diagonal",
                         "diagonal_copy",
                         "diagonal_scatter",
                         "flip",
                         "repeat",
                         "empty.memory_format",
                         "empty_strided",
                         "new_empty_strided",
                         "bernoulli.p",
                         "rand",
                         "randn"}) {
    EXPECT_NE(registry.Find(op), nullptr) << op;
  }
  EXPECT_EQ(registry.Find("_unsafe_index.Tensor"), registry.Find("index.Tensor"));
  EXPECT_EQ(registry.Find("_unsafe_index_put"), registry.Find("index_put"));
  EXPECT_EQ(registry.Find("as_strided_copy"), registry.Find("as_strided"));
  EXPECT_EQ(registry.Find("diagonal_copy"), registry.Find("diagonal"));
  EXPECT_EQ(registry.Find("scatter_reduce.two")->num_outputs, 2);
  // Ops whose kernels check data, under every name.
  for (const char* op : {"index.Tensor", "_unsafe_index.Tensor", "index_put", "_unsafe_index_put", "scatter_add",
                         "scatter_reduce.two", "masked_scatter"}) {
    EXPECT_TRUE(OpChecksData(op)) << op;
  }
  for (const char* op : {"slice_scatter", "as_strided", "flip", "repeat", "bernoulli.p", "diagonal_copy"}) {
    EXPECT_FALSE(OpChecksData(op)) << op;
  }
}

TEST(IndexOpsRegistryTest, IndexTensorPlacesTheBroadcastIndexAsPyTorchDoes) {
  const TensorType self = F32({4, 3, 4, 5});
  // No indexed_dims: the first k dims.
  EXPECT_EQ(InferOne("index.Tensor", {}, {self, I64({7})}), F32({7, 3, 4, 5}));
  EXPECT_EQ(InferOne("index.Tensor", {}, {self, I64({2, 1}), I32({6})}), F32({2, 6, 4, 5}));
  // Adjacent indexed dims: B where they were ([None, i, j] of torch).
  EXPECT_EQ(InferOne("index.Tensor", Dims({1, 2}), {self, I64({2, 2}), I64({2})}), F32({4, 2, 2, 5}));
  EXPECT_EQ(InferOne("index.Tensor", Dims({2}), {self, I64({2})}), F32({4, 3, 2, 5}));
  EXPECT_EQ(InferOne("_unsafe_index.Tensor", Dims({3}), {self, I64({6, 1})}), F32({4, 3, 4, 6, 1}));
  // Not adjacent: B first ([i, None, j]).
  EXPECT_EQ(InferOne("index.Tensor", Dims({0, 2}), {self, I64({2, 2}), I64({2})}), F32({2, 2, 3, 5}));
  EXPECT_EQ(InferOne("index.Tensor", Dims({0, 2}), {self, I64({}), I64({2})}), F32({2, 3, 5}));
  EXPECT_EQ(InferOne("index.Tensor", Dims({1, 3}), {self, I64({3, 1}), I64({1, 2})}), F32({3, 2, 4, 4}));
  // Every dtype: the op moves bytes.
  EXPECT_EQ(InferOne("index.Tensor", {}, {BF16({5, 2}), I64({3})}), BF16({3, 2}));
  EXPECT_EQ(InferOne("index.Tensor", {}, {Bool({5}), I64({3})}), Bool({3}));
}

TEST(IndexOpsRegistryTest, IndexTensorRefusals) {
  const TensorType self = F32({4, 3});
  EXPECT_THAT(InferError("index.Tensor", {}, {self, Bool({4})}),
              AllOf(HasSubstr("index.Tensor: "), HasSubstr("indices[0] is bool[4]"),
                    HasSubstr("data-dependent number of elements")));
  EXPECT_THAT(InferError("index.Tensor", {}, {self, I64({2}), F32({2})}),
              HasSubstr("indices[1] is float32[2]; indices must be int64 or int32"));
  EXPECT_THAT(InferError("index.Tensor", {}, {self, I64({2}), I64({2}), I64({2})}),
              AllOf(HasSubstr("self is float32[4, 3]"), HasSubstr("3 index tensors were given")));
  EXPECT_THAT(InferError("index.Tensor", {}, {self, I64({2}), I64({3})}),
              AllOf(HasSubstr("indices[1] of shape [3]"), HasSubstr("does not broadcast")));
  EXPECT_THAT(InferError("index.Tensor", Dims({0, 1}), {self, I64({2})}),
              HasSubstr("attribute 'indexed_dims' [0, 1] names 2 dims but 1 index tensors were given"));
  EXPECT_THAT(InferError("index.Tensor", Dims({1, 0}), {self, I64({2}), I64({2})}),
              HasSubstr("must name ascending dims of self, in [0, 2)"));
  EXPECT_THAT(InferError("index.Tensor", Dims({2}), {self, I64({2})}), HasSubstr("in [0, 2)"));
  EXPECT_THAT(InferError("index.Tensor", Dims({-1}), {self, I64({2})}), HasSubstr("in [0, 2)"));
  EXPECT_THAT(InferError("index.Tensor", {}, {self}), HasSubstr("no index tensors were given"));
  // B's size must be a number even where the result is empty.
  const int64_t big = int64_t{1} << 40;
  EXPECT_THAT(InferError("index.Tensor", Dims({0, 1}), {F32({0, 5}), I64({big, 1}), I64({1, big})}),
              HasSubstr("too many elements"));
}

TEST(IndexOpsRegistryTest, IndexPutTakesIndexedDims) {
  const TensorType self = F32({3, 4, 5});
  // values broadcasts to self[indices]'s shape.
  EXPECT_EQ(InferOne("index_put", Dims({1}), {self, I64({2}), F32({3, 2, 5})}), self);
  EXPECT_EQ(InferOne("_unsafe_index_put", Dims({1}), {self, I64({2}), F32({1, 5})}), self);
  EXPECT_EQ(InferOne("index_put", Dims({0, 2}), {self, I64({2}), I32({2}), F32({2, 4})}), self);
  EXPECT_EQ(InferOne("index_put", MakeAttrs({{"accumulate", true}}), {BF16({3, 4}), I64({2}), BF16({4})}),
            BF16({3, 4}));
  EXPECT_THAT(InferError("index_put", Dims({1}), {self, I64({2}), F32({2, 4, 5})}),
              HasSubstr("values is float32[2, 4, 5]; expected float32 broadcasting to [3, 2, 5]"));
  EXPECT_THAT(InferError("index_put", Dims({0, 2}), {self, I64({2}), I64({2}), F32({3, 4})}),
              HasSubstr("broadcasting to [2, 4]"));
  EXPECT_THAT(InferError("index_put", Dims({3}), {self, I64({2}), F32({1})}), HasSubstr("in [0, 3)"));
}

TEST(IndexOpsRegistryTest, ScatterAddAndScatterReduce) {
  const Attrs dim0 = MakeAttrs({{"dim", int64_t{0}}});
  EXPECT_EQ(InferOne("scatter_add", dim0, {F32({5, 4}), I64({7, 3}), F32({7, 4})}), F32({5, 4}));
  EXPECT_EQ(InferOne("scatter_add", MakeAttrs({{"dim", int64_t{-1}}}), {BF16({5, 4}), I32({2, 9}), BF16({2, 9})}),
            BF16({5, 4}));
  for (const char* reduce : {"sum", "prod", "amax", "amin"}) {
    auto out = Infer("scatter_reduce.two", MakeAttrs({{"dim", int64_t{1}}, {"reduce", std::string(reduce)}}),
                     {I64({5, 4}), I64({5, 6}), I64({5, 6})});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 2u);
    EXPECT_EQ((*out)[0], I64({5, 4}));
    EXPECT_EQ((*out)[1], I64({0})) << reduce;
  }
  auto mean = Infer("scatter_reduce.two",
                    MakeAttrs({{"dim", int64_t{1}}, {"reduce", std::string("mean")}, {"include_self", false}}),
                    {F32({5, 4}), I64({5, 6}), F32({5, 6})});
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_EQ((*mean)[1], I64({5, 4}));  // the counts
  EXPECT_THAT(InferError("scatter_reduce.two", MakeAttrs({{"dim", int64_t{0}}, {"reduce", std::string("max")}}),
                         {F32({5}), I64({2}), F32({2})}),
              HasSubstr("attribute 'reduce' is \"max\"; expected sum, prod, mean, amax or amin"));
  EXPECT_THAT(InferError("scatter_add", dim0, {F32({5, 4}), I64({7, 5}), F32({7, 5})}),
              HasSubstr("index is int64[7, 5] but self is float32[5, 4]; index is larger in dim 1"));
  EXPECT_THAT(InferError("scatter_add", dim0, {F32({5, 4}), I64({7, 3}), F32({6, 4})}),
              HasSubstr("but src is float32[6, 4]; index is larger in dim 0"));
  EXPECT_THAT(InferError("scatter_add", dim0, {F32({5, 4}), I64({2, 3}), F64({2, 3})}), HasSubstr("dtypes must match"));
  EXPECT_THAT(InferError("scatter_add", dim0, {Bool({5}), I64({2}), Bool({2})}), HasSubstr("self is bool[5]"));
  EXPECT_THAT(InferError("scatter_add", dim0, {F32({5}), Bool({2}), F32({2})}), HasSubstr("index is bool[2]"));
  EXPECT_THAT(InferError("scatter_add", MakeAttrs({{"dim", int64_t{2}}}), {F32({5}), I64({2}), F32({2})}),
              HasSubstr("self is float32[5]: dim 2 is out of range"));
}

TEST(IndexOpsRegistryTest, MaskedScatter) {
  EXPECT_EQ(InferOne("masked_scatter", {}, {F32({4, 3}), Bool({3}), F32({3, 4})}), F32({4, 3}));
  EXPECT_EQ(InferOne("masked_scatter", {}, {BF16({4, 3}), Bool({4, 1}), BF16({20})}), BF16({4, 3}));
  EXPECT_THAT(InferError("masked_scatter", {}, {F32({4, 3}), Bool({4}), F32({12})}),
              HasSubstr("mask is bool[4]; expected a bool mask broadcasting to self's shape [4, 3]"));
  EXPECT_THAT(InferError("masked_scatter", {}, {F32({4, 3}), I64({4, 3}), F32({12})}), HasSubstr("mask is int64"));
  EXPECT_THAT(InferError("masked_scatter", {}, {F32({4, 3}), Bool({4, 3}), F64({12})}), HasSubstr("dtypes must match"));
}

TEST(IndexOpsRegistryTest, SliceAndSelectScatter) {
  const TensorType self = F32({3, 4});
  EXPECT_EQ(InferOne("slice_scatter", MakeAttrs({{"dim", int64_t{1}}, {"start", int64_t{-3}}, {"step", int64_t{2}}}),
                     {self, F32({3, 2})}),
            self);
  EXPECT_EQ(InferOne("slice_scatter", MakeAttrs({{"start", int64_t{1}}, {"end", int64_t{100}}}), {self, F32({2, 4})}),
            self);
  EXPECT_EQ(InferOne("select_scatter", MakeAttrs({{"dim", int64_t{0}}, {"index", int64_t{-1}}}), {self, F32({4})}),
            self);
  EXPECT_THAT(InferError("slice_scatter", MakeAttrs({{"dim", int64_t{1}}, {"end", int64_t{2}}}), {self, F32({3, 3})}),
              HasSubstr("src is float32[3, 3]; expected float32[3, 2] for self float32[3, 4]"));
  EXPECT_THAT(InferError("slice_scatter", MakeAttrs({{"dim", int64_t{1}}}), {self, F64({3, 4})}),
              HasSubstr("expected float32[3, 4]"));
  EXPECT_THAT(InferError("slice_scatter", MakeAttrs({{"step", int64_t{0}}}), {self, self}),
              HasSubstr("attribute 'step' is 0"));
  EXPECT_THAT(InferError("select_scatter", MakeAttrs({{"dim", int64_t{1}}, {"index", int64_t{4}}}), {self, F32({3})}),
              HasSubstr("attribute 'index' is 4 but dim 1 has size 4"));
}

TEST(IndexOpsRegistryTest, AsStridedViewsStayInsideSelf) {
  const TensorType self = F32({3, 4});
  auto view = [](Ints size, Ints stride, int64_t offset) {
    return MakeAttrs({{"size", size}, {"stride", stride}, {"storage_offset", offset}});
  };
  EXPECT_EQ(InferOne("as_strided", view({2, 2}, {4, 1}, 5), {self}), F32({2, 2}));
  EXPECT_EQ(InferOne("as_strided_copy", view({4, 3}, {1, 4}, 0), {self}), F32({4, 3}));
  EXPECT_EQ(InferOne("as_strided", view({5, 12}, {0, 1}, 0), {self}), F32({5, 12}));       // stride 0 reads repeat
  EXPECT_EQ(InferOne("as_strided", view({0, 7}, {100, 100}, 1000), {self}), F32({0, 7}));  // empty: reads nothing
  EXPECT_EQ(InferOne("as_strided", MakeAttrs({{"size", Ints{2}}, {"stride", Ints{3}}}), {self}), F32({2}));
  // The last element read is storage_offset + sum((size - 1) * stride) = 12.
  EXPECT_THAT(InferError("as_strided", view({2, 2}, {4, 1}, 7), {self}),
              AllOf(HasSubstr("self is float32[3, 4]"), HasSubstr("reads element 12 of self, which has 12 elements")));
  EXPECT_THAT(InferError("as_strided", view({2}, {-1}, 3), {self}), HasSubstr("negative strides are not supported"));
  EXPECT_THAT(InferError("as_strided", view({2, 2}, {1}, 0), {self}), HasSubstr("differ in length"));
  EXPECT_THAT(InferError("as_strided", view({2}, {1}, -1), {self}), HasSubstr("'storage_offset' is -1"));
  EXPECT_THAT(InferError("as_strided", view({3, 3}, {int64_t{1} << 62, int64_t{1} << 62}, 0), {self}),
              HasSubstr("past 2^63"));
  EXPECT_EQ(InferOne("as_strided_scatter", view({2, 2}, {4, 1}, 5), {self, F32({2, 2})}), self);
  EXPECT_THAT(InferError("as_strided_scatter", view({2, 2}, {4, 1}, 5), {self, F32({4})}),
              HasSubstr("src is float32[4]; expected float32[2, 2]"));
  EXPECT_THAT(InferError("as_strided_scatter", view({2, 2}, {4, 1}, 8), {self, F32({2, 2})}),
              HasSubstr("reads element 13"));
}

TEST(IndexOpsRegistryTest, DiagonalFlipRepeat) {
  const TensorType self = F32({2, 3, 4, 5});
  auto diagonal = [](int64_t offset, int64_t dim1, int64_t dim2) {
    return MakeAttrs({{"offset", offset}, {"dim1", dim1}, {"dim2", dim2}});
  };
  // torch.diagonal(zeros(2, 3, 4, 5), offset, dim1, dim2).shape
  EXPECT_EQ(InferOne("diagonal", diagonal(0, 1, 3), {self}), F32({2, 4, 3}));
  EXPECT_EQ(InferOne("diagonal", diagonal(2, 1, 3), {self}), F32({2, 4, 3}));
  EXPECT_EQ(InferOne("diagonal", diagonal(-2, 1, 3), {self}), F32({2, 4, 1}));
  EXPECT_EQ(InferOne("diagonal", diagonal(7, 1, 3), {self}), F32({2, 4, 0}));
  EXPECT_EQ(InferOne("diagonal_copy", diagonal(-1, -1, 1), {self}), F32({2, 4, 3}));
  EXPECT_EQ(InferOne("diagonal", {}, {F32({3, 4})}), F32({3}));
  EXPECT_EQ(InferOne("diagonal", diagonal(int64_t{1} << 62, 0, 1), {F32({3, 4})}), F32({0}));
  EXPECT_THAT(InferError("diagonal", diagonal(0, 1, -3), {self}), HasSubstr("name the same dim"));
  EXPECT_THAT(InferError("diagonal", {}, {F32({3})}), HasSubstr("diagonal needs rank >= 2"));
  EXPECT_EQ(InferOne("diagonal_scatter", diagonal(2, 1, 3), {self, F32({2, 4, 3})}), self);
  EXPECT_THAT(InferError("diagonal_scatter", diagonal(2, 1, 3), {self, F32({2, 4, 2})}),
              HasSubstr("src is float32[2, 4, 2]; expected float32[2, 4, 3]"));
  EXPECT_EQ(InferOne("flip", MakeAttrs({{"dims", Ints{0, -1}}}), {self}), self);
  EXPECT_EQ(InferOne("flip", MakeAttrs({{"dims", Ints{}}}), {F32({})}), F32({}));
  EXPECT_THAT(InferError("flip", MakeAttrs({{"dims", Ints{1, -3}}}), {self}), HasSubstr("names dim 1 twice"));
  EXPECT_THAT(InferError("flip", MakeAttrs({{"dims", Ints{4}}}), {self}), HasSubstr("dim 4 is out of range"));
  EXPECT_EQ(InferOne("repeat", MakeAttrs({{"repeats", Ints{2, 1, 1, 1, 3}}}), {self}), F32({2, 2, 3, 4, 15}));
  EXPECT_EQ(InferOne("repeat", MakeAttrs({{"repeats", Ints{0, 2}}}), {I64({3})}), I64({0, 6}));
  EXPECT_THAT(InferError("repeat", MakeAttrs({{"repeats", Ints{2}}}), {F32({3, 4})}),
              HasSubstr("has fewer entries than self [3, 4] has dims"));
  EXPECT_THAT(InferError("repeat", MakeAttrs({{"repeats", Ints{-1}}}), {F32({3})}), HasSubstr("is negative"));
  EXPECT_THAT(InferError("repeat", MakeAttrs({{"repeats", Ints{int64_t{1} << 62}}}), {F32({8})}),
              HasSubstr("overflows dim 0"));
}

TEST(IndexOpsRegistryTest, EmptyConstructors) {
  EXPECT_EQ(InferOne("empty.memory_format", MakeAttrs({{"size", Ints{2, 3}}}), {}), F32({2, 3}));
  EXPECT_EQ(InferOne("empty.memory_format", MakeAttrs({{"size", Ints{4}}, {"dtype", DType::kBFloat16}}), {}),
            BF16({4}));
  EXPECT_EQ(InferOne("empty_strided",
                     MakeAttrs({{"size", Ints{2, 3}}, {"stride", Ints{1, 2}}, {"dtype", DType::kInt64}}), {}),
            I64({2, 3}));
  EXPECT_EQ(InferOne("new_empty_strided", MakeAttrs({{"size", Ints{5}}, {"stride", Ints{1}}}), {Bool({2})}), Bool({5}));
  EXPECT_THAT(InferError("empty_strided", MakeAttrs({{"size", Ints{2, 3}}, {"stride", Ints{1}}}), {}),
              HasSubstr("attribute 'stride' [1] has 1 entries for size [2, 3]"));
  EXPECT_THAT(InferError("empty.memory_format", MakeAttrs({{"size", Ints{2, -3}}}), {}), HasSubstr("negative dim -3"));
}

TEST(IndexOpsRegistryTest, RandomOps) {
  EXPECT_EQ(InferOne("bernoulli.p", MakeAttrs({{"p", 0.25}}), {F32({3, 4})}), F32({3, 4}));
  EXPECT_EQ(InferOne("bernoulli.p", MakeAttrs({{"p", 1.0}, {"seed", int64_t{7}}}), {BF16({3}), I64({})}), BF16({3}));
  EXPECT_EQ(InferOne("rand", MakeAttrs({{"size", Ints{2, 5}}}), {}), F32({2, 5}));
  EXPECT_EQ(InferOne("randn", MakeAttrs({{"size", Ints{3}}, {"dtype", DType::kFloat16}}), {I64({})}),
            (TensorType{DType::kFloat16, {3}}));
  EXPECT_THAT(InferError("bernoulli.p", MakeAttrs({{"p", 1.5}}), {F32({3})}),
              HasSubstr("attribute 'p' is 1.5; expected a probability in [0, 1]"));
  EXPECT_THAT(InferError("bernoulli.p", MakeAttrs({{"p", 0.5}}), {F32({3}), I32({})}),
              HasSubstr("seed is int32[]; expected an int64 rank-0 tensor"));
  EXPECT_THAT(InferError("randn", MakeAttrs({{"size", Ints{3}}, {"dtype", DType::kInt64}}), {}),
              HasSubstr("attribute 'dtype'"));
  EXPECT_THAT(InferError("rand", MakeAttrs({{"size", Ints{3}}}), {I64({2})}), HasSubstr("seed is int64[2]"));
}

}  // namespace
}  // namespace tandem
