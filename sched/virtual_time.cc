#include "sched/virtual_time.h"

#include <algorithm>
#include <limits>

namespace tandem::sched {

double VirtualTimes::Of(JobId job) const {
  auto it = vtime_.find(job);
  return it == vtime_.end() ? 0 : it->second;
}

double VirtualTimes::Floor(int lane) const {
  auto it = floor_.find(lane);
  return it == floor_.end() ? 0 : it->second;
}

void VirtualTimes::RaiseFloor(const SchedState& state, int lane) {
  const LaneState* l = state.Lane(lane);
  if (l == nullptr) return;
  double least = std::numeric_limits<double>::infinity();
  for (const JobState* job : l->jobs) {
    if (job->active()) least = std::min(least, Of(job->id));
  }
  if (least == std::numeric_limits<double>::infinity()) return;
  double& floor = floor_[lane];
  floor = std::max(floor, least);
}

void VirtualTimes::Rejoin(const SchedState& state, const JobState& job) {
  double& v = vtime_[job.id];
  v = std::max(v, Floor(job.lane()) - window_seconds_);
}

void VirtualTimes::Added(const SchedState& state, const JobState& job) {
  RaiseFloor(state, job.lane());
  vtime_[job.id] = Floor(job.lane());
}

void VirtualTimes::Activated(const SchedState& state, const JobState& job) { Rejoin(state, job); }

void VirtualTimes::Moved(const SchedState& state, const JobState& job) {
  RaiseFloor(state, job.lane());
  Rejoin(state, job);
}

void VirtualTimes::Served(const SchedState& state, const JobState& job, double device_seconds) {
  vtime_[job.id] += device_seconds / job.params.weight;
  RaiseFloor(state, job.lane());
}

}  // namespace tandem::sched
