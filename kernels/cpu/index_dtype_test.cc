// int32 index tensors in the CPU kernels: every op that takes indices
// (embedding and its backward, nll_loss_forward / nll_loss_backward, gather,
// scatter.value / scatter.src, index_select, index_put) gives with int32
// indices exactly the bytes it gives with the same indices as int64, on fresh
// random data (the seed is printed; TANDEM_TEST_SEED repeats a run), for
// float32, float64 and, where the op takes them, the 16-bit floats. The two
// runs poison their outputs with different bytes, so an output one of them
// leaves unwritten shows. index_put takes int32 and int64 index tensors
// mixed. A bad int32 index fails the iteration with INVALID_ARGUMENT naming
// the node and the value, in the very words of the same bad int64 index.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/make_attrs.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/cpu_program.h"
#include "kernels/cpu/run_op_test_util.h"
#include "kernels/half.h"

namespace tandem::cpu {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint8_t kPoison64 = 0xA5;  // outputs of the int64 run
constexpr uint8_t kPoison32 = 0x5A;  // outputs of the int32 run

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

// Random values: floats in [-1, 1), integers in [-50, 50], bools either way.
TestTensor RandomValues(TensorType type) {
  TestTensor t(std::move(type));
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double u = unit(Rng());
    switch (t.type.dtype) {
      case DType::kFloat32:
        static_cast<float*>(t.data())[i] = static_cast<float>(u);
        break;
      case DType::kFloat64:
        static_cast<double*>(t.data())[i] = u;
        break;
      case DType::kInt64:
        static_cast<int64_t*>(t.data())[i] = std::llround(u * 50);
        break;
      case DType::kInt32:
        static_cast<int32_t*>(t.data())[i] = static_cast<int32_t>(std::lround(u * 50));
        break;
      case DType::kBool:
        static_cast<bool*>(t.data())[i] = u > 0;
        break;
      case DType::kBFloat16:
        static_cast<BFloat16*>(t.data())[i] = BFloat16(static_cast<float>(u));
        break;
      case DType::kFloat16:
        static_cast<Float16*>(t.data())[i] = Float16(static_cast<float>(u));
        break;
    }
  }
  return t;
}

// int64 indices of `shape`, uniform in [lo, hi].
TestTensor RandomIndices(Shape shape, int64_t lo, int64_t hi) {
  TestTensor t({DType::kInt64, std::move(shape)});
  for (int64_t i = 0; i < t.numel(); ++i) static_cast<int64_t*>(t.data())[i] = Uniform(lo, hi);
  return t;
}

// `index` (int64) as a tensor of `dtype` (int64 or int32) with the same values.
TestTensor AsIndex(const TestTensor& index, DType dtype) {
  if (dtype == DType::kInt64) return index;
  TestTensor t({dtype, index.type.shape});
  for (int64_t i = 0; i < t.numel(); ++i) {
    static_cast<int32_t*>(t.data())[i] = static_cast<int32_t>(static_cast<const int64_t*>(index.data())[i]);
  }
  return t;
}

int64_t IndexAt(const TestTensor& index, int64_t i) { return static_cast<const int64_t*>(index.data())[i]; }
void SetIndex(TestTensor& index, int64_t i, int64_t v) { static_cast<int64_t*>(index.data())[i] = v; }

bool SameBytes(const TestTensor& a, const TestTensor& b) {
  return a.type == b.type && std::memcmp(a.data(), b.data(), a.type.bytes()) == 0;
}

