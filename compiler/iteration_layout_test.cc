#include "compiler/iteration_layout.h"

#include <gtest/gtest.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "compiler/update_schedule.h"
#include "device/device.h"
#include "ir/graph_builder.h"
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
// Names the update schedule looks at: an optimizer's fused update, and an op
// whose kernel checks data.
const OpDef kFused{.name = "fused_elementwise", .alias = AliasKind::kInPlace};
const OpDef kCheck{.name = "nll_loss_forward", .alias = AliasKind::kNone};

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
// overlap an input it is not allowed to alias; an update's source must be
// intact when the update schedule copies it. Persistents: once one holds
// its new value (copied, or computed in place), no node may read it and no
// node that checks data may run. Returns the first problem.
std::string Simulate(const Graph& graph, const IterationLayout& layout) {
  const UpdateSchedule updates = ScheduleUpdates(graph);
  std::vector<bool> changed(graph.values.size(), false);
  int changed_count = 0;
  auto change = [&](int persistent) {
    if (!changed[persistent]) ++changed_count;
    changed[persistent] = true;
  };
  std::vector<int> token_of(graph.values.size());
  for (size_t v = 0; v < graph.values.size(); ++v) token_of[v] = static_cast<int>(v);
  std::vector<int> units(layout.arena_bytes / kAlign + 1, -1);
  auto range = [&](int v) {
    const uint64_t begin = static_cast<uint64_t>(layout.offset[v]) / kAlign;
    return std::make_pair(begin, begin + memory::AlignUp(Bytes(graph, v), kAlign) / kAlign);
  };
  auto write = [&](int v) {
    if (layout.offset[v] < 0) return;  // computed in its persistent tensor
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
      if (changed[v]) return absl::StrCat("node ", i, " reads persistent v", v, " after its update");
    }
    if (OpChecksData(node.op) && changed_count > 0) {
      return absl::StrCat("node ", i, " checks data after a persistent changed");
    }
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const int out = node.outputs[o];
      const bool aliased_pair = o == 0 && !node.inputs.empty() && node.def->alias != AliasKind::kNone &&
                                layout.offset[node.inputs[0]] == layout.offset[out];
      // A view that shares its input's buffer writes nothing.
      const bool writes = !(aliased_pair && node.def->alias == AliasKind::kView);
      for (size_t k = 0; writes && k < node.inputs.size(); ++k) {
        const int in = node.inputs[k];
        if (layout.offset[in] < 0 || layout.offset[out] < 0 || Bytes(graph, in) == 0 || Bytes(graph, out) == 0)
          continue;
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
    for (int k : updates.after_node[i]) {
      const auto& [target, v] = graph.updates[k];
      if (!intact(v)) return absl::StrCat("update source v", v, " was overwritten before its copy");
      change(target);
    }
  }
  for (int v : graph.fetchable) {
    if (!intact(v)) return absl::StrCat("fetch v", v, " was overwritten before the end");
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
    const bool overlaps = layout->offset[v] < layout->offset[loss] + static_cast<int64_t>(kAlign) &&
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

// An optimizer-like tail: each weight's new value is copied as soon as its
// last reader and the last data check have run, so the new values of two
// weights are never live at once.
TEST(IterationLayoutTest, UpdatesAreCopiedAsSoonAsSafe) {
  GraphMaker g;
  const int w1 = g.Persistent(4096);
  const int w2 = g.Persistent(4096);
  const int x = g.Feed(64);
  const int loss = g.Op(kCheck, {x}, 1);
  const int n1 = g.Op(kPlain, {w1, x}, 4096);  // node 1: new w1
  const int n2 = g.Op(kPlain, {w2, x}, 4096);  // node 2: new w2
  const int tail = g.Op(kPlain, {x}, 1);       // node 3
  g.graph.updates = {{w1, n1}, {w2, n2}};
  g.Fetch(loss);
  g.Fetch(tail);
  const UpdateSchedule updates = ScheduleUpdates(g.graph);
  EXPECT_EQ(updates.copy_after, (std::vector<int>{1, 2}));
  EXPECT_EQ(updates.in_place, (std::vector<bool>{false, false}));
  auto layout = PlanIterationLayout(g.graph);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // n1 dies at its copy after node 1, so n2 takes its range: one 16-KiB
  // buffer beside x and the loss (the tail reuses the freed range too).
  EXPECT_EQ(layout->offset[n2], layout->offset[n1]);
  EXPECT_EQ(layout->arena_bytes, 16384 + 2 * kAlign);
  EXPECT_EQ(Simulate(g.graph, *layout), "");
}

TEST(IterationLayoutTest, UpdatesWaitForLaterReadersAndDataChecks) {
  GraphMaker g;
  const int w = g.Persistent(256);
  const int x = g.Feed(256);
  const int fresh = g.Op(kPlain, {w, x}, 256);  // node 0
  g.Op(kPlain, {w}, 1);                         // node 1 reads the old w
  const int checked = g.Op(kCheck, {x}, 1);     // node 2 may fail the iteration
  g.Op(kPlain, {x}, 1);                         // node 3
  g.graph.updates = {{w, fresh}};
  g.Fetch(checked);
  EXPECT_EQ(ScheduleUpdates(g.graph).copy_after, (std::vector<int>{2}));
  g.graph.nodes[2].op = "plain";  // without the check: after the last reader
  EXPECT_EQ(ScheduleUpdates(g.graph).copy_after, (std::vector<int>{1}));
  g.Fetch(w);  // the old value is fetched at the end: the copy waits for it
  EXPECT_EQ(ScheduleUpdates(g.graph).copy_after, (std::vector<int>{3}));
}

TEST(IterationLayoutTest, FusedUpdateIsComputedInItsPersistent) {
  GraphMaker g;
  const int w = g.Persistent(4096);
  const int m = g.Persistent(4096);
  const int x = g.Feed(4096);
  const int loss = g.Op(kCheck, {x}, 1);             // node 0
  const int grad = g.Op(kPlain, {x, w}, 4096);       // node 1
  const int new_m = g.Op(kFused, {m, grad}, 4096);   // node 2
  const int new_w = g.Op(kFused, {w, new_m}, 4096);  // node 3: reads new_m in m's storage
  g.graph.updates = {{m, new_m}, {w, new_w}};
  g.Fetch(loss);
  const UpdateSchedule updates = ScheduleUpdates(g.graph);
  EXPECT_EQ(updates.in_place, (std::vector<bool>{true, true}));
  auto layout = PlanIterationLayout(g.graph);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->stored_in[new_m], m);
  EXPECT_EQ(layout->stored_in[new_w], w);
  EXPECT_EQ(layout->offset[new_m], -1);
  EXPECT_EQ(layout->offset[new_w], -1);
  // Only x and grad (and the loss) are in the arena.
  EXPECT_EQ(layout->arena_bytes, 2 * 16384 + kAlign);
  EXPECT_EQ(Simulate(g.graph, *layout), "");
}

TEST(IterationLayoutTest, FusedUpdateIsCopiedWhenWritingInPlaceIsUnsafe) {
  // A data check after the fused node, a later reader of the old weight,
  // another type: each keeps the value in the arena and copies it.
  for (int variant = 0; variant < 3; ++variant) {
    GraphMaker g;
    const int w = g.Persistent(variant == 2 ? 2048 : 4096);
    const int x = g.Feed(4096);
    const int fresh = g.Op(kFused, {w, x}, 4096);                                       // node 0
    const int later = g.Op(variant == 0 ? kCheck : kPlain, {variant == 1 ? w : x}, 1);  // node 1
    g.graph.updates = {{w, fresh}};
    g.Fetch(later);
    const UpdateSchedule updates = ScheduleUpdates(g.graph);
    EXPECT_FALSE(updates.in_place[0]) << "variant " << variant;
    EXPECT_EQ(updates.copy_after[0], variant == 2 ? 0 : 1) << "variant " << variant;
    auto layout = PlanIterationLayout(g.graph);
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_GE(layout->offset[fresh], 0);
    EXPECT_EQ(Simulate(g.graph, *layout), "") << "variant " << variant;
  }
}

// Random graphs of plain, view and in-place nodes: the simulated run never
// reads an overwritten value, offsets are aligned, and the arena is no
// larger than the no-reuse bound.
TEST(IterationLayoutTest, RandomGraphsRunCorrectlyOnTheirLayout) {
  std::mt19937_64 rng(5);
  const OpDef* defs[] = {&kPlain, &kView, &kInPlace, &kCheck};
  int in_place_merges = 0;
  int view_merges = 0;
  int early_updates = 0;
  int in_place_updates = 0;
  for (int trial = 0; trial < 300; ++trial) {
    GraphMaker g;
    std::vector<int> pool;
    const int persistents = static_cast<int>(rng() % 3);
    for (int i = 0; i < persistents; ++i) pool.push_back(g.Persistent(1 + rng() % 2000));
    const int feeds = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < feeds; ++i) pool.push_back(g.Feed(1 + rng() % 2000));
    const int nodes = 1 + static_cast<int>(rng() % 40);
    for (int n = 0; n < nodes; ++n) {
      const OpDef& def = *defs[rng() % 4];
      // Inputs mostly from recent values, so chains form.
      std::vector<int> inputs;
      const int arity = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < arity; ++k) {
        const size_t back = std::min<size_t>(pool.size(), 1 + rng() % 4);
        inputs.push_back(pool[pool.size() - back + rng() % back]);
      }
      const int64_t in_floats = g.graph.values[inputs[0]].type.numel();
      const int64_t floats =
          def.alias == AliasKind::kNone || rng() % 8 == 0 ? static_cast<int64_t>(1 + rng() % 2000) : in_floats;
      pool.push_back(g.Op(def, inputs, floats));
    }
    for (int v : pool) {
      if (g.graph.values[v].kind != ValueKind::kPersistent && rng() % 6 == 0) g.Fetch(v);
    }
    // Updates: each persistent gets a new value now and then, from an
    // optimizer-like fused node over it and a recent value (or from any
    // value); the fused node's output may be read later.
    for (int p = 0; p < persistents; ++p) {
      if (rng() % 3 == 0) continue;
      int source = pool[p + (rng() % (pool.size() - p))];
      if (rng() % 4 != 0) {
        source = g.Op(kFused, {p, pool[pool.size() - 1 - rng() % std::min<size_t>(pool.size(), 3)]},
                      g.graph.values[p].type.numel());
        pool.push_back(source);
        if (rng() % 3 == 0) pool.push_back(g.Op(kPlain, {source}, 1 + rng() % 2000));
        if (rng() % 4 == 0) pool.push_back(g.Op(kCheck, {pool.back()}, 1));
      }
      if (source != p) g.graph.updates.emplace_back(p, source);
    }
    g.Fetch(pool.back());

    auto layout = PlanIterationLayout(g.graph);
    ASSERT_TRUE(layout.ok()) << layout.status();
    const UpdateSchedule updates = ScheduleUpdates(g.graph);
    for (size_t k = 0; k < g.graph.updates.size(); ++k) {
      if (updates.in_place[k]) {
        ++in_place_updates;
      } else if (updates.copy_after[k] < static_cast<int>(g.graph.nodes.size()) - 1) {
        ++early_updates;
      }
    }
    for (size_t v = 0; v < g.graph.values.size(); ++v) {
      const bool persistent = g.graph.values[v].kind == ValueKind::kPersistent;
      ASSERT_EQ(layout->stored_in[v] >= 0, updates.stored_in[v] >= 0) << "v" << v;
      ASSERT_EQ(layout->offset[v] < 0, persistent || layout->stored_in[v] >= 0) << "v" << v;
      if (layout->offset[v] >= 0) {
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
  // The generator exercised both kinds of sharing and of early updates.
  EXPECT_GT(view_merges, 100);
  EXPECT_GT(in_place_merges, 50);
  EXPECT_GT(early_updates, 30);
  EXPECT_GT(in_place_updates, 30);
}

}  // namespace
}  // namespace tandem
