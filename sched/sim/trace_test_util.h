// Trace jobs for the simulator's and the policies' tests. Test-only;
// header-only; thread-compatible.
#ifndef TANDEM_SCHED_SIM_TRACE_TEST_UTIL_H_
#define TANDEM_SCHED_SIM_TRACE_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sched/sim/model_catalog.h"
#include "sched/sim/trace.h"

namespace tandem::sched::sim {

// A catalog of models with these solo milliseconds per iteration, 0.1 GB of
// persistent and 1 GB of ephemeral memory each (many fit) and 100 ops per
// iteration.
inline ModelCatalog CatalogOfSoloMs(const std::vector<std::pair<std::string, double>>& models) {
  ModelCatalog catalog;
  for (const auto& [name, ms] : models) {
    catalog.Add({.name = name,
                 .solo_seconds = ms / 1000,
                 .persistent_bytes = 100'000'000,
                 .ephemeral_bytes = 1'000'000'000,
                 .ops_per_iteration = 100});
  }
  return catalog;
}

// A job of `model` arriving at `arrival` seconds for `iterations`
// iterations; every other field at its default.
inline TraceJob Job(JobId id, double arrival, const std::string& model, int64_t iterations) {
  TraceJob job;
  job.id = id;
  job.arrival_seconds = arrival;
  job.model = model;
  job.iterations = iterations;
  return job;
}

}  // namespace tandem::sched::sim

#endif  // TANDEM_SCHED_SIM_TRACE_TEST_UTIL_H_
