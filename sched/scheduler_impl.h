// SchedulerImpl: the Scheduler behind CreateScheduler. It keeps the queues,
// lanes and measurements (SchedState) and asks its current Policy for every
// decision; SetPolicy swaps the policy and keeps the state.
//
// Thread-safety: not thread-safe (the control loop's).
#ifndef TANDEM_SCHED_SCHEDULER_IMPL_H_
#define TANDEM_SCHED_SCHEDULER_IMPL_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "sched/policy.h"
#include "sched/sched_state.h"
#include "sched/scheduler.h"

namespace tandem::sched {

class SchedulerImpl : public Scheduler {
 public:
  SchedulerImpl(const SchedulerOptions& options, std::shared_ptr<Clock> clock, std::unique_ptr<Policy> policy);

  std::string policy() const override { return std::string(policy_->name()); }
  absl::Status AddJob(JobId job, const JobParams& params) override;
  std::vector<Ticket> RemoveJob(JobId job) override;
  absl::Status Enqueue(JobId job, Ticket ticket) override;
  std::optional<Dispatch> Next(int lane) override;
  void OnIterationDone(JobId job, int lane, double device_seconds) override;
  absl::Status SetPriority(JobId job, int priority) override;
  std::vector<JobSchedStats> Stats() const override;

  absl::Status SetPolicy(absl::string_view policy) override;
  absl::Status SetWeight(JobId job, double weight) override;
  absl::Status SetExpectedIterations(JobId job, int64_t expected_iterations) override;

  int ChooseLane(const JobParams& params, int num_lanes) const override;
  absl::Status MoveJob(JobId job, int lane) override;
  std::vector<LaneChange> Rebalance(int num_lanes) const override;

  bool ShouldYield(int lane) override;
  void OnIterationYielded(int lane) override;
  void OnIterationResumed(int lane) override;
  void OnIterationAborted(JobId job, int lane) override;
  void CancelDispatch(JobId job, int lane) override;

  std::vector<PairInterference> Interference() const override;

 private:
  JobState* FindJob(JobId job);
  absl::StatusOr<JobState*> JobOrNotFound(JobId job, absl::string_view what);
  LaneState& LaneFor(int lane);
  void InsertIntoLane(JobState* job);
  void EraseFromLane(JobState* job);
  // Ends the lane's running iteration, then starts its next staged one;
  // returns the ended one's overlap sample.
  OverlapMeter::Sample EndIteration(int lane);
  // Makes `dispatch` the lane's running iteration (job: null when closed).
  void StartRunning(int lane, const Dispatch& dispatch, const JobState* job, int key);
  // Whether `job` may be started behind a running iteration (lookahead).
  bool MayStage(const JobState& job) const;
  void Tick() { state_.now = clock_->Now(); }

  std::shared_ptr<Clock> clock_;
  std::unique_ptr<Policy> policy_;
  SchedState state_;
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_SCHEDULER_IMPL_H_
