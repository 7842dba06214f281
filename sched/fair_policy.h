// FAIR: equal (or weighted) device time per job, measured per iteration.
//
// Each job has a virtual time: its measured device seconds divided by its
// weight. A free lane runs the job of that lane with the least virtual time
// among those with a queued iteration (ties: the older job), so over any
// stretch where jobs stay busy each gets device time in proportion to its
// weight, to within one iteration.
//
// Assumptions it was designed for:
//   * Iterations are short next to the window over which fairness is judged
//     (a share is exact to within one iteration of the largest job).
//   * Jobs share a lane and take turns (ChooseLane puts every job in lane 0):
//     device time of jobs running side by side is not comparable, so FAIR
//     does not run them so. Jobs that memory placed in other lanes are
//     treated fairly among their lane-mates.
//   * A job that was idle (nothing queued) may claim back at most `window`
//     seconds of normalized service it missed; a new job starts level with
//     the lane's least-served active job, with no credit.
#ifndef TANDEM_SCHED_FAIR_POLICY_H_
#define TANDEM_SCHED_FAIR_POLICY_H_

#include "absl/strings/string_view.h"
#include "sched/policy.h"
#include "sched/virtual_time.h"

namespace tandem::sched {

class FairPolicy : public Policy {
 public:
  explicit FairPolicy(double window_seconds) : vtimes_(window_seconds) {}

  absl::string_view name() const override { return "fair"; }
  std::optional<JobId> Pick(const SchedState& state, int lane) override;
  int ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const override;

  void OnJobAdded(const SchedState& state, const JobState& job) override;
  void OnJobRemoved(const SchedState& state, JobId job) override;
  void OnJobActivated(const SchedState& state, const JobState& job) override;
  void OnIterationDone(const SchedState& state, const JobState& job, double device_seconds) override;
  void OnJobMoved(const SchedState& state, const JobState& job, int from_lane) override;

  // For tests and reports: the job's virtual time (normalized service).
  double VirtualTime(JobId job) const { return vtimes_.Of(job); }

 private:
  VirtualTimes vtimes_;
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_FAIR_POLICY_H_
