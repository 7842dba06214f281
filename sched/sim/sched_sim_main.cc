// sched_sim: runs the real scheduler over a job trace on a simulated device.
//
//   sched_sim --policy=srtf --generate=poisson --jobs=200 --load=0.9 --json=out.json
//   sched_sim --policy=pack --generate=sweep --jobs=32 --sweep_model=resnet50
//   sched_sim --policy=fair --trace=jobs.csv
//
// Prints a summary (and with --json, writes the result with per-job rows).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "sched/sim/json_writer.h"
#include "sched/sim/sim_report.h"
#include "sched/sim/simulator.h"
#include "sched/sim/trace.h"

ABSL_FLAG(std::string, policy, "fifo", "fifo, pack, fair, srtf, priority or srtf_pack");
ABSL_FLAG(std::string, preemption, "iteration", "PRIORITY's preemption: iteration or op");
ABSL_FLAG(int, max_lanes, 4, "most lanes on the device");
ABSL_FLAG(std::string, trace, "", "trace CSV to run (else one is generated)");
ABSL_FLAG(std::string, generate, "poisson", "trace to generate: poisson or sweep");
ABSL_FLAG(int, jobs, 100, "jobs in a generated trace");
ABSL_FLAG(uint64_t, seed, 1, "random seed of a generated trace");
ABSL_FLAG(double, load, 0.9, "poisson: offered load (mean solo job time / mean gap)");
ABSL_FLAG(double, min_job_s, 10, "poisson: shortest solo job duration, seconds");
ABSL_FLAG(double, max_job_s, 3600, "poisson: longest solo job duration, seconds");
ABSL_FLAG(std::string, models, "fcn5,resnet50,vgg19,lstm", "poisson: models to draw from");
ABSL_FLAG(std::string, sweep_model, "resnet50", "sweep: the model");
ABSL_FLAG(int64_t, sweep_iterations, 1000, "sweep: iterations per job");
ABSL_FLAG(std::string, interference, "mps", "r preset: mps or timeslice");
ABSL_FLAG(double, uniform_r, 0, "if > 0, this r for every pair instead of the preset");
ABSL_FLAG(double, switch_us, 20, "cost of switching a lane to another job, microseconds");
ABSL_FLAG(double, move_capture_factor, 1,
          "a moved job's next iteration takes this many times its solo time (op by op, recapture)");
ABSL_FLAG(double, capacity_gb, 141, "device memory, GB");
ABSL_FLAG(std::string, key_by, "model", "interference keys: model (alike jobs share) or job");
ABSL_FLAG(double, end_s, 0, "if > 0, stop at this virtual time");
ABSL_FLAG(std::string, json, "", "write the result as JSON to this path");
ABSL_FLAG(bool, with_jobs, true, "include per-job rows in the JSON");
ABSL_FLAG(std::string, write_trace, "", "write the trace that ran as CSV to this path");

namespace tandem::sched::sim {
namespace {

absl::StatusOr<std::vector<TraceJob>> LoadTrace(const ModelCatalog& catalog) {
  const std::string path = absl::GetFlag(FLAGS_trace);
  if (!path.empty()) {
    std::ifstream in(path);
    if (!in) return absl::NotFoundError("cannot read trace " + path);
    std::stringstream text;
    text << in.rdbuf();
    return ParseTraceCsv(text.str());
  }
  const std::string kind = absl::GetFlag(FLAGS_generate);
  if (kind == "poisson") {
    PoissonTraceOptions options;
    options.num_jobs = absl::GetFlag(FLAGS_jobs);
    options.seed = absl::GetFlag(FLAGS_seed);
    options.load = absl::GetFlag(FLAGS_load);
    options.min_job_seconds = absl::GetFlag(FLAGS_min_job_s);
    options.max_job_seconds = absl::GetFlag(FLAGS_max_job_s);
    options.models = absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty());
    return PoissonTrace(options, catalog);
  }
  if (kind == "sweep") {
    SweepTraceOptions options;
    options.num_jobs = absl::GetFlag(FLAGS_jobs);
    options.seed = absl::GetFlag(FLAGS_seed);
    options.model = absl::GetFlag(FLAGS_sweep_model);
    options.iterations = absl::GetFlag(FLAGS_sweep_iterations);
    return SweepTrace(options, catalog);
  }
  return absl::InvalidArgumentError("--generate must be poisson or sweep, got " + kind);
}

int Main() {
  const ModelCatalog catalog = ModelCatalog::Reference();
  absl::StatusOr<std::vector<TraceJob>> trace = LoadTrace(catalog);
  if (!trace.ok()) {
    std::fprintf(stderr, "sched_sim: %s\n", trace.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<InterferenceTable> table = InterferenceTable::Preset(absl::GetFlag(FLAGS_interference));
  if (!table.ok()) {
    std::fprintf(stderr, "sched_sim: %s\n", table.status().ToString().c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_uniform_r) > 0) table->SetAll(absl::GetFlag(FLAGS_uniform_r));

  SimOptions options;
  options.scheduler.policy = absl::GetFlag(FLAGS_policy);
  options.scheduler.preemption = absl::GetFlag(FLAGS_preemption);
  options.scheduler.max_lanes = absl::GetFlag(FLAGS_max_lanes);
  options.switch_seconds = absl::GetFlag(FLAGS_switch_us) * 1e-6;
  options.move_capture_factor = absl::GetFlag(FLAGS_move_capture_factor);
  options.capacity_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_capacity_gb) * 1e9);
  options.key_by_model = absl::GetFlag(FLAGS_key_by) == "model";
  if (absl::GetFlag(FLAGS_end_s) > 0) options.end_seconds = absl::GetFlag(FLAGS_end_s);

  Simulator simulator(options, catalog, *table);
  absl::StatusOr<SimResult> result = simulator.Run(*trace);
  if (!result.ok()) {
    std::fprintf(stderr, "sched_sim: %s\n", result.status().ToString().c_str());
    return 1;
  }
  PrintSummary(*result, stdout);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    JsonWriter json;
    WriteResultJson(*result, absl::GetFlag(FLAGS_with_jobs), json);
    if (absl::Status written = WriteTextFile(path, json.str() + "\n"); !written.ok()) {
      std::fprintf(stderr, "sched_sim: %s\n", written.ToString().c_str());
      return 1;
    }
  }
  if (const std::string path = absl::GetFlag(FLAGS_write_trace); !path.empty()) {
    if (absl::Status written = WriteTextFile(path, TraceToCsv(*trace)); !written.ok()) {
      std::fprintf(stderr, "sched_sim: %s\n", written.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace tandem::sched::sim

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Runs Tandem's scheduler over a job trace on a simulated device.");
  absl::ParseCommandLine(argc, argv);
  return tandem::sched::sim::Main();
}
