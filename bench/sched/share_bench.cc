// sched_bench_share: what FAIR and PRIORITY give each job of a pair, on the
// simulated H200.
//
// FAIR: each mixed pair of the reference models, equal weights, both always
// busy. Reported per job: its share of device time and its effective
// iteration time (window / iterations) over its solo time, next to the r the
// same pair suffers when simply co-located (the MPS measurements).
// PRIORITY: a high-priority job whose client leaves 10 ms between
// iterations, beside an always-busy best-effort vgg19; its iteration time
// over solo with op- and iteration-granularity preemption, and how much of
// the device the best-effort job still gets.
//
//   sched_bench_share --json=share.json
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/sched/bench_common.h"

ABSL_FLAG(double, seconds, 60, "simulated seconds per run");
ABSL_FLAG(double, think_ms, 10, "PRIORITY: the high-priority client's gap between iterations");
ABSL_FLAG(std::string, json, "", "write the results as JSON to this path");

namespace tandem::bench {
namespace {

using sched::sim::InterferenceTable;
using sched::sim::JobResult;
using sched::sim::JsonWriter;
using sched::sim::SimOptions;
using sched::sim::SimResult;
using sched::sim::TraceJob;

TraceJob Endless(sched::JobId id, const std::string& model) {
  TraceJob job;
  job.id = id;
  job.model = model;
  job.iterations = 1'000'000'000;
  return job;
}

SimResult RunWindow(SimOptions options, const std::vector<TraceJob>& trace, double seconds) {
  options.window_start_seconds = 1;
  options.window_end_seconds = seconds;
  options.end_seconds = seconds;
  sched::sim::Simulator simulator(options, sched::sim::ModelCatalog::Reference(),
                                  InterferenceTable::Preset("mps").value());
  absl::StatusOr<SimResult> result = simulator.Run(trace);
  if (!result.ok()) {
    std::fprintf(stderr, "simulation failed: %s\n", result.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(result);
}

int Main() {
  WarnIfUnoptimized("sched_bench_share");
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const double window = seconds - 1;
  const InterferenceTable mps = InterferenceTable::Preset("mps").value();
  const std::vector<std::string> models = {"fcn5", "lstm", "resnet50", "vgg19"};
  JsonWriter json;
  json.BeginObject();
  json.Key("benchmark").String("sched_bench_share");
  json.Key("seconds").Number(seconds);

  std::printf("FAIR, equal weights, both jobs always busy (simulated H200, %.0f s)\n", seconds);
  std::printf("%-9s %-9s %10s %10s %16s %16s\n", "job", "beside", "share", "slowdown", "co-located r",
              "FAIR/co-located");
  json.Key("fair").BeginArray();
  for (size_t i = 0; i < models.size(); ++i) {
    for (size_t j = i + 1; j < models.size(); ++j) {
      SimOptions options;
      options.scheduler.policy = "fair";
      const SimResult result = RunWindow(options, {Endless(1, models[i]), Endless(2, models[j])}, seconds);
      double total = 0;
      for (const JobResult& job : result.jobs) total += job.window_device_seconds;
      for (const JobResult& job : result.jobs) {
        const std::string& other = job.id == 1 ? models[j] : models[i];
        const double share = job.window_device_seconds / total;
        const double slowdown = window / static_cast<double>(job.window_iterations) / job.solo_seconds;
        const double colocated = mps.R(job.model, other);
        std::printf("%-9s %-9s %9.1f%% %9.2fx %15.2fx %15.2f\n", job.model.c_str(), other.c_str(), 100 * share,
                    slowdown, colocated, slowdown / colocated);
        json.BeginObject();
        json.Key("job").String(job.model);
        json.Key("beside").String(other);
        json.Key("share").Number(share);
        json.Key("slowdown").Number(slowdown);
        json.Key("colocated_r").Number(colocated);
        json.EndObject();
      }
    }
  }
  json.EndArray();

  std::printf("\nPRIORITY: high-priority job (client gap %.0f ms) beside a best-effort vgg19\n",
              absl::GetFlag(FLAGS_think_ms));
  std::printf("%-9s %-10s %14s %14s %12s %8s\n", "high", "preemption", "mean/solo", "worst/solo", "BE share", "yields");
  json.Key("priority").BeginArray();
  for (const std::string& model : models) {
    for (const std::string preemption : {"op", "iteration"}) {
      TraceJob high = Endless(1, model);
      high.priority = 10;
      high.depth = 1;
      high.think_seconds = absl::GetFlag(FLAGS_think_ms) * 1e-3;
      high.arrival_seconds = 0.5;
      SimOptions options;
      options.scheduler.policy = "priority";
      options.scheduler.preemption = preemption;
      const SimResult result = RunWindow(options, {Endless(2, "vgg19"), high}, seconds);
      const JobResult& hi = result.jobs[1];
      const JobResult& be = result.jobs[0];
      const double be_share = be.window_device_seconds / window;
      std::printf("%-9s %-10s %13.3fx %13.3fx %11.1f%% %8llu\n", model.c_str(), preemption.c_str(),
                  hi.mean_iteration_seconds() / hi.solo_seconds, hi.max_iteration_seconds / hi.solo_seconds,
                  100 * be_share, static_cast<unsigned long long>(result.yields));
      json.BeginObject();
      json.Key("high").String(model);
      json.Key("preemption").String(preemption);
      json.Key("mean_over_solo").Number(hi.mean_iteration_seconds() / hi.solo_seconds);
      json.Key("worst_over_solo").Number(hi.max_iteration_seconds / hi.solo_seconds);
      json.Key("best_effort_share").Number(be_share);
      json.Key("yields").Int(static_cast<int64_t>(result.yields));
      json.EndObject();
    }
  }
  json.EndArray();
  json.EndObject();
  WriteJsonOrExit(absl::GetFlag(FLAGS_json), json);
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tandem::bench::Main();
}
