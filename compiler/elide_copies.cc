#include "compiler/elide_copies.h"

#include <utility>

#include "base/status_macros.h"
#include "compiler/graph_rewriter.h"
#include "compiler/value_uses.h"

namespace tandem {
namespace {

// Whether node `n` copies its only input unchanged.
bool IsCopy(const Graph& g, const Node& n) {
  if (n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  if (n.op == "clone") return true;
  return (n.op == "expand" || n.op == "expand_copy") && g.values[n.inputs[0]].type == g.values[n.outputs[0]].type;
}

}  // namespace

absl::StatusOr<Graph> ElideCopies(const Graph& graph) {
  const ValueUses uses(graph);
  GraphRewriter out(graph);
  for (const Node& n : graph.nodes) {
    if (IsCopy(graph, n) && !uses.kept[n.outputs[0]] && out.Map(n.inputs[0]) >= 0) {
      out.SetMap(n.outputs[0], out.Map(n.inputs[0]));
      continue;
    }
    RETURN_IF_ERROR(out.Copy(n));
  }
  return std::move(out).Finish();
}

}  // namespace tandem
