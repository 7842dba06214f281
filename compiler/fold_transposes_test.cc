// FoldTransposes: which transposes fold into which products, which ones are
// removed, what is left alone, and that the folded graph computes exactly
// (bit for bit) what the unfolded one does on the CPU backend.
#include "compiler/fold_transposes.h"

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "compiler/wire_graph_test_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "ir/graph_builder.h"
#include "kernels/cpu/cpu_program.h"
#include "tandem.pb.h"

namespace tandem {
namespace {

using google::protobuf::util::MessageDifferencer;
using testing::AddNode;
using testing::AddSpec;
using testing::Contents;
using testing::Persistent;

void SetBool(v1::Node* node, const std::string& name, bool value) { (*node->mutable_attrs())[name].set_b(value); }

// `g` folded (built without persistent tensors unless given), in wire form.
v1::Graph Folded(const v1::Graph& g, const Persistent& persistent = {}) {
  auto folded = testing::ApplyPass(g, persistent, FoldTransposes);
  EXPECT_TRUE(folded.ok()) << folded.status();
  return folded.ok() ? *std::move(folded) : g;
}

// The node that defines `output`, or null.
const v1::Node* Producer(const v1::Graph& g, const std::string& output) {
  for (const v1::Node& node : g.nodes()) {
    for (const std::string& out : node.outputs()) {
      if (out == output) return &node;
    }
  }
  return nullptr;
}

std::vector<std::string> InputsOf(const v1::Node* node) {
  if (node == nullptr) return {};
  return {node->inputs().begin(), node->inputs().end()};
}

// "absent", "true", "false" or "not a bool".
std::string Flag(const v1::Node* node, const std::string& attr) {
  if (node == nullptr) return "no node";
  auto it = node->attrs().find(attr);
  if (it == node->attrs().end()) return "absent";
  if (it->second.value_case() != v1::AttrValue::kB) return "not a bool";
  return it->second.b() ? "true" : "false";
}

int CountTransposes(const v1::Graph& g) {
  int count = 0;
  for (const v1::Node& node : g.nodes()) count += node.op() == "t" || node.op() == "t_copy";
  return count;
}

// A training-step-like graph with every case the pass distinguishes; each
// product's comment says what folding must make of it.
v1::Graph EveryCase(v1::DType dtype) {
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", dtype, {5, 4});
  AddSpec(g.add_feeds(), "g", dtype, {5, 3});
  AddSpec(g.add_feeds(), "e", dtype, {2, 5});
  AddSpec(g.add_feeds(), "c", dtype, {6, 2});
  // Persistent: W1 [6, 4], b1 [6], W2 [3, 6], P [4, 6].
  AddNode(g, "t", {"W1"}, "W1t");
  AddNode(g, "addmm", {"b1", "x", "W1t"}, "h");  // addmm(b1, x, W1, transpose_b)
  AddNode(g, "relu", {"h"}, "a");
  AddNode(g, "t_copy", {"W2"}, "W2t");
  AddNode(g, "mm", {"a", "W2t"}, "z");  // mm(a, W2, transpose_b)
  AddNode(g, "t", {"a"}, "at");
  AddNode(g, "mm", {"at", "g"}, "gW2t");  // mm(a, g, transpose_a)
  AddNode(g, "t", {"x"}, "xt");           // also read by relu: stays
  AddNode(g, "mm", {"xt", "h"}, "xh");    // mm(x, h, transpose_a)
  AddNode(g, "relu", {"xt"}, "xt_relu");
  AddNode(g, "t", {"g"}, "gt");         // fetched: stays
  AddNode(g, "mm", {"gt", "a"}, "ga");  // mm(g, a, transpose_a)
  AddNode(g, "t", {"W1"}, "W1t2");
  AddNode(g, "t", {"W1t2"}, "W1tt");
  AddNode(g, "mm", {"h", "W1tt"}, "hw");  // mm(h, W1): two transposes cancel
  AddNode(g, "t", {"x"}, "xt3");
  SetBool(AddNode(g, "mm", {"xt3", "W1t"}, "xw"), "transpose_a", true);  // mm(x, W1, transpose_b)
  AddNode(g, "t", {"W1"}, "P_new");                                      // the value of an update: stays
  AddNode(g, "mm", {"x", "P_new"}, "xp");                                // mm(x, W1, transpose_b)
  AddNode(g, "t", {"h"}, "ht");
  AddNode(g, "t", {"e"}, "et");
  v1::Node* hc = AddNode(g, "addmm", {"c", "ht", "et"}, "hc");  // addmm(c, h, e, both transposed)
  (*hc->mutable_attrs())["beta"].set_f(0.5);
  (*hc->mutable_attrs())["alpha"].set_f(2.0);
  for (const char* f : {"h", "z", "gW2t", "xh", "xt_relu", "gt", "ga", "hw", "xw", "xp", "hc"}) g.add_fetches(f);
  v1::Update* update = g.add_updates();
  update->set_persistent("P");
  update->set_value("P_new");
  return g;
}

std::string RandomBytes(v1::DType dtype, int64_t numel, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::string bytes;
  for (int64_t i = 0; i < numel; ++i) {
    const double value = normal(rng);
    if (dtype == v1::FLOAT64) {
      bytes.append(reinterpret_cast<const char*>(&value), sizeof(value));
    } else {
      const float narrow = static_cast<float>(value);
      bytes.append(reinterpret_cast<const char*>(&narrow), sizeof(narrow));
    }
  }
  return bytes;
}

Persistent RandomPersistent(v1::DType dtype, std::mt19937_64& rng) {
  Persistent persistent;
  for (const auto& [name, shape] :
       std::vector<std::pair<std::string, Shape>>{{"W1", {6, 4}}, {"b1", {6}}, {"W2", {3, 6}}, {"P", {4, 6}}}) {
    v1::Tensor* t = persistent.Add();
    AddSpec(t->mutable_spec(), name, dtype, shape);
    t->set_data(RandomBytes(dtype, NumElements(shape), rng));
  }
  return persistent;
}

TEST(FoldTransposesTest, FoldsEveryTransposeFeedingAProductAndRemovesTheUnusedOnes) {
  v1::Graph g = EveryCase(v1::FLOAT64);
  ASSERT_EQ(g.nodes_size(), 22);
  std::mt19937_64 rng(1);
  g = Folded(g, RandomPersistent(v1::FLOAT64, rng));

  // Left: the transpose also read by relu, the fetched one, the updated one.
  EXPECT_EQ(CountTransposes(g), 3);
  EXPECT_EQ(g.nodes_size(), 14);
  for (const char* kept : {"xt", "gt", "P_new"}) {
    ASSERT_NE(Producer(g, kept), nullptr) << kept;
    EXPECT_EQ(Producer(g, kept)->op(), "t") << kept;
  }
  for (const char* gone : {"W1t", "W2t", "at", "W1t2", "W1tt", "xt3", "ht", "et"}) {
    EXPECT_EQ(Producer(g, gone), nullptr) << gone;
  }

  using Inputs = std::vector<std::string>;
  const v1::Node* h = Producer(g, "h");
  EXPECT_EQ(InputsOf(h), (Inputs{"b1", "x", "W1"}));
  EXPECT_EQ(Flag(h, "transpose_a"), "absent");
  EXPECT_EQ(Flag(h, "transpose_b"), "true");
  const v1::Node* z = Producer(g, "z");
  EXPECT_EQ(InputsOf(z), (Inputs{"a", "W2"}));
  EXPECT_EQ(Flag(z, "transpose_b"), "true");
  const v1::Node* g_w2t = Producer(g, "gW2t");
  EXPECT_EQ(InputsOf(g_w2t), (Inputs{"a", "g"}));
  EXPECT_EQ(Flag(g_w2t, "transpose_a"), "true");
  EXPECT_EQ(Flag(g_w2t, "transpose_b"), "absent");
  const v1::Node* xh = Producer(g, "xh");
  EXPECT_EQ(InputsOf(xh), (Inputs{"x", "h"}));
  EXPECT_EQ(Flag(xh, "transpose_a"), "true");
  EXPECT_EQ(InputsOf(Producer(g, "xt_relu")), (Inputs{"xt"}));
  const v1::Node* ga = Producer(g, "ga");
  EXPECT_EQ(InputsOf(ga), (Inputs{"g", "a"}));
  EXPECT_EQ(Flag(ga, "transpose_a"), "true");
  const v1::Node* hw = Producer(g, "hw");
  EXPECT_EQ(InputsOf(hw), (Inputs{"h", "W1"}));
  EXPECT_EQ(Flag(hw, "transpose_a"), "absent");
  EXPECT_EQ(Flag(hw, "transpose_b"), "absent");
  const v1::Node* xw = Producer(g, "xw");
  EXPECT_EQ(InputsOf(xw), (Inputs{"x", "W1"}));
  EXPECT_EQ(Flag(xw, "transpose_a"), "false");
  EXPECT_EQ(Flag(xw, "transpose_b"), "true");
  const v1::Node* xp = Producer(g, "xp");
  EXPECT_EQ(InputsOf(xp), (Inputs{"x", "W1"}));
  EXPECT_EQ(Flag(xp, "transpose_b"), "true");
  const v1::Node* hc = Producer(g, "hc");
  EXPECT_EQ(InputsOf(hc), (Inputs{"c", "h", "e"}));
  EXPECT_EQ(Flag(hc, "transpose_a"), "true");
  EXPECT_EQ(Flag(hc, "transpose_b"), "true");
  ASSERT_NE(hc, nullptr);
  EXPECT_EQ(hc->attrs().at("beta").f(), 0.5);
  EXPECT_EQ(hc->attrs().at("alpha").f(), 2.0);
  EXPECT_EQ(hc->label(), "hc");

  // The kept nodes keep their order.
  std::vector<std::string> order;
  for (const v1::Node& node : g.nodes()) order.push_back(node.outputs(0));
  EXPECT_EQ(order, (Inputs{"h", "a", "z", "gW2t", "xt", "xh", "xt_relu", "gt", "ga", "hw", "xw", "P_new", "xp", "hc"}));
  // Fetches and updates are untouched.
  EXPECT_EQ(g.fetches_size(), 11);
  ASSERT_EQ(g.updates_size(), 1);
  EXPECT_EQ(g.updates(0).value(), "P_new");
}

class FoldTransposesRunTest : public ::testing::TestWithParam<v1::DType> {};

TEST_P(FoldTransposesRunTest, FoldedGraphComputesBitForBitTheSameOnTheCpu) {
  const v1::DType dtype = GetParam();
  std::mt19937_64 rng(dtype == v1::FLOAT64 ? 11 : 12);
  const v1::Graph original = EveryCase(dtype);
  const Persistent persistent = RandomPersistent(dtype, rng);
  const v1::Graph folded = Folded(original, persistent);
  ASSERT_LT(folded.nodes_size(), original.nodes_size());

  for (int trial = 0; trial < 3; ++trial) {
    Contents feeds;
    for (const v1::TensorSpec& feed : original.feeds()) {
      feeds[feed.name()] = RandomBytes(dtype, NumElements({feed.shape().begin(), feed.shape().end()}), rng);
    }
    auto expected = testing::RunWireGraphOnCpu(original, persistent, feeds);
    ASSERT_TRUE(expected.ok()) << expected.status();
    auto actual = testing::RunWireGraphOnCpu(folded, persistent, feeds);
    ASSERT_TRUE(actual.ok()) << actual.status();
    ASSERT_EQ(actual->size(), expected->size());
    ASSERT_EQ(actual->size(), 15u);  // 11 fetches, 4 persistent tensors
    for (const auto& [name, bytes] : *expected) {
      ASSERT_EQ(actual->count(name), 1u) << name;
      EXPECT_TRUE(actual->at(name) == bytes) << name << " differs after folding";
      EXPECT_NE(bytes, std::string(bytes.size(), '\0')) << name << " is all zeros: the check would be vacuous";
    }
    // The update, whose value is a transpose that stays, wrote W1^T into P.
    const size_t element = dtype == v1::FLOAT64 ? 8 : 4;
    const std::string& w1 = persistent.Get(0).data();
    const std::string& p = actual->at("P");
    ASSERT_EQ(p.size(), w1.size());
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 6; ++j) {
        EXPECT_EQ(p.substr((i * 6 + j) * element, element), w1.substr((j * 4 + i) * element, element))
            << "P[" << i << ", " << j << "]";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FoldTransposesRunTest, ::testing::Values(v1::FLOAT64, v1::FLOAT32),
                         [](const auto& info) { return info.param == v1::FLOAT64 ? "Float64" : "Float32"; });

TEST(FoldTransposesTest, FoldingIsDeterministicAndIdempotent) {
  std::mt19937_64 rng(1);
  const Persistent persistent = RandomPersistent(v1::FLOAT32, rng);
  const v1::Graph once = Folded(EveryCase(v1::FLOAT32), persistent);
  const v1::Graph again = Folded(EveryCase(v1::FLOAT32), persistent);
  EXPECT_TRUE(MessageDifferencer::Equals(once, again));
  const v1::Graph twice = Folded(once, persistent);
  EXPECT_TRUE(MessageDifferencer::Equals(twice, once)) << twice.DebugString();
}

// Graphs the pass must leave exactly as they are.
void ExpectUnchanged(const v1::Graph& g, const std::string& why) {
  const v1::Graph folded = Folded(g);
  auto original = testing::Normalized(g, {});
  ASSERT_TRUE(original.ok()) << original.status();
  EXPECT_TRUE(MessageDifferencer::Equals(folded, *original)) << why << "\nafter folding:\n" << folded.DebugString();
}

v1::Graph WithFeeds() {
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", v1::FLOAT64, {3, 4});
  AddSpec(g.add_feeds(), "w", v1::FLOAT64, {3, 5});
  return g;
}

TEST(FoldTransposesTest, LeavesTransposesThatFeedNoProduct) {
  v1::Graph g = WithFeeds();
  AddSpec(g.add_feeds(), "a", v1::FLOAT64, {4, 2});
  AddSpec(g.add_feeds(), "b", v1::FLOAT64, {2, 3});
  AddNode(g, "t", {"x"}, "dead");  // unused from the start
  AddNode(g, "t", {"x"}, "xt");
  AddNode(g, "relu", {"xt"}, "r");
  AddNode(g, "addmm", {"xt", "a", "b"}, "bias_is_no_matrix_operand");  // xt [4, 3] is the bias
  g.add_fetches("r");
  ExpectUnchanged(g, "no transpose feeds a matrix operand");
}

// A traced linear layer's weight gradient comes out as t(t(mm(...))): the
// even chain is the product itself, so whatever reads it reads the product.
TEST(FoldTransposesTest, AnEvenChainFeedingAnyOpIsReadAtItsSource) {
  v1::Graph g = WithFeeds();
  AddNode(g, "t", {"x"}, "xt");
  AddNode(g, "t", {"xt"}, "xtt");
  AddNode(g, "add.Tensor", {"xtt", "x"}, "sum");
  AddNode(g, "t", {"w"}, "wt");  // odd: relu reads a real transpose
  AddNode(g, "relu", {"wt"}, "r");
  g.add_fetches("sum");
  g.add_fetches("r");
  const v1::Graph original = g;
  g = Folded(g);
  EXPECT_EQ(InputsOf(Producer(g, "sum")), (std::vector<std::string>{"x", "x"}));
  EXPECT_EQ(Producer(g, "xt"), nullptr);
  EXPECT_EQ(Producer(g, "xtt"), nullptr);
  EXPECT_EQ(InputsOf(Producer(g, "r")), (std::vector<std::string>{"wt"}));
  EXPECT_EQ(CountTransposes(g), 1);
  std::mt19937_64 rng(5);
  const Contents feeds = {{"x", RandomBytes(v1::FLOAT64, 12, rng)}, {"w", RandomBytes(v1::FLOAT64, 15, rng)}};
  auto expected = testing::RunWireGraphOnCpu(original, {}, feeds);
  ASSERT_TRUE(expected.ok()) << expected.status();
  auto actual = testing::RunWireGraphOnCpu(g, {}, feeds);
  ASSERT_TRUE(actual.ok()) << actual.status();
  EXPECT_TRUE(*expected == *actual);
}

v1::Node* AddPermute(v1::Graph& g, const std::string& input, const std::string& output,
                     const std::vector<int64_t>& dims) {
  v1::Node* node = AddNode(g, "permute", {input}, output);
  for (int64_t d : dims) (*node->mutable_attrs())["dims"].mutable_ints()->add_values(d);
  return node;
}

// A linear layer's step as torch >= 2.1 traces it, where the core
// decompositions write every `t` as permute(dims = [1, 0]): the forward's
// weight, the backward's input gradient through the weight's double
// transpose, and the weight gradient permute(mm(permute(g), x)). Every one
// folds; a permute of other dims stays.
TEST(FoldTransposesTest, APermuteOfTwoDimsIsATranspose) {
  v1::Graph g = WithFeeds();  // x [3, 4], w [3, 5]
  AddSpec(g.add_feeds(), "W", v1::FLOAT64, {5, 4});
  AddSpec(g.add_feeds(), "b", v1::FLOAT64, {5});
  AddSpec(g.add_feeds(), "cube", v1::FLOAT64, {2, 3, 4});
  AddPermute(g, "W", "Wt", {1, 0});
  AddNode(g, "addmm", {"b", "x", "Wt"}, "h");  // [3, 5]
  AddPermute(g, "Wt", "Wtt", {1, 0});
  AddNode(g, "mm", {"w", "Wtt"}, "gx");  // the input gradient through the weight: [3, 4]
  AddPermute(g, "w", "wt", {1, 0});
  AddNode(g, "mm", {"wt", "x"}, "gw_t");  // [5, 4]
  AddPermute(g, "gw_t", "gw", {1, 0});    // the weight gradient, [4, 5]
  AddPermute(g, "cube", "moved", {0, 2, 1});
  for (const char* name : {"h", "gx", "gw", "moved"}) g.add_fetches(name);
  const v1::Graph original = g;
  g = Folded(g);
  int permutes = 0;
  for (const v1::Node& node : g.nodes()) permutes += node.op() == "permute";
  EXPECT_EQ(permutes, 1) << g.DebugString();  // the cube's
  EXPECT_EQ(InputsOf(Producer(g, "h")), (std::vector<std::string>{"b", "x", "W"}));
  EXPECT_EQ(Flag(Producer(g, "h"), "transpose_b"), "true");
  EXPECT_EQ(InputsOf(Producer(g, "gx")), (std::vector<std::string>{"w", "W"}));
  EXPECT_EQ(Flag(Producer(g, "gx"), "transpose_b"), "absent");
  EXPECT_EQ(InputsOf(Producer(g, "gw")), (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(Flag(Producer(g, "gw"), "transpose_a"), "true");
  std::mt19937_64 rng(9);
  const Contents feeds = testing::RandomFeeds(original, rng);
  auto expected = testing::RunWireGraphOnCpu(original, {}, feeds);
  ASSERT_TRUE(expected.ok()) << expected.status();
  auto actual = testing::RunWireGraphOnCpu(g, {}, feeds);
  ASSERT_TRUE(actual.ok()) << actual.status();
  EXPECT_TRUE(*expected == *actual);
}

// A linear layer's weight gradient as torch 2.x traces it: t(mm(t(x), g)).
// The outer transpose becomes the product (mm(g, x, transpose_a)); a product
// read by anything besides the transpose stays as it is.
TEST(FoldTransposesTest, ATransposedProductBecomesTheProduct) {
  v1::Graph g = WithFeeds();  // x [3, 4], w [3, 5]
  AddNode(g, "t", {"x"}, "xt");
  AddNode(g, "mm", {"xt", "w"}, "xw");  // [4, 5], read only by the transpose
  AddSpec(AddNode(g, "t_copy", {"xw"}, "grad")->add_declared_outputs(), "grad", v1::FLOAT64, {5, 4});
  AddNode(g, "mm", {"xt", "w"}, "kept");  // also fetched: its transpose stays
  AddNode(g, "t", {"kept"}, "kept_t");
  AddNode(g, "relu", {"grad"}, "r");
  for (const char* f : {"r", "kept", "kept_t"}) g.add_fetches(f);
  const v1::Graph original = g;
  g = Folded(g);
  const v1::Node* grad = Producer(g, "grad");
  ASSERT_NE(grad, nullptr);
  EXPECT_EQ(grad->op(), "mm");
  EXPECT_EQ(InputsOf(grad), (std::vector<std::string>{"w", "x"}));
  EXPECT_EQ(Flag(grad, "transpose_a"), "true");
  EXPECT_EQ(Flag(grad, "transpose_b"), "false");
  ASSERT_EQ(grad->declared_outputs_size(), 1);
  EXPECT_EQ(grad->declared_outputs(0).shape_size(), 2);
  EXPECT_EQ(Producer(g, "xw"), nullptr);
  EXPECT_EQ(Producer(g, "kept_t")->op(), "t");
  EXPECT_EQ(Producer(g, "kept")->op(), "mm");
  std::mt19937_64 rng(9);
  const Contents feeds = {{"x", RandomBytes(v1::FLOAT64, 12, rng)}, {"w", RandomBytes(v1::FLOAT64, 15, rng)}};
  auto expected = testing::RunWireGraphOnCpu(original, {}, feeds);
  ASSERT_TRUE(expected.ok()) << expected.status();
  auto actual = testing::RunWireGraphOnCpu(g, {}, feeds);
  ASSERT_TRUE(actual.ok()) << actual.status();
  ASSERT_EQ(expected->size(), 3u);
  for (const auto& [name, bytes] : *expected) {
    ASSERT_EQ(actual->count(name), 1u) << name;
    EXPECT_TRUE(actual->at(name) == bytes) << name << " differs after folding";
  }
}

TEST(FoldTransposesTest, AnIntegerFlagIsReadAsTheOpReadsIt) {
  v1::Graph g = WithFeeds();
  AddNode(g, "t", {"x"}, "xt");                          // [4, 3]
  AddNode(g, "t", {"xt"}, "xtt");                        // [3, 4]: x
  v1::Node* mm = AddNode(g, "mm", {"xtt", "w"}, "out");  // op(x) with transpose_a = 1: [4, 3] @ [3, 5]
  (*mm->mutable_attrs())["transpose_a"].set_i(1);
  v1::Node* other = AddNode(g, "mm", {"xt", "w"}, "out2");  // [4, 3] @ [3, 5]
  (*other->mutable_attrs())["transpose_a"].set_i(0);
  g.add_fetches("out");
  g.add_fetches("out2");
  ASSERT_TRUE(BuildGraph(g, {}).ok());
  g = Folded(g);
  EXPECT_EQ(CountTransposes(g), 0);
  // An even chain changes no flag.
  EXPECT_EQ(InputsOf(Producer(g, "out")), (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(Flag(Producer(g, "out"), "transpose_a"), "not a bool");
  EXPECT_EQ(InputsOf(Producer(g, "out2")), (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(Flag(Producer(g, "out2"), "transpose_a"), "true");
  auto built = BuildGraph(g, {});
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->values[built->Find("out")].type.shape, (Shape{4, 5}));
  EXPECT_EQ(built->values[built->Find("out2")].type.shape, (Shape{4, 5}));
}

TEST(FoldTransposesTest, BothOperandsReadingOneTranspose) {
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", v1::FLOAT64, {3, 3});
  AddNode(g, "t", {"x"}, "xt");
  AddNode(g, "mm", {"xt", "xt"}, "sq");
  g.add_fetches("sq");
  v1::Graph folded = g;
  folded = Folded(folded);
  ASSERT_EQ(folded.nodes_size(), 1);
  EXPECT_EQ(InputsOf(&folded.nodes(0)), (std::vector<std::string>{"x", "x"}));
  EXPECT_EQ(Flag(&folded.nodes(0), "transpose_a"), "true");
  EXPECT_EQ(Flag(&folded.nodes(0), "transpose_b"), "true");

  std::mt19937_64 rng(3);
  const Contents feeds = {{"x", RandomBytes(v1::FLOAT64, 9, rng)}};
  auto expected = testing::RunWireGraphOnCpu(g, {}, feeds);
  auto actual = testing::RunWireGraphOnCpu(folded, {}, feeds);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(actual.ok()) << actual.status();
  EXPECT_EQ(actual->at("sq"), expected->at("sq"));
}

}  // namespace
}  // namespace tandem
