// When each update of an iteration reaches its persistent tensor.
//
// An update (persistent p <- value v: the optimizer's new weights, a batch
// norm's new running mean) used to be copied after the last node, which kept
// every new value alive in the arena to the end: the whole model's worth of
// new weights and optimizer state at once. This schedule applies each update
// as early as it is safe, and writes some straight into the persistent
// tensor, so the arena holds only what PyTorch's in-place optimizers hold.
//
// Safe means: no node reads p's old value afterwards, and a failing
// iteration still leaves every persistent tensor unchanged. Kernels that
// check data (OpChecksData: a bad label, an index out of range) fail the
// iteration when their node runs, so no update may land before the last of
// them has run. On the CPU backend a failing node stops the iteration at
// once; on CUDA the copies and the in-place kernels test the lane's error
// word and write nothing when it is set.
//
//   copy_after[k]  the node after which update k is copied (v -> p), for an
//                  update that is not in place: the latest of v's producer,
//                  the last node that reads p, and the last node that checks
//                  data. Updates from feeds or persistents, and updates of a
//                  persistent that is fetched or itself the source of an
//                  update, keep the end (the last node).
//   in_place[k]    v is computed straight into p's storage (no copy, no arena
//                  space). Only when v's producer is a `fused_elementwise`
//                  node (its kernels read every input element before writing
//                  the outputs at that index, and test the error word), v has
//                  p's type, the producer runs after the last data check and
//                  the last other reader of p, and reads p (if at all) as an
//                  operand of v's shape — never broadcast.
//
// Pure function of the graph; thread-safe.
#ifndef TANDEM_COMPILER_UPDATE_SCHEDULE_H_
#define TANDEM_COMPILER_UPDATE_SCHEDULE_H_

#include <vector>

#include "ir/graph.h"

namespace tandem {

struct UpdateSchedule {
  std::vector<int> copy_after;  // per graph.updates entry: a node index
  std::vector<bool> in_place;   // per graph.updates entry
  // Per value id: the persistent value whose storage it is computed in, or -1.
  std::vector<int> stored_in;
  // Per node: the updates (indices into graph.updates) to copy right after
  // it, in update order. In-place updates are listed at their producer: a
  // caller that placed the value elsewhere than the layout says (a test's
  // own buffers) still gets it copied; with the layout's addresses source and
  // target are one and the copy is skipped.
  std::vector<std::vector<int>> after_node;
};

// `graph` must be valid (BuildGraph). In a graph without nodes every update
// has copy_after -1 and is listed nowhere: the caller copies it at the end.
UpdateSchedule ScheduleUpdates(const Graph& graph);

}  // namespace tandem

#endif  // TANDEM_COMPILER_UPDATE_SCHEDULE_H_
