// FIFO: one job at a time per lane, in arrival order — the no-sharing
// baseline.
//
// Assumptions it was designed for:
//   * Jobs are independent and users accept waiting for earlier jobs: the
//     lane's oldest job runs every iteration it queues, and the next job gets
//     the lane only when the earlier one has closed (RemoveJob). A job that
//     merely has nothing queued still holds the lane (it is "between
//     iterations", like a process that owns the GPU).
//   * No knowledge of job lengths, priorities or interference is needed or
//     used; every job is placed in lane 0, so nothing ever runs side by side.
#ifndef TANDEM_SCHED_FIFO_POLICY_H_
#define TANDEM_SCHED_FIFO_POLICY_H_

#include "absl/strings/string_view.h"
#include "sched/policy.h"

namespace tandem::sched {

class FifoPolicy : public Policy {
 public:
  absl::string_view name() const override { return "fifo"; }
  std::optional<JobId> Pick(const SchedState& state, int lane) override;
  int ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const override;
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_FIFO_POLICY_H_
