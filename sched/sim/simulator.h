// The scheduler simulator: the real Scheduler (any policy) driven by a job
// trace against a simulated device, on a virtual clock.
//
// The device: lanes run side by side. An iteration of model A needs A's solo
// time of work (plus a switch cost when the lane's previous iteration was
// another job's); while other lanes run, it progresses at rate
//   1 / (1 + sum over running iterations B of (r(A,B) - 1))
// (InterferenceTable). Memory is a SimMemory (LaneMemoryModel by default):
// jobs that do not fit wait, in arrival order, first fit. Clients keep
// `depth` iterations submitted and wait `think_seconds` after each completion
// before submitting the next.
//
// The simulator plays the daemon's control loop (scheduler.h's contract):
// ChooseLane, admission, AddJob; Next() on every free lane after every event;
// Rebalance at iteration boundaries (at most every rebalance_interval
// seconds, and whenever jobs come or go) with the moves memory accepts; with
// op-granularity preemption, a lane whose ShouldYield() turns true pauses at
// its next op boundary and resumes when it turns false; a segmented
// Dispatch asks ShouldYield() at every op boundary, as the daemon does at
// every segment's end.
//
// Event-driven and deterministic: the same trace and options give the same
// result. Not thread-safe; one Run at a time.
#ifndef TANDEM_SCHED_SIM_SIMULATOR_H_
#define TANDEM_SCHED_SIM_SIMULATOR_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sched/scheduler.h"
#include "sched/sim/lane_memory.h"
#include "sched/sim/model_catalog.h"
#include "sched/sim/trace.h"

namespace tandem::sched::sim {

struct SimOptions {
  // The scheduler under test; its clock is replaced by the simulator's.
  SchedulerOptions scheduler;
  double switch_seconds = 20e-6;  // switching a lane to another job's iteration
  // A job's first iteration after it moves to another lane takes this many
  // times its solo time: on the GPU it runs op by op and captures its graph
  // again on the new lane's arena (tens of ms for a model of a ms: 30 is
  // of that order). 1: moves cost nothing.
  double move_capture_factor = 1;
  // A job's first iteration takes this many times its solo time (on the GPU
  // it runs op by op, captures the graph and makes cuDNN's choices). 1: no
  // extra cost.
  double first_iteration_factor = 1;
  // Keep each job's completion gaps inside the window (JobResult::window_gaps).
  bool record_completion_gaps = false;
  uint64_t capacity_bytes = 141'000'000'000;
  // Jobs with no interference key in the trace get their model's name (alike
  // jobs share measurements); false: each job is measured on its own.
  bool key_by_model = true;
  double rebalance_interval_seconds = 0.1;
  // Per-job device time and iterations are also counted for iterations that
  // end inside [window_start, window_end].
  double window_start_seconds = 0;
  double window_end_seconds = std::numeric_limits<double>::infinity();
  // Stop at this virtual time (jobs still running are reported unfinished).
  double end_seconds = std::numeric_limits<double>::infinity();
  // Memory model; null: LaneMemoryModel(capacity_bytes, scheduler.max_lanes).
  std::function<std::unique_ptr<SimMemory>()> memory_factory;
};

struct JobResult {
  JobId id = 0;
  std::string model;
  int priority = 0;
  double weight = 1;
  double arrival = 0;
  double admitted = -1;     // -1: never admitted
  double first_start = -1;  // -1: never started
  double finish = -1;       // -1: unfinished
  int64_t iterations = 0;
  int64_t done = 0;
  double solo_seconds = 0;    // the model's solo iteration time
  double device_seconds = 0;  // sum of the iterations' measured times
  double max_iteration_seconds = 0;
  double window_device_seconds = 0;
  int64_t window_iterations = 0;
  // With record_completion_gaps: the time between consecutive completions of
  // the job's iterations that end inside the window, what its client sees as
  // the iteration time.
  std::vector<double> window_gaps;
  double last_completion = -1;
  int final_lane = -1;
  int moves = 0;
  int yields = 0;

  bool finished() const { return finish >= 0; }
  double jct() const { return finish - arrival; }
  double mean_iteration_seconds() const { return done > 0 ? device_seconds / done : 0; }
};

struct SimResult {
  std::string policy;
  std::vector<JobResult> jobs;  // in trace order
  int finished = 0;
  double makespan = 0;  // last finish - first arrival
  double mean_jct = 0;  // over finished jobs
  double median_jct = 0;
  double p95_jct = 0;
  double end_time = 0;
  double busy_seconds = 0;  // some lane running
  double lane_seconds = 0;  // sum over lanes of running time
  uint64_t iterations = 0;
  uint64_t events = 0;
  uint64_t moves = 0;
  uint64_t yields = 0;
  int lanes_used = 0;
  double cpu_seconds = 0;                      // host time the simulation took
  std::vector<PairInterference> interference;  // what the scheduler measured

  // The result of job `id`, or null when the trace had no such job.
  const JobResult* Job(JobId id) const {
    for (const JobResult& job : jobs) {
      if (job.id == id) return &job;
    }
    return nullptr;
  }
};

class Simulator {
 public:
  Simulator(SimOptions options, ModelCatalog catalog, InterferenceTable interference);

  // INVALID_ARGUMENT for a bad trace or options; INTERNAL when the scheduler
  // broke the control loop's contract (e.g. two iterations in one lane).
  absl::StatusOr<SimResult> Run(const std::vector<TraceJob>& trace);

 private:
  SimOptions options_;
  ModelCatalog catalog_;
  InterferenceTable interference_;
};

}  // namespace tandem::sched::sim

#endif  // TANDEM_SCHED_SIM_SIMULATOR_H_
