#include "adaptor/fold_transposes.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem {
namespace {

// Where a name is defined in the wire graph: a node index (>= 0), a feed, or
// more than once (BuildGraph refuses such a graph). A name absent from the
// map is a persistent tensor or undefined; the wire graph cannot tell.
constexpr int kFeed = -1;
constexpr int kDefinedTwice = -2;

using Definitions = absl::flat_hash_map<absl::string_view, int>;

Definitions DefinitionsOf(const v1::Graph& graph) {
  Definitions definitions;
  auto define = [&](const std::string& name, int where) {
    auto [it, inserted] = definitions.emplace(name, where);
    if (!inserted) it->second = kDefinedTwice;
  };
  for (const v1::TensorSpec& feed : graph.feeds()) define(feed.name(), kFeed);
  for (int i = 0; i < graph.nodes_size(); ++i) {
    for (const std::string& out : graph.nodes(i).outputs()) define(out, i);
  }
  return definitions;
}

// The definition `name` resolves to as an input of node `reader` (as
// BuildGraph resolves it: the one definition before the node), or nullopt
// when BuildGraph would refuse that input. kFeed also stands for a name the
// graph does not define (a persistent tensor, or an error BuildGraph reports
// the same way wherever the name is read).
std::optional<int> Resolve(const Definitions& definitions, absl::string_view name, int reader) {
  auto it = definitions.find(name);
  if (it == definitions.end()) return kFeed;
  if (it->second == kDefinedTwice || it->second >= reader) return std::nullopt;
  return it->second;
}

// A node that transposes one tensor into one tensor (rank <= 2; BuildGraph
// checks the rank).
bool IsTranspose(const v1::Node& node) {
  return (node.op() == "t" || node.op() == "t_copy") && node.inputs_size() == 1 && node.outputs_size() == 1;
}

// A transpose node's output in terms of the start of its chain of
// transposes: `source` (a transpose node's input string, which the pass
// never changes) transposed once when `odd`, else `source` itself (t is its
// own inverse up to rank 2). Null source: the node's input does not resolve,
// so nothing folds through it.
struct TransposeSource {
  const std::string* source = nullptr;
  bool odd = false;
};

// The matrix operands of a product node: (input index, transpose attribute).
struct MatrixSlot {
  int input;
  const char* attr;
};

absl::Span<const MatrixSlot> MatrixSlotsOf(const v1::Node& node) {
  static constexpr MatrixSlot kMm[] = {{0, "transpose_a"}, {1, "transpose_b"}};
  static constexpr MatrixSlot kAddmm[] = {{1, "transpose_a"}, {2, "transpose_b"}};
  if (node.op() == "mm" && node.inputs_size() == 2) return kMm;
  if (node.op() == "addmm" && node.inputs_size() == 3) return kAddmm;
  return {};
}

// How often each name is read: by node inputs, fetches and updates (both
// sides of an update count).
using Uses = absl::flat_hash_map<absl::string_view, int>;

Uses UsesOf(const v1::Graph& graph) {
  Uses uses;
  for (const v1::Node& node : graph.nodes()) {
    for (const std::string& input : node.inputs()) ++uses[input];
  }
  for (const std::string& fetch : graph.fetches()) ++uses[fetch];
  for (const v1::Update& update : graph.updates()) {
    ++uses[update.persistent()];
    ++uses[update.value()];
  }
  return uses;
}

// Drops the nodes marked `removed`, keeping the others' order.
void RemoveNodes(v1::Graph* graph, const std::vector<bool>& removed) {
  auto* nodes = graph->mutable_nodes();
  const int num_nodes = nodes->size();
  int kept = 0;
  for (int i = 0; i < num_nodes; ++i) {
    if (removed[i]) continue;
    if (kept != i) nodes->SwapElements(kept, i);
    ++kept;
  }
  nodes->DeleteSubrange(kept, num_nodes - kept);
}

// A product node's transpose flag as the op reads it (Attrs::GetBool), or
// nullopt when the attribute is not a flag (BuildGraph reports it).
std::optional<bool> Flag(const v1::Node& node, const char* attr) {
  auto it = node.attrs().find(attr);
  if (it == node.attrs().end()) return false;
  if (it->second.value_case() == v1::AttrValue::kB) return it->second.b();
  if (it->second.value_case() == v1::AttrValue::kI) return it->second.i() != 0;
  return std::nullopt;
}

// t(mm(a, b)) -> mm(b, a) with both flags flipped and swapped ((op(A) op(B))^T
// = op(B)^T op(A)^T), when the product's only use is that transpose: the
// product then defines the transpose's output, and the transpose goes. A
// traced linear layer's weight gradient comes out as t(mm(t(x), g)).
void FoldTransposedProducts(v1::Graph* graph) {
  const int num_nodes = graph->nodes_size();
  const Definitions definitions = DefinitionsOf(*graph);
  Uses uses = UsesOf(*graph);
  std::vector<bool> removed(num_nodes, false);
  for (int i = 0; i < num_nodes; ++i) {
    const v1::Node& transpose = graph->nodes(i);
    if (!IsTranspose(transpose)) continue;
    const std::optional<int> producer = Resolve(definitions, transpose.inputs(0), i);
    if (!producer.has_value() || *producer < 0 || removed[*producer]) continue;
    v1::Node& product = *graph->mutable_nodes(*producer);
    if (product.op() != "mm" || product.inputs_size() != 2 || product.outputs_size() != 1) continue;
    if (uses[product.outputs(0)] != 1) continue;
    auto defined = definitions.find(transpose.outputs(0));
    if (defined == definitions.end() || defined->second != i) continue;  // defined twice: BuildGraph refuses
    const std::optional<bool> a = Flag(product, "transpose_a");
    const std::optional<bool> b = Flag(product, "transpose_b");
    if (!a.has_value() || !b.has_value()) continue;
    std::string first = product.inputs(0);
    product.set_inputs(0, product.inputs(1));
    product.set_inputs(1, first);
    (*product.mutable_attrs())["transpose_a"].set_b(!*b);
    (*product.mutable_attrs())["transpose_b"].set_b(!*a);
    product.set_outputs(0, transpose.outputs(0));
    *product.mutable_declared_outputs() = transpose.declared_outputs();
    removed[i] = true;
  }
  RemoveNodes(graph, removed);
}

}  // namespace

