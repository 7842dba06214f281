// The CPU kernels of advanced indexing (index.Tensor, index_put with
// indexed_dims), the reducing scatters, masked_scatter and the strided
// views: small cases worked out with PyTorch, then random
// shapes, indices and values (the seed is printed; TANDEM_TEST_SEED repeats
// a run) against naive references written here coordinate by coordinate,
// in several dtypes. Outputs are poisoned before each run, so an element a
// kernel leaves unwritten shows. Bad indices fail with INVALID_ARGUMENT
// naming the value. The random ops: random_kernels_test.cc.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/make_attrs.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/run_op_test_util.h"
#include "kernels/half.h"

namespace tandem::cpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Ints = std::vector<int64_t>;

constexpr uint8_t kPoison = 0xA7;

std::mt19937_64& Rng() {
  static std::mt19937_64 rng([] {
    uint64_t seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    if (const char* env = std::getenv("TANDEM_TEST_SEED")) seed = std::strtoull(env, nullptr, 10);
    std::printf("random seed %llu (set TANDEM_TEST_SEED to repeat)\n", static_cast<unsigned long long>(seed));
    return seed;
  }());
  return rng;
}

int64_t Uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(Rng()); }

// Random values exact in every dtype: integers in [-50, 50] (halves for the
// float types, so no two are likely equal), bools either way.
TestTensor Random(DType dtype, Shape shape) {
  TestTensor t({dtype, std::move(shape)});
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = Uniform(-100, 100);
    const int64_t half = v / 2;
    SetElement(t, i,
               dtype == DType::kBool ? static_cast<double>(v > 0)
               : IsFloating(dtype)   ? v / 2.0
                                     : static_cast<double>(half));
  }
  return t;
}

TestTensor Indices(DType dtype, Shape shape, int64_t lo, int64_t hi) {
  TestTensor t({dtype, std::move(shape)});
  for (int64_t i = 0; i < t.numel(); ++i) SetElement(t, i, static_cast<double>(Uniform(lo, hi)));
  return t;
}

std::vector<double> Values(const TestTensor& t) { return ElementsAsDoubles(t); }

std::vector<TestTensor> RunOp(const std::string& op, const Attrs& attrs, std::vector<TestTensor> inputs) {
  return MustRunCpuOp(op, attrs, std::move(inputs), kPoison);
}

absl::Status RunStatus(const std::string& op, const Attrs& attrs, std::vector<TestTensor> inputs) {
  return RunCpuOp(op, attrs, inputs, kPoison).status();
}

Ints Unravel(int64_t i, const Shape& shape) {
  Ints coords(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    coords[d] = i % shape[d];
    i /= shape[d];
  }
  return coords;
}

int64_t Ravel(const Ints& coords, const Shape& shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + coords[d];
  return i;
}

// ---- advanced indexing ----

// A naive self[indices] / index_put: per result coordinate, the self
// coordinate it names, derived from PyTorch's rule directly.
struct NaiveIndex {
  Shape self;
  std::vector<int> dims;
  std::vector<const TestTensor*> indices;
  Shape broadcast;
  int at = 0;
  Shape result;

  NaiveIndex(Shape self_shape, std::vector<int> indexed, std::vector<const TestTensor*> tensors)
      : self(std::move(self_shape)), dims(std::move(indexed)), indices(std::move(tensors)) {
    for (const TestTensor* t : indices) broadcast = *BroadcastShapes(broadcast, t->type.shape);
    bool adjacent = true;
    for (size_t j = 1; j < dims.size(); ++j) adjacent = adjacent && dims[j] == dims[j - 1] + 1;
    at = adjacent ? dims[0] : 0;
    Shape rest;
    for (int d = 0; d < static_cast<int>(self.size()); ++d) {
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) rest.push_back(self[d]);
    }
    result.assign(rest.begin(), rest.begin() + at);
    result.insert(result.end(), broadcast.begin(), broadcast.end());
    result.insert(result.end(), rest.begin() + at, rest.end());
  }

  // The self element (row-major) that result element i reads.
  int64_t SelfElement(int64_t i) const {
    const Ints r = Unravel(i, result);
    const Ints b(r.begin() + at, r.begin() + at + broadcast.size());
    Ints rest(r.begin(), r.begin() + at);
    rest.insert(rest.end(), r.begin() + at + broadcast.size(), r.end());
    Ints s(self.size());
    size_t next_rest = 0;
    for (int d = 0; d < static_cast<int>(self.size()); ++d) {
      const auto j = std::find(dims.begin(), dims.end(), d) - dims.begin();
      if (j == static_cast<long>(dims.size())) {
        s[d] = rest[next_rest++];
        continue;
      }
      const Shape& shape = indices[j]->type.shape;
      Ints c(shape.size());
      for (size_t k = 0; k < shape.size(); ++k) {
        c[k] = shape[k] == 1 ? 0 : b[broadcast.size() - shape.size() + k];
      }
      const int64_t v = static_cast<int64_t>(ElementAsDouble(*indices[j], Ravel(c, shape)));
      s[d] = v < 0 ? v + self[d] : v;
    }
    return Ravel(s, self);
  }
};

