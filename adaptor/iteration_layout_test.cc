#include "adaptor/iteration_layout.h"

#include <gtest/gtest.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "adaptor/graph_builder.h"
#include "device/device.h"
#include "memory/arena_planner.h"
#include "memory/byte_format.h"

namespace tandem {
namespace {

constexpr uint64_t kAlign = device::kDeviceAlignment;

// Graphs built by hand, with local op definitions carrying the alias kind
// under test (layout looks only at OpDef::alias).
const OpDef kPlain{.name = "plain", .alias = AliasKind::kNone};
const OpDef kView{.name = "view", .alias = AliasKind::kView};
const OpDef kInPlace{.name = "inplace", .alias = AliasKind::kInPlace};

class GraphMaker {
 public:
  int Value(ValueKind kind, int64_t floats) {
    const int id = static_cast<int>(graph.values.size());
    tandem::Value value;
    value.name = absl::StrCat("v", id);
    value.type = TensorType{DType::kFloat32, {floats}};
    value.kind = kind;
    graph.values.push_back(value);
    graph.by_name[value.name] = id;
    if (kind == ValueKind::kPersistent) graph.persistents.push_back(id);
    if (kind == ValueKind::kFeed) graph.feeds.push_back(id);
    return id;
  }
  int Persistent(int64_t floats) { return Value(ValueKind::kPersistent, floats); }
  int Feed(int64_t floats) { return Value(ValueKind::kFeed, floats); }
  // A node with one output of `floats` elements.
  int Op(const OpDef& def, std::vector<int> inputs, int64_t floats) {
    const int out = Value(ValueKind::kIntermediate, floats);
    graph.values[out].producer = static_cast<int>(graph.nodes.size());
    Node node;
    node.op = def.name;
    node.def = &def;
    node.inputs = std::move(inputs);
    node.outputs = {out};
    graph.nodes.push_back(std::move(node));
    return out;
  }
  void Fetch(int v) { graph.fetchable.push_back(v); }

  Graph graph;
};

uint64_t Bytes(const Graph& graph, int v) { return graph.values[v].type.bytes(); }

// Runs the graph on a simulated arena: every value writes a token over its
// bytes (in 256-byte units) when it is defined; a view of an arena value
// writes nothing (it is its input's bytes). Every read, and every fetch at
// the end, must find the value's token still there; a node's output may not
// overlap an input it is not allowed to alias. Returns the first problem.
std::string Simulate(const Graph& graph, const IterationLayout& layout) {
  std::vector<int> token_of(graph.values.size());
  for (size_t v = 0; v < graph.values.size(); ++v) token_of[v] = static_cast<int>(v);
  std::vector<int> units(layout.arena_bytes / kAlign + 1, -1);
  auto range = [&](int v) {
    const uint64_t begin = static_cast<uint64_t>(layout.offset[v]) / kAlign;
    return std::make_pair(begin, begin + memory::AlignUp(Bytes(graph, v), kAlign) / kAlign);
  };
  auto write = [&](int v) {
    auto [begin, end] = range(v);
    for (uint64_t u = begin; u < end; ++u) units[u] = token_of[v];
  };
  auto intact = [&](int v) {
    if (layout.offset[v] < 0) return true;
    auto [begin, end] = range(v);
    for (uint64_t u = begin; u < end; ++u) {
      if (units[u] != token_of[v]) return false;
    }
    return true;
  };
  for (int v : graph.feeds) write(v);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    for (int v : node.inputs) {
      if (!intact(v)) return absl::StrCat("node ", i, " reads v", v, ", which was overwritten");
    }
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const int out = node.outputs[o];
      const bool aliased_pair = o == 0 && !node.inputs.empty() &&
                                node.def->alias != AliasKind::kNone &&
                                layout.offset[node.inputs[0]] == layout.offset[out];
      // A view that shares its input's buffer writes nothing.
      const bool writes = !(aliased_pair && node.def->alias == AliasKind::kView);
      for (size_t k = 0; writes && k < node.inputs.size(); ++k) {
        const int in = node.inputs[k];
        if (layout.offset[in] < 0 || Bytes(graph, in) == 0 || Bytes(graph, out) == 0) continue;
        if (aliased_pair && (k == 0 || in == node.inputs[0])) continue;
        auto [ib, ie] = range(in);
        auto [ob, oe] = range(out);
        if (ib < oe && ob < ie) {
          return absl::StrCat("node ", i, " writes v", out, " over its input v", in);
        }
      }
      if (!writes) {
        token_of[out] = token_of[node.inputs[0]];
      } else {
        write(out);
      }
    }
  }
  for (int v : graph.fetchable) {
    if (!intact(v)) return absl::StrCat("fetch v", v, " was overwritten before the end");
  }
  for (const auto& [persistent, v] : graph.updates) {
    if (!intact(v)) return absl::StrCat("update source v", v, " was overwritten before the end");
  }
  return "";
}

