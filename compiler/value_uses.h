// Who reads each value of a graph and which values leave the iteration: what
// the graph passes ask before they remove or move a value. Plain data.
#ifndef TANDEM_COMPILER_VALUE_USES_H_
#define TANDEM_COMPILER_VALUE_USES_H_

#include <vector>

#include "ir/graph.h"

namespace tandem {

struct ValueUses {
  explicit ValueUses(const Graph& g) : readers(g.values.size()), kept(g.values.size(), false) {
    for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
      for (int v : g.nodes[i].inputs) readers[v].push_back(i);
    }
    for (int v : g.fetchable) kept[v] = true;
    for (const auto& [target, v] : g.updates) kept[v] = true;
  }

  std::vector<std::vector<int>> readers;  // by value: reading nodes, ascending (a node reading twice appears twice)
  std::vector<bool> kept;                 // by value: fetched or updated
};

}  // namespace tandem

#endif  // TANDEM_COMPILER_VALUE_USES_H_