TEST(AdvancedIndexKernelTest, IndexTensorAsPyTorch) {
  const TestTensor x = MakeTensor(DType::kFloat32, {2, 3, 4}, [] {
    std::vector<double> v(24);
    for (int i = 0; i < 24; ++i) v[i] = i;
    return v;
  }());
  // x[:, [2, 0], [[1], [3]]] and x[[1, -2], :, [3, 0]] (torch 1.13).
  auto adjacent = RunOp("index.Tensor", MakeAttrs({{"indexed_dims", Ints{1, 2}}}),
                        {x, MakeTensor(DType::kInt64, {2}, {2, 0}), MakeTensor(DType::kInt32, {2, 1}, {1, 3})});
  ASSERT_EQ(adjacent.size(), 1u);
  EXPECT_EQ(adjacent[0].type, (TensorType{DType::kFloat32, {2, 2, 2}}));
  EXPECT_EQ(Values(adjacent[0]), (std::vector<double>{9, 1, 11, 3, 21, 13, 23, 15}));
  auto apart = RunOp("_unsafe_index.Tensor", MakeAttrs({{"indexed_dims", Ints{0, 2}}}),
                     {x, MakeTensor(DType::kInt64, {2}, {1, -2}), MakeTensor(DType::kInt64, {2}, {3, 0})});
  ASSERT_EQ(apart.size(), 1u);
  EXPECT_EQ(apart[0].type, (TensorType{DType::kFloat32, {2, 3}}));
  EXPECT_EQ(Values(apart[0]), (std::vector<double>{15, 19, 23, 0, 4, 8}));
}

