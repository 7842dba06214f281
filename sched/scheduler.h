// The scheduler: which job's iteration runs next in each lane, and which lane
// a job should live in.
//
// The daemon's control loop owns it. Jobs are added when admitted (with the
// lane memory gave them) and removed when they close. Iterations are
// enqueued as opaque tickets; when a lane is free the loop asks Next(lane)
// and starts what it returns; when the iteration finishes it reports the
// measured device time, which the policies use (FAIR's shares, SRTF's
// remaining time, the interference measurements).
//
// Lanes. A lane is one ephemeral arena (memory/device_memory.h): jobs in one
// lane take turns, one iteration at a time; different lanes run side by side.
// Before admitting a job the loop asks ChooseLane() where the policy wants it
// (an existing lane, or num_lanes for a new one), admits it with memory, and
// passes the lane memory actually granted to AddJob. At iteration boundaries
// it may ask Rebalance() for moves (PACK folds lanes whose jobs slow each
// other down and spreads jobs that run well side by side), carries out the
// ones memory accepts, and reports each with MoveJob().
//
// The control loop's contract:
//   * A Dispatch returned by Next(lane) is started at once; the lane is busy
//     until OnIterationDone(job, lane, ...) or OnIterationAborted(job, lane).
//     A Dispatch the loop cannot start after all is handed back at once with
//     CancelDispatch(job, lane).
//   * Lookahead (SchedulerOptions::lookahead > 0): Next(lane) also answers
//     for a busy lane, up to `lookahead` iterations started behind the
//     running one, which the loop enqueues on the lane's stream so that the
//     device goes from one iteration to the next without waiting for the
//     loop. Done and abort reports always name the lane's oldest started
//     iteration; the next one counts as running from that report on.
//   * After every event (AddJob, Enqueue, iteration done or aborted, MoveJob,
//     SetPolicy, a priority or weight change) it calls Next() on every free
//     lane: a policy may hold a lane back while another runs, and releases it
//     only on such an event.
//   * With op-granularity preemption the executor polls ShouldYield(lane) at
//     each op boundary of the running iteration; when it pauses it calls
//     OnIterationYielded(lane), keeps polling after each event, and calls
//     OnIterationResumed(lane) when it goes on. A yielded iteration keeps its
//     lane (its ephemeral tensors stay in the lane's arena). The same holds
//     for an iteration whose Dispatch says `segmented`, under any policy.
//
// Interference. The scheduler knows which lanes are busy at every moment, so
// each finished iteration comes with how long it ran alone and beside whom.
// From that it keeps, per interference key (a job, or a class of alike jobs),
// the solo iteration time, and per ordered pair of keys the degradation
// coefficient r(A,B) = A's iteration time beside B / A's time alone.
//
// Thread-safety: not thread-safe; called from the control loop only. The
// clock is injected (the simulator drives a virtual one).
#ifndef TANDEM_SCHED_SCHEDULER_H_
#define TANDEM_SCHED_SCHEDULER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sched/clock.h"

namespace tandem::sched {

using JobId = uint64_t;
using Ticket = uint64_t;

// The largest expected_iterations accepted (anything above is a mistake).
inline constexpr int64_t kMaxExpectedIterations = 1'000'000'000'000;

struct JobParams {
  int priority = 0;                 // higher first under PRIORITY
  double weight = 1.0;              // FAIR share; positive and finite
  int64_t expected_iterations = 0;  // SRTF; 0: unknown
  int lane = 0;
  // Jobs with the same non-empty key are taken to behave alike (same model,
  // batch and graph): they share solo-time and interference estimates, so a
  // sweep of alike jobs is measured once. Empty: the job is its own key.
  std::string interference_key;
};

struct Dispatch {
  JobId job = 0;
  Ticket ticket = 0;
  // Run it in segments (Program::EnqueueNodes) and poll ShouldYield(lane)
  // at each segment boundary, whatever the preemption option: PACK's solo
  // probe of a newcomer beside running jobs (SoloProbes), which pauses so
  // that a job it holds up runs an iteration in between.
  bool segmented = false;
};

struct JobSchedStats {
  JobId job = 0;
  int lane = 0;
  int priority = 0;
  double weight = 1.0;
  uint64_t iterations_done = 0;
  uint64_t queued = 0;
  double device_seconds = 0;  // total measured
  double mean_iteration_seconds = 0;
  int64_t expected_iterations = 0;
  bool running = false;
  // Solo iteration time of the job's interference key; 0: not measured yet.
  double solo_iteration_seconds = 0;
  std::string interference_key;
};

// One placement change proposed by Rebalance(). to_lane == num_lanes (the
// value passed to Rebalance) asks for a new lane.
struct LaneChange {
  JobId job = 0;
  int from_lane = 0;
  int to_lane = 0;
};

// r(a, b): a's iteration time beside b / a's iteration time alone.
struct PairInterference {
  std::string a;
  std::string b;
  double r = 0;
  uint64_t samples = 0;
};

struct SchedulerOptions {
  // "fifo", "pack", "fair", "srtf", "priority" or "srtf_pack".
  std::string policy = "fifo";
  // Null: a SteadyClock of the scheduler's own.
  std::shared_ptr<Clock> clock;
  // PRIORITY's preemption: "iteration" (never mid-iteration) or "op"
  // (ShouldYield asks a lower-priority iteration to pause at an op boundary).
  std::string preemption = "iteration";
  // Most lanes a policy asks for (ChooseLane / Rebalance never propose more).
  int max_lanes = 4;
  // FAIR: how much unused share (seconds of normalized service) a job that
  // was idle may bank and claim back when it returns.
  double fair_window_seconds = 10.0;
  // PACK: side by side only while 1/r(A,B) + 1/r(B,A) > 1 + pack_margin.
  double pack_margin = 0.02;
  // Samples before an estimate (solo time, a pair's r) is trusted.
  int min_interference_samples = 3;
  // Iterations that may be started behind a lane's running one (0: a lane
  // runs one iteration at a time). A staged iteration cannot be recalled, so
  // only jobs of the highest priority present are staged: PRIORITY's
  // best-effort jobs never run more than one iteration ahead of a decision.
  int lookahead = 0;
  // A job's first iteration runs op by op and captures its graph (the
  // daemon on a GPU: hundreds of milliseconds with cuDNN's choices): it is
  // then not a measurement (of its solo time, its r, its mean), and PACK's
  // solo probes wait for the second, so that no lane drains for it.
  bool first_iteration_captures = false;
  // PACK's solo probes (each drains the other lanes for one of the
  // newcomer's iterations) start at most once per this many seconds, so a
  // running job is held up by one probe now and then, not by a run of them.
  double probe_spacing_seconds = 0;
  // A segmented solo probe runs for this fraction of the slowest held-up
  // job's iteration (at most the quickest one's) before it pauses for them:
  // alike held-up jobs' iterations then wait at most about this much
  // longer (the sharing issue's goal: p99 within 1.2x while a job joins),
  // and the probe still gets a share of the device beside very different
  // ones (its turn is not a fraction of a 3 ms job's beside a 28 ms one's).
  double probe_turn_fraction = 0.15;
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;

