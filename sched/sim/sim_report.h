// Reports of a simulation: a one-screen text summary and JSON, and a file
// writer the CLI and the benchmark programs share. Stateless functions.
#ifndef TANDEM_SCHED_SIM_SIM_REPORT_H_
#define TANDEM_SCHED_SIM_SIM_REPORT_H_

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "sched/sim/json_writer.h"
#include "sched/sim/simulator.h"

namespace tandem::sched::sim {

// Appends the result as one JSON object (with per-job rows when asked).
void WriteResultJson(const SimResult& result, bool with_jobs, JsonWriter& json);
void PrintSummary(const SimResult& result, std::FILE* out);
// Writes `text` to `path` (replacing it); an error a user can act on.
absl::Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace tandem::sched::sim

#endif  // TANDEM_SCHED_SIM_SIM_REPORT_H_