TEST(AdvancedIndexKernelTest, IndexTensorAgainstNaiveOnRandomShapes) {
  for (int trial = 0; trial < 40; ++trial) {
    const int rank = static_cast<int>(Uniform(1, 4));
    Shape self_shape;
    for (int d = 0; d < rank; ++d) self_shape.push_back(Uniform(1, 5));
    std::vector<int> dims;
    for (int d = 0; d < rank; ++d) {
      if (Uniform(0, 1) == 1) dims.push_back(d);
    }
    if (dims.empty()) dims.push_back(static_cast<int>(Uniform(0, rank - 1)));
    const DType dtype =
        std::vector<DType>{DType::kFloat32, DType::kInt64, DType::kBFloat16, DType::kBool, DType::kFloat64}[trial % 5];
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " self " << ShapeString(self_shape) << " "
                                      << DTypeName(dtype));
    std::vector<TestTensor> inputs = {Random(dtype, self_shape)};
    inputs.reserve(dims.size() + 2);  // `naive` points into it
    // Index tensors of shapes that broadcast: [n] or [m, 1] or [1] or [].
    const int64_t n = Uniform(1, 4), m = Uniform(1, 3);
    Ints attr;
    for (int d : dims) {
      const int64_t kind = Uniform(0, 3);
      const Shape shape = kind == 0 ? Shape{n} : kind == 1 ? Shape{m, 1} : kind == 2 ? Shape{1} : Shape{};
      inputs.push_back(
          Indices(Uniform(0, 1) ? DType::kInt64 : DType::kInt32, shape, -self_shape[d], self_shape[d] - 1));
      attr.push_back(d);
    }
    std::vector<const TestTensor*> tensors;
    for (size_t j = 1; j < inputs.size(); ++j) tensors.push_back(&inputs[j]);
    const NaiveIndex naive(self_shape, dims, tensors);
    auto out = RunOp("index.Tensor", MakeAttrs({{"indexed_dims", attr}}), inputs);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].type.shape, naive.result);
    for (int64_t i = 0; i < out[0].numel(); ++i) {
      ASSERT_EQ(ElementAsDouble(out[0], i), ElementAsDouble(inputs[0], naive.SelfElement(i))) << "element " << i;
    }
    // index_put of fresh values at the same indices, accumulating and not.
    const bool accumulate = trial % 2 == 1;
    const DType put_dtype = dtype == DType::kBool && accumulate ? DType::kFloat32 : dtype;
    inputs[0] = Random(put_dtype, self_shape);
    const TestTensor values = Random(put_dtype, naive.result);
    inputs.push_back(values);
    auto put = RunOp("index_put", MakeAttrs({{"indexed_dims", attr}, {"accumulate", accumulate}}), inputs);
    ASSERT_EQ(put.size(), 1u);
    std::vector<double> expected = Values(inputs[0]);
    for (int64_t i = 0; i < values.numel(); ++i) {
      double& dst = expected[naive.SelfElement(i)];
      dst = accumulate ? dst + ElementAsDouble(values, i) : ElementAsDouble(values, i);
    }
    // bfloat16 sums round once (in float32), as the kernel computes them.
    for (auto& e : expected) e = put_dtype == DType::kBFloat16 ? BFloat16(static_cast<float>(e)).ToFloat() : e;
    EXPECT_EQ(Values(put[0]), expected);
  }
}

TEST(AdvancedIndexKernelTest, IndexPutWithANoneFirstAsPyTorch) {
  // index_put(zeros(2, 3, 4), [None, [2, 0, 2]], [[1], [2], [3]], accumulate=True)
  auto out = RunOp("index_put", MakeAttrs({{"indexed_dims", Ints{1}}, {"accumulate", true}}),
                   {MakeTensor(DType::kFloat64, {2, 3, 4}, std::vector<double>(24, 0.0)),
                    MakeTensor(DType::kInt64, {3}, {2, 0, 2}), MakeTensor(DType::kFloat64, {3, 1}, {1, 2, 3})});
  ASSERT_EQ(out.size(), 1u);
  std::vector<double> expected;
  for (int b = 0; b < 2; ++b) {
    for (double v : {2.0, 0.0, 4.0}) expected.insert(expected.end(), 4, v);
  }
  EXPECT_EQ(Values(out[0]), expected);
}

TEST(AdvancedIndexKernelTest, OutOfRangeIndicesFailByValue) {
  const TestTensor x = Random(DType::kFloat32, {3, 4});
  for (DType index : {DType::kInt64, DType::kInt32}) {
    absl::Status status =
        RunStatus("index.Tensor", MakeAttrs({{"indexed_dims", Ints{1}}}), {x, MakeTensor(index, {3}, {0, 4, 1})});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), AllOf(HasSubstr("index.Tensor: indices[0][1] is 4, outside [-4, 4)"),
                                        HasSubstr("dim 1 of self [3, 4]")));
    status = RunStatus("index_put", {}, {x, MakeTensor(index, {2}, {-4, 0}), Random(DType::kFloat32, {4})});
    EXPECT_THAT(status.message(), HasSubstr("index_put: indices[0][0] is -4, outside [-3, 3)"));
    status = RunStatus("scatter_add", MakeAttrs({{"dim", int64_t{0}}}),
                       {x, MakeTensor(index, {1, 2}, {1, -1}), Random(DType::kFloat32, {1, 2})});
    EXPECT_THAT(status.message(), HasSubstr("scatter_add: index[1] is -1, outside [0, 3)"));
  }
}

// ---- scatter_add, scatter_reduce.two ----

