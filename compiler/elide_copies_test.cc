#include "compiler/elide_copies.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "compiler/compile_job.h"
#include "compiler/wire_graph_test_util.h"

namespace tandem {
namespace {

using testing::AddNode;
using testing::AddSpec;
using testing::Contents;
using testing::Ops;
using testing::Persistent;

void SetSize(v1::Node* n, const std::vector<int64_t>& size) {
  for (int64_t d : size) (*n->mutable_attrs())["size"].mutable_ints()->add_values(d);
}

// A clone and an expand to the same shape go, their readers reading the
// source; a fetched clone and an expand that broadcasts stay; every fetch
// is bit-identical.
TEST(ElideCopiesTest, CopiesNobodyNeedsGo) {
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", v1::FLOAT32, {2, 3});
  AddSpec(g.add_feeds(), "w", v1::FLOAT32, {1, 3});
  AddNode(g, "clone", {"x"}, "c");
  SetSize(AddNode(g, "expand_copy", {"c"}, "e"), {2, 3});
  AddNode(g, "neg", {"e"}, "n");
  AddNode(g, "clone", {"n"}, "k");
  SetSize(AddNode(g, "expand_copy", {"w"}, "b"), {2, 3});
  AddNode(g, "add.Tensor", {"n", "b"}, "s");
  for (const char* f : {"n", "k", "s"}) g.add_fetches(f);
  auto elided = testing::ApplyPass(g, Persistent(), ElideCopies);
  ASSERT_TRUE(elided.ok()) << elided.status();
  EXPECT_THAT(Ops(*elided), ::testing::ElementsAre("neg", "clone", "expand_copy", "add.Tensor"));
  EXPECT_EQ(elided->nodes(0).inputs(0), "x");
  std::mt19937_64 rng(3);
  const Contents feeds = testing::RandomFeeds(g, rng, {});
  auto want = testing::RunWireGraphOnCpu(g, Persistent(), feeds);
  auto got = testing::RunWireGraphOnCpu(*elided, Persistent(), feeds);
  ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
  for (const std::string& fetch : g.fetches()) {
    ASSERT_EQ(got->count(fetch), 1u) << fetch;
    EXPECT_TRUE(got->at(fetch) == want->at(fetch)) << fetch;
  }
}

// CompileJob runs it: the plan loses the copies' buffers.
TEST(ElideCopiesTest, CompileJobElides) {
  v1::RegisterJobRequest request;
  v1::Graph& g = *request.mutable_graph();
  AddSpec(g.add_feeds(), "x", v1::FLOAT32, {64, 64});
  AddNode(g, "relu", {"x"}, "r");
  AddNode(g, "clone", {"r"}, "c");
  AddNode(g, "neg", {"c"}, "n");
  AddNode(g, "add.Tensor", {"n", "r"}, "s");
  g.add_fetches("s");
  auto elided = CompileJob(request, {.fuse_elementwise = false});
  auto kept = CompileJob(request, {.elide_copies = false, .fuse_elementwise = false});
  ASSERT_TRUE(elided.ok() && kept.ok()) << elided.status() << kept.status();
  EXPECT_EQ(elided->graph.nodes.size() + 1, kept->graph.nodes.size());
  EXPECT_LT(elided->layout.no_reuse_bytes, kept->layout.no_reuse_bytes);
}

}  // namespace
}  // namespace tandem
