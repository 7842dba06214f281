#include "sched/fair_policy.h"

#include <algorithm>
#include <limits>

namespace tandem::sched {

double FairPolicy::VirtualTime(JobId job) const {
  auto it = vtime_.find(job);
  return it == vtime_.end() ? 0 : it->second;
}

double FairPolicy::Floor(int lane) const {
  auto it = floor_.find(lane);
  return it == floor_.end() ? 0 : it->second;
}

void FairPolicy::RaiseFloor(const SchedState& state, int lane) {
  const LaneState* l = state.Lane(lane);
  if (l == nullptr) return;
  double least = std::numeric_limits<double>::infinity();
  for (const JobState* job : l->jobs) {
    if (job->active()) least = std::min(least, VirtualTime(job->id));
  }
  if (least == std::numeric_limits<double>::infinity()) return;
  double& floor = floor_[lane];
  floor = std::max(floor, least);
}

std::optional<JobId> FairPolicy::Pick(const SchedState& state, int lane) {
  const LaneState* l = state.Lane(lane);
  if (l == nullptr) return std::nullopt;
  const JobState* best = nullptr;
  double best_vtime = 0;
  for (const JobState* job : l->jobs) {  // arrival order: ties go to the older
    if (!job->has_queued()) continue;
    const double v = VirtualTime(job->id);
    if (best == nullptr || v < best_vtime) {
      best = job;
      best_vtime = v;
    }
  }
  if (best == nullptr) return std::nullopt;
  return best->id;
}

int FairPolicy::ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const {
  return SingleLane(num_lanes);
}

void FairPolicy::OnJobAdded(const SchedState& state, const JobState& job) {
  RaiseFloor(state, job.lane());
  vtime_[job.id] = Floor(job.lane());
}

void FairPolicy::OnJobRemoved(const SchedState& state, JobId job) { vtime_.erase(job); }

void FairPolicy::OnJobActivated(const SchedState& state, const JobState& job) {
  double& v = vtime_[job.id];
  v = std::max(v, Floor(job.lane()) - window_seconds_);
}

void FairPolicy::OnJobMoved(const SchedState& state, const JobState& job, int from_lane) {
  // Virtual times of different lanes are not comparable: the job joins its
  // new lane with at most the window's credit.
  RaiseFloor(state, job.lane());
  double& v = vtime_[job.id];
  v = std::max(v, Floor(job.lane()) - window_seconds_);
}

void FairPolicy::OnIterationDone(const SchedState& state, const JobState& job, double device_seconds) {
  vtime_[job.id] += device_seconds / job.params.weight;
  RaiseFloor(state, job.lane());
}

}  // namespace tandem::sched