TEST(IterationLayoutTest, ViewSharesItsInputsBuffer) {
  GraphMaker g;
  const int x = g.Feed(1000);
  const int w = g.Persistent(1000);
  const int y = g.Op(kView, {x}, 1000);
  const int z = g.Op(kPlain, {y, w}, 1000);
  g.Fetch(z);
  auto layout = PlanIterationLayout(g.graph);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->offset[y], layout->offset[x]);
  EXPECT_NE(layout->offset[z], layout->offset[x]);
  EXPECT_EQ(layout->offset[w], -1);
  EXPECT_EQ(layout->arena_bytes, 2 * memory::AlignUp(4000, kAlign));
  EXPECT_EQ(layout->no_reuse_bytes, 3 * memory::AlignUp(4000, kAlign));
  EXPECT_EQ(Simulate(g.graph, *layout), "");
}

TEST(IterationLayoutTest, ViewOfAPersistentGetsItsOwnBuffer) {
  GraphMaker g;
  const int w = g.Persistent(64);
  const int v = g.Op(kView, {w}, 64);
  g.Fetch(v);
  auto layout = PlanIterationLayout(g.graph);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->offset[w], -1);
  EXPECT_EQ(layout->offset[v], 0);
  EXPECT_EQ(layout->arena_bytes, kAlign);
}

TEST(IterationLayoutTest, InPlaceReusesTheLastReadInput) {
  GraphMaker g;
  const int x = g.Feed(512);
  const int w = g.Persistent(512 * 512);
  const int a = g.Op(kPlain, {x, w}, 512);
  const int b = g.Op(kInPlace, {a}, 512);
  const int c = g.Op(kInPlace, {b, w}, 512);
  g.Fetch(c);
  auto layout = PlanIterationLayout(g.graph);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->offset[b], layout->offset[a]);
  EXPECT_EQ(layout->offset[c], layout->offset[a]);
  // x (live at step 0) and the chain a=b=c: two buffers, not four.
  EXPECT_EQ(layout->arena_bytes, 2 * memory::AlignUp(2048, kAlign));
  EXPECT_EQ(layout->no_reuse_bytes, 4 * memory::AlignUp(2048, kAlign));
  EXPECT_EQ(Simulate(g.graph, *layout), "");
}

TEST(IterationLayoutTest, InPlaceIsRefusedWhenTheInputIsReadLater) {
  GraphMaker g;
  const int x = g.Feed(256);
  const int a = g.Op(kPlain, {x}, 256);
  const int b = g.Op(kInPlace, {a}, 256);
  const int c = g.Op(kPlain, {a, b}, 256);
  g.Fetch(c);
  auto layout = PlanIterationLayout(g.graph);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_NE(layout->offset[b], layout->offset[a]);
  EXPECT_EQ(Simulate(g.graph, *layout), "");
}

TEST(IterationLayoutTest, InPlaceIsRefusedForFetchesUpdatesFeedsOfOtherSizeAndPersistents) {
  GraphMaker g;
  const int w = g.Persistent(256);
  const int x = g.Feed(256);
  const int fetched = g.Op(kPlain, {x}, 256);
  const int over_fetch = g.Op(kInPlace, {fetched}, 256);
  const int updated = g.Op(kPlain, {x}, 256);
  const int over_update = g.Op(kInPlace, {updated}, 256);
  const int small = g.Op(kPlain, {x}, 64);
  const int grown = g.Op(kInPlace, {small, x}, 256);  // broadcast: another size
  const int over_weight = g.Op(kInPlace, {w}, 256);
  g.Fetch(fetched);
  g.graph.updates.emplace_back(w, updated);
  for (int v : {over_fetch, over_update, grown, over_weight}) g.Fetch(v);
  auto layout = PlanIterationLayout(g.graph);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_NE(layout->offset[over_fetch], layout->offset[fetched]);
  EXPECT_NE(layout->offset[over_update], layout->offset[updated]);
  EXPECT_NE(layout->offset[grown], layout->offset[small]);
  EXPECT_GE(layout->offset[over_weight], 0);
  EXPECT_EQ(Simulate(g.graph, *layout), "");
}