  virtual std::string policy() const = 0;
  virtual absl::Status AddJob(JobId job, const JobParams& params) = 0;
  // Drops the job and its queued tickets (the caller fails them). An
  // iteration of the job still running keeps its lane busy until reported.
  virtual std::vector<Ticket> RemoveJob(JobId job) = 0;
  virtual absl::Status Enqueue(JobId job, Ticket ticket) = 0;
  // The next iteration to start on a free lane, or nullopt when nothing
  // there should run now. What it returns counts as started.
  virtual std::optional<Dispatch> Next(int lane) = 0;
  virtual void OnIterationDone(JobId job, int lane, double device_seconds) = 0;
  virtual absl::Status SetPriority(JobId job, int priority) = 0;
  virtual std::vector<JobSchedStats> Stats() const = 0;

  // --- Policies and per-job knobs -----------------------------------------
  // Switches the policy; jobs, queues, lanes and measurements are kept.
  virtual absl::Status SetPolicy(absl::string_view policy) = 0;
  virtual absl::Status SetWeight(JobId job, double weight) = 0;
  virtual absl::Status SetExpectedIterations(JobId job, int64_t expected_iterations) = 0;

  // --- Lanes -----------------------------------------------------------------
  // Where the policy wants a job with `params` (params.lane is ignored): a
  // lane in [0, num_lanes), or num_lanes for a new lane (never when that
  // would exceed max_lanes).
  virtual int ChooseLane(const JobParams& params, int num_lanes) const = 0;
  // Moves a job (and its queued tickets) to `lane`. FAILED_PRECONDITION while
  // one of its iterations runs; the loop moves jobs at iteration boundaries.
  virtual absl::Status MoveJob(JobId job, int lane) = 0;
  // Moves the policy would make now, given num_lanes lanes exist. Each job
  // appears at most once; none of them is running. Advisory: the loop applies
  // those memory accepts and reports each with MoveJob.
  virtual std::vector<LaneChange> Rebalance(int num_lanes) const = 0;

  // --- Preemption ------------------------------------------------------------
  // True when the iteration running in `lane` should pause at its next op
  // boundary: a higher-priority iteration is waiting to run beside it
  // (PRIORITY with op granularity), or a segmented solo probe has held
  // another lane's job up for one of its iterations (PACK).
  // False for every other iteration.
  virtual bool ShouldYield(int lane) = 0;
  virtual void OnIterationYielded(int lane) = 0;
  virtual void OnIterationResumed(int lane) = 0;
  // The lane's oldest started iteration did not run to completion (it failed
  // or was cancelled): nothing is measured, and the lane is free again (or
  // runs its next staged iteration).
  virtual void OnIterationAborted(JobId job, int lane) = 0;
  // The Dispatch that Next(lane) just returned was not started (the loop
  // had nothing to run for its ticket, or could not stage its data): undoes
  // that Next. The ticket is dropped.
  virtual void CancelDispatch(JobId job, int lane) = 0;

  // --- Measurements ----------------------------------------------------------
  virtual std::vector<PairInterference> Interference() const = 0;
};

// The valid policy names, in the order the error message lists them.
std::vector<std::string> PolicyNames();

// INVALID_ARGUMENT for an unknown policy or preemption name, a non-positive
// max_lanes, a negative window or margin.
absl::StatusOr<std::unique_ptr<Scheduler>> CreateScheduler(const SchedulerOptions& options);

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_SCHEDULER_H_
