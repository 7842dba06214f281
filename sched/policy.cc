#include "sched/policy.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "sched/fair_policy.h"
#include "sched/fifo_policy.h"
#include "sched/pack_policy.h"
#include "sched/priority_policy.h"
#include "sched/srtf_pack_policy.h"
#include "sched/srtf_policy.h"

namespace tandem::sched {

absl::StatusOr<std::unique_ptr<Policy>> CreatePolicy(absl::string_view name, const SchedulerOptions& options) {
  if (name == "fifo") return std::make_unique<FifoPolicy>();
  if (name == "priority") return std::make_unique<PriorityPolicy>(options.preemption == "op");
  if (name == "fair") return std::make_unique<FairPolicy>(options.fair_window_seconds);
  if (name == "srtf") return std::make_unique<SrtfPolicy>();
  if (name == "pack") return std::make_unique<PackPolicy>(options);
  if (name == "srtf_pack") return std::make_unique<SrtfPackPolicy>(options);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown scheduling policy '", std::string(name), "'; valid: ", absl::StrJoin(PolicyNames(), ", ")));
}

const JobState* FirstQueued(const SchedState& state, int lane) {
  const LaneState* l = state.Lane(lane);
  if (l == nullptr) return nullptr;
  const JobState* first = nullptr;
  for (const JobState* job : l->jobs) {
    if (job->has_queued() && (first == nullptr || job->queue.front() < first->queue.front())) first = job;
  }
  return first;
}

int FirstEmptyLane(const SchedState& state, int num_lanes) {
  for (int lane = 0; lane < num_lanes; ++lane) {
    if (!state.LaneHasJobs(lane)) return lane;
  }
  return -1;
}

}  // namespace tandem::sched
