// Shared by the simulated scheduling benchmarks: the build warning, running
// one simulation, and writing the JSON report. Header-only; not thread-safe.
#ifndef TANDEM_BENCH_SCHED_BENCH_COMMON_H_
#define TANDEM_BENCH_SCHED_BENCH_COMMON_H_

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sched/sim/json_writer.h"
#include "sched/sim/sim_report.h"
#include "sched/sim/simulator.h"
#include "sched/sim/trace.h"

namespace tandem::bench {

// Results do not depend on the build (virtual time), but the host time it
// takes does.
inline void WarnIfUnoptimized(const char* program) {
#ifndef __OPTIMIZE__
  std::fprintf(stderr, "%s: WARNING: built without optimization; simulations run slowly\n", program);
#endif
}

inline sched::sim::SimResult RunOrExit(const sched::sim::SimOptions& options,
                                       const sched::sim::InterferenceTable& table,
                                       const std::vector<sched::sim::TraceJob>& trace) {
  sched::sim::Simulator simulator(options, sched::sim::ModelCatalog::Reference(), table);
  absl::StatusOr<sched::sim::SimResult> result = simulator.Run(trace);
  if (!result.ok()) {
    std::fprintf(stderr, "simulation failed: %s\n", result.status().ToString().c_str());
    std::exit(1);
  }
  if (result->finished != static_cast<int>(trace.size())) {
    std::fprintf(stderr, "simulation left %d of %zu jobs unfinished\n",
                 static_cast<int>(trace.size()) - result->finished, trace.size());
    std::exit(1);
  }
  return *std::move(result);
}

inline void WriteJsonOrExit(const std::string& path, const sched::sim::JsonWriter& json) {
  if (path.empty()) return;
  if (absl::Status s = sched::sim::WriteTextFile(path, json.str() + "\n"); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
  std::printf("wrote %s\n", path.c_str());
}

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_SCHED_BENCH_COMMON_H_