TEST(ScatterReduceKernelTest, EveryReductionAsPyTorch) {
  const TestTensor self = MakeTensor(DType::kFloat32, {3, 2}, {1, 4, 2, 5, 3, 6});
  const TestTensor index = MakeTensor(DType::kInt64, {3, 2}, {0, 1, 0, 0, 2, 2});
  const TestTensor src = MakeTensor(DType::kFloat32, {3, 2}, {10, 20, 30, 40, 50, 60});
  struct Case {
    const char* reduce;
    bool include_self;
    std::vector<double> expected;  // torch.scatter_reduce(self, 0, index, src, reduce, include_self=...)
  };
  const std::vector<Case> cases = {{"sum", true, {41, 44, 2, 25, 53, 66}},
                                   {"sum", false, {40, 40, 2, 20, 50, 60}},
                                   {"prod", true, {300, 160, 2, 100, 150, 360}},
                                   {"prod", false, {300, 40, 2, 20, 50, 60}},
                                   {"mean", true, {41.0 / 3, 22, 2, 12.5, 26.5, 33}},
                                   {"mean", false, {20, 40, 2, 20, 50, 60}},
                                   {"amax", true, {30, 40, 2, 20, 50, 60}},
                                   {"amax", false, {30, 40, 2, 20, 50, 60}},
                                   {"amin", true, {1, 4, 2, 5, 3, 6}},
                                   {"amin", false, {10, 40, 2, 20, 50, 60}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.reduce << " include_self " << c.include_self);
    auto out =
        RunOp("scatter_reduce.two",
              MakeAttrs({{"dim", int64_t{0}}, {"reduce", std::string(c.reduce)}, {"include_self", c.include_self}}),
              {self, index, src});
    ASSERT_EQ(out.size(), 2u);
    const std::vector<double> got = Values(out[0]);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], c.expected[i]) << i;
    if (std::string(c.reduce) == "mean") {
      const std::vector<double> counts =
          c.include_self ? std::vector<double>{3, 2, 1, 2, 2, 2} : std::vector<double>{2, 1, 0, 1, 1, 1};
      EXPECT_EQ(Values(out[1]), counts);
    } else {
      EXPECT_EQ(out[1].numel(), 0);
    }
  }
  // scatter_add is the sum with self.
  auto add = RunOp("scatter_add", MakeAttrs({{"dim", int64_t{0}}}), {self, index, src});
  ASSERT_EQ(add.size(), 1u);
  EXPECT_EQ(Values(add[0]), (std::vector<double>{41, 44, 2, 25, 53, 66}));
}

TEST(ScatterReduceKernelTest, IntegerMeanRoundsDownAndAmaxPropagatesNaN) {
  // torch.scatter_reduce(tensor([5, -7, 3]), 0, tensor([0, 1, 1, 0]), tensor([2, 2, -4, 1]), "mean") = [2, -3, 3]
  auto mean = RunOp("scatter_reduce.two", MakeAttrs({{"dim", int64_t{0}}, {"reduce", std::string("mean")}}),
                    {MakeTensor(DType::kInt64, {3}, {5, -7, 3}), MakeTensor(DType::kInt64, {4}, {0, 1, 1, 0}),
                     MakeTensor(DType::kInt64, {4}, {2, 2, -4, 1})});
  ASSERT_EQ(mean.size(), 2u);
  EXPECT_EQ(Values(mean[0]), (std::vector<double>{2, -3, 3}));
  auto amax = RunOp("scatter_reduce.two", MakeAttrs({{"dim", int64_t{0}}, {"reduce", std::string("amax")}}),
                    {MakeTensor(DType::kFloat64, {2}, {1, 2}), MakeTensor(DType::kInt32, {3}, {0, 0, 1}),
                     MakeTensor(DType::kFloat64, {3}, {std::nan(""), 5, 1})});
  ASSERT_EQ(amax.size(), 2u);
  EXPECT_TRUE(std::isnan(ElementAsDouble(amax[0], 0)));
  EXPECT_EQ(ElementAsDouble(amax[0], 1), 2.0);
}

