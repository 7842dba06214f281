// The IR: one iteration of a job as a static dataflow graph.
//
// Values are typed tensors (dtype, shape, contiguous row-major). A value is
// persistent (lives across iterations: weights, optimizer state), a feed
// (supplied per iteration) or an intermediate (defined by exactly one node).
// Nodes are in topological order. Fetches name values a client may ask for;
// updates copy a value into a persistent tensor after every iteration (the
// optimizer writing new weights back).
//
// A Graph is immutable once built by BuildGraph (graph_builder.h), which
// validates it against the op registry; later stages rely on that.
#ifndef TANDEM_IR_GRAPH_H_
#define TANDEM_IR_GRAPH_H_

#include <string>
#include <utility>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/container/flat_hash_map.h"
#include "ir/attrs.h"
#include "ir/dtype.h"
#include "ir/op_registry.h"

namespace tandem {

enum class ValueKind { kPersistent, kFeed, kIntermediate };

struct Value {
  std::string name;
  TensorType type;
  ValueKind kind = ValueKind::kIntermediate;
  int producer = -1;  // index of the defining node; -1 for persistents and feeds
};

struct Node {
  std::string op;
  const OpDef* def = nullptr;  // points into OpRegistry::Global()
  std::vector<int> inputs;     // value ids
  std::vector<int> outputs;    // value ids
  Attrs attrs;
  std::string label;  // free text for errors (module path)

  // "node 12 (addmm 'fc1')" for error messages.
  std::string Describe(int index) const;
};

struct Graph {
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> persistents;              // value ids, in registration order
  std::vector<int> feeds;                    // value ids, in declaration order
  std::vector<int> fetchable;                // value ids a run may fetch
  std::vector<std::pair<int, int>> updates;  // (persistent id, value id)
  absl::flat_hash_map<std::string, int> by_name;

  // -1 when there is no such value.
  int Find(absl::string_view name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? -1 : it->second;
  }
};

}  // namespace tandem

#endif  // TANDEM_IR_GRAPH_H_
