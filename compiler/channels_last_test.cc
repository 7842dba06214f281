#include "compiler/channels_last.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "compiler/compile_job.h"
#include "compiler/wire_graph_test_util.h"
#include "ir/graph_builder.h"

namespace tandem {
namespace {

using testing::AddNode;
using testing::AddSpec;
using testing::Contents;
using testing::Persistent;

void SetInts(v1::Node* n, const std::string& name, const std::vector<int64_t>& v) {
  for (int64_t x : v) (*n->mutable_attrs())[name].mutable_ints()->add_values(x);
}

v1::Node* Conv(v1::Graph& g, const std::string& x, const std::string& w, const std::string& out, int64_t pad) {
  v1::Node* n = AddNode(g, "convolution", {x, w}, out);
  SetInts(n, "stride", {1, 1});
  SetInts(n, "padding", {pad, pad});
  SetInts(n, "dilation", {1, 1});
  (*n->mutable_attrs())["groups"].set_i(1);
  return n;
}

// A small residual network's step, forward and backward, with a reader of
// every kind the pass knows: 3x3 and 1x1 convolutions, a batch norm and its
// ReLU, a residual add, a pooling (which stays channels-first), a mean over
// H and W and a flatten, a channel cat and slice, an expand of the pooled
// gradient, and both backward ops. x is [2, 3, 6, 5] of `dtype`.
v1::Graph Step(v1::DType dtype) {
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", dtype, {2, 3, 6, 5});
  AddSpec(g.add_feeds(), "w1", dtype, {8, 3, 3, 3});
  AddSpec(g.add_feeds(), "w2", dtype, {8, 8, 1, 1});
  for (const char* name : {"bw", "bb", "rm", "rv"}) AddSpec(g.add_feeds(), name, dtype, {8});
  AddSpec(g.add_feeds(), "gy", dtype, {2, 8, 6, 5});
  AddSpec(g.add_feeds(), "gp", dtype, {2, 8});
  Conv(g, "x", "w1", "c1", 1);
  v1::Node* bn = g.add_nodes();
  bn->set_op("_native_batch_norm_legit_functional");
  for (const char* in : {"c1", "bw", "bb", "rm", "rv"}) bn->add_inputs(in);
  for (const char* out : {"y", "mean", "invstd", "rm2", "rv2"}) bn->add_outputs(out);
  (*bn->mutable_attrs())["training"].set_b(true);
  (*bn->mutable_attrs())["momentum"].set_f(0.1);
  (*bn->mutable_attrs())["eps"].set_f(1e-5);
  AddNode(g, "relu", {"y"}, "r");
  Conv(g, "r", "w2", "c2", 0);
  AddNode(g, "add.Tensor", {"c2", "r"}, "res");
  v1::Node* mean = AddNode(g, "mean.dim", {"res"}, "pooled");
  SetInts(mean, "dim", {-1, -2});
  (*mean->mutable_attrs())["keepdim"].set_b(true);
  SetInts(AddNode(g, "view", {"pooled"}, "flat"), "size", {2, 8});
  v1::Node* mp = g.add_nodes();
  mp->set_op("max_pool2d_with_indices");
  mp->add_inputs("res");
  mp->add_outputs("mp");
  mp->add_outputs("mp_indices");
  SetInts(mp, "kernel_size", {2, 2});
  (*AddNode(g, "cat", {"c1", "c2"}, "both")->mutable_attrs())["dim"].set_i(1);
  v1::Node* slice = AddNode(g, "slice_copy.Tensor", {"both"}, "part");
  (*slice->mutable_attrs())["dim"].set_i(1);
  (*slice->mutable_attrs())["start"].set_i(4);
  (*slice->mutable_attrs())["end"].set_i(12);
  // Backward: the pooled gradient expanded over H and W, through the
  // residual, the ReLU, the batch norm and the first convolution.
  SetInts(AddNode(g, "view", {"gp"}, "gp4"), "size", {2, 8, 1, 1});
  SetInts(AddNode(g, "expand_copy", {"gp4"}, "gpe"), "size", {2, 8, 6, 5});
  AddNode(g, "add.Tensor", {"gpe", "gy"}, "gsum");
  v1::Node* c2b = g.add_nodes();
  c2b->set_op("convolution_backward");
  for (const char* in : {"gsum", "r", "w2"}) c2b->add_inputs(in);
  for (const char* out : {"gr2", "gw2", "gb2"}) c2b->add_outputs(out);
  SetInts(c2b, "stride", {1, 1});
  SetInts(c2b, "padding", {0, 0});
  SetInts(c2b, "dilation", {1, 1});
  SetInts(c2b, "output_mask", {1, 1, 0});
  (*c2b->mutable_attrs())["groups"].set_i(1);
  AddNode(g, "add.Tensor", {"gr2", "gsum"}, "gr");
  (*AddNode(g, "threshold_backward", {"gr", "r"}, "gm")->mutable_attrs())["threshold"].set_f(0.0);
  v1::Node* back = g.add_nodes();
  back->set_op("native_batch_norm_backward");
  for (const char* in : {"gm", "c1", "bw", "rm", "rv", "mean", "invstd"}) back->add_inputs(in);
  for (const char* out : {"gc1", "gbw", "gbb"}) back->add_outputs(out);
  (*back->mutable_attrs())["train"].set_b(true);
  (*back->mutable_attrs())["eps"].set_f(1e-5);
  v1::Node* c1b = g.add_nodes();
  c1b->set_op("convolution_backward");
  for (const char* in : {"gc1", "x", "w1"}) c1b->add_inputs(in);
  for (const char* out : {"gx", "gw1", "gb1"}) c1b->add_outputs(out);
  SetInts(c1b, "stride", {1, 1});
  SetInts(c1b, "padding", {1, 1});
  SetInts(c1b, "dilation", {1, 1});
  (*c1b->mutable_attrs())["groups"].set_i(1);
  for (const char* f :
       {"c1", "flat", "mp", "mp_indices", "part", "gw2", "gx", "gw1", "gb1", "gbw", "gbb", "rm2", "rv2"}) {
    g.add_fetches(f);
  }
  return g;
}

int Count(const v1::Graph& g, const std::string& op) {
  int n = 0;
  for (const v1::Node& node : g.nodes()) n += node.op() == op;
  return n;
}

bool ChannelsLastAttr(const v1::Node& n) {
  auto it = n.attrs().find("channels_last");
  return it != n.attrs().end() && it->second.b();
}

// The declared shape of each output of `g`'s nodes, by name.
std::map<std::string, std::string> DeclaredShapes(const v1::Graph& g) {
  std::map<std::string, std::string> shapes;
  for (const v1::Node& n : g.nodes()) {
    for (int o = 0; o < n.outputs_size() && o < n.declared_outputs_size(); ++o) {
      shapes[n.outputs(o)] = n.declared_outputs(o).DebugString();
    }
  }
  return shapes;
}

// Every fetch of `last` (`g` rewritten) equals `g`'s, bit for bit, on the
// CPU with random feeds drawn from `seed`.
void ExpectSameFetches(const v1::Graph& g, const v1::Graph& last, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Contents feeds = testing::RandomFeeds(g, rng, {});
  auto want = testing::RunWireGraphOnCpu(g, Persistent(), feeds);
  auto got = testing::RunWireGraphOnCpu(last, Persistent(), feeds);
  ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
  for (const std::string& fetch : g.fetches()) {
    ASSERT_EQ(got->count(fetch), 1u) << fetch;
    EXPECT_TRUE(got->at(fetch) == want->at(fetch)) << fetch << " differs channels-last";
  }
}

// The rewritten step computes what the step computes: on the CPU every
// channels-last node runs its channels-first kernel on permuted copies, and
// a channels-last batch norm sums each channel in the same order, so every
// fetch agrees bit for bit.
TEST(ChannelsLastTest, AResidualStepComputesTheSameBitForBit) {
  const v1::Graph g = Step(v1::FLOAT32);
  auto last = testing::ApplyPass(g, Persistent(), ChannelsLast);
  ASSERT_TRUE(last.ok()) << last.status();
  // Fetched values keep their types (bytes alone would not tell a view of
  // the wrong shape).
  auto normalized = testing::Normalized(g, Persistent());
  ASSERT_TRUE(normalized.ok()) << normalized.status();
  const auto want_shapes = DeclaredShapes(*normalized), got_shapes = DeclaredShapes(*last);
  for (const std::string& fetch : g.fetches()) {
    if (want_shapes.count(fetch) == 0) continue;  // a feed
    EXPECT_EQ(got_shapes.count(fetch) ? got_shapes.at(fetch) : "", want_shapes.at(fetch)) << fetch;
  }
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2; ++trial) {
    const Contents feeds = testing::RandomFeeds(g, rng, {"rv"});
    auto want = testing::RunWireGraphOnCpu(g, Persistent(), feeds);
    auto got = testing::RunWireGraphOnCpu(*last, Persistent(), feeds);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status() << "\n" << last->DebugString();
    for (const std::string& fetch : g.fetches()) {
      ASSERT_EQ(got->count(fetch), 1u) << fetch;
      EXPECT_TRUE(got->at(fetch) == want->at(fetch)) << fetch << " differs channels-last";
    }
  }
}

// What runs channels-last, and how few relayouts it takes: permutes of the
// feeds x and gy into channels-last, of the 3x3 weight once (read by its
// forward and backward), and back for the six fetched rank-4 values (c1,
// the pooling's output and indices, part, gx and the 3x3 weight's
// gradient, permuted back right after its backward); the 1x1 weight and
// its gradient need none (a 1x1 kernel's weight is read channels-first),
// the pooled mean and the pooled gradient relayout as views (besides the
// step's own two views).
TEST(ChannelsLastTest, TheConvolutionsAndTheirNeighboursRunChannelsLast) {
  auto last = testing::ApplyPass(Step(v1::FLOAT32), Persistent(), ChannelsLast);
  ASSERT_TRUE(last.ok()) << last.status();
  for (const v1::Node& n : last->nodes()) {
    const bool layout_op = n.op() == "convolution" || n.op() == "convolution_backward" ||
                           n.op() == "_native_batch_norm_legit_functional" || n.op() == "native_batch_norm_backward" ||
                           n.op() == "max_pool2d_with_indices";
    if (layout_op) {
      EXPECT_TRUE(ChannelsLastAttr(n)) << n.DebugString();
    }
    if (n.op() == "cat" || n.op() == "slice_copy.Tensor") {
      EXPECT_EQ(n.attrs().at("dim").i(), 3) << n.DebugString();
    }
  }
  EXPECT_EQ(Count(*last, "permute"), 2 + 1 + 6) << last->DebugString();
  EXPECT_EQ(Count(*last, "view"), 2 + 2);
}

// A constant (fill.Scalar, *_like, full) reads no data, so it is made in
// the layout its reader wants instead of being made channels-first and
// permuted: SiLU's backward `1 - sigmoid(c)` (a fill shaped like c) beside
// a channels-last c costs no relayout, and a fetched constant stays
// channels-first. A comparison and a where (Hardswish's backward) follow
// the layout like any elementwise op. Here: permutes of x and the 3x3
// weight in, and of d and h back for their fetches; a channels-last full
// for the sub and the where, a channels-first one for the fetch of f and
// for the view.
TEST(ChannelsLastTest, AConstantIsMadeInTheLayoutItsReaderWants) {
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", v1::FLOAT32, {2, 3, 6, 5});
  AddSpec(g.add_feeds(), "w", v1::FLOAT32, {8, 3, 3, 3});
  Conv(g, "x", "w", "c", 1);
  AddNode(g, "sigmoid", {"c"}, "s");
  (*AddNode(g, "fill.Scalar", {"s"}, "f")->mutable_attrs())["value"].set_f(1.0);
  AddNode(g, "sub.Tensor", {"f", "s"}, "d");
  (*AddNode(g, "lt.Scalar", {"c"}, "m")->mutable_attrs())["other"].set_f(-0.5);
  AddNode(g, "where.self", {"m", "f", "s"}, "h");
  AddNode(g, "zeros_like", {"c"}, "z");
  SetInts(AddNode(g, "view", {"z"}, "zv"), "size", {2, 240});
  for (const char* f : {"d", "f", "zv", "h"}) g.add_fetches(f);
  auto last = testing::ApplyPass(g, Persistent(), ChannelsLast);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(Count(*last, "permute"), 4) << last->DebugString();
  EXPECT_EQ(Count(*last, "fill.Scalar") + Count(*last, "zeros_like"), 0);
  std::vector<std::vector<int64_t>> full_sizes;
  for (const v1::Node& n : last->nodes()) {
    if (n.op() != "full") continue;
    const auto& size = n.attrs().at("size").ints().values();
    full_sizes.emplace_back(size.begin(), size.end());
  }
  EXPECT_THAT(full_sizes,
              ::testing::UnorderedElementsAre(std::vector<int64_t>{2, 6, 5, 8}, std::vector<int64_t>{2, 8, 6, 5},
                                              std::vector<int64_t>{2, 8, 6, 5}))
      << last->DebugString();
  ExpectSameFetches(g, *last, 11);
}

TEST(ChannelsLastTest, AGraphWithoutConvolutionsOrInFloat64IsUnchanged) {
  v1::Graph mlp;
  AddSpec(mlp.add_feeds(), "x", v1::FLOAT32, {2, 3, 4, 5});
  AddNode(mlp, "relu", {"x"}, "y");
  mlp.add_fetches("y");
  auto normalized = testing::Normalized(mlp, Persistent());
  auto passed = testing::ApplyPass(mlp, Persistent(), ChannelsLast);
  ASSERT_TRUE(normalized.ok() && passed.ok());
  EXPECT_EQ(passed->DebugString(), normalized->DebugString());

  const v1::Graph doubles = Step(v1::FLOAT64);
  auto normalized64 = testing::Normalized(doubles, Persistent());
  auto passed64 = testing::ApplyPass(doubles, Persistent(), ChannelsLast);
  ASSERT_TRUE(normalized64.ok() && passed64.ok()) << passed64.status();
  EXPECT_EQ(Count(*passed64, "permute"), 0);
}

// CompileJob runs the pass when asked (the daemon asks for jobs on GPUs),
// before the activation folding, which keeps the attribute.
TEST(ChannelsLastTest, CompileJobRunsItBeforeTheFolds) {
  v1::RegisterJobRequest reg;
  *reg.mutable_graph() = Step(v1::FLOAT32);
  auto plain = CompileJob(reg);
  auto last = CompileJob(reg, {.channels_last = true});
  ASSERT_TRUE(plain.ok() && last.ok()) << last.status();
  int folded = 0, folded_last = 0;
  for (const Node& n : last->graph.nodes) {
    if (n.op == "_native_batch_norm_legit_functional" && n.attrs.GetBool("relu", false).value_or(false)) {
      ++folded;
      folded_last += n.attrs.GetBool("channels_last", false).value_or(false);
    }
  }
  EXPECT_EQ(folded, 1);
  EXPECT_EQ(folded_last, 1);
  for (const Node& n : plain->graph.nodes) EXPECT_FALSE(n.attrs.Has("channels_last")) << n.op;
}

// Two 3x3 convolutions, an image [4, 3, 12, 12] to 16 channels and 16 to
// 16, their weights persistent, and the mean of the result fetched; with
// `shuffle` the network moves its channels itself between them
// (ShuffleNet's channel shuffle: a view to [N, 2, 8, H, W], a transpose of
// the groups, a view back), which the pass reads channels-first: a
// relayout of the activation each way.
v1::RegisterJobRequest TwoConvolutions(bool shuffle) {
  v1::RegisterJobRequest reg;
  v1::Graph& g = *reg.mutable_graph();
  AddSpec(g.add_feeds(), "x", v1::FLOAT32, {4, 3, 12, 12});
  for (const auto& [name, shape] : {std::pair<const char*, Shape>{"w1", {16, 3, 3, 3}}, {"w2", {16, 16, 3, 3}}}) {
    v1::Tensor* w = reg.add_persistent();
    AddSpec(w->mutable_spec(), name, v1::FLOAT32, shape);
    w->set_data(std::string(4 * shape[0] * shape[1] * shape[2] * shape[3], '\0'));
  }
  Conv(g, "x", "w1", "c1", 1);
  AddNode(g, "relu", {"c1"}, "r");
  std::string between = "r";
  if (shuffle) {
    SetInts(AddNode(g, "view", {"r"}, "groups"), "size", {4, 2, 8, 12, 12});
    v1::Node* t = AddNode(g, "transpose_copy.int", {"groups"}, "swapped");
    (*t->mutable_attrs())["dim0"].set_i(1);
    (*t->mutable_attrs())["dim1"].set_i(2);
    SetInts(AddNode(g, "view", {"swapped"}, "shuffled"), "size", {4, 16, 12, 12});
    between = "shuffled";
  }
  Conv(g, between, "w2", "c2", 1);
  SetInts(AddNode(g, "mean.dim", {"c2"}, "m"), "dim", {1, 2, 3});
  g.add_fetches("m");
  return reg;
}

// A depthwise convolution with a window over 5x5 (ConvNeXt's 7x7) stays
// channels-first, its backward too: cuDNN's NHWC kernels for it measured
// slower; a 3x3 depthwise one runs channels-last.
TEST(ChannelsLastTest, ALargeDepthwiseWindowStaysChannelsFirst) {
  for (int64_t k : {7, 3}) {
    SCOPED_TRACE(k);
    v1::Graph g;
    AddSpec(g.add_feeds(), "x", v1::FLOAT32, {2, 8, 9, 9});
    AddSpec(g.add_feeds(), "w", v1::FLOAT32, {8, 1, k, k});
    AddSpec(g.add_feeds(), "gy", v1::FLOAT32, {2, 8, 9, 9});
    (*Conv(g, "x", "w", "y", k / 2)->mutable_attrs())["groups"].set_i(8);
    v1::Node* back = g.add_nodes();
    back->set_op("convolution_backward");
    for (const char* in : {"gy", "x", "w"}) back->add_inputs(in);
    for (const char* out : {"gx", "gw", "gb"}) back->add_outputs(out);
    SetInts(back, "stride", {1, 1});
    SetInts(back, "padding", {k / 2, k / 2});
    SetInts(back, "dilation", {1, 1});
    SetInts(back, "output_mask", {1, 1, 0});
    (*back->mutable_attrs())["groups"].set_i(8);
    for (const char* f : {"y", "gx", "gw"}) g.add_fetches(f);
    auto last = testing::ApplyPass(g, Persistent(), ChannelsLast);
    ASSERT_TRUE(last.ok()) << last.status();
    int channels_last = 0;
    for (const v1::Node& n : last->nodes()) channels_last += ChannelsLastAttr(n);
    EXPECT_EQ(channels_last, k == 7 ? 0 : 2) << last->DebugString();
    ExpectSameFetches(g, *last, 17);
  }
}

// ConvNeXt's and Swin's own permutes, to [N, H, W, C] before a LayerNorm
// and back after it, cost nothing channels-last: the first of a value
// computed channels-last is a view of its twin, and the second's input is
// the result's twin. Here conv -> relu -> permute -> neg -> permute back ->
// a layer scale and a row bias -> conv: the only permutes are the image's,
// the two 3x3 weights' and the fetched results' way back (the network's own
// two are views), and every fetch is bit-identical.
TEST(ChannelsLastTest, ANetworksOwnMoveToChannelsLastIsAView) {
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", v1::FLOAT32, {2, 3, 6, 5});
  AddSpec(g.add_feeds(), "w1", v1::FLOAT32, {8, 3, 3, 3});
  AddSpec(g.add_feeds(), "w2", v1::FLOAT32, {8, 8, 3, 3});
  AddSpec(g.add_feeds(), "scale", v1::FLOAT32, {8, 1, 1});
  AddSpec(g.add_feeds(), "row", v1::FLOAT32, {5});
  Conv(g, "x", "w1", "c1", 1);
  AddNode(g, "relu", {"c1"}, "r");
  SetInts(AddNode(g, "permute", {"r"}, "nhwc"), "dims", {0, 2, 3, 1});
  AddNode(g, "neg", {"nhwc"}, "n");
  SetInts(AddNode(g, "permute", {"n"}, "nchw"), "dims", {0, 3, 1, 2});
  // Lower-rank broadcast operands follow as views: a layer scale [C, 1, 1]
  // and a [W] row.
  AddNode(g, "mul.Tensor", {"nchw", "scale"}, "scaled");
  AddNode(g, "add.Tensor", {"scaled", "row"}, "shifted");
  Conv(g, "shifted", "w2", "c2", 1);
  for (const char* f : {"c2", "nhwc", "nchw"}) g.add_fetches(f);
  auto last = testing::ApplyPass(g, Persistent(), ChannelsLast);
  ASSERT_TRUE(last.ok()) << last.status();
  // x, w1, w2 in; c2 and nchw back for their fetches (nhwc is a view).
  EXPECT_EQ(Count(*last, "permute"), 5) << last->DebugString();
  ExpectSameFetches(g, *last, 13);
}

// What the layout costs against what it is for: a chain of convolutions
// relays out only its image, one that shuffles its own channels also an
// activation each way; auto (a limit) keeps such a graph channels-first,
// true (no limit) rewrites it anyway.
TEST(ChannelsLastTest, AutoKeepsAGraphThatMovesItsOwnChannelsChannelsFirst) {
  for (bool own : {false, true}) {
    SCOPED_TRACE(own ? "a channel shuffle" : "a plain chain");
    const v1::RegisterJobRequest reg = TwoConvolutions(own);
    auto unlimited = CompileJob(reg, {.channels_last = true});
    auto limited = CompileJob(reg, {.channels_last = true, .channels_last_max_relayout_share = 0.1});
    ASSERT_TRUE(unlimited.ok() && limited.ok()) << unlimited.status() << limited.status();
    // Activations of 16 channels are A; the convolutions read and write
    // 3/16 A + A and A + A; the pass relays out the image (3/16 A), and
    // with the shuffle the ReLU's output back and the shuffled one forth.
    EXPECT_NEAR(ChannelsLastRelayoutShare(unlimited->graph), (own ? 2.1875 : 0.1875) / 3.1875, 1e-9);
    EXPECT_DOUBLE_EQ(limited->channels_last_relayout_share, ChannelsLastRelayoutShare(unlimited->graph));
    auto channels_last = [](const CompiledJob& job) {
      int n = 0;
      for (const Node& node : job.graph.nodes) n += node.attrs.GetBool("channels_last", false).value_or(false);
      return n;
    };
    EXPECT_EQ(channels_last(*unlimited), 2);
    EXPECT_EQ(channels_last(*limited), own ? 0 : 2);
  }
}

}  // namespace
}  // namespace tandem