TEST(ScatterReduceKernelTest, AgainstNaiveOnRandomShapes) {
  for (int trial = 0; trial < 30; ++trial) {
    const int rank = static_cast<int>(Uniform(1, 3));
    Shape self_shape, index_shape, src_shape;
    for (int d = 0; d < rank; ++d) {
      self_shape.push_back(Uniform(1, 5));
      index_shape.push_back(Uniform(1, 5));
    }
    const int dim = static_cast<int>(Uniform(0, rank - 1));
    for (int d = 0; d < rank; ++d) {
      if (d != dim) index_shape[d] = Uniform(1, self_shape[d]);
      src_shape.push_back(index_shape[d] + Uniform(0, 1));
    }
    const char* reduce = std::vector<const char*>{"sum", "prod", "mean", "amax", "amin"}[trial % 5];
    const bool include_self = Uniform(0, 1) == 1;
    const DType dtype = std::vector<DType>{DType::kFloat64, DType::kInt64, DType::kFloat32, DType::kInt32}[trial % 4];
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " " << reduce << " include_self " << include_self << " "
                                      << DTypeName(dtype) << " self " << ShapeString(self_shape) << " index "
                                      << ShapeString(index_shape) << " dim " << dim);
    const TestTensor self = Random(dtype, self_shape);
    const TestTensor index = Indices(DType::kInt64, index_shape, 0, self_shape[dim] - 1);
    TestTensor src = Random(dtype, src_shape);
    if (std::string(reduce) == "prod") {  // small factors keep products exact
      for (int64_t i = 0; i < src.numel(); ++i) SetElement(src, i, static_cast<double>(Uniform(-2, 2)));
    }
    auto out =
        RunOp("scatter_reduce.two",
              MakeAttrs({{"dim", int64_t{dim}}, {"reduce", std::string(reduce)}, {"include_self", include_self}}),
              {self, index, src});
    ASSERT_EQ(out.size(), 2u);
    // Naive: the values each self element receives, then the reduction.
    std::vector<std::vector<double>> received(static_cast<size_t>(self.numel()));
    for (int64_t i = 0; i < index.numel(); ++i) {
      Ints c = Unravel(i, index_shape);
      const double v = ElementAsDouble(src, Ravel(c, src_shape));
      c[dim] = static_cast<int64_t>(ElementAsDouble(index, i));
      received[Ravel(c, self_shape)].push_back(v);
    }
    for (int64_t p = 0; p < self.numel(); ++p) {
      std::vector<double> vals = received[p];
      if (vals.empty()) {
        ASSERT_EQ(ElementAsDouble(out[0], p), ElementAsDouble(self, p)) << p;
        continue;
      }
      if (include_self) vals.insert(vals.begin(), ElementAsDouble(self, p));
      double r = vals[0];
      for (size_t k = 1; k < vals.size(); ++k) {
        const std::string op = reduce;
        if (op == "sum" || op == "mean") r += vals[k];
        if (op == "prod") r *= vals[k];
        if (op == "amax") r = std::max(r, vals[k]);
        if (op == "amin") r = std::min(r, vals[k]);
      }
      if (std::string(reduce) == "mean") {
        r = IsFloating(dtype) ? r / static_cast<double>(vals.size()) : std::floor(r / static_cast<double>(vals.size()));
        ASSERT_EQ(ElementAsDouble(out[1], p), static_cast<double>(vals.size())) << p;
      }
      if (dtype == DType::kFloat32) {
        ASSERT_NEAR(ElementAsDouble(out[0], p), r, 1e-5 * std::max(1.0, std::fabs(r))) << p;
      } else {
        ASSERT_EQ(ElementAsDouble(out[0], p), r) << p;
      }
    }
  }
}

TEST(ScatterReduceKernelTest, SixteenBitSumsInFloat32) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    const TestTensor self = MakeTensor(dtype, {2}, {1, 2});
    auto out = RunOp("scatter_add", MakeAttrs({{"dim", int64_t{0}}}),
                     {self, MakeTensor(DType::kInt64, {3}, {1, 1, 0}), MakeTensor(dtype, {3}, {0.5, 0.25, 4})});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(Values(out[0]), (std::vector<double>{5, 2.75})) << DTypeName(dtype);
  }
}

// ---- masked_scatter ----

