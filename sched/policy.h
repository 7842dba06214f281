// The tiny interface every scheduling policy implements, one policy per file
// (fifo_policy, pack_policy, fair_policy, srtf_policy, priority_policy,
// srtf_pack_policy).
//
// A policy decides; SchedulerImpl does the bookkeeping (queues, lanes,
// measurements) and calls the policy with the current state. Pick(lane) is
// asked only for a free lane and returns a job of that lane with a queued
// iteration, or nullopt to leave the lane idle for now. The hooks let a
// policy keep its own per-job bookkeeping. Not thread-safe.
#ifndef TANDEM_SCHED_POLICY_H_
#define TANDEM_SCHED_POLICY_H_

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sched/sched_state.h"
#include "sched/scheduler.h"

namespace tandem::sched {

class Policy {
 public:
  virtual ~Policy() = default;

  virtual absl::string_view name() const = 0;
  virtual std::optional<JobId> Pick(const SchedState& state, int lane) = 0;
  virtual int ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const = 0;
  virtual std::vector<LaneChange> Rebalance(const SchedState& state, int num_lanes) const { return {}; }
  virtual bool ShouldYield(const SchedState& state, int lane) const { return false; }
  // Whether the iteration of `job` that Pick just chose for the free `lane`
  // runs in segments (Dispatch::segmented).
  virtual bool Segmented(const SchedState& state, JobId job, int lane) const { return false; }

  // Called after the state reflects the change.
  virtual void OnJobAdded(const SchedState& state, const JobState& job) {}
  virtual void OnJobRemoved(const SchedState& state, JobId job) {}
  // The job had nothing queued or running and now has a queued iteration.
  virtual void OnJobActivated(const SchedState& state, const JobState& job) {}
  virtual void OnIterationDone(const SchedState& state, const JobState& job, double device_seconds) {}
  // The job now lives in job.lane() (it came from from_lane).
  virtual void OnJobMoved(const SchedState& state, const JobState& job, int from_lane) {}
};

// INVALID_ARGUMENT naming the valid policies when `name` is unknown.
absl::StatusOr<std::unique_ptr<Policy>> CreatePolicy(absl::string_view name, const SchedulerOptions& options);

// Helpers shared by the policies.
// The job of `lane` whose queued iteration arrived first (tickets grow with
// every iteration the daemon accepts), or nullptr: first come, first served
// across the lane's jobs, so jobs sharing a lane alternate and none of a
// crowd of request streams waits behind older jobs' later requests.
const JobState* FirstQueued(const SchedState& state, int lane);
// The lowest lane in [0, num_lanes) without jobs, or -1.
int FirstEmptyLane(const SchedState& state, int num_lanes);
// A lane for a policy that keeps every job in one lane: lane 0 (a new lane
// when none exists yet).
inline int SingleLane(int num_lanes) { return 0; }

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_POLICY_H_
