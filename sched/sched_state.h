// The scheduler's state as policies see it: jobs, their queues and
// measurements, lanes, interference estimates, the time.
//
// SchedulerImpl owns and mutates it; policies get a const reference and
// decide from it (they keep only their own bookkeeping, such as FAIR's
// virtual time). Not thread-safe.
#ifndef TANDEM_SCHED_SCHED_STATE_H_
#define TANDEM_SCHED_SCHED_STATE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "sched/estimate.h"
#include "sched/interference.h"
#include "sched/overlap_meter.h"
#include "sched/scheduler.h"

namespace tandem::sched {

struct JobState {
  JobId id = 0;
  JobParams params;          // params.lane is the job's current lane
  uint64_t arrival_seq = 0;  // order of AddJob; smaller is older
  int key = -1;              // interned interference key
  bool private_key = false;  // the key is the job's own (forgotten on removal)
  std::deque<Ticket> queue;
  uint64_t iterations_done = 0;
  double device_seconds = 0;
  RunningEstimate iteration_time;  // this job's own iterations, any conditions
  bool running = false;
  int staged = 0;  // iterations started behind a running one (lookahead)
  // Moved since its last iteration (or new, with first_iteration_captures):
  // the next one runs op by op and captures the job's graph on the daemon,
  // so it is not a measurement.
  bool unmeasured_next = false;
  uint64_t last_start_seq = 0;  // 0: never started

  int lane() const { return params.lane; }
  bool has_queued() const { return !queue.empty(); }
  // Queued, staged or running: the job wants the device now.
  bool active() const { return running || staged > 0 || !queue.empty(); }
};

// An iteration started behind the lane's running one (SchedulerOptions::
// lookahead); it counts as running once those before it are reported.
struct StagedIteration {
  Dispatch dispatch;
  int key = -1;  // the job's interference key when it was started
};

struct LaneState {
  std::vector<JobState*> jobs;  // sorted by arrival_seq
  bool busy = false;
  bool paused = false;
  std::deque<StagedIteration> staged;  // started behind the running iteration, oldest first
  JobId running_job = 0;
  int running_priority = 0;  // the running job's priority when it started
  bool has_last_job = false;
  JobId last_job = 0;       // the job whose iteration ran last here
  double run_since = 0;     // the clock's seconds when its running iteration started or last resumed
  double paused_since = 0;  // when its running iteration yielded (while paused)
};

struct SchedState {
  explicit SchedState(const SchedulerOptions& opts) : options(opts), interference(opts.min_interference_samples) {}

  const JobState* Job(JobId id) const {
    auto it = jobs.find(id);
    return it == jobs.end() ? nullptr : it->second.get();
  }
  const LaneState* Lane(int lane) const {
    if (lane < 0 || lane >= static_cast<int>(lanes.size())) return nullptr;
    return &lanes[lane];
  }
  int LaneCount() const { return static_cast<int>(lanes.size()); }
  bool LaneHasJobs(int lane) const {
    const LaneState* l = Lane(lane);
    return l != nullptr && !l->jobs.empty();
  }
  // The job's best guess of its iteration time: its own measurements, else
  // its key's solo time; nullopt when neither exists.
  std::optional<double> IterationEstimate(const JobState& job) const {
    if (job.iteration_time.samples() > 0) return job.iteration_time.mean();
    return interference.Solo(job.key);
  }

  const SchedulerOptions options;
  double now = 0;
  absl::flat_hash_map<JobId, std::unique_ptr<JobState>> jobs;
  std::vector<LaneState> lanes;
  OverlapMeter overlap;
  InterferenceEstimates interference;
  uint64_t next_arrival_seq = 1;
  uint64_t next_start_seq = 1;
  // Changes whenever a job is added or removed (and so whenever the set of
  // interference keys in use may change); policies cache on it.
  uint64_t jobs_version = 1;
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_SCHED_STATE_H_
