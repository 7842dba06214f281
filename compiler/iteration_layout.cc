// Turns an iteration graph into buffer lifetimes and lets the arena planner
// place them (memory/arena_planner.h).
//
// Steps: node i runs at step i; feeds are live from step 0; a value is live
// from its definition to its last reader; fetched values stay live to step N
// (= number of nodes: they are copied out after the last node), and update
// sources to the node after which their update is copied
// (compiler/update_schedule.h). Sources computed straight into their
// persistent tensor take no arena space at all.
// Values that must share memory are merged into one buffer first:
//   - kView: output 0 shares input 0's buffer when input 0 is ephemeral (and
//     the output is no larger than the input);
//   - kInPlace: output 0 takes input 0's buffer when this node is the last
//     reader of every value in that buffer, none of them is fetched or
//     updated, the sizes match, and no other input of the node is a
//     different value in the same buffer (an elementwise kernel reads and
//     writes index by index, which is only safe for the same tensor).
#include "compiler/iteration_layout.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/update_schedule.h"
#include "device/device.h"
#include "memory/arena_planner.h"
#include "memory/byte_format.h"

namespace tandem {
namespace {

// Union-find over value ids; the root owns the buffer.
class Buffers {
 public:
  explicit Buffers(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  int Find(int v) {
    while (parent_[v] != v) {
      parent_[v] = parent_[parent_[v]];
      v = parent_[v];
    }
    return v;
  }
  // Merges `member`'s buffer into `owner`'s.
  void Merge(int owner, int member) { parent_[Find(member)] = Find(owner); }

 private:
  std::vector<int> parent_;
};

}  // namespace

absl::StatusOr<IterationLayout> PlanIterationLayout(const Graph& graph) {
  const int num_values = static_cast<int>(graph.values.size());
  const int num_nodes = static_cast<int>(graph.nodes.size());
  const int end_step = num_nodes;
  auto check_id = [&](int id, const std::string& where) -> absl::Status {
    if (id < 0 || id >= num_values) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory layout: ", where, " names value ", id, ", but the graph has ", num_values, " values"));
    }
    return absl::OkStatus();
  };
  for (const auto& [persistent, v] : graph.updates) {
    if (absl::Status s = check_id(v, "an update"); !s.ok()) return s;
    if (absl::Status s = check_id(persistent, "an update"); !s.ok()) return s;
  }
  UpdateSchedule updates = ScheduleUpdates(graph);
  auto ephemeral = [&](int v) { return graph.values[v].kind != ValueKind::kPersistent && updates.stored_in[v] < 0; };

  // Per value: first and last step it is live.
  std::vector<int> first(num_values, 0);
  std::vector<int> last(num_values, -1);
  for (int i = 0; i < num_nodes; ++i) {
    const Node& node = graph.nodes[i];
    for (int v : node.inputs) {
      if (absl::Status s = check_id(v, node.Describe(i)); !s.ok()) return s;
      last[v] = std::max(last[v], i);
    }
    for (int v : node.outputs) {
      if (absl::Status s = check_id(v, node.Describe(i)); !s.ok()) return s;
      first[v] = i;
      last[v] = std::max(last[v], i);
    }
  }
  for (int v = 0; v < num_values; ++v) {
    if (graph.values[v].kind == ValueKind::kFeed) {
      first[v] = 0;
      last[v] = std::max(last[v], 0);
    }
  }
  for (size_t k = 0; k < graph.updates.size(); ++k) {
    const int v = graph.updates[k].second;
    last[v] = std::max(last[v], updates.copy_after[k]);
  }
  for (int v : graph.fetchable) {
    if (absl::Status s = check_id(v, "a fetch"); !s.ok()) return s;
    last[v] = end_step;
  }

  // Merge views and in-place outputs into their input's buffer, in node order
  // so that a buffer's members are known when a later node asks.
  Buffers buffers(num_values);
  std::vector<int> buffer_last(last);  // by root: the last step of any member
  for (int i = 0; i < num_nodes; ++i) {
    const Node& node = graph.nodes[i];
    if (node.def == nullptr || node.inputs.empty() || node.outputs.empty()) continue;
    const int in = node.inputs[0];
    const int out = node.outputs[0];
    if (!ephemeral(in) || !ephemeral(out) || in == out) continue;
    const int root = buffers.Find(in);
    bool merge = false;
    if (node.def->alias == AliasKind::kView) {
      // A view reinterprets its input's bytes; one that claims more bytes
      // than its input has is not a view of them.
      merge = graph.values[out].type.bytes() <= graph.values[in].type.bytes();
    } else if (node.def->alias == AliasKind::kInPlace) {
      merge = buffer_last[root] == i && graph.values[out].type.bytes() == graph.values[in].type.bytes();
      for (size_t k = 1; merge && k < node.inputs.size(); ++k) {
        const int other = node.inputs[k];
        if (other != in && ephemeral(other) && buffers.Find(other) == root) merge = false;
      }
    }
    if (!merge) continue;
    const int out_root = buffers.Find(out);
    buffers.Merge(in, out);
    buffer_last[root] = std::max(buffer_last[root], buffer_last[out_root]);
  }

  // One lifetime per buffer.
  const uint64_t alignment = device::kDeviceAlignment;
  std::vector<int> buffer_of(num_values, -1);
  std::vector<memory::BufferLifetime> lifetimes;
  IterationLayout layout;
  layout.offset.assign(num_values, -1);
  for (int v = 0; v < num_values; ++v) {
    if (!ephemeral(v)) continue;
    const uint64_t bytes = graph.values[v].type.bytes();
    layout.no_reuse_bytes += memory::AlignUp(bytes, alignment);
    const int root = buffers.Find(v);
    if (buffer_of[root] < 0) {
      buffer_of[root] = static_cast<int>(lifetimes.size());
      lifetimes.push_back({bytes, first[v], last[v] < 0 ? first[v] : last[v]});
    }
    memory::BufferLifetime& lifetime = lifetimes[buffer_of[root]];
    lifetime.bytes = std::max<uint64_t>(lifetime.bytes, bytes);
    lifetime.first = std::min(lifetime.first, first[v]);
    lifetime.last = std::max(lifetime.last, last[v] < 0 ? first[v] : last[v]);
  }
  memory::ArenaPlan plan = memory::PlanArena(lifetimes, alignment);
  for (int v = 0; v < num_values; ++v) {
    if (!ephemeral(v)) continue;
    layout.offset[v] = static_cast<int64_t>(plan.offsets[buffer_of[buffers.Find(v)]]);
  }
  layout.arena_bytes = plan.peak_bytes;
  layout.stored_in = std::move(updates.stored_in);
  return layout;
}

}  // namespace tandem