// Runs `op` on `inputs` (int64 indices) and on the same inputs with the index
// inputs `as_int32` converted to int32; expects both to succeed with
// identical output bytes. Returns the int64 run's outputs.
std::vector<TestTensor> ExpectSameWithInt32(const std::string& op, const Attrs& attrs,
                                            const std::vector<TestTensor>& inputs, const std::vector<int>& as_int32) {
  std::vector<TestTensor> wide = inputs;
  std::vector<TestTensor> narrow = inputs;
  for (int i : as_int32) narrow[i] = AsIndex(inputs[i], DType::kInt32);
  auto expected = RunCpuOp(op, attrs, wide, kPoison64);
  auto actual = RunCpuOp(op, attrs, narrow, kPoison32);
  EXPECT_TRUE(expected.ok()) << op << " with int64 indices: " << expected.status();
  EXPECT_TRUE(actual.ok()) << op << " with int32 indices: " << actual.status();
  if (!expected.ok() || !actual.ok()) return {};
  EXPECT_EQ(expected->size(), actual->size());
  for (size_t k = 0; k < expected->size() && k < actual->size(); ++k) {
    EXPECT_TRUE(SameBytes((*expected)[k], (*actual)[k]))
        << op << " output " << k << " " << (*expected)[k].type.ToString();
  }
  return *std::move(expected);
}

constexpr DType kFloatTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16};
constexpr DType kGatherTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kBool};

TEST(IndexDTypeTest, EmbeddingRowsOfInt32IdsAreThoseOfInt64Ids) {
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t vocab = Uniform(2, 60), width = Uniform(1, 9);
    TestTensor weight = RandomValues({dtype, {vocab, width}});
    TestTensor ids = RandomIndices({Uniform(1, 7), Uniform(1, 9)}, 0, vocab - 1);
    auto out = ExpectSameWithInt32("embedding", {}, {weight, ids}, {1});
    ASSERT_EQ(out.size(), 1u);
    // And they are the rows the ids name.
    const size_t row = static_cast<size_t>(width) * DTypeSize(dtype);
    for (int64_t n = 0; n < ids.numel(); ++n) {
      EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>(out[0].data()) + n * row,
                            static_cast<const uint8_t*>(weight.data()) + IndexAt(ids, n) * row, row),
                0)
          << "row " << n;
    }
  }
}

TEST(IndexDTypeTest, EmbeddingBackwardSumsOverInt32IdsAsOverInt64Ids) {
  for (DType dtype : kFloatTypes) {
    for (int64_t padding_idx : {int64_t{-1}, int64_t{2}}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " padding_idx " << padding_idx);
      const int64_t vocab = Uniform(3, 12), width = Uniform(1, 9);
      const Shape id_shape = {Uniform(1, 6), Uniform(1, 8)};
      TestTensor ids = RandomIndices(id_shape, 0, vocab - 1);  // few rows: many repeats
      Shape grad_shape = id_shape;
      grad_shape.push_back(width);
      TestTensor grad = RandomValues({dtype, grad_shape});
      const Attrs attrs = MakeAttrs({{"num_weights", vocab}, {"padding_idx", padding_idx}});
      ExpectSameWithInt32("embedding_dense_backward", attrs, {grad, ids}, {1});
    }
  }
}

TEST(IndexDTypeTest, NllLossWithInt32LabelsIsTheLossWithInt64Labels) {
  for (DType dtype : kFloatTypes) {
    for (int64_t reduction : {0, 1, 2}) {
      for (bool weighted : {false, true}) {
        for (int64_t ignore_index : {int64_t{-100}, int64_t{1}}) {
          SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " reduction " << reduction << " weighted "
                                            << weighted << " ignore_index " << ignore_index);
          const int64_t rows = Uniform(1, 40), classes = Uniform(2, 12);
          TestTensor self = RandomValues({dtype, {rows, classes}});
          TestTensor target = RandomIndices({rows}, 0, classes - 1);
          if (rows > 1) SetIndex(target, Uniform(0, rows - 1), ignore_index);  // one ignored row
          std::vector<TestTensor> inputs = {self, target};
          if (weighted) inputs.push_back(RandomValues({dtype, {classes}}));
          const Attrs attrs = MakeAttrs({{"reduction", reduction}, {"ignore_index", ignore_index}});
          auto forward = ExpectSameWithInt32("nll_loss_forward", attrs, inputs, {1});
          ASSERT_EQ(forward.size(), 2u);
          TestTensor grad_output = RandomValues(forward[0].type);
          std::vector<TestTensor> backward = {grad_output, self, target, forward[1]};
          if (weighted) backward.push_back(inputs[2]);
          ExpectSameWithInt32("nll_loss_backward", attrs, backward, {2});
        }
      }
    }
  }
  // A [C] self with a [] label.
  TestTensor self = RandomValues({DType::kFloat32, {7}});
  TestTensor target = RandomIndices({}, 0, 6);
  ExpectSameWithInt32("nll_loss_forward", {}, {self, target}, {1});
}

