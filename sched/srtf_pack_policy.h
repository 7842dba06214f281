// SRTF_PACK: shortest remaining time first, and side by side while the
// measured interference says that pays.
//
// Jobs are ranked as SRTF ranks them (remaining iterations x iteration time;
// ties: the older job). The running set is built greedily in rank order: the
// shortest job, then each next job that PACK's rule lets run beside every
// job already in the set (1/r(A,B) + 1/r(B,A) > 1 + pack_margin, or the pair
// not measured yet, which is how it gets measured), at most one job per lane
// and max_lanes jobs in all. Jobs that clash with the set wait, as they
// would under SRTF.
//
//   * Pick: a free lane runs its job of the running set, or stays idle (a
//     job outside the set would slow a shorter one for too little gain).
//     Preemption happens at iteration boundaries, as under SRTF. A job whose
//     key has no solo time yet gets PACK's solo probes first.
//   * ChooseLane: PACK's placement (a clashing partner's lane, else an empty
//     or a new lane), so measured clashers take turns in one lane.
//   * Rebalance: when two jobs of the running set (built without regard to
//     lanes) share a lane, the lower-ranked one moves to a lane that holds
//     no job of the set (an empty one first, then one new lane per call).
//
// Assumptions it was designed for:
//   * SRTF's: honest expected_iterations (none, or past it: infinitely
//     long), steady iteration times. The iteration time used is the key's
//     solo time when measured (a job's own mean includes the slowdown of its
//     partners), else the job's own mean; a job with neither is ranked first
//     so that one iteration measures it.
//   * PACK's: pairwise, additive interference; alike jobs share a key;
//     memory has the last word on placement (moves it refuses leave the set
//     built lane by lane, so a lane never runs two jobs at once).
#ifndef TANDEM_SCHED_SRTF_PACK_POLICY_H_
#define TANDEM_SCHED_SRTF_PACK_POLICY_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "sched/pack_policy.h"
#include "sched/policy.h"

namespace tandem::sched {

class SrtfPackPolicy : public Policy {
 public:
  explicit SrtfPackPolicy(const SchedulerOptions& options)
      : margin_(options.pack_margin),
        max_lanes_(options.max_lanes),
        probes_(4 * options.min_interference_samples, /*segmented=*/false) {}

  absl::string_view name() const override { return "srtf_pack"; }
  std::optional<JobId> Pick(const SchedState& state, int lane) override;
  int ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const override;
  std::vector<LaneChange> Rebalance(const SchedState& state, int num_lanes) const override;

  // Remaining seconds (+infinity when the length is unknown or spent);
  // nullopt when no iteration time is known yet.
  static std::optional<double> RemainingSeconds(const SchedState& state, const JobState& job);

 private:
  // The running set: active jobs (queued, staged or running) taken
  // shortest remaining first while they fit, at most max_lanes of them, in
  // that order. by_lane: at most one job per lane.
  std::vector<const JobState*> RunningSet(const SchedState& state, bool by_lane) const;

  const double margin_;
  const int max_lanes_;
  SoloProbes probes_;
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_SRTF_PACK_POLICY_H_
