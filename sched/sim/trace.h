// Job traces for the simulator: what arrives when, running what, for how
// long, with which priority and weight, and how its client paces iterations.
//
// Traces are generated (seeded, deterministic on every platform: the random
// numbers come from std::mt19937_64, whose sequence the standard fixes, and
// distributions of our own) or read from CSV:
//   id,arrival_s,model,iterations,priority,weight,declared_iterations,think_s,depth,key
// (declared_iterations -1: same as iterations; 0: not declared; key empty:
// the simulator's default). Value types; not thread-safe.
#ifndef TANDEM_SCHED_SIM_TRACE_H_
#define TANDEM_SCHED_SIM_TRACE_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sched/scheduler.h"
#include "sched/sim/model_catalog.h"

namespace tandem::sched::sim {

struct TraceJob {
  JobId id = 0;
  double arrival_seconds = 0;
  std::string model;
  int64_t iterations = 1;
  int priority = 0;
  double weight = 1.0;
  // What the client tells the scheduler (SRTF): -1 the truth, 0 nothing.
  int64_t declared_iterations = -1;
  // The client's gap between an iteration's completion and its next submit
  // (data loading, round trip); 0: it always has the next one ready.
  double think_seconds = 0;
  // Iterations the client keeps submitted (queued or running) at once.
  int depth = 2;
  std::string interference_key;
};

// A seeded random source with platform-independent distributions.
class TraceRandom {
 public:
  explicit TraceRandom(uint64_t seed) : engine_(seed) {}
  double Uniform();  // [0, 1)
  double Exponential(double mean);
  // Log-uniform in [lo, hi].
  double LogUniform(double lo, double hi);
  uint64_t Below(uint64_t n);  // [0, n)

 private:
  std::mt19937_64 engine_;
};

// Poisson arrivals of jobs of mixed models and lengths.
struct PoissonTraceOptions {
  int num_jobs = 100;
  uint64_t seed = 1;
  // Offered load: mean solo job duration / mean inter-arrival time.
  double load = 0.9;
  std::vector<std::string> models = {"fcn5", "resnet50", "vgg19", "lstm"};
  // Job length: a solo duration drawn log-uniformly in [min, max] seconds,
  // turned into iterations of the job's model.
  double min_job_seconds = 10;
  double max_job_seconds = 3600;
  int depth = 2;
};
absl::StatusOr<std::vector<TraceJob>> PoissonTrace(const PoissonTraceOptions& options, const ModelCatalog& catalog);

// A hyper-parameter sweep: many short jobs of one model, all submitted at
// (nearly) the same time.
struct SweepTraceOptions {
  int num_jobs = 32;
  uint64_t seed = 1;
  std::string model = "resnet50";
  int64_t iterations = 1000;
  // Arrivals spread uniformly over [0, arrival_spread_seconds].
  double arrival_spread_seconds = 0;
  int depth = 2;
};
absl::StatusOr<std::vector<TraceJob>> SweepTrace(const SweepTraceOptions& options, const ModelCatalog& catalog);

absl::StatusOr<std::vector<TraceJob>> ParseTraceCsv(const std::string& text);
std::string TraceToCsv(const std::vector<TraceJob>& trace);
// INVALID_ARGUMENT naming the job and the field when a job cannot be run.
absl::Status ValidateTrace(const std::vector<TraceJob>& trace, const ModelCatalog& catalog);

}  // namespace tandem::sched::sim

#endif  // TANDEM_SCHED_SIM_TRACE_H_
