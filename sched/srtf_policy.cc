#include "sched/srtf_policy.h"

#include <limits>

namespace tandem::sched {

std::optional<double> SrtfPolicy::RemainingSeconds(const SchedState& state, const JobState& job) {
  constexpr double kLong = std::numeric_limits<double>::infinity();
  const int64_t expected = job.params.expected_iterations;
  if (expected <= 0 || job.iterations_done >= static_cast<uint64_t>(expected)) return kLong;
  const std::optional<double> per_iteration = state.IterationEstimate(job);
  if (!per_iteration) return std::nullopt;
  return static_cast<double>(expected - static_cast<int64_t>(job.iterations_done)) * *per_iteration;
}

std::optional<JobId> SrtfPolicy::Pick(const SchedState& state, int lane) {
  const LaneState* l = state.Lane(lane);
  if (l == nullptr) return std::nullopt;
  const JobState* best = nullptr;
  double best_remaining = 0;
  for (const JobState* job : l->jobs) {  // arrival order: ties go to the older
    if (!job->has_queued()) continue;
    const std::optional<double> remaining = RemainingSeconds(state, *job);
    if (!remaining) return job->id;  // the oldest job due a probe iteration
    if (best == nullptr || *remaining < best_remaining) {
      best = job;
      best_remaining = *remaining;
    }
  }
  if (best == nullptr) return std::nullopt;
  return best->id;
}

int SrtfPolicy::ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const {
  return SingleLane(num_lanes);
}

}  // namespace tandem::sched
