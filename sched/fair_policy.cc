#include "sched/fair_policy.h"

namespace tandem::sched {

std::optional<JobId> FairPolicy::Pick(const SchedState& state, int lane) {
  const LaneState* l = state.Lane(lane);
  if (l == nullptr) return std::nullopt;
  const JobState* best = nullptr;
  double best_vtime = 0;
  for (const JobState* job : l->jobs) {  // arrival order: ties go to the older
    if (!job->has_queued()) continue;
    const double v = vtimes_.Of(job->id);
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

void FairPolicy::OnJobAdded(const SchedState& state, const JobState& job) { vtimes_.Added(state, job); }

void FairPolicy::OnJobRemoved(const SchedState& state, JobId job) { vtimes_.Removed(job); }

void FairPolicy::OnJobActivated(const SchedState& state, const JobState& job) { vtimes_.Activated(state, job); }

void FairPolicy::OnJobMoved(const SchedState& state, const JobState& job, int from_lane) {
  // Virtual times of different lanes are not comparable: the job joins its
  // new lane with at most the window's credit.
  vtimes_.Moved(state, job);
}

void FairPolicy::OnIterationDone(const SchedState& state, const JobState& job, double device_seconds) {
  vtimes_.Served(state, job, device_seconds);
}

}  // namespace tandem::sched