TEST(IterationLayoutTest, InPlaceIsRefusedWhenAnotherInputIsAViewOfInputZero) {
  GraphMaker g;
  const int x = g.Feed(256);
  const int a = g.Op(kPlain, {x}, 256);
  const int v = g.Op(kView, {a}, 256);
  const int b = g.Op(kInPlace, {a, v}, 256);
  g.Fetch(b);
  auto layout = PlanIterationLayout(g.graph);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->offset[v], layout->offset[a]);
  EXPECT_NE(layout->offset[b], layout->offset[a]);
  EXPECT_EQ(Simulate(g.graph, *layout), "");
}

TEST(IterationLayoutTest, FetchesSurviveToTheEndAndFreedRangesAreReused) {
  GraphMaker g;
  const int x = g.Feed(1024);
  const int loss = g.Op(kPlain, {x}, 1);  // fetched early, read by nobody
  int h = x;
  std::vector<int> chain;
  for (int i = 0; i < 6; ++i) {
    h = g.Op(kPlain, {h}, 1024);
    chain.push_back(h);
  }
  g.Fetch(loss);
  g.Fetch(h);
  auto layout = PlanIterationLayout(g.graph);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // The chain needs two 4-KiB buffers at a time plus the loss, which lives on.
  EXPECT_EQ(layout->arena_bytes, 2 * 4096 + kAlign);
  for (int v : chain) {
    const bool overlaps =
        layout->offset[v] < layout->offset[loss] + static_cast<int64_t>(kAlign) &&
        layout->offset[loss] < layout->offset[v] + 4096;
    EXPECT_FALSE(overlaps) << "v" << v << " overlaps the fetched loss";
  }
  EXPECT_EQ(Simulate(g.graph, *layout), "");
}

TEST(IterationLayoutTest, OutOfRangeValueIsInvalidArgument) {
  GraphMaker g;
  const int x = g.Feed(16);
  g.Op(kPlain, {x}, 16);
  g.graph.nodes[0].inputs.push_back(99);
  EXPECT_EQ(PlanIterationLayout(g.graph).status().code(), absl::StatusCode::kInvalidArgument);
}

// The registry's own ops, through BuildGraph: relu overwrites the matmul
// output it is the last reader of, and view shares relu's buffer.
TEST(IterationLayoutTest, RegistryOpsShareBuffersThroughBuildGraph) {
  v1::Graph wire;
  auto spec = [](v1::TensorSpec* s, const std::string& name, std::vector<int64_t> shape) {
    s->set_name(name);
    s->set_dtype(DTypeToProto(DType::kFloat32));
    for (int64_t d : shape) s->add_shape(d);
  };
  spec(wire.add_feeds(), "x", {64, 32});
  auto node = [&](const std::string& op, std::vector<std::string> inputs, const std::string& out) {
    v1::Node* n = wire.add_nodes();
    n->set_op(op);
    for (const std::string& in : inputs) n->add_inputs(in);
    n->add_outputs(out);
    return n;
  };
  node("mm", {"x", "w"}, "h");
  node("relu", {"h"}, "r");
  node("view", {"r"}, "v")->mutable_attrs()->operator[]("size").mutable_ints()->add_values(1024);
  node("sum", {"v"}, "loss");
  wire.add_fetches("loss");
  google::protobuf::RepeatedPtrField<v1::Tensor> persistent;
  v1::Tensor* w = persistent.Add();
  spec(w->mutable_spec(), "w", {32, 16});
  w->set_data(std::string(32 * 16 * sizeof(float), '\0'));

  auto graph = BuildGraph(wire, persistent);
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto layout = PlanIterationLayout(*graph);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const auto& offset = layout->offset;
  EXPECT_EQ(offset[graph->Find("w")], -1);
  EXPECT_EQ(offset[graph->Find("r")], offset[graph->Find("h")]);
  EXPECT_EQ(offset[graph->Find("v")], offset[graph->Find("h")]);
  EXPECT_NE(offset[graph->Find("loss")], offset[graph->Find("h")]);
  // x (8 KiB) and h = r = v (4 KiB) are live together at step 0; the loss
  // (one float) beside h at step 3.
  EXPECT_EQ(layout->arena_bytes, 8192u + 4096u);
  EXPECT_EQ(layout->no_reuse_bytes, 8192u + 3 * 4096u + kAlign);
  EXPECT_EQ(Simulate(*graph, *layout), "");
}

