// Shape and dtype inference of the reductions, scans and sorts (mean, prod,
// var, linalg_vector_norm, amax / amin, argmax / argmin, max.dim / min.dim,
// cumsum, sort, topk), and the messages of the nodes they refuse.
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/make_attrs.h"
#include "ir/op_registry.h"
#include "ir/ops/reduction_rules.h"

namespace tandem {

void PrintTo(const TensorType& type, std::ostream* os) { *os << type.ToString(); }

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TensorType T(DType dtype, Shape shape) { return {dtype, std::move(shape)}; }
TensorType F32(Shape shape) { return {DType::kFloat32, std::move(shape)}; }
TensorType F64(Shape shape) { return {DType::kFloat64, std::move(shape)}; }
TensorType I64(Shape shape) { return {DType::kInt64, std::move(shape)}; }
TensorType BF16(Shape shape) { return {DType::kBFloat16, std::move(shape)}; }
TensorType F16(Shape shape) { return {DType::kFloat16, std::move(shape)}; }

using Ints = std::vector<int64_t>;

absl::StatusOr<std::vector<TensorType>> Infer(const std::string& op, const Attrs& attrs,
                                              const std::vector<TensorType>& inputs) {
  const OpDef* def = OpRegistry::Global().Find(op);
  if (def == nullptr) return absl::NotFoundError("no op " + op);
  return def->infer(attrs, inputs);
}

std::vector<TensorType> InferAll(const std::string& op, const Attrs& attrs, const std::vector<TensorType>& inputs) {
  auto result = Infer(op, attrs, inputs);
  EXPECT_TRUE(result.ok()) << op << ": " << result.status();
  return result.ok() ? *result : std::vector<TensorType>{};
}

TensorType InferOne(const std::string& op, const Attrs& attrs, const std::vector<TensorType>& inputs) {
  auto all = InferAll(op, attrs, inputs);
  EXPECT_EQ(all.size(), 1u) << op;
  return all.size() == 1 ? all[0] : TensorType{};
}

std::string InferError(const std::string& op, const Attrs& attrs, const std::vector<TensorType>& inputs) {
  auto result = Infer(op, attrs, inputs);
  EXPECT_FALSE(result.ok()) << op << " unexpectedly inferred " << (result.ok() ? (*result)[0].ToString() : "");
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  return std::string(result.status().message());
}

TEST(ReductionOpsTest, Mean) {
  EXPECT_EQ(InferOne("mean", {}, {F32({2, 3})}), F32({}));
  EXPECT_EQ(InferOne("mean", {}, {F64({})}), F64({}));
  EXPECT_EQ(InferOne("mean", {}, {BF16({4})}), BF16({}));
  EXPECT_EQ(InferOne("mean", MakeAttrs({{"dtype", DType::kFloat64}}), {F32({4})}), F64({}));
  EXPECT_EQ(InferOne("mean", MakeAttrs({{"dtype", DType::kFloat32}}), {F16({4})}), F32({}));
  EXPECT_THAT(InferError("mean", {}, {I64({2})}), AllOf(HasSubstr("mean: "), HasSubstr("self is int64[2]")));
  EXPECT_THAT(InferError("mean", MakeAttrs({{"dtype", DType::kInt64}}), {F32({2})}), HasSubstr("'dtype'"));
}

TEST(ReductionOpsTest, Prod) {
  EXPECT_EQ(InferOne("prod", {}, {I64({2, 3})}), I64({}));
  EXPECT_EQ(InferOne("prod", {}, {F16({2, 3})}), F16({}));
  EXPECT_EQ(InferOne("prod", MakeAttrs({{"dtype", DType::kFloat32}}), {I64({2})}), F32({}));
  EXPECT_EQ(InferOne("prod.dim_int", MakeAttrs({{"dim", int64_t{1}}}), {F32({2, 3, 4})}), F32({2, 4}));
  EXPECT_EQ(InferOne("prod.dim_int", MakeAttrs({{"dim", int64_t{-1}}, {"keepdim", true}}), {F64({2, 3})}), F64({2, 1}));
  EXPECT_EQ(InferOne("prod.dim_int", MakeAttrs({{"dim", int64_t{0}}}), {F32({})}), F32({}));
  EXPECT_EQ(InferOne("prod.dim_int", MakeAttrs({{"dim", int64_t{0}}}), {F32({0, 3})}), F32({3}));
  EXPECT_THAT(InferError("prod.dim_int", {}, {F32({2})}), HasSubstr("'dim'"));
  EXPECT_THAT(InferError("prod.dim_int", MakeAttrs({{"dim", int64_t{2}}}), {F32({2, 3})}),
              AllOf(HasSubstr("prod.dim_int: self is float32[2, 3]"), HasSubstr("out of range")));
  // A narrowing dtype is refused.
  EXPECT_THAT(InferError("prod", MakeAttrs({{"dtype", DType::kFloat32}}), {F64({2})}),
              AllOf(HasSubstr("attribute 'dtype' is float32"), HasSubstr("supported conversions")));
  EXPECT_THAT(InferError("prod", MakeAttrs({{"dtype", DType::kInt64}}), {F32({2})}), HasSubstr("'dtype'"));
  EXPECT_THAT(InferError("prod", {}, {T(DType::kBool, {2})}), HasSubstr("self is bool[2]"));
}

TEST(ReductionOpsTest, Var) {
  for (const char* op : {"var.correction", "var.dim"}) {
    SCOPED_TRACE(op);
    EXPECT_EQ(InferOne(op, {}, {F32({2, 3})}), F32({}));
    EXPECT_EQ(InferOne(op, MakeAttrs({{"dim", Ints{}}}), {F32({2, 3})}), F32({}));
    EXPECT_EQ(InferOne(op, MakeAttrs({{"dim", Ints{0, -1}}, {"keepdim", true}}), {F64({2, 3, 4})}), F64({1, 3, 1}));
    EXPECT_EQ(InferOne(op, MakeAttrs({{"dim", int64_t{1}}}), {BF16({2, 3})}), BF16({2}));
    EXPECT_EQ(InferOne(op, {}, {F32({})}), F32({}));
    EXPECT_THAT(InferError(op, {}, {I64({2})}), HasSubstr("self is int64[2]"));
    EXPECT_THAT(InferError(op, MakeAttrs({{"dim", Ints{1, 1}}}), {F32({2, 3})}), HasSubstr("appears twice"));
  }
  EXPECT_EQ(InferOne("var.correction", MakeAttrs({{"correction", int64_t{0}}}), {F32({5})}), F32({}));
  EXPECT_EQ(InferOne("var.correction", MakeAttrs({{"correction", 0.5}}), {F32({5})}), F32({}));
  EXPECT_THAT(
      InferError("var.correction", MakeAttrs({{"correction", std::numeric_limits<double>::infinity()}}), {F32({5})}),
      HasSubstr("'correction'"));
  EXPECT_THAT(InferError("var.dim", MakeAttrs({{"unbiased", std::string("yes")}}), {F32({5})}), HasSubstr("unbiased"));
}

TEST(ReductionOpsTest, VectorNorm) {
  EXPECT_EQ(InferOne("linalg_vector_norm", {}, {F32({2, 3})}), F32({}));
  EXPECT_EQ(InferOne("linalg_vector_norm", MakeAttrs({{"ord", 1.0}, {"dim", Ints{1}}}), {F32({2, 3})}), F32({2}));
  EXPECT_EQ(InferOne("linalg_vector_norm", MakeAttrs({{"ord", int64_t{3}}, {"dim", Ints{-1}}, {"keepdim", true}}),
                     {F64({2, 3})}),
            F64({2, 1}));
  EXPECT_EQ(InferOne("linalg_vector_norm", MakeAttrs({{"dtype", DType::kFloat32}}), {BF16({2})}), F32({}));
  EXPECT_EQ(InferOne("linalg_vector_norm", MakeAttrs({{"dtype", DType::kFloat64}}), {F32({2})}), F64({}));
  // ord 2 and 0 over an empty dim are 0; inf, -inf and negative ords have no identity.
  EXPECT_EQ(InferOne("linalg_vector_norm", MakeAttrs({{"dim", Ints{0}}}), {F32({0, 3})}), F32({3}));
  EXPECT_EQ(InferOne("linalg_vector_norm", MakeAttrs({{"ord", 0.0}, {"dim", Ints{0}}}), {F32({0, 3})}), F32({3}));
  const double inf = std::numeric_limits<double>::infinity();
  for (double ord : {inf, -inf, -1.0}) {
    EXPECT_THAT(InferError("linalg_vector_norm", MakeAttrs({{"ord", ord}, {"dim", Ints{0}}}), {F32({0, 3})}),
                AllOf(HasSubstr("reduced dim 0 is empty"), HasSubstr("no identity")));
  }
  EXPECT_EQ(InferOne("linalg_vector_norm", MakeAttrs({{"ord", inf}, {"dim", Ints{1}}}), {F32({0, 3})}), F32({0}));
  EXPECT_THAT(
      InferError("linalg_vector_norm", MakeAttrs({{"ord", std::numeric_limits<double>::quiet_NaN()}}), {F32({3})}),
      HasSubstr("'ord' is NaN"));
  EXPECT_THAT(InferError("linalg_vector_norm", {}, {I64({3})}), HasSubstr("self is int64[3]"));
  EXPECT_THAT(InferError("linalg_vector_norm", MakeAttrs({{"dtype", DType::kBFloat16}}), {F32({3})}),
              HasSubstr("'dtype' is bfloat16"));
  EXPECT_THAT(InferError("linalg_vector_norm", MakeAttrs({{"ord", std::string("fro")}}), {F32({3})}), HasSubstr("ord"));
}

TEST(ReductionOpsTest, AmaxAmin) {
  for (const char* op : {"amax", "amin"}) {
    SCOPED_TRACE(op);
    EXPECT_EQ(InferOne(op, {}, {F32({2, 3})}), F32({}));
    EXPECT_EQ(InferOne(op, MakeAttrs({{"dim", Ints{}}, {"keepdim", true}}), {I64({2, 3})}), I64({1, 1}));
    EXPECT_EQ(InferOne(op, MakeAttrs({{"dim", int64_t{-2}}}), {F16({2, 3})}), F16({3}));
    EXPECT_EQ(InferOne(op, MakeAttrs({{"dim", Ints{0}}}), {F32({})}), F32({}));
    EXPECT_EQ(InferOne(op, MakeAttrs({{"dim", Ints{1}}}), {F32({0, 3})}), F32({0}));
    EXPECT_THAT(InferError(op, MakeAttrs({{"dim", Ints{0}}}), {F32({0, 3})}),
                AllOf(HasSubstr("self is float32[0, 3]: reduced dim 0 is empty")));
    EXPECT_THAT(InferError(op, {}, {F32({2, 0})}), HasSubstr("reduced dim 1 is empty"));
    EXPECT_THAT(InferError(op, MakeAttrs({{"dim", Ints{3}}}), {F32({2, 3})}), HasSubstr("out of range"));
    EXPECT_THAT(InferError(op, {}, {T(DType::kInt32, {2})}), HasSubstr("self is int32[2]"));
  }
}

TEST(ReductionOpsTest, ArgmaxArgmin) {
  for (const char* op : {"argmax", "argmin"}) {
    SCOPED_TRACE(op);
    EXPECT_EQ(InferOne(op, {}, {F32({2, 3})}), I64({}));
    EXPECT_EQ(InferOne(op, MakeAttrs({{"keepdim", true}}), {F32({2, 3})}), I64({1, 1}));
    EXPECT_EQ(InferOne(op, MakeAttrs({{"dim", int64_t{1}}}), {BF16({2, 3})}), I64({2}));
    EXPECT_EQ(InferOne(op, MakeAttrs({{"dim", int64_t{-2}}, {"keepdim", true}}), {I64({2, 3})}), I64({1, 3}));
    EXPECT_EQ(InferOne(op, MakeAttrs({{"dim", int64_t{0}}}), {F64({})}), I64({}));
    EXPECT_EQ(InferOne(op, MakeAttrs({{"dim", int64_t{1}}}), {F32({0, 3})}), I64({0}));
    EXPECT_THAT(InferError(op, {}, {F32({0, 3})}), HasSubstr("the reduced tensor is empty"));
    EXPECT_THAT(InferError(op, MakeAttrs({{"dim", int64_t{0}}}), {F32({0, 3})}), HasSubstr("the reduced dim is empty"));
    EXPECT_THAT(InferError(op, MakeAttrs({{"dim", Ints{0, 1}}}), {F32({2, 3})}), HasSubstr("'dim'"));
  }
}

TEST(ReductionOpsTest, MaxMinDim) {
  for (const char* op : {"max.dim", "min.dim"}) {
    SCOPED_TRACE(op);
    EXPECT_EQ(InferAll(op, MakeAttrs({{"dim", int64_t{1}}}), {F32({2, 3, 4})}),
              (std::vector<TensorType>{F32({2, 4}), I64({2, 4})}));
    EXPECT_EQ(InferAll(op, MakeAttrs({{"dim", int64_t{-1}}, {"keepdim", true}}), {F16({2, 3})}),
              (std::vector<TensorType>{F16({2, 1}), I64({2, 1})}));
    EXPECT_EQ(InferAll(op, MakeAttrs({{"dim", int64_t{0}}}), {I64({})}), (std::vector<TensorType>{I64({}), I64({})}));
    EXPECT_THAT(InferError(op, {}, {F32({2})}), HasSubstr("'dim'"));
    EXPECT_THAT(InferError(op, MakeAttrs({{"dim", int64_t{0}}}), {F32({0, 2})}), HasSubstr("dim 0 is empty"));
  }
}

TEST(ReductionOpsTest, Cumsum) {
  EXPECT_EQ(InferOne("cumsum", MakeAttrs({{"dim", int64_t{1}}}), {F32({2, 3})}), F32({2, 3}));
  EXPECT_EQ(InferOne("cumsum", MakeAttrs({{"dim", int64_t{0}}}), {I64({5})}), I64({5}));
  EXPECT_EQ(InferOne("cumsum", MakeAttrs({{"dim", int64_t{0}}, {"dtype", DType::kFloat64}}), {I64({5})}), F64({5}));
  EXPECT_EQ(InferOne("cumsum", MakeAttrs({{"dim", int64_t{-1}}, {"dtype", DType::kFloat32}}), {BF16({5})}), F32({5}));
  EXPECT_EQ(InferOne("cumsum", MakeAttrs({{"dim", int64_t{0}}}), {F32({})}), F32({}));
  EXPECT_THAT(InferError("cumsum", {}, {F32({2})}), HasSubstr("'dim'"));
  EXPECT_THAT(InferError("cumsum", MakeAttrs({{"dim", int64_t{-3}}}), {F32({2, 3})}), HasSubstr("out of range"));
  EXPECT_THAT(InferError("cumsum", MakeAttrs({{"dim", int64_t{0}}, {"dtype", DType::kBFloat16}}), {F32({2})}),
              HasSubstr("'dtype' is bfloat16"));
}

TEST(ReductionOpsTest, SortAndTopk) {
  EXPECT_EQ(InferAll("sort", {}, {F32({2, 3})}), (std::vector<TensorType>{F32({2, 3}), I64({2, 3})}));
  EXPECT_EQ(
      InferAll("sort.stable", MakeAttrs({{"stable", true}, {"dim", int64_t{0}}, {"descending", true}}), {BF16({4})}),
      (std::vector<TensorType>{BF16({4}), I64({4})}));
  EXPECT_EQ(InferAll("sort", {}, {I64({})}), (std::vector<TensorType>{I64({}), I64({})}));
  EXPECT_THAT(InferError("sort", MakeAttrs({{"dim", int64_t{2}}}), {F32({2, 3})}), HasSubstr("out of range"));
  EXPECT_THAT(InferError("sort", MakeAttrs({{"descending", std::string("yes")}}), {F32({2})}), HasSubstr("descending"));
  EXPECT_EQ(InferAll("topk", MakeAttrs({{"k", int64_t{2}}}), {F32({4, 5})}),
            (std::vector<TensorType>{F32({4, 2}), I64({4, 2})}));
  EXPECT_EQ(InferAll("topk", MakeAttrs({{"k", int64_t{4}}, {"dim", int64_t{0}}, {"largest", false}}), {F16({4, 5})}),
            (std::vector<TensorType>{F16({4, 5}), I64({4, 5})}));
  EXPECT_EQ(InferAll("topk", MakeAttrs({{"k", int64_t{0}}}), {I64({3})}),
            (std::vector<TensorType>{I64({0}), I64({0})}));
  EXPECT_EQ(InferAll("topk", MakeAttrs({{"k", int64_t{1}}}), {F32({})}), (std::vector<TensorType>{F32({}), I64({})}));
  EXPECT_THAT(InferError("topk", {}, {F32({4})}), HasSubstr("'k'"));
  for (int64_t k : {int64_t{-1}, int64_t{6}}) {
    EXPECT_THAT(InferError("topk", MakeAttrs({{"k", k}}), {F32({4, 5})}),
                AllOf(HasSubstr("topk: attribute 'k' is "), HasSubstr("whose dim 1 has 5 elements")));
  }
}

TEST(ReductionRulesTest, SplitsAndNorms) {
  const DimSplit flat = SplitForDim({2, 3, 4}, -1);
  EXPECT_EQ(flat.outer, 1);
  EXPECT_EQ(flat.size, 24);
  EXPECT_EQ(flat.inner, 1);
  const DimSplit mid = SplitForDim({2, 3, 4}, 1);
  EXPECT_EQ(mid.outer, 2);
  EXPECT_EQ(mid.size, 3);
  EXPECT_EQ(mid.inner, 4);
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<double, NormKind>> kinds = {
      {2, NormKind::kSumSquares},   {1, NormKind::kSumAbs},   {inf, NormKind::kMaxAbs}, {-inf, NormKind::kMinAbs},
      {0, NormKind::kCountNonZero}, {3.5, NormKind::kSumPow}, {-2, NormKind::kSumPow}};
  for (const auto& [ord, kind] : kinds) {
    auto norm = VectorNormOf(MakeAttrs({{"ord", ord}}));
    ASSERT_TRUE(norm.ok()) << norm.status();
    EXPECT_EQ(norm->kind, kind) << ord;
    EXPECT_EQ(norm->p, ord);
  }
  EXPECT_EQ(VectorNormOf({})->kind, NormKind::kSumSquares);
  EXPECT_EQ(*VarianceCorrectionOf("var.dim", MakeAttrs({{"unbiased", false}})), 0.0);
  EXPECT_EQ(*VarianceCorrectionOf("var.dim", {}), 1.0);
  EXPECT_EQ(*VarianceCorrectionOf("var.correction", {}), 1.0);
  EXPECT_EQ(*VarianceCorrectionOf("var.correction", MakeAttrs({{"correction", int64_t{2}}})), 2.0);
}

}  // namespace
}  // namespace tandem
