#include "codegen/pointwise_batches.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "codegen/pointwise_kernel.h"

namespace tandem::codegen {
namespace {

using ::testing::ElementsAre;
using Runs = std::vector<std::pair<int, int>>;

// A graph of nodes over float32 values of `elements` each, with the
// addresses the test chooses: an arena of bytes, values placed by offset.
class Layout {
 public:
  int Value(int64_t elements, int64_t offset) {
    tandem::Value v;
    v.type.shape = {elements};
    graph.values.push_back(v);
    addresses.push_back(arena_ + offset * 4);
    return static_cast<int>(graph.values.size()) - 1;
  }
  int Node(std::vector<int> inputs, std::vector<int> outputs, std::string kernel) {
    tandem::Node n;
    n.op = "fused_elementwise";
    n.inputs = std::move(inputs);
    n.outputs = std::move(outputs);
    graph.nodes.push_back(n);
    names.push_back(std::move(kernel));
    return static_cast<int>(graph.nodes.size()) - 1;
  }
  Runs Plan(std::vector<int> copies = {}) const {
    return PlanPointwiseBatches(graph, 0, static_cast<int>(graph.nodes.size()), names, addresses, [&](int i) {
      for (int c : copies) {
        if (c == i) return true;
      }
      return false;
    });
  }

  Graph graph;
  std::vector<std::string> names;
  std::vector<void*> addresses;

 private:
  char* arena_ = reinterpret_cast<char*>(uintptr_t{1} << 20);  // never dereferenced
};

// An SGD step: per parameter, w' = w - lr * (m' = mu * m + g), written in
// place over w and m. Each node reads and writes only its own tensors.
TEST(PlanPointwiseBatchesTest, AnOptimizerStepIsOneRun) {
  Layout l;
  const int lr = l.Value(1, 0);
  int offset = 16;
  for (int p = 0; p < 5; ++p) {
    const int64_t size = 100 + 37 * p;
    const int w = l.Value(size, offset);
    const int m = l.Value(size, offset + size);
    const int g = l.Value(size, offset + 2 * size);
    const int w2 = l.Value(size, offset);         // in place over w
    const int m2 = l.Value(size, offset + size);  // in place over m
    l.Node({w, m, g, lr}, {w2, m2}, "sgd");
    offset += 3 * size;
  }
  EXPECT_THAT(l.Plan(), ElementsAre(std::make_pair(0, 4)));
  // A copy due after node 2 ends the run there.
  EXPECT_THAT(l.Plan({2}), ElementsAre(std::make_pair(0, 2), std::make_pair(3, 4)));
}

TEST(PlanPointwiseBatchesTest, DependentOrOverlappingNodesSplit) {
  {  // node 1 reads node 0's output
    Layout l;
    const int a = l.Value(64, 0), b = l.Value(64, 64), c = l.Value(64, 128);
    l.Node({a}, {b}, "k");
    l.Node({b}, {c}, "k");
    EXPECT_TRUE(l.Plan().empty());
  }
  {  // node 1 writes where node 0 reads (the plan reused a dead input)
    Layout l;
    const int a = l.Value(64, 0), b = l.Value(64, 64), c = l.Value(64, 128), d = l.Value(64, 32);
    l.Node({a}, {b}, "k");
    l.Node({c}, {d}, "k");
    EXPECT_TRUE(l.Plan().empty());
  }
  {  // node 1 reads bytes node 0 writes, through another value
    Layout l;
    const int a = l.Value(64, 0), b = l.Value(64, 64), c = l.Value(64, 96), d = l.Value(64, 256);
    l.Node({a}, {b}, "k");
    l.Node({c}, {d}, "k");
    EXPECT_TRUE(l.Plan().empty());
  }
  {  // shared reads (a rank-0 learning rate) are fine; other kernels split
    Layout l;
    const int lr = l.Value(1, 0), a = l.Value(64, 16), b = l.Value(64, 80), c = l.Value(64, 144), d = l.Value(64, 208),
              e = l.Value(64, 272), f = l.Value(64, 336);
    l.Node({a, lr}, {a}, "k");
    l.Node({b, lr}, {b}, "k");
    l.Node({c, lr}, {c}, "other");
    l.Node({d, lr}, {d}, "k");
    l.Node({e, lr}, {e}, "");
    l.Node({f, lr}, {f}, "k");
    EXPECT_THAT(l.Plan(), ElementsAre(std::make_pair(0, 1)));
  }
}

TEST(PlanPointwiseBatchesTest, RunsHoldAtMostTheBatchLimit) {
  Layout l;
  const int n = 2 * kPointwiseBatchMax + 3;
  for (int i = 0; i < n; ++i) {
    const int v = l.Value(8, 8 * i);
    l.Node({v}, {v}, "k");
  }
  EXPECT_THAT(l.Plan(), ElementsAre(std::make_pair(0, kPointwiseBatchMax - 1),
                                    std::make_pair(kPointwiseBatchMax, 2 * kPointwiseBatchMax - 1),
                                    std::make_pair(2 * kPointwiseBatchMax, n - 1)));
}

}  // namespace
}  // namespace tandem::codegen