TEST(IndexDTypeTest, GatherScatterAndIndexSelectWithInt32IndicesMatchInt64) {
  for (DType dtype : kGatherTypes) {
    for (int64_t dim : {0, 1, -1}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " dim " << dim);
      const Shape shape = {Uniform(1, 6), Uniform(1, 7), Uniform(1, 5)};
      const int d = static_cast<int>(dim < 0 ? dim + 3 : dim);
      TestTensor self = RandomValues({dtype, shape});
      Shape index_shape = shape;
      for (int64_t& s : index_shape) s = Uniform(1, s);
      index_shape[d] = Uniform(1, 2 * shape[d]);  // gather may repeat along dim
      TestTensor index = RandomIndices(index_shape, 0, shape[d] - 1);
      const Attrs at_dim = MakeAttrs({{"dim", dim}});
      auto gathered = ExpectSameWithInt32("gather", at_dim, {self, index}, {1});
      ASSERT_EQ(gathered.size(), 1u);

      // scatter: distinct indices along each line of dim (index's size there
      // <= self's), so that no two writes meet and order does not matter.
      Shape scatter_shape = index_shape;
      scatter_shape[d] = Uniform(1, shape[d]);
      TestTensor scatter_index = RandomIndices(scatter_shape, 0, 0);
      const std::vector<int64_t> strides = ContiguousStrides(scatter_shape);
      std::map<int64_t, std::vector<int64_t>> line_perms;  // first element of a line -> its values
      for (int64_t i = 0; i < scatter_index.numel(); ++i) {
        const int64_t along = (i / strides[d]) % scatter_shape[d];
        std::vector<int64_t>& perm = line_perms[i - along * strides[d]];
        if (perm.empty()) {
          perm.resize(static_cast<size_t>(shape[d]));
          std::iota(perm.begin(), perm.end(), 0);
          std::shuffle(perm.begin(), perm.end(), Rng());
        }
        SetIndex(scatter_index, i, perm[static_cast<size_t>(along)]);
      }
      ExpectSameWithInt32("scatter.value", MakeAttrs({{"dim", dim}, {"value", int64_t{-3}}}), {self, scatter_index},
                          {1});
      Shape src_shape = scatter_shape;
      for (int64_t& s : src_shape) s += Uniform(0, 2);
      TestTensor src = RandomValues({dtype, src_shape});
      ExpectSameWithInt32("scatter.src", at_dim, {self, scatter_index, src}, {1});

      TestTensor pick = RandomIndices({Uniform(0, 9)}, 0, shape[d] - 1);
      ExpectSameWithInt32("index_select", at_dim, {self, pick}, {1});
      TestTensor one = RandomIndices({}, 0, shape[d] - 1);
      ExpectSameWithInt32("index_select", at_dim, {self, one}, {1});
    }
  }
}

TEST(IndexDTypeTest, IndexPutTakesInt32AndInt64IndexTensorsMixed) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32}) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " accumulate " << accumulate);
      const int64_t rows = Uniform(2, 30), cols = Uniform(2, 6), depth = Uniform(1, 4);
      TestTensor self = RandomValues({dtype, {rows, cols, depth}});
      // Negative indices count from the end; with accumulate, repeats add up.
      TestTensor i0 = RandomIndices({Uniform(1, 8), 1}, -rows, rows - 1);
      TestTensor i1 = RandomIndices({Uniform(1, 5)}, -cols, cols - 1);
      const Attrs attrs = MakeAttrs({{"accumulate", accumulate}});
      TestTensor values = RandomValues({dtype, {i1.numel(), depth}});
      // Every mix of int32 and int64 index tensors gives the all-int64 result.
      for (const std::vector<int>& as_int32 : {std::vector<int>{1}, std::vector<int>{2}, std::vector<int>{1, 2}}) {
        ExpectSameWithInt32("index_put", attrs, {self, i0, i1, values}, as_int32);
      }
      TestTensor row_values = RandomValues({dtype, {cols, depth}});
      ExpectSameWithInt32("index_put", attrs, {self, i0, row_values}, {1});
    }
  }
}