// Random graphs of plain, view and in-place nodes: the simulated run never
// reads an overwritten value, offsets are aligned, and the arena is no
// larger than the no-reuse bound.
TEST(IterationLayoutTest, RandomGraphsRunCorrectlyOnTheirLayout) {
  std::mt19937_64 rng(5);
  const OpDef* defs[] = {&kPlain, &kView, &kInPlace};
  int in_place_merges = 0;
  int view_merges = 0;
  for (int trial = 0; trial < 300; ++trial) {
    GraphMaker g;
    std::vector<int> pool;
    const int persistents = static_cast<int>(rng() % 3);
    for (int i = 0; i < persistents; ++i) pool.push_back(g.Persistent(1 + rng() % 2000));
    const int feeds = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < feeds; ++i) pool.push_back(g.Feed(1 + rng() % 2000));
    const int nodes = 1 + static_cast<int>(rng() % 40);
    for (int n = 0; n < nodes; ++n) {
      const OpDef& def = *defs[rng() % 3];
      // Inputs mostly from recent values, so chains form.
      std::vector<int> inputs;
      const int arity = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < arity; ++k) {
        const size_t back = std::min<size_t>(pool.size(), 1 + rng() % 4);
        inputs.push_back(pool[pool.size() - back + rng() % back]);
      }
      const int64_t in_floats = g.graph.values[inputs[0]].type.numel();
      const int64_t floats = def.alias == AliasKind::kNone || rng() % 8 == 0
                                 ? static_cast<int64_t>(1 + rng() % 2000)
                                 : in_floats;
      pool.push_back(g.Op(def, inputs, floats));
    }
    for (int v : pool) {
      if (g.graph.values[v].kind != ValueKind::kPersistent && rng() % 6 == 0) g.Fetch(v);
    }
    g.Fetch(pool.back());
    if (persistents > 0 && rng() % 2 == 0) g.graph.updates.emplace_back(pool[0], pool[pool.size() / 2]);

    auto layout = PlanIterationLayout(g.graph);
    ASSERT_TRUE(layout.ok()) << layout.status();
    for (size_t v = 0; v < g.graph.values.size(); ++v) {
      const bool persistent = g.graph.values[v].kind == ValueKind::kPersistent;
      ASSERT_EQ(layout->offset[v] < 0, persistent) << "v" << v;
      if (!persistent) {
        ASSERT_EQ(layout->offset[v] % static_cast<int64_t>(kAlign), 0) << "v" << v;
      }
    }
    ASSERT_LE(layout->arena_bytes, layout->no_reuse_bytes);
    std::string dump;
    for (size_t i = 0; i < g.graph.nodes.size(); ++i) {
      const Node& node = g.graph.nodes[i];
      absl::StrAppend(&dump, "\n  node ", i, " ", node.op, " (");
      for (int in : node.inputs) {
        absl::StrAppend(&dump, " v", in, "@", layout->offset[in], ":", Bytes(g.graph, in));
      }
      absl::StrAppend(&dump, " ) -> v", node.outputs[0], "@", layout->offset[node.outputs[0]], ":",
                      Bytes(g.graph, node.outputs[0]));
    }
    ASSERT_EQ(Simulate(g.graph, *layout), "") << "trial " << trial << dump;
    for (const Node& node : g.graph.nodes) {
      const int in = node.inputs[0];
      if (node.def->alias != AliasKind::kNone && layout->offset[in] >= 0 &&
          layout->offset[in] == layout->offset[node.outputs[0]]) {
        (node.def->alias == AliasKind::kView ? view_merges : in_place_merges) += 1;
      }
    }
  }
  // The generator exercised both kinds of sharing.
  EXPECT_GT(view_merges, 100);
  EXPECT_GT(in_place_merges, 50);
}

}  // namespace
}  // namespace tandem
