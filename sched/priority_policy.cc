#include "sched/priority_policy.h"

#include <cstdlib>
#include <limits>

namespace tandem::sched {

std::optional<int> PriorityPolicy::TopDemand(const SchedState& state, int except_lane) {
  std::optional<int> top;
  for (int lane = 0; lane < state.LaneCount(); ++lane) {
    if (lane == except_lane) continue;
    const LaneState& l = state.lanes[lane];
    if (l.busy && !l.paused) {
      if (!top || l.running_priority > *top) top = l.running_priority;
    }
    for (const JobState* job : l.jobs) {
      if (job->has_queued() && (!top || job->params.priority > *top)) top = job->params.priority;
    }
  }
  return top;
}

std::optional<JobId> PriorityPolicy::Pick(const SchedState& state, int lane) {
  const LaneState* l = state.Lane(lane);
  if (l == nullptr) return std::nullopt;
  // The lane's best candidate: highest priority, then least recently started.
  const JobState* best = nullptr;
  for (const JobState* job : l->jobs) {
    if (!job->has_queued()) continue;
    if (best == nullptr || job->params.priority > best->params.priority ||
        (job->params.priority == best->params.priority && job->last_start_seq < best->last_start_seq)) {
      best = job;
    }
  }
  if (best == nullptr) return std::nullopt;
  const std::optional<int> elsewhere = TopDemand(state, lane);
  if (elsewhere && *elsewhere > best->params.priority) return std::nullopt;
  return best->id;
}

int PriorityPolicy::ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const {
  // The lane of the same level; else an empty lane; else a new one; else the
  // lane whose level is nearest.
  int nearest = -1;
  long nearest_distance = std::numeric_limits<long>::max();
  for (int lane = 0; lane < num_lanes && lane < state.LaneCount(); ++lane) {
    for (const JobState* job : state.lanes[lane].jobs) {
      const long distance = std::labs(static_cast<long>(job->params.priority) - params.priority);
      if (distance == 0) return lane;
      if (distance < nearest_distance) {
        nearest_distance = distance;
        nearest = lane;
      }
    }
  }
  const int empty = FirstEmptyLane(state, num_lanes);
  if (empty >= 0) return empty;
  if (num_lanes < state.options.max_lanes) return num_lanes;
  return nearest >= 0 ? nearest : 0;
}

bool PriorityPolicy::ShouldYield(const SchedState& state, int lane) const {
  if (!op_preemption_) return false;
  const LaneState* l = state.Lane(lane);
  if (l == nullptr || !l->busy) return false;
  const std::optional<int> elsewhere = TopDemand(state, lane);
  return elsewhere && *elsewhere > l->running_priority;
}

}  // namespace tandem::sched
