#include "compiler/update_schedule.h"

#include <algorithm>

#include "ir/ops/fused_program.h"

namespace tandem {

UpdateSchedule ScheduleUpdates(const Graph& graph) {
  const int num_nodes = static_cast<int>(graph.nodes.size());
  const int num_values = static_cast<int>(graph.values.size());
  const int last_node = num_nodes - 1;
  UpdateSchedule schedule;
  schedule.copy_after.assign(graph.updates.size(), last_node);
  schedule.in_place.assign(graph.updates.size(), false);
  schedule.stored_in.assign(num_values, -1);
  if (num_nodes == 0) return schedule;

  int last_check = -1;
  std::vector<int> last_read(num_values, -1);
  for (int i = 0; i < num_nodes; ++i) {
    if (OpChecksData(graph.nodes[i].op)) last_check = i;
    for (int v : graph.nodes[i].inputs) last_read[v] = i;
  }
  // Persistents whose old value is read after the last node (a fetch, the
  // source of another update) or that are updated twice keep the end.
  std::vector<int> updates_of(num_values, 0);
  std::vector<int> sourced(num_values, 0);
  std::vector<bool> pinned(num_values, false);
  for (const auto& [target, value] : graph.updates) {
    ++updates_of[target];
    ++sourced[value];
  }
  for (int v : graph.fetchable) pinned[v] = true;
  for (int v = 0; v < num_values; ++v) {
    if (sourced[v] > 0 && graph.values[v].kind == ValueKind::kPersistent) pinned[v] = true;
    if (updates_of[v] > 1) pinned[v] = true;
  }

  for (size_t k = 0; k < graph.updates.size(); ++k) {
    const auto& [target, value] = graph.updates[k];
    const Value& source = graph.values[value];
    if (pinned[target] || source.kind != ValueKind::kIntermediate || source.producer < 0 || sourced[value] > 1) {
      continue;
    }
    const int producer = source.producer;
    const Node& node = graph.nodes[producer];
    bool in_place = node.op == kFusedElementwiseOp && source.type == graph.values[target].type &&
                    producer > last_check && last_read[target] <= producer;
    // The producer may read the target itself only as a full-shape operand
    // (read at the index it writes); the type check above makes it so.
    if (in_place) {
      schedule.in_place[k] = true;
      schedule.stored_in[value] = target;
      schedule.copy_after[k] = producer;
      continue;
    }
    schedule.copy_after[k] = std::max({producer, last_read[target], last_check});
  }
  schedule.after_node.resize(num_nodes);
  for (size_t k = 0; k < graph.updates.size(); ++k) {
    schedule.after_node[schedule.copy_after[k]].push_back(static_cast<int>(k));
  }
  return schedule;
}

}  // namespace tandem
