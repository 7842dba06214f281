#include "compiler/fold_transposes.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "base/status_macros.h"
#include "compiler/graph_rewriter.h"

namespace tandem {
namespace {

// A node that transposes one tensor into one tensor: `t` (`t_copy`: rank
// <= 2, which inference checked), or a `permute` (`permute_copy`) with dims
// [1, 0], which is what torch >= 2.1's core decompositions make of `t`.
bool IsTranspose(const Node& node) {
  if (node.inputs.size() != 1 || node.outputs.size() != 1) return false;
  if (node.def->name == "t") return true;
  if (node.def->name != "permute") return false;
  const absl::StatusOr<std::vector<int64_t>> dims = node.attrs.GetInts("dims");
  return dims.ok() && *dims == std::vector<int64_t>{1, 0};
}

// The matrix operands of a product node: (input index, transpose attribute).
struct MatrixSlot {
  int input;
  const char* attr;
};

absl::Span<const MatrixSlot> MatrixSlotsOf(const Node& node) {
  static constexpr MatrixSlot kMm[] = {{0, "transpose_a"}, {1, "transpose_b"}};
  static constexpr MatrixSlot kAddmm[] = {{1, "transpose_a"}, {2, "transpose_b"}};
  if (node.def->name == "mm" && node.inputs.size() == 2) return kMm;
  if (node.def->name == "addmm" && node.inputs.size() == 3) return kAddmm;
  return {};
}

// A product's transpose flag as the op reads it, or nullopt when the
// attribute is not a flag.
std::optional<bool> Flag(const Node& node, const char* attr) {
  auto flag = node.attrs.GetBool(attr, false);
  if (!flag.ok()) return std::nullopt;
  return *flag;
}

// The pass's working copy: the source's nodes, which it edits, and which of
// them are removed.
struct Working {
  std::vector<Node> nodes;
  std::vector<bool> removed;

  // Per value: the index of the (kept) node defining it, or -1.
  std::vector<int> Producers(size_t num_values) const {
    std::vector<int> producer(num_values, -1);
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (removed[i]) continue;
      for (int v : nodes[i].outputs) producer[v] = static_cast<int>(i);
    }
    return producer;
  }
  // Per value: how often kept nodes read it, plus fetches and both sides of
  // updates (uses that never go).
  std::vector<int> Uses(const Graph& g) const {
    std::vector<int> uses(g.values.size(), 0);
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (removed[i]) continue;
      for (int v : nodes[i].inputs) ++uses[v];
    }
    for (int v : g.fetchable) ++uses[v];
    for (const auto& [target, value] : g.updates) {
      ++uses[target];
      ++uses[value];
    }
    return uses;
  }
};

// t(mm(a, b)) -> mm(b, a) with both flags flipped and swapped ((op(A) op(B))^T
// = op(B)^T op(A)^T), when the product's only use is that transpose: the
// product then defines the transpose's output, and the transpose goes. A
// traced linear layer's weight gradient comes out as t(mm(t(x), g)).
void FoldTransposedProducts(const Graph& g, Working& w) {
  const std::vector<int> uses = w.Uses(g);
  for (size_t i = 0; i < w.nodes.size(); ++i) {
    const Node& transpose = w.nodes[i];
    if (!IsTranspose(transpose)) continue;
    const int producer = g.values[transpose.inputs[0]].producer;
    if (producer < 0 || w.removed[producer]) continue;
    Node& product = w.nodes[producer];
    if (product.def->name != "mm" || product.inputs.size() != 2 || product.outputs.size() != 1) continue;
    if (product.outputs[0] != transpose.inputs[0] || uses[product.outputs[0]] != 1) continue;
    const std::optional<bool> a = Flag(product, "transpose_a");
    const std::optional<bool> b = Flag(product, "transpose_b");
    if (!a.has_value() || !b.has_value()) continue;
    std::swap(product.inputs[0], product.inputs[1]);
    product.attrs.Set("transpose_a", !*b);
    product.attrs.Set("transpose_b", !*a);
    product.outputs[0] = transpose.outputs[0];
    w.removed[i] = true;
  }
}

// A transpose node's output in terms of the start of its chain of
// transposes: `source` transposed once when `odd`, else `source` itself (t
// is its own inverse up to rank 2); -1: not a transpose.
struct TransposeSource {
  int source = -1;
  bool odd = false;
};

}  // namespace

absl::StatusOr<Graph> FoldTransposes(const Graph& graph) {
  Working w{graph.nodes, std::vector<bool>(graph.nodes.size(), false)};
  FoldTransposedProducts(graph, w);
  const std::vector<int> producer = w.Producers(graph.values.size());
  const int num_nodes = static_cast<int>(w.nodes.size());
  std::vector<TransposeSource> sources(num_nodes);
  std::vector<bool> lost_use(num_nodes, false);

  // One pass in order: a transpose's source is known before any node that
  // reads it, since readers come after their producers.
  for (int i = 0; i < num_nodes; ++i) {
    if (w.removed[i]) continue;
    Node& node = w.nodes[i];
    if (IsTranspose(node)) {
      const int p = producer[node.inputs[0]];
      if (p >= 0 && sources[p].source >= 0) {
        sources[i] = {sources[p].source, !sources[p].odd};
      } else {
        sources[i] = {node.inputs[0], true};
      }
      continue;
    }
    for (const MatrixSlot& slot : MatrixSlotsOf(node)) {
      const int p = producer[node.inputs[slot.input]];
      if (p < 0 || sources[p].source < 0) continue;
      const std::optional<bool> transposed = Flag(node, slot.attr);
      if (!transposed.has_value()) continue;
      if (sources[p].odd) node.attrs.Set(slot.attr, !*transposed);
      node.inputs[slot.input] = sources[p].source;
      lost_use[p] = true;
    }
    // Any other input that is an even chain of transposes (t(t(x)) == x up to
    // rank 2) reads the chain's source.
    for (int& input : node.inputs) {
      const int p = producer[input];
      if (p < 0 || sources[p].source < 0 || sources[p].odd) continue;
      input = sources[p].source;
      lost_use[p] = true;
    }
  }

  // Backwards, so that removing a transpose can free the transpose feeding
  // it (which comes earlier) before that one is looked at.
  std::vector<int> uses = w.Uses(graph);
  for (int i = num_nodes - 1; i >= 0; --i) {
    if (w.removed[i] || !lost_use[i] || !IsTranspose(w.nodes[i])) continue;
    if (uses[w.nodes[i].outputs[0]] > 0) continue;
    w.removed[i] = true;
    const int input = w.nodes[i].inputs[0];
    --uses[input];
    if (producer[input] >= 0) lost_use[producer[input]] = true;
  }

  GraphRewriter out(graph);
  for (int i = 0; i < num_nodes; ++i) {
    if (!w.removed[i]) RETURN_IF_ERROR(out.Copy(w.nodes[i]));
  }
  return std::move(out).Finish();
}

}  // namespace tandem
