// The way a pass rewrites a graph: it re-emits the graph through an
// IrBuilder, copying the nodes it keeps and adding the ones it makes, with
// the source's value ids mapped to the new graph's. The result is held to
// the rules a client's graph is (every node's types inferred again), so a
// pass cannot produce a graph that registration would refuse; a pass that
// does gets INTERNAL with the builder's message.
//
// Persistent tensors and feeds keep their names, order and types. A value
// the pass drops (a removed node's output) must not be read, fetched or
// updated afterwards. Not thread-safe.
#ifndef TANDEM_COMPILER_GRAPH_REWRITER_H_
#define TANDEM_COMPILER_GRAPH_REWRITER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/graph_builder.h"

namespace tandem {

class GraphRewriter {
 public:
  explicit GraphRewriter(const Graph& source, const GraphLimits& limits = {});

  // The new id of source value `v`; -1 when it has none (yet).
  int Map(int v) const { return map_[v]; }
  // Source node `node` as it is, reading its inputs' new ids.
  absl::Status Copy(const Node& node);
  // A node of `op` reading source values `inputs`; its outputs are named
  // `names` and stand for source values `replaces` (one each; -1 for an
  // output that replaces nothing).
  absl::Status Add(const std::string& op, const std::vector<int>& inputs, Attrs attrs,
                   const std::vector<std::string>& names, const std::vector<int>& replaces, std::string label);
  // A node of `op` reading values of the new graph (`new_inputs`: ids that
  // Map or an earlier AddNew returned), whose outputs stand for no source
  // value (SetMap may tie them to one). Returns their new ids; an empty
  // list once the rewriter has failed (the status says why).
  std::vector<int> AddNew(const std::string& op, std::vector<int> new_inputs, Attrs attrs,
                          const std::vector<std::string>& names, std::string label);
  // Source value `v` is new value `id` from now on.
  void SetMap(int v, int id) { map_[v] = id; }
  // A new value's type.
  const TensorType& NewType(int id) const { return builder_.graph().values[id].type; }
  const absl::Status& status() const { return status_; }
  // The rewritten graph: the source's fetches and updates, mapped.
  absl::StatusOr<Graph> Finish() &&;

 private:
  const Graph& source_;
  IrBuilder builder_;
  std::vector<int> map_;  // source value id -> new id
  absl::Status status_;   // the first error
};

}  // namespace tandem

#endif  // TANDEM_COMPILER_GRAPH_REWRITER_H_