// One node `op` ('bad') over feeds of `inputs`, run as an iteration of the
// CPU backend.
absl::Status RunAsIteration(const std::string& op, const Attrs& attrs, std::vector<TestTensor>& inputs) {
  Graph graph;
  Node node;
  node.op = op;
  node.def = OpRegistry::Global().Find(op);
  if (node.def == nullptr) return absl::NotFoundError(op);
  node.attrs = attrs;
  node.label = "bad";
  std::vector<TensorType> in_types;
  std::vector<void*> addresses;
  for (TestTensor& t : inputs) {
    Value value;
    value.name = absl::StrCat("feed", graph.values.size());
    value.type = t.type;
    value.kind = ValueKind::kFeed;
    node.inputs.push_back(static_cast<int>(graph.values.size()));
    graph.feeds.push_back(static_cast<int>(graph.values.size()));
    graph.values.push_back(value);
    in_types.push_back(t.type);
    addresses.push_back(t.data());
  }
  auto out_types = node.def->infer(attrs, in_types);
  if (!out_types.ok()) return out_types.status();
  std::vector<TestTensor> outputs;
  outputs.reserve(out_types->size());
  for (const TensorType& type : *out_types) {
    Value value;
    value.name = absl::StrCat("out", graph.values.size());
    value.type = type;
    value.producer = 0;
    node.outputs.push_back(static_cast<int>(graph.values.size()));
    graph.values.push_back(value);
    outputs.emplace_back(type);
    addresses.push_back(outputs.back().data());
  }
  graph.nodes.push_back(node);
  return RunGraphOnCpu(graph, addresses);
}

struct BadIndexCase {
  std::string op;
  Attrs attrs;
  std::vector<TestTensor> inputs;  // int64 indices, all good
  int index_input;                 // the index tensor made bad
  std::vector<int64_t> bad_values;
};

// With `bad` written into element `at` of the index input, the int64 and the
// int32 run fail alike: INVALID_ARGUMENT, the node first, then the value.
void ExpectSameBadIndexError(BadIndexCase& c, int64_t bad) {
  SCOPED_TRACE(::testing::Message() << c.op << " bad value " << bad);
  TestTensor& index = c.inputs[c.index_input];
  const int64_t at = Uniform(0, index.numel() - 1);
  const int64_t good = IndexAt(index, at);
  SetIndex(index, at, bad);
  std::vector<TestTensor> wide = c.inputs;
  std::vector<TestTensor> narrow = c.inputs;
  narrow[c.index_input] = AsIndex(index, DType::kInt32);
  SetIndex(index, at, good);
  const absl::Status expected = RunAsIteration(c.op, c.attrs, wide);
  const absl::Status actual = RunAsIteration(c.op, c.attrs, narrow);
  EXPECT_EQ(expected.code(), absl::StatusCode::kInvalidArgument) << expected;
  EXPECT_EQ(actual.code(), absl::StatusCode::kInvalidArgument) << actual;
  const std::string message(actual.message());
  EXPECT_THAT(message, StartsWith(absl::StrCat("node 0 (", c.op, " 'bad'): ")));
  EXPECT_THAT(message, HasSubstr(absl::StrCat("[", at, "] is ", bad, ", outside ")));
  EXPECT_EQ(actual.message(), expected.message());
  // The same tensors with the good value back run.
  narrow[c.index_input] = AsIndex(index, DType::kInt32);
  EXPECT_TRUE(RunAsIteration(c.op, c.attrs, narrow).ok());
}

