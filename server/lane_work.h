// The one sequence that puts an iteration's device work on a lane's stream,
// for a whole iteration and for each segment of one that runs in segments
// (op-granularity preemption): run on the lane's executor thread.
#ifndef TANDEM_SERVER_LANE_WORK_H_
#define TANDEM_SERVER_LANE_WORK_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "device/device.h"
#include "kernels/program.h"
#include "server/state.h"

namespace tandem::server {

// One enqueue on a lane's stream: the whole program, or nodes
// [begin_node, end_node) of it as one segment of an iteration.
struct LaneWork {
  device::Device* device = nullptr;
  device::Stream* stream = nullptr;
  Program* program = nullptr;
  std::shared_ptr<const std::vector<void*>> table;  // the program's address table
  bool whole = true;                                // Program::Enqueue; else EnqueueNodes
  int begin_node = 0;
  int end_node = 0;
  bool first = true;  // the iteration's first part: its begin event, feeds and start event
  bool last = true;   // its last part: its end event and fetches
  std::vector<StagedCopy> feeds;
  std::vector<StagedCopy> fetches;
  // The iteration's events: begin (before the feeds: the lane-gap probe),
  // start and end (around the program: its device time).
  device::Event* begin = nullptr;
  device::Event* start = nullptr;
  device::Event* end = nullptr;
  // A segment's own events around its nodes (null for a whole iteration).
  device::Event* segment_start = nullptr;
  device::Event* segment_end = nullptr;
};

// Enqueues, in this order and stopping at the first error: (first) begin,
// the feeds' copies, start; segment_start; the nodes; segment_end; (last)
// end, the fetches' copies. The caller then asks for the completion
// (Device::OnComplete), or reports the error as the completion.
absl::Status EnqueueLaneWork(const LaneWork& work);

}  // namespace tandem::server

#endif  // TANDEM_SERVER_LANE_WORK_H_