TEST(MaskedScatterKernelTest, AsPyTorchAndRefusesAShortSource) {
  // zeros(4, 3).masked_scatter(tensor([True, False, True]), arange(12.).reshape(3, 4))
  const TestTensor source = MakeTensor(DType::kFloat32, {3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  auto out = RunOp("masked_scatter", {},
                   {MakeTensor(DType::kFloat32, {4, 3}, std::vector<double>(12, 0.0)),
                    MakeTensor(DType::kBool, {3}, {1, 0, 1}), source});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Values(out[0]), (std::vector<double>{0, 0, 1, 2, 0, 3, 4, 0, 5, 6, 0, 7}));
  const absl::Status status = RunStatus(
      "masked_scatter", {},
      {Random(DType::kInt64, {4, 3}), MakeTensor(DType::kBool, {4, 1}, {1, 0, 1, 1}), Random(DType::kInt64, {8})});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("masked_scatter: mask has 9 true elements but source has only 8"));
}

// ---- strided views ----

TEST(StridedKernelTest, ViewsAsPyTorch) {
  std::vector<double> twelve(12);
  for (int i = 0; i < 12; ++i) twelve[i] = i;
  const TestTensor x = MakeTensor(DType::kFloat32, {3, 4}, twelve);
  auto strided = RunOp("as_strided",
                       MakeAttrs({{"size", Ints{2, 2}}, {"stride", Ints{4, 1}}, {"storage_offset", int64_t{5}}}), {x});
  ASSERT_EQ(strided.size(), 1u);
  EXPECT_EQ(Values(strided[0]), (std::vector<double>{5, 6, 9, 10}));
  auto scatter = RunOp("as_strided_scatter",
                       MakeAttrs({{"size", Ints{2, 2}}, {"stride", Ints{4, 1}}, {"storage_offset", int64_t{5}}}),
                       {x, MakeTensor(DType::kFloat32, {2, 2}, {-1, -1, -1, -1})});
  ASSERT_EQ(scatter.size(), 1u);
  EXPECT_EQ(Values(scatter[0]), (std::vector<double>{0, 1, 2, 3, 4, -1, -1, 7, 8, -1, -1, 11}));
  // torch.diagonal(x, -1, 1, 0) = [1, 6, 11]
  auto diagonal =
      RunOp("diagonal_copy", MakeAttrs({{"offset", int64_t{-1}}, {"dim1", int64_t{1}}, {"dim2", int64_t{0}}}), {x});
  ASSERT_EQ(diagonal.size(), 1u);
  EXPECT_EQ(Values(diagonal[0]), (std::vector<double>{1, 6, 11}));
  // slice_scatter(x, zeros(3, 2), 1, -3, None, 2)
  auto slice = RunOp("slice_scatter", MakeAttrs({{"dim", int64_t{1}}, {"start", int64_t{-3}}, {"step", int64_t{2}}}),
                     {x, MakeTensor(DType::kFloat32, {3, 2}, std::vector<double>(6, 0.0))});
  ASSERT_EQ(slice.size(), 1u);
  EXPECT_EQ(Values(slice[0]), (std::vector<double>{0, 0, 2, 0, 4, 0, 6, 0, 8, 0, 10, 0}));
  auto select = RunOp("select_scatter", MakeAttrs({{"dim", int64_t{0}}, {"index", int64_t{-2}}}),
                      {x, MakeTensor(DType::kFloat32, {4}, {9, 9, 9, 9})});
  ASSERT_EQ(select.size(), 1u);
  EXPECT_EQ(Values(select[0]), (std::vector<double>{0, 1, 2, 3, 9, 9, 9, 9, 8, 9, 10, 11}));
  // torch.flip(arange(24.).reshape(2, 3, 4), [0, 2])[1]
  std::vector<double> v24(24);
  for (int i = 0; i < 24; ++i) v24[i] = i;
  auto flip = RunOp("flip", MakeAttrs({{"dims", Ints{0, -1}}}), {MakeTensor(DType::kInt64, {2, 3, 4}, v24)});
  ASSERT_EQ(flip.size(), 1u);
  const std::vector<double> flipped = Values(flip[0]);
  EXPECT_EQ(std::vector<double>(flipped.begin() + 12, flipped.end()),
            (std::vector<double>{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8}));
  // arange(6).reshape(2, 3).repeat(2, 1, 2)
  auto repeat =
      RunOp("repeat", MakeAttrs({{"repeats", Ints{2, 1, 2}}}), {MakeTensor(DType::kInt32, {2, 3}, {0, 1, 2, 3, 4, 5})});
  ASSERT_EQ(repeat.size(), 1u);
  EXPECT_EQ(repeat[0].type.shape, (Shape{2, 2, 6}));
  const std::vector<double> once = {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5};
  std::vector<double> twice = once;
  twice.insert(twice.end(), once.begin(), once.end());
  EXPECT_EQ(Values(repeat[0]), twice);
}

