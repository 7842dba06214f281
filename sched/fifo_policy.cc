#include "sched/fifo_policy.h"

namespace tandem::sched {

std::optional<JobId> FifoPolicy::Pick(const SchedState& state, int lane) {
  const LaneState* l = state.Lane(lane);
  if (l == nullptr || l->jobs.empty()) return std::nullopt;
  const JobState* oldest = l->jobs.front();
  if (!oldest->has_queued()) return std::nullopt;
  return oldest->id;
}

int FifoPolicy::ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const {
  return SingleLane(num_lanes);
}

}  // namespace tandem::sched