void FoldTransposes(v1::Graph* graph) {
  FoldTransposedProducts(graph);
  const int num_nodes = graph->nodes_size();
  const Definitions definitions = DefinitionsOf(*graph);
  std::vector<TransposeSource> sources(num_nodes);
  std::vector<bool> lost_use(num_nodes, false);

  // One pass in order: a transpose's source is known before any node that
  // reads it validly, since valid readers come after their producers.
  for (int i = 0; i < num_nodes; ++i) {
    v1::Node& node = *graph->mutable_nodes(i);
    if (IsTranspose(node)) {
      const std::string& input = node.inputs(0);
      const std::optional<int> producer = Resolve(definitions, input, i);
      if (!producer.has_value()) continue;
      if (*producer >= 0 && sources[*producer].source != nullptr) {
        sources[i] = {sources[*producer].source, !sources[*producer].odd};
      } else {
        sources[i] = {&input, true};
      }
      continue;
    }
    for (const MatrixSlot& slot : MatrixSlotsOf(node)) {
      const std::optional<int> producer = Resolve(definitions, node.inputs(slot.input), i);
      if (!producer.has_value() || *producer < 0 || sources[*producer].source == nullptr) continue;
      const TransposeSource& source = sources[*producer];
      const std::optional<bool> transposed = Flag(node, slot.attr);
      if (!transposed.has_value()) continue;  // not a flag: BuildGraph reports it
      if (source.odd) (*node.mutable_attrs())[slot.attr].set_b(!*transposed);
      node.set_inputs(slot.input, *source.source);
      lost_use[*producer] = true;
    }
    // Any other input that is an even chain of transposes (t(t(x)) == x up to
    // rank 2; the weight gradients of a traced linear layer come out so)
    // reads the chain's source.
    for (int k = 0; k < node.inputs_size(); ++k) {
      const std::optional<int> producer = Resolve(definitions, node.inputs(k), i);
      if (!producer.has_value() || *producer < 0) continue;
      const TransposeSource& source = sources[*producer];
      if (source.source == nullptr || source.odd) continue;
      node.set_inputs(k, *source.source);
      lost_use[*producer] = true;
    }
  }

  // Uses after folding; fetches and updates count as uses that never go.
  Uses uses = UsesOf(*graph);

  // Backwards, so that removing a transpose can free the transpose feeding
  // it (which comes earlier) before that one is looked at.
  std::vector<bool> removed(num_nodes, false);
  for (int i = num_nodes - 1; i >= 0; --i) {
    const v1::Node& node = graph->nodes(i);
    if (!lost_use[i] || !IsTranspose(node)) continue;
    auto output_uses = uses.find(node.outputs(0));
    if (output_uses != uses.end() && output_uses->second > 0) continue;
    removed[i] = true;
    const std::string& input = node.inputs(0);
    --uses[input];
    const std::optional<int> producer = Resolve(definitions, input, i);
    if (producer.has_value() && *producer >= 0) lost_use[*producer] = true;
  }

  RemoveNodes(graph, removed);
}

}  // namespace tandem