TEST(IndexDTypeTest, BadInt32IndicesFailTheIterationLikeBadInt64Ones) {
  constexpr int64_t kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int64_t kMin32 = std::numeric_limits<int32_t>::min();
  const int64_t vocab = Uniform(2, 50), rows = Uniform(2, 9), cols = Uniform(2, 9);
  std::vector<BadIndexCase> cases;
  cases.push_back({"embedding",
                   {},
                   {RandomValues({DType::kFloat32, {vocab, 3}}), RandomIndices({4, 5}, 0, vocab - 1)},
                   1,
                   {vocab, -1, kMax32, kMin32}});
  cases.push_back({"embedding",
                   {},
                   {RandomValues({DType::kBFloat16, {vocab, 3}}), RandomIndices({6}, 0, vocab - 1)},
                   1,
                   {vocab, -7}});
  for (DType dtype : {DType::kFloat32, DType::kFloat16}) {
    cases.push_back({"embedding_dense_backward",
                     MakeAttrs({{"num_weights", vocab}}),
                     {RandomValues({dtype, {4, 5, 3}}), RandomIndices({4, 5}, 0, vocab - 1)},
                     1,
                     {vocab, -3, kMax32}});
  }
  for (DType dtype : {DType::kFloat64, DType::kBFloat16}) {
    TestTensor self = RandomValues({dtype, {rows, cols}});
    cases.push_back({"nll_loss_forward", {}, {self, RandomIndices({rows}, 0, cols - 1)}, 1, {cols, -1, kMin32}});
    cases.push_back({"nll_loss_backward",
                     MakeAttrs({{"reduction", int64_t{2}}}),
                     {RandomValues({dtype, {}}), self, RandomIndices({rows}, 0, cols - 1), RandomValues({dtype, {}})},
                     2,
                     {cols + 7, -2}});
  }
  TestTensor self = RandomValues({DType::kFloat32, {rows, cols}});
  const Attrs dim1 = MakeAttrs({{"dim", int64_t{1}}});
  cases.push_back({"gather", dim1, {self, RandomIndices({rows, 2}, 0, cols - 1)}, 1, {cols, -1, kMax32}});
  cases.push_back({"scatter.value",
                   MakeAttrs({{"dim", int64_t{0}}, {"value", 1.5}}),
                   {self, RandomIndices({1, cols}, 0, rows - 1)},
                   1,
                   {rows, -1}});
  cases.push_back({"scatter.src",
                   dim1,
                   {self, RandomIndices({rows, 1}, 0, cols - 1), RandomValues({DType::kFloat32, {rows, 1}})},
                   1,
                   {cols, kMin32}});
  cases.push_back({"index_select", dim1, {self, RandomIndices({5}, 0, cols - 1)}, 1, {cols, -2}});
  // index_put wraps [-size, size); the int32 index tensor beside an int64 one.
  cases.push_back({"index_put",
                   {},
                   {self, RandomIndices({3}, -rows, rows - 1), RandomIndices({3}, -cols, cols - 1),
                    RandomValues({DType::kFloat32, {3}})},
                   2,
                   {cols, -cols - 1, kMin32}});
  for (BadIndexCase& c : cases) {
    for (int64_t bad : c.bad_values) ExpectSameBadIndexError(c, bad);
  }
}

// A label equal to ignore_index is skipped, not refused, in either dtype.
TEST(IndexDTypeTest, Int32IgnoreIndexIsNotABadLabel) {
  TestTensor self = RandomValues({DType::kFloat32, {3, 4}});
  TestTensor target = RandomIndices({3}, 0, 3);
  SetIndex(target, 1, -100);
  std::vector<TestTensor> inputs = {self, AsIndex(target, DType::kInt32)};
  auto out = RunCpuOp("nll_loss_forward", MakeAttrs({{"reduction", int64_t{2}}}), inputs, kPoison32);
  ASSERT_TRUE(out.ok()) << out.status();
  const float* x = static_cast<const float*>(self.data());
  const float expected = -x[IndexAt(target, 0)] - x[2 * 4 + IndexAt(target, 2)];
  EXPECT_FLOAT_EQ(*static_cast<const float*>((*out)[0].data()), expected);
  EXPECT_FLOAT_EQ(*static_cast<const float*>((*out)[1].data()), 2.0f);  // total_weight: two rows counted
}

}  // namespace
}  // namespace tandem::cpu
