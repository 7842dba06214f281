// Trace jobs for the simulator's and the policies' tests. Test-only;
// header-only; thread-compatible.
#ifndef TANDEM_SCHED_SIM_TRACE_TEST_UTIL_H_
#define TANDEM_SCHED_SIM_TRACE_TEST_UTIL_H_

#include <cstdint>
#include <string>

#include "sched/sim/trace.h"

namespace tandem::sched::sim {

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
