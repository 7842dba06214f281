// Where each ephemeral value of one iteration lives in a lane's arena.
//
// Feeds and intermediates are ephemeral: the planner packs them into one
// arena by liveness over the node order (a freed range is reused, a view
// shares its input's buffer, an elementwise op may overwrite an input it is
// the last reader of), so the exact peak is known at registration and no
// allocation happens while an iteration runs. Offsets are aligned to
// device::kDeviceAlignment. Persistent values are not in the arena, nor are
// new values of persistents computed in place of the old ones.
#ifndef TANDEM_COMPILER_ITERATION_LAYOUT_H_
#define TANDEM_COMPILER_ITERATION_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace tandem {

struct IterationLayout {
  // Per value id: byte offset in the arena; -1 for persistents and for the
  // values in `stored_in`.
  std::vector<int64_t> offset;
  // Per value id: the persistent value whose storage it is computed in (an
  // optimizer's new weights written in place, compiler/update_schedule.h), or
  // -1. Such a value's address is its persistent tensor's.
  std::vector<int> stored_in;
  uint64_t arena_bytes = 0;     // the planned peak of one iteration
  uint64_t no_reuse_bytes = 0;  // sum of all ephemeral sizes: the bound without reuse
};

absl::StatusOr<IterationLayout> PlanIterationLayout(const Graph& graph);

}  // namespace tandem

#endif  // TANDEM_COMPILER_ITERATION_LAYOUT_H_
