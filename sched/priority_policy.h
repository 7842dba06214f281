// PRIORITY: the highest priority with a queued iteration runs first;
// lower-priority (best-effort) jobs fill the gaps.
//
// Assumptions it was designed for:
//   * Few priority levels, and the high-priority jobs do not keep the device
//     busy all the time (inference, interactive training with data loading or
//     client round trips between iterations); the gaps are what best-effort
//     jobs get, and they may starve otherwise.
//   * Each priority level lives in its own lane (ChooseLane), so that an
//     iteration of a lower level can pause mid-iteration without its
//     ephemeral tensors being overwritten: a paused iteration keeps its lane.
//     Jobs of one level share their lane and take turns round-robin.
//   * Across lanes a lower level starts an iteration only while no higher
//     level has an iteration queued or running anywhere on the device.
//   * Preemption granularity: "iteration" never interrupts a running
//     iteration (a high-priority iteration that arrives then runs beside it
//     until it ends); "op" makes ShouldYield(lane) true for a lower-priority
//     iteration while a higher one is queued or running in another lane, so
//     the executor pauses it at its next op boundary and the high-priority
//     job runs as if alone.
#ifndef TANDEM_SCHED_PRIORITY_POLICY_H_
#define TANDEM_SCHED_PRIORITY_POLICY_H_

#include "absl/strings/string_view.h"
#include "sched/policy.h"

namespace tandem::sched {

class PriorityPolicy : public Policy {
 public:
  explicit PriorityPolicy(bool op_preemption) : op_preemption_(op_preemption) {}

  absl::string_view name() const override { return "priority"; }
  std::optional<JobId> Pick(const SchedState& state, int lane) override;
  int ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const override;
  bool ShouldYield(const SchedState& state, int lane) const override;

 private:
  // The highest priority with a queued or running (not paused) iteration in
  // any lane other than `except_lane`; nullopt when there is none.
  static std::optional<int> TopDemand(const SchedState& state, int except_lane);

  const bool op_preemption_;
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_PRIORITY_POLICY_H_
