// FuseElementwise: which nodes fuse, what is left alone, that the fused
// graph stays valid (BuildGraph accepts it), and that it computes exactly
// (bit for bit, a NaN's sign aside) what the unfused one does on the CPU
// backend — float32, float64, and bfloat16 / float16 chains (optimizer steps
// of 16-bit models with float32 step sizes; random graphs on fresh random
// data, the seed printed).
#include "compiler/fuse_elementwise.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/wire_graph_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/graph_builder.h"
#include "ir/ops/fused_program.h"
#include "kernels/cpu/cpu_program.h"
#include "kernels/cpu/half_test_util.h"
#include "kernels/half.h"
#include "tandem.pb.h"

namespace tandem {
namespace {

using testing::AddNode;
using testing::AddSpec;
using testing::Contents;
using testing::Persistent;
using Names = std::vector<std::string>;
using ::testing::ElementsAre;

v1::Node* WithFloat(v1::Node* node, const std::string& name, double value) {
  (*node->mutable_attrs())[name].set_f(value);
  return node;
}

void AddUpdate(v1::Graph& g, const std::string& persistent, const std::string& value) {
  v1::Update* u = g.add_updates();
  u->set_persistent(persistent);
  u->set_value(value);
}

// Random values in [lo, hi) as bytes of `dtype`.
std::string RandomBytes(v1::DType dtype, int64_t n, std::mt19937_64& rng, double lo = -2.0, double hi = 2.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::string bytes;
  for (int64_t i = 0; i < n; ++i) {
    const double v = dist(rng);
    if (dtype == v1::FLOAT32) {
      const float f = static_cast<float>(v);
      bytes.append(reinterpret_cast<const char*>(&f), sizeof f);
    } else if (dtype == v1::BFLOAT16 || dtype == v1::FLOAT16) {
      const uint16_t h = dtype == v1::BFLOAT16 ? BFloat16(v).bits : Float16(v).bits;
      bytes.append(reinterpret_cast<const char*>(&h), sizeof h);
    } else {
      bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
  }
  return bytes;
}

void AddPersistent(Persistent& persistent, const std::string& name, v1::DType dtype, const Shape& shape,
                   std::mt19937_64& rng) {
  v1::Tensor* t = persistent.Add();
  AddSpec(t->mutable_spec(), name, dtype, shape);
  t->set_data(RandomBytes(dtype, NumElements(shape), rng));
}

// Random contents for every feed of `g`.
Contents RandomFeeds(const v1::Graph& g, std::mt19937_64& rng, double lo = -2.0, double hi = 2.0) {
  Contents feeds;
  for (const v1::TensorSpec& f : g.feeds()) {
    feeds[f.name()] = RandomBytes(f.dtype(), NumElements({f.shape().begin(), f.shape().end()}), rng, lo, hi);
  }
  return feeds;
}

// Whether two tensors of `dtype` hold the same bits, except that a NaN
// matches any NaN: the compiler may order a commutative operation's operands
// either way, and which NaN an x86 instruction passes on (its sign, here)
// follows the operand order (the random graphs take square roots of negative
// numbers, so NaNs meet NaNs).
bool SameBitsOrBothNaN(const std::string& a, const std::string& b, DType dtype) {
  if (a.size() != b.size()) return false;
  if (a == b) return true;
  const size_t width = DTypeSize(dtype);
  if (!IsFloating(dtype) || width == 0) return false;
  auto is_nan = [&](const std::string& bytes, size_t at) {
    switch (dtype) {
      case DType::kFloat32: {
        float x;
        std::memcpy(&x, bytes.data() + at, sizeof(x));
        return std::isnan(x);
      }
      case DType::kFloat64: {
        double x;
        std::memcpy(&x, bytes.data() + at, sizeof(x));
        return std::isnan(x);
      }
      default: {
        uint16_t bits;
        std::memcpy(&bits, bytes.data() + at, sizeof(bits));
        return std::isnan(dtype == DType::kBFloat16 ? BFloat16BitsToFloat(bits) : Float16BitsToFloat(bits));
      }
    }
  };
  for (size_t at = 0; at + width <= a.size(); at += width) {
    if (std::memcmp(a.data() + at, b.data() + at, width) == 0) continue;
    if (!(is_nan(a, at) && is_nan(b, at))) return false;
  }
  return true;
}

// Fuses a copy of `g`; expects BuildGraph to accept the result and the
// fused and unfused graphs to give the same bytes (SameBitsOrBothNaN) for
// every fetch and persistent tensor on `trials` random inputs.
v1::Graph FuseAndCompare(const v1::Graph& g, const Persistent& persistent, std::mt19937_64& rng, int trials = 3,
                         double lo = -2.0, double hi = 2.0) {
  EXPECT_TRUE(BuildGraph(g, persistent).ok()) << BuildGraph(g, persistent).status();
  auto passed = testing::ApplyPass(g, persistent, FuseElementwise);
  EXPECT_TRUE(passed.ok()) << passed.status();
  v1::Graph fused = passed.ok() ? *std::move(passed) : g;
  auto built = BuildGraph(fused, persistent);
  EXPECT_TRUE(built.ok()) << built.status() << "\n" << fused.DebugString();
  auto unfused = BuildGraph(g, persistent);
  if (!unfused.ok()) return fused;
  for (int t = 0; t < trials; ++t) {
    const Contents feeds = RandomFeeds(g, rng, lo, hi);
    auto want = testing::RunWireGraphOnCpu(g, persistent, feeds);
    auto got = testing::RunWireGraphOnCpu(fused, persistent, feeds);
    EXPECT_TRUE(want.ok()) << want.status();
    EXPECT_TRUE(got.ok()) << got.status();
    if (!want.ok() || !got.ok()) break;
    EXPECT_EQ(got->size(), want->size());
    for (const auto& [name, bytes] : *want) {
      auto it = got->find(name);
      EXPECT_NE(it, got->end()) << name;
      if (it != got->end()) {
        const int v = unfused->Find(name);
        EXPECT_GE(v, 0) << name;
        if (v >= 0) {
          EXPECT_TRUE(SameBitsOrBothNaN(it->second, bytes, unfused->values[v].type.dtype))
              << name << " differs after fusion";
        }
      }
    }
  }
  return fused;
}

const v1::Node* Producer(const v1::Graph& g, const std::string& output) {
  for (const v1::Node& node : g.nodes()) {
    for (const std::string& out : node.outputs()) {
      if (out == output) return &node;
    }
  }
  return nullptr;
}

Names InputsOf(const v1::Node* node) {
  if (node == nullptr) return {};
  return {node->inputs().begin(), node->inputs().end()};
}
Names OutputsOf(const v1::Node* node) {
  if (node == nullptr) return {};
  return {node->outputs().begin(), node->outputs().end()};
}
Names Ops(const v1::Graph& g) {
  Names ops;
  for (const v1::Node& node : g.nodes()) ops.push_back(node.op());
  return ops;
}
int Instructions(const v1::Node& node) {
  auto it = node.attrs().find("code");
  return it == node.attrs().end() ? 0 : it->second.ints().values_size() / kFusedFieldsPerInstruction;
}

// SGD with momentum for one parameter `w` (buffer `w_buf`), lr a rank-0 feed.
void AddSgdStep(v1::Graph& g, const std::string& w) {
  WithFloat(AddNode(g, "mul.Scalar", {w + "_buf"}, w + "_m"), "other", 0.9);
  AddNode(g, "add.Tensor", {w + "_m", w + "_grad"}, w + "_buf_new");
  AddNode(g, "mul.Tensor", {w + "_buf_new", "lr"}, w + "_step");
  AddNode(g, "sub.Tensor", {w, w + "_step"}, w + "_new");
  AddUpdate(g, w + "_buf", w + "_buf_new");
  AddUpdate(g, w, w + "_new");
}

TEST(FuseElementwiseTest, SgdStepsBecomeOneNodeEachWithTwoOutputs) {
  for (v1::DType dtype : {v1::FLOAT32, v1::FLOAT64}) {
    SCOPED_TRACE(v1::DType_Name(dtype));
    std::mt19937_64 rng(7);
    v1::Graph g;
    Persistent persistent;
    AddSpec(g.add_feeds(), "lr", dtype, {});
    for (const auto& [w, shape] : std::vector<std::pair<std::string, Shape>>{{"w1", {5, 7}}, {"w2", {13}}}) {
      AddPersistent(persistent, w, dtype, shape, rng);
      AddPersistent(persistent, w + "_buf", dtype, shape, rng);
      AddSpec(g.add_feeds(), w + "_grad", dtype, shape);
      AddSgdStep(g, w);
    }
    ASSERT_EQ(g.nodes_size(), 8);
    const v1::Graph fused = FuseAndCompare(g, persistent, rng);
    EXPECT_THAT(Ops(fused), ElementsAre(kFusedElementwiseOp, kFusedElementwiseOp));
    const v1::Node* node = Producer(fused, "w1_new");
    ASSERT_NE(node, nullptr);
    EXPECT_EQ(InputsOf(node), (Names{"w1_buf", "w1_grad", "lr", "w1"}));
    EXPECT_EQ(OutputsOf(node), (Names{"w1_buf_new", "w1_new"}));
    EXPECT_EQ(Instructions(*node), 4);
    EXPECT_EQ(node->declared_outputs_size(), 2);
    ASSERT_NE(Producer(fused, "w2_new"), nullptr);
    EXPECT_EQ(Producer(fused, "w2_buf_new"), Producer(fused, "w2_new"));
    // The intermediates read only inside a step are gone.
    for (const char* gone : {"w1_m", "w1_step", "w2_m", "w2_step"}) EXPECT_EQ(Producer(fused, gone), nullptr);
  }
}

TEST(FuseElementwiseTest, FetchedIntermediateBecomesAnOutput) {
  std::mt19937_64 rng(11);
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", v1::FLOAT32, {4, 6});
  AddSpec(g.add_feeds(), "y", v1::FLOAT32, {4, 6});
  WithFloat(WithFloat(AddNode(g, "add.Scalar", {"x"}, "a"), "other", 3.0), "alpha", 1.5);
  AddNode(g, "sqrt", {"a"}, "b");
  WithFloat(AddNode(g, "sub.Tensor", {"b", "y"}, "c"), "alpha", 0.3);
  AddNode(g, "neg", {"c"}, "d");
  g.add_fetches("a");
  g.add_fetches("d");
  const v1::Graph fused = FuseAndCompare(g, {}, rng, 3, 0.0, 4.0);
  ASSERT_EQ(fused.nodes_size(), 1);
  EXPECT_EQ(OutputsOf(&fused.nodes(0)), (Names{"a", "d"}));
  EXPECT_EQ(Instructions(fused.nodes(0)), 4);
}

TEST(FuseElementwiseTest, NothingFusesAcrossANonFusableNode) {
  std::mt19937_64 rng(13);
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", v1::FLOAT32, {3, 5});
  AddSpec(g.add_feeds(), "y", v1::FLOAT32, {3, 5});
  AddNode(g, "add.Tensor", {"x", "y"}, "a");
  AddNode(g, "exp", {"a"}, "r");
  AddNode(g, "mul.Tensor", {"r", "y"}, "b");
  WithFloat(AddNode(g, "sub.Scalar", {"b"}, "c"), "other", 1.0);
  g.add_fetches("c");
  const v1::Graph fused = FuseAndCompare(g, {}, rng);
  EXPECT_THAT(Ops(fused), ElementsAre("add.Tensor", "exp", kFusedElementwiseOp));
  EXPECT_EQ(InputsOf(Producer(fused, "c")), (Names{"r", "y"}));
  EXPECT_EQ(OutputsOf(Producer(fused, "c")), (Names{"c"}));
}

TEST(FuseElementwiseTest, ReaderBetweenMembersSplitsTheChain) {
  std::mt19937_64 rng(17);
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", v1::FLOAT64, {6});
  AddSpec(g.add_feeds(), "y", v1::FLOAT64, {6});
  AddNode(g, "mul.Tensor", {"x", "y"}, "a");
  AddNode(g, "sum", {"a"}, "s");  // rank 0, reads a between a and c
  AddNode(g, "mul.Tensor", {"a", "s"}, "c");
  AddNode(g, "add.Tensor", {"c", "x"}, "d");
  g.add_fetches("d");
  const v1::Graph fused = FuseAndCompare(g, {}, rng);
  // a cannot join c: the fused node would sit after `sum`, which reads a.
  EXPECT_THAT(Ops(fused), ElementsAre("mul.Tensor", "sum", kFusedElementwiseOp));
  EXPECT_EQ(InputsOf(Producer(fused, "d")), (Names{"a", "s", "x"}));
}

TEST(FuseElementwiseTest, BroadcastOperandIsNotFused) {
  std::mt19937_64 rng(19);
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", v1::FLOAT32, {4, 5});
  AddSpec(g.add_feeds(), "bias", v1::FLOAT32, {5});
  AddSpec(g.add_feeds(), "one", v1::FLOAT32, {1});
  AddNode(g, "add.Tensor", {"x", "bias"}, "a");
  AddNode(g, "mul.Tensor", {"a", "one"}, "b");  // [1] broadcasts: not a rank-0 operand
  WithFloat(AddNode(g, "mul.Scalar", {"a"}, "c"), "other", 2.0);
  AddNode(g, "neg", {"c"}, "d");
  g.add_fetches("b");
  g.add_fetches("d");
  const v1::Graph fused = FuseAndCompare(g, {}, rng);
  EXPECT_THAT(Ops(fused), ElementsAre("add.Tensor", "mul.Tensor", kFusedElementwiseOp));
  EXPECT_EQ(InputsOf(Producer(fused, "d")), (Names{"a"}));
}

TEST(FuseElementwiseTest, DtypeMixIsNotFused) {
  std::mt19937_64 rng(23);
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", v1::FLOAT32, {8});
  AddSpec(g.add_feeds(), "lr", v1::FLOAT64, {});
  AddNode(g, "mul.Tensor", {"x", "lr"}, "a");  // float32 result from a float64 rank-0
  AddNode(g, "neg", {"a"}, "b");
  AddSpec(g.add_feeds(), "z", v1::FLOAT64, {8});
  AddNode(g, "neg", {"z"}, "c");
  g.add_fetches("b");
  g.add_fetches("c");
  const v1::Graph fused = FuseAndCompare(g, {}, rng);
  EXPECT_THAT(Ops(fused), ElementsAre("mul.Tensor", "neg", "neg"));
}

TEST(FuseElementwiseTest, RankZeroChainFusesAndAFullChainTakesItAsInput) {
  std::mt19937_64 rng(29);
  v1::Graph g;
  AddSpec(g.add_feeds(), "lr", v1::FLOAT32, {});
  AddSpec(g.add_feeds(), "x", v1::FLOAT32, {3, 3});
  WithFloat(AddNode(g, "mul.Scalar", {"lr"}, "lr2"), "other", 0.5);
  AddNode(g, "div.Tensor", {"lr2", "lr"}, "ratio");
  AddNode(g, "mul.Tensor", {"x", "ratio"}, "a");
  AddNode(g, "div.Tensor", {"a", "x"}, "b");
  g.add_fetches("b");
  const v1::Graph fused = FuseAndCompare(g, {}, rng);
  ASSERT_THAT(Ops(fused), ElementsAre(kFusedElementwiseOp, kFusedElementwiseOp));
  EXPECT_EQ(OutputsOf(&fused.nodes(0)), (Names{"ratio"}));
  EXPECT_EQ(InputsOf(&fused.nodes(1)), (Names{"x", "ratio"}));
}

TEST(FuseElementwiseTest, LongChainsSplitAtTheLimits) {
  std::mt19937_64 rng(31);
  v1::Graph g;
  AddSpec(g.add_feeds(), "x0", v1::FLOAT32, {9});
  // 40 negations, then a sum of 12 feeds: over the instruction and input limits.
  std::string prev = "x0";
  for (int i = 0; i < 40; ++i) {
    const std::string out = absl::StrCat("n", i);
    AddNode(g, i % 3 == 2 ? "sqrt" : "neg", {prev}, out);  // sqrt after two negations
    prev = out;
  }
  for (int i = 1; i <= 12; ++i) {
    const std::string feed = absl::StrCat("x", i);
    AddSpec(g.add_feeds(), feed, v1::FLOAT32, {9});
    const std::string out = absl::StrCat("s", i);
    AddNode(g, "add.Tensor", {prev, feed}, out);
    prev = out;
  }
  g.add_fetches(prev);
  const v1::Graph fused = FuseAndCompare(g, {}, rng, 2, 0.0, 1.0);
  ASSERT_GE(fused.nodes_size(), 2);
  int instructions = 0;
  for (const v1::Node& node : fused.nodes()) {
    ASSERT_EQ(node.op(), kFusedElementwiseOp);
    EXPECT_LE(Instructions(node), kFusedMaxInstructions);
    EXPECT_LE(node.inputs_size(), kFusedMaxInputs);
    EXPECT_LE(node.outputs_size(), kFusedMaxOutputs);
    instructions += Instructions(node);
  }
  EXPECT_EQ(instructions, 52);
  EXPECT_EQ(fused.nodes_size(), 3);  // 32 negations and sqrts; 8 + 7 adds (8 inputs); 5 adds
}

TEST(FuseElementwiseTest, DeadChainKeepsItsLastValue) {
  std::mt19937_64 rng(37);
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", v1::FLOAT32, {4});
  AddNode(g, "neg", {"x"}, "a");
  AddNode(g, "neg", {"a"}, "b");
  AddNode(g, "exp", {"x"}, "r");
  g.add_fetches("r");
  const v1::Graph fused = FuseAndCompare(g, {}, rng);
  EXPECT_THAT(Ops(fused), ElementsAre(kFusedElementwiseOp, "exp"));
  EXPECT_EQ(OutputsOf(&fused.nodes(0)), (Names{"b"}));
}

// A residual block's activation and its gradient: add + relu forward,
// add + threshold_backward backward (the residual's two gradients summed,
// then masked by the block's output), each one fused node.
TEST(FuseElementwiseTest, ResidualReluAndItsGradientFuse) {
  std::mt19937_64 rng(43);
  for (v1::DType dtype : {v1::FLOAT32, v1::FLOAT64, v1::BFLOAT16, v1::FLOAT16}) {
    v1::Graph g;
    for (const char* name : {"x", "skip", "g1", "g2"}) AddSpec(g.add_feeds(), name, dtype, {2, 3, 5});
    AddNode(g, "add.Tensor", {"x", "skip"}, "s");
    AddNode(g, "relu", {"s"}, "out");
    AddNode(g, "add.Tensor", {"g1", "g2"}, "g");
    WithFloat(AddNode(g, "threshold_backward", {"g", "out"}, "gs"), "threshold", 0.0);
    g.add_fetches("out");
    g.add_fetches("gs");
    SCOPED_TRACE(v1::DType_Name(dtype));
    const v1::Graph fused = FuseAndCompare(g, {}, rng, 2, -1.0, 1.0);
    ASSERT_EQ(fused.nodes_size(), 1);
    EXPECT_EQ(fused.nodes(0).op(), kFusedElementwiseOp);
    EXPECT_EQ(OutputsOf(&fused.nodes(0)), (Names{"out", "gs"}));
    EXPECT_EQ(Instructions(fused.nodes(0)), 4);
  }
}

// What RandomGraphsFuseExactly draws its graphs from.
struct RandomGraphOptions {
  std::vector<v1::DType> dtypes;    // trial k's dtype: dtypes[k % size]
  Shape shape;                      // of every full-size value
  std::vector<std::string> binary;  // binary ops (on full-size and rank-0 operands)
  // Rank-0 feeds, by name; no dtype: the trial's.
  std::vector<std::pair<std::string, std::optional<v1::DType>>> rank0_feeds;
  int rank0_operand_odds;  // one full-size binary node in this many takes a rank-0 operand
  double scalar_other;     // the .Scalar ops' "other"
};

// 60 random graphs of fusable and non-fusable nodes over one shape, with
// rank-0 values and random fetches; each fused graph must build and match
// the unfused one (FuseAndCompare). Returns how many fused nodes the
// trials made.
int RandomGraphsFuseExactly(const RandomGraphOptions& options, std::mt19937_64& rng) {
  const std::vector<std::string> scalar = {"add.Scalar", "sub.Scalar", "mul.Scalar", "div.Scalar"};
  int fused_nodes = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const v1::DType dtype = options.dtypes[static_cast<size_t>(trial) % options.dtypes.size()];
    v1::Graph g;
    Persistent persistent;
    std::vector<std::string> full = {"p", "f0", "f1"};
    std::vector<std::string> rank0;
    AddPersistent(persistent, "p", dtype, options.shape, rng);
    AddSpec(g.add_feeds(), "f0", dtype, options.shape);
    AddSpec(g.add_feeds(), "f1", dtype, options.shape);
    for (const auto& [name, feed_dtype] : options.rank0_feeds) {
      AddSpec(g.add_feeds(), name, feed_dtype.value_or(dtype), {});
      rank0.push_back(name);
    }
    auto pick = [&](const std::vector<std::string>& from) {
      return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
    };
    const int num_nodes = std::uniform_int_distribution<int>(5, 45)(rng);
    for (int i = 0; i < num_nodes; ++i) {
      const std::string out = absl::StrCat("v", i);
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      if (kind <= 3) {
        const bool with_rank0 = std::uniform_int_distribution<int>(0, options.rank0_operand_odds - 1)(rng) == 0;
        const std::string a = pick(full), b = with_rank0 ? pick(rank0) : pick(full);
        v1::Node* node = AddNode(g, pick(options.binary), kind % 2 ? Names{a, b} : Names{b, a}, out);
        if ((node->op() == "add.Tensor" || node->op() == "sub.Tensor") && kind == 0) WithFloat(node, "alpha", 0.7);
        if (node->op() == "threshold_backward") WithFloat(node, "threshold", 0.25);
      } else if (kind <= 5) {
        v1::Node* node = WithFloat(AddNode(g, pick(scalar), {pick(full)}, out), "other", options.scalar_other);
        if (node->op() == "add.Scalar" || node->op() == "sub.Scalar") WithFloat(node, "alpha", -0.3);
      } else if (kind == 6) {
        AddNode(g, std::uniform_int_distribution<int>(0, 1)(rng) ? "neg" : "sqrt", {pick(full)}, out);
      } else if (kind == 7) {
        // exp is not fusable (and float32/float64 only).
        const bool wide = dtype == v1::FLOAT32 || dtype == v1::FLOAT64;
        AddNode(g, !wide || std::uniform_int_distribution<int>(0, 1)(rng) ? "relu" : "exp", {pick(full)}, out);
      } else if (kind == 8) {
        AddNode(g, "sum", {pick(full)}, out);  // a rank-0 value of the trial's dtype
        rank0.push_back(out);
        continue;
      } else {
        // A rank-0 chain member: feed-derived numbers (their dtype by the
        // type rule).
        v1::Node* node = AddNode(g, pick(options.binary), {pick(rank0), pick(rank0)}, out);
        if (node->op() == "threshold_backward") WithFloat(node, "threshold", 0.25);
        rank0.push_back(out);
        continue;
      }
      full.push_back(out);
    }
    for (const std::string& v : full) {
      if (v[0] == 'v' && std::uniform_int_distribution<int>(0, 3)(rng) == 0) g.add_fetches(v);
    }
    g.add_fetches(full.back());
    AddUpdate(g, "p", full.back() == "p" ? "f0" : full.back());
    SCOPED_TRACE(::testing::Message() << "trial " << trial << "\n" << g.DebugString());
    const v1::Graph fused = FuseAndCompare(g, persistent, rng, 2);
    for (const v1::Node& node : fused.nodes()) fused_nodes += node.op() == kFusedElementwiseOp;
    if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) break;
  }
  return fused_nodes;
}

// Random float32 and float64 graphs with a rank-0 feed: the fused graph
// must build and match.
TEST(FuseElementwiseTest, RandomGraphsStayValidAndExact) {
  std::mt19937_64 rng(41);
  const RandomGraphOptions options{{v1::FLOAT32, v1::FLOAT64},
                                   {3, 4},
                                   {"add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "threshold_backward"},
                                   {{"lr", std::nullopt}},
                                   /*rank0_operand_odds=*/4,
                                   /*scalar_other=*/1.25};
  EXPECT_GT(RandomGraphsFuseExactly(options, rng), 20);  // the generator does make fusable chains
}

// ---- 16-bit chains ----

const std::vector<v1::DType> kHalfTypes = {v1::BFLOAT16, v1::FLOAT16};

struct AdamOptions {
  bool lerp_form = false;        // torch >= 2.0's exp_avg update (optim.py)
  bool decoupled_decay = false;  // AdamW: p * (1 - lr * weight_decay), a rank-0 feed
  bool amsgrad = false;
};

// One parameter's Adam / AdamW step as the PyTorch adaptor lowers it
// (adaptor/pytorch/tandem/torch/optim.py): state `w_m`, `w_v` (and
// `w_vmax`), float32 rank-0 feeds `step_size`, `bc2_sqrt` and `decay`.
void AddAdamStep(v1::Graph& g, const std::string& w, const AdamOptions& o) {
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  std::string p = w;
  if (o.decoupled_decay) {
    AddNode(g, "mul.Tensor", {w, "decay"}, w + "_decayed");
    p = w + "_decayed";
  }
  if (o.lerp_form) {
    AddNode(g, "sub.Tensor", {w + "_grad", w + "_m"}, w + "_diff");
    WithFloat(AddNode(g, "mul.Scalar", {w + "_diff"}, w + "_step_m"), "other", 1 - beta1);
    AddNode(g, "add.Tensor", {w + "_m", w + "_step_m"}, w + "_m_new");
  } else {
    WithFloat(AddNode(g, "mul.Scalar", {w + "_m"}, w + "_m_scaled"), "other", beta1);
    WithFloat(AddNode(g, "add.Tensor", {w + "_m_scaled", w + "_grad"}, w + "_m_new"), "alpha", 1 - beta1);
  }
  WithFloat(AddNode(g, "mul.Scalar", {w + "_v"}, w + "_v_scaled"), "other", beta2);
  WithFloat(AddNode(g, "mul.Scalar", {w + "_grad"}, w + "_g_scaled"), "other", 1 - beta2);
  AddNode(g, "mul.Tensor", {w + "_g_scaled", w + "_grad"}, w + "_g2");
  AddNode(g, "add.Tensor", {w + "_v_scaled", w + "_g2"}, w + "_v_new");
  std::string second = w + "_v_new";
  if (o.amsgrad) {
    AddNode(g, "maximum", {w + "_vmax", w + "_v_new"}, w + "_vmax_new");
    second = w + "_vmax_new";
    AddUpdate(g, w + "_vmax", second);
  }
  AddNode(g, "sqrt", {second}, w + "_root");
  AddNode(g, "div.Tensor", {w + "_root", "bc2_sqrt"}, w + "_root_scaled");
  WithFloat(AddNode(g, "add.Scalar", {w + "_root_scaled"}, w + "_denom"), "other", eps);
  AddNode(g, "mul.Tensor", {"step_size", w + "_m_new"}, w + "_step");
  AddNode(g, "div.Tensor", {w + "_step", w + "_denom"}, w + "_update");
  AddNode(g, "sub.Tensor", {p, w + "_update"}, w + "_new");
  AddUpdate(g, w + "_m", w + "_m_new");
  AddUpdate(g, w + "_v", w + "_v_new");
  AddUpdate(g, w, w + "_new");
}

// Persistent `name` of `shape` with values in [lo, hi).
void AddPersistentIn(Persistent& persistent, const std::string& name, v1::DType dtype, const Shape& shape,
                     std::mt19937_64& rng, double lo, double hi) {
  v1::Tensor* t = persistent.Add();
  AddSpec(t->mutable_spec(), name, dtype, shape);
  t->set_data(RandomBytes(dtype, NumElements(shape), rng, lo, hi));
}

// A 16-bit model's optimizer step (SGD with momentum, and every form of
// Adam the adaptor lowers) fuses into one node per parameter, reading the
// float32 step sizes as rank-0 inputs, and the fused graph computes the
// same bits as the unfused one.
TEST(FuseElementwiseTest, SixteenBitOptimizerStepsFuseIntoOneNodePerParameter) {
  std::mt19937_64 rng(half_test::TestSeed("fuse_elementwise_test"));
  const std::vector<std::pair<std::string, Shape>> params = {{"w1", {5, 7}}, {"w2", {300}}};
  for (v1::DType dtype : kHalfTypes) {
    SCOPED_TRACE(v1::DType_Name(dtype));
    {
      SCOPED_TRACE("sgd");
      v1::Graph g;
      Persistent persistent;
      AddSpec(g.add_feeds(), "lr", v1::FLOAT32, {});
      for (const auto& [w, shape] : params) {
        AddPersistent(persistent, w, dtype, shape, rng);
        AddPersistent(persistent, w + "_buf", dtype, shape, rng);
        AddSpec(g.add_feeds(), w + "_grad", dtype, shape);
        AddSgdStep(g, w);
      }
      const v1::Graph fused = FuseAndCompare(g, persistent, rng, 3, 0.01, 0.3);
      EXPECT_THAT(Ops(fused), ElementsAre(kFusedElementwiseOp, kFusedElementwiseOp));
      const v1::Node* node = Producer(fused, "w1_new");
      ASSERT_NE(node, nullptr);
      EXPECT_EQ(InputsOf(node), (Names{"w1_buf", "w1_grad", "lr", "w1"}));
      EXPECT_EQ(OutputsOf(node), (Names{"w1_buf_new", "w1_new"}));
    }
    for (int form = 0; form < 4; ++form) {
      const AdamOptions options{form % 2 == 1, form >= 2, form == 3};
      SCOPED_TRACE(::testing::Message() << "adam lerp=" << options.lerp_form << " decoupled_decay="
                                        << options.decoupled_decay << " amsgrad=" << options.amsgrad);
      v1::Graph g;
      Persistent persistent;
      for (const char* scalar : {"step_size", "bc2_sqrt", "decay"}) AddSpec(g.add_feeds(), scalar, v1::FLOAT32, {});
      for (const auto& [w, shape] : params) {
        AddPersistent(persistent, w, dtype, shape, rng);
        AddPersistent(persistent, w + "_m", dtype, shape, rng);
        AddPersistentIn(persistent, w + "_v", dtype, shape, rng, 0.0, 0.1);
        if (options.amsgrad) AddPersistentIn(persistent, w + "_vmax", dtype, shape, rng, 0.0, 0.1);
        AddSpec(g.add_feeds(), w + "_grad", dtype, shape);
        AddAdamStep(g, w, options);
      }
      // Step sizes and gradients of a real step's magnitude: positive
      // feeds in [0.01, 0.3) (bc2_sqrt, decay: positive too).
      const v1::Graph fused = FuseAndCompare(g, persistent, rng, 3, 0.01, 0.3);
      EXPECT_THAT(Ops(fused), ElementsAre(kFusedElementwiseOp, kFusedElementwiseOp));
      const v1::Node* node = Producer(fused, "w2_new");
      ASSERT_NE(node, nullptr);
      Names outputs = {"w2_m_new", "w2_v_new"};
      if (options.amsgrad) outputs.push_back("w2_vmax_new");
      outputs.push_back("w2_new");
      EXPECT_EQ(OutputsOf(node), outputs);
      EXPECT_EQ(node->inputs_size(), 5 + (options.decoupled_decay ? 1 : 0) + (options.amsgrad ? 1 : 0) + 1);
      for (const v1::TensorSpec& spec : node->declared_outputs()) EXPECT_EQ(spec.dtype(), dtype) << spec.name();
    }
  }
}

// Rank-0 values of a 16-bit type fuse only with inputs of that very type
// (a rank-0 fused node has no shaped input to fix its dtype); a float32
// chain never takes a 16-bit rank-0 input.
TEST(FuseElementwiseTest, SixteenBitDTypeMixesThatStayUnfused) {
  std::mt19937_64 rng(half_test::TestSeed("fuse_elementwise_test"));
  v1::Graph g;
  AddSpec(g.add_feeds(), "h", v1::BFLOAT16, {});
  AddSpec(g.add_feeds(), "f16", v1::FLOAT16, {});
  AddNode(g, "add.Tensor", {"h", "f16"}, "a");  // bfloat16[] from a float16[] operand
  AddNode(g, "neg", {"a"}, "b");
  AddSpec(g.add_feeds(), "x", v1::FLOAT32, {6});
  AddNode(g, "mul.Tensor", {"x", "h"}, "c");  // float32 from a bfloat16 rank-0 operand
  AddNode(g, "neg", {"c"}, "d");
  AddNode(g, "neg", {"h"}, "e");  // a bfloat16[] chain of bfloat16[] inputs does fuse
  AddNode(g, "mul.Tensor", {"e", "h"}, "f");
  for (const char* fetch : {"b", "d", "f"}) g.add_fetches(fetch);
  const v1::Graph fused = FuseAndCompare(g, {}, rng);
  EXPECT_THAT(Ops(fused), ElementsAre("add.Tensor", "neg", "mul.Tensor", "neg", kFusedElementwiseOp));
}

// Random 16-bit graphs of fusable and non-fusable nodes over one shape,
// with rank-0 operands of the 16-bit type, float32 and float64, maximum and
// minimum, NaN from sqrt of negatives, and random fetches: the fused graph
// must build and give the unfused graph's bits.
TEST(FuseElementwiseTest, RandomSixteenBitGraphsStayValidAndExact) {
  std::mt19937_64 rng(half_test::TestSeed("fuse_elementwise_test"));
  const RandomGraphOptions options{kHalfTypes,
                                   {3, 41},
                                   {"add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "maximum", "minimum"},
                                   {{"lr32", v1::FLOAT32}, {"lr64", v1::FLOAT64}, {"h", std::nullopt}},
                                   /*rank0_operand_odds=*/3,
                                   /*scalar_other=*/0.1};
  EXPECT_GT(RandomGraphsFuseExactly(options, rng), 20);  // the generator does make fusable chains
}

}  // namespace
}  // namespace tandem
