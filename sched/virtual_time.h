// Virtual time: each job's device seconds divided by its weight, the
// measure of fair shares that FAIR orders by and PACK bounds its lanes with.
//
// Virtual times are compared only among the jobs of one lane (jobs that run
// side by side slow each other, so their device times are not comparable).
// Each lane keeps a floor, the least virtual time among its active jobs,
// which never decreases. A new job starts at its lane's floor, with no
// credit; a job that was idle (nothing queued) or that moved lanes comes
// back at no less than the floor minus `window` seconds: the service it may
// claim back for the time it did not compete.
//
// Owned by one policy; not thread-safe.
#ifndef TANDEM_SCHED_VIRTUAL_TIME_H_
#define TANDEM_SCHED_VIRTUAL_TIME_H_

#include "absl/container/flat_hash_map.h"
#include "sched/sched_state.h"

namespace tandem::sched {

class VirtualTimes {
 public:
  explicit VirtualTimes(double window_seconds) : window_seconds_(window_seconds) {}

  // The job's virtual time (0 for a job not seen).
  double Of(JobId job) const;

  // The Policy hooks of the same names.
  void Added(const SchedState& state, const JobState& job);
  void Removed(JobId job) { vtime_.erase(job); }
  void Activated(const SchedState& state, const JobState& job);
  void Moved(const SchedState& state, const JobState& job);
  void Served(const SchedState& state, const JobState& job, double device_seconds);

 private:
  double Floor(int lane) const;
  void RaiseFloor(const SchedState& state, int lane);
  // Back to at least the lane's floor minus the window.
  void Rejoin(const SchedState& state, const JobState& job);

  const double window_seconds_;
  absl::flat_hash_map<JobId, double> vtime_;
  absl::flat_hash_map<int, double> floor_;
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_VIRTUAL_TIME_H_
