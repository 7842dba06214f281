// The scheduler: which job's iteration runs next in each lane.
//
// The daemon's control loop owns it. Jobs are added when admitted (with the
// lane memory gave them) and removed when they close. Iterations are
// enqueued as opaque tickets; when a lane is free the loop asks Next(lane)
// and starts what it returns; when the iteration finishes it reports the
// measured device time, which the policies use (FAIR's shares, SRTF's
// remaining time, the interference measurements).
//
// Thread-safety: not thread-safe; called from the control loop only. The
// clock is injected (the simulator drives a virtual one).
#ifndef TANDEM_SCHED_SCHEDULER_H_
#define TANDEM_SCHED_SCHEDULER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::sched {

using JobId = uint64_t;
using Ticket = uint64_t;

struct JobParams {
  int priority = 0;               // higher first under PRIORITY
  double weight = 1.0;            // FAIR share
  int64_t expected_iterations = 0;  // SRTF; 0: unknown
  int lane = 0;
};

struct Dispatch {
  JobId job = 0;
  Ticket ticket = 0;
};

struct JobSchedStats {
  JobId job = 0;
  int lane = 0;
  int priority = 0;
  double weight = 1.0;
  uint64_t iterations_done = 0;
  uint64_t queued = 0;
  double device_seconds = 0;       // total measured
  double mean_iteration_seconds = 0;
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;

  virtual std::string policy() const = 0;
  virtual absl::Status AddJob(JobId job, const JobParams& params) = 0;
  // Drops the job and its queued tickets (the caller fails them).
  virtual std::vector<Ticket> RemoveJob(JobId job) = 0;
  virtual absl::Status Enqueue(JobId job, Ticket ticket) = 0;
  // The next iteration to start on a free lane, or nullopt when nothing
  // there should run now.
  virtual std::optional<Dispatch> Next(int lane) = 0;
  virtual void OnIterationDone(JobId job, int lane, double device_seconds) = 0;
  virtual absl::Status SetPriority(JobId job, int priority) = 0;
  virtual std::vector<JobSchedStats> Stats() const = 0;
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_SCHEDULER_H_
