// SRTF: shortest remaining time first, preempting at iteration boundaries.
//
// Remaining time = (expected_iterations - iterations done) x the job's mean
// iteration time (its own measurements, else the solo time measured for its
// interference key). A free lane runs the job of that lane with the least
// remaining time that has a queued iteration (ties: the older job).
//
// Assumptions it was designed for:
//   * Clients declare expected_iterations honestly. A job that declares none
//     (0), or has already run past what it declared, is treated as long
//     (infinite remaining time): it runs only when no job with a known,
//     finite remaining time is waiting — under-declaring buys nothing after
//     the declared iterations are spent.
//   * Iteration times are steady, so a few iterations measure them. A job
//     with a declared length but no measurement yet (and no solo time for
//     its key) runs one probe iteration first, ahead of the others, so that
//     it can be ranked.
//   * Jobs share a lane and take turns (ChooseLane puts every job in lane 0),
//     so the measured times are solo times and the order is what matters.
#ifndef TANDEM_SCHED_SRTF_POLICY_H_
#define TANDEM_SCHED_SRTF_POLICY_H_

#include "absl/strings/string_view.h"
#include "sched/policy.h"

namespace tandem::sched {

class SrtfPolicy : public Policy {
 public:
  absl::string_view name() const override { return "srtf"; }
  std::optional<JobId> Pick(const SchedState& state, int lane) override;
  int ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const override;

  // Remaining seconds; +infinity when unknown. nullopt when the job's length
  // is declared but its iteration time is not known yet (a probe is due).
  static std::optional<double> RemainingSeconds(const SchedState& state, const JobState& job);
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_SRTF_POLICY_H_