// Reads a contiguous tensor of `shape` through (offset, sizes, strides).
double ReadView(const TestTensor& t, int64_t offset, const Ints& strides, const Ints& coords) {
  int64_t at = offset;
  for (size_t d = 0; d < coords.size(); ++d) at += coords[d] * strides[d];
  return ElementAsDouble(t, at);
}

TEST(StridedKernelTest, AgainstNaiveOnRandomShapes) {
  for (int trial = 0; trial < 30; ++trial) {
    const DType dtype = std::vector<DType>{DType::kFloat64, DType::kBFloat16, DType::kBool, DType::kInt32}[trial % 4];
    const int rank = static_cast<int>(Uniform(2, 4));
    Shape shape;
    for (int d = 0; d < rank; ++d) shape.push_back(Uniform(1, 5));
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " " << DTypeName(dtype) << " " << ShapeString(shape));
    const TestTensor x = Random(dtype, shape);
    // flip of a random set of dims.
    Ints dims;
    for (int d = 0; d < rank; ++d) {
      if (Uniform(0, 1)) dims.push_back(Uniform(0, 1) ? d : d - rank);
    }
    auto flip = RunOp("flip", MakeAttrs({{"dims", dims}}), {x});
    ASSERT_EQ(flip.size(), 1u);
    for (int64_t i = 0; i < x.numel(); ++i) {
      Ints c = Unravel(i, shape);
      for (int64_t d : dims) {
        const int64_t dd = d < 0 ? d + rank : d;
        c[dd] = shape[dd] - 1 - c[dd];
      }
      ASSERT_EQ(ElementAsDouble(flip[0], i), ElementAsDouble(x, Ravel(c, shape))) << i;
    }
    // diagonal over two random dims with a random offset.
    const int64_t d1 = Uniform(0, rank - 1);
    int64_t d2 = Uniform(0, rank - 2);
    if (d2 >= d1) ++d2;
    const int64_t offset = Uniform(-3, 3);
    auto diagonal = RunOp("diagonal", MakeAttrs({{"offset", offset}, {"dim1", d1}, {"dim2", d2}}), {x});
    ASSERT_EQ(diagonal.size(), 1u);
    const Shape& dshape = diagonal[0].type.shape;
    for (int64_t i = 0; i < diagonal[0].numel(); ++i) {
      const Ints dc = Unravel(i, dshape);
      Ints c(rank);
      size_t next = 0;
      for (int d = 0; d < rank; ++d) {
        if (d != d1 && d != d2) c[d] = dc[next++];
      }
      c[d1] = dc.back() + (offset < 0 ? -offset : 0);
      c[d2] = dc.back() + (offset > 0 ? offset : 0);
      ASSERT_EQ(ElementAsDouble(diagonal[0], i), ElementAsDouble(x, Ravel(c, shape))) << i;
    }
    // diagonal_scatter writes the same elements.
    const TestTensor diag_src = Random(dtype, dshape);
    auto diag_scatter =
        RunOp("diagonal_scatter", MakeAttrs({{"offset", offset}, {"dim1", d1}, {"dim2", d2}}), {x, diag_src});
    ASSERT_EQ(diag_scatter.size(), 1u);
    std::vector<double> diag_expected = Values(x);
    for (int64_t i = 0; i < diag_src.numel(); ++i) {
      const Ints dc = Unravel(i, dshape);
      Ints c(rank);
      size_t next = 0;
      for (int d = 0; d < rank; ++d) {
        if (d != d1 && d != d2) c[d] = dc[next++];
      }
      c[d1] = dc.back() + (offset < 0 ? -offset : 0);
      c[d2] = dc.back() + (offset > 0 ? offset : 0);
      diag_expected[Ravel(c, shape)] = ElementAsDouble(diag_src, i);
    }
    ASSERT_EQ(Values(diag_scatter[0]), diag_expected);
    // repeat with an extra leading dim.
    Ints repeats = {Uniform(1, 2)};
    for (int d = 0; d < rank; ++d) repeats.push_back(Uniform(1, 3));
    auto repeat = RunOp("repeat", MakeAttrs({{"repeats", repeats}}), {x});
    ASSERT_EQ(repeat.size(), 1u);
    const Shape& rshape = repeat[0].type.shape;
    for (int64_t i = 0; i < repeat[0].numel(); ++i) {
      const Ints rc = Unravel(i, rshape);
      Ints c(rank);
      for (int d = 0; d < rank; ++d) c[d] = rc[d + 1] % shape[d];
      ASSERT_EQ(ElementAsDouble(repeat[0], i), ElementAsDouble(x, Ravel(c, shape))) << i;
    }
    // as_strided: a random in-bounds view (transposed strides, an offset).
    const int64_t numel = x.numel();
    const Ints size = {Uniform(1, 3), Uniform(1, 3)};
    const Ints view_strides = {Uniform(0, 3), Uniform(0, 3)};
    const int64_t reach = (size[0] - 1) * view_strides[0] + (size[1] - 1) * view_strides[1];
    if (reach < numel) {
      const int64_t storage_offset = Uniform(0, numel - 1 - reach);
      const Attrs attrs = MakeAttrs({{"size", size}, {"stride", view_strides}, {"storage_offset", storage_offset}});
      auto view = RunOp("as_strided", attrs, {x});
      ASSERT_EQ(view.size(), 1u);
      for (int64_t i = 0; i < view[0].numel(); ++i) {
        ASSERT_EQ(ElementAsDouble(view[0], i), ReadView(x, storage_offset, view_strides, Unravel(i, size))) << i;
      }
      // Scatter through a non-overlapping view: strides from the sizes.
      const Ints dense = {size[1] + Uniform(0, 1), 1};
      const int64_t dense_reach = (size[0] - 1) * dense[0] + (size[1] - 1);
      if (dense_reach < numel) {
        const Attrs put = MakeAttrs({{"size", size}, {"stride", dense}, {"storage_offset", numel - 1 - dense_reach}});
        const TestTensor src = Random(dtype, {size[0], size[1]});
        auto scattered = RunOp("as_strided_scatter", put, {x, src});
        ASSERT_EQ(scattered.size(), 1u);
        std::vector<double> expected = Values(x);
        for (int64_t i = 0; i < src.numel(); ++i) {
          const Ints c = Unravel(i, size);
          expected[numel - 1 - dense_reach + c[0] * dense[0] + c[1]] = ElementAsDouble(src, i);
        }
        ASSERT_EQ(Values(scattered[0]), expected);
      }
    }
    // slice_scatter along a random dim with a random step.
    const int64_t dim = Uniform(0, rank - 1);
    const int64_t start = Uniform(0, shape[dim] - 1), step = Uniform(1, 2);
    const int64_t length = (shape[dim] - start + step - 1) / step;
    Shape src_shape = shape;
    src_shape[dim] = length;
    const TestTensor src = Random(dtype, src_shape);
    auto sliced = RunOp("slice_scatter", MakeAttrs({{"dim", dim}, {"start", start}, {"step", step}}), {x, src});
    ASSERT_EQ(sliced.size(), 1u);
    std::vector<double> expected = Values(x);
    for (int64_t i = 0; i < src.numel(); ++i) {
      Ints c = Unravel(i, src_shape);
      c[dim] = start + c[dim] * step;
      expected[Ravel(c, shape)] = ElementAsDouble(src, i);
    }
    ASSERT_EQ(Values(sliced[0]), expected);
  }
}

}  // namespace
}  // namespace tandem::cpu
