// sched_bench_jct: average job completion time under Poisson arrivals of
// mixed jobs, SRTF vs FIFO without sharing (and the other policies for
// context), on the simulated H200.
//
// Jobs: models drawn uniformly from fcn5, resnet50, vgg19, lstm (their
// reference solo iteration times); solo durations log-uniform in
// [min_job_s, max_job_s]; arrivals Poisson at the given offered loads. Each
// (load, seed) trace runs under every policy listed; the table gives mean,
// median and p95 JCT, and FIFO's mean JCT over each policy's.
//
//   sched_bench_jct --json=jct.json
//   sched_bench_jct --loads=0.9 --seeds=10 --policies=fifo,srtf
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/sched/bench_common.h"

ABSL_FLAG(int, jobs, 100, "jobs per trace");
ABSL_FLAG(int, seeds, 5, "traces per load (seeds 1..N)");
ABSL_FLAG(std::string, loads, "0.5,0.7,0.9", "offered loads");
ABSL_FLAG(std::string, policies, "fifo,srtf,fair,pack", "policies to compare");
ABSL_FLAG(double, min_job_s, 10, "shortest solo job duration, seconds");
ABSL_FLAG(double, max_job_s, 1800, "longest solo job duration, seconds");
ABSL_FLAG(std::string, interference, "mps", "r preset for PACK's lanes: mps or timeslice");
ABSL_FLAG(std::string, json, "", "write the results as JSON to this path");

namespace tandem::bench {
namespace {

using sched::sim::InterferenceTable;
using sched::sim::JsonWriter;
using sched::sim::ModelCatalog;
using sched::sim::PoissonTraceOptions;
using sched::sim::SimOptions;
using sched::sim::SimResult;

int Main() {
  WarnIfUnoptimized("sched_bench_jct");
  std::vector<double> loads;
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_loads), ',')) {
    double load = 0;
    if (!absl::SimpleAtod(text, &load) || !(load > 0)) {
      std::fprintf(stderr, "bad load %s\n", std::string(text).c_str());
      return 2;
    }
    loads.push_back(load);
  }
  const std::vector<std::string> policies = absl::StrSplit(absl::GetFlag(FLAGS_policies), ',', absl::SkipEmpty());
  absl::StatusOr<InterferenceTable> table = InterferenceTable::Preset(absl::GetFlag(FLAGS_interference));
  if (!table.ok()) {
    std::fprintf(stderr, "%s\n", table.status().ToString().c_str());
    return 2;
  }
  const ModelCatalog catalog = ModelCatalog::Reference();

  std::printf(
      "Average JCT under Poisson arrivals (simulated H200; %d jobs per trace, solo "
      "durations %.0f-%.0f s log-uniform, 4 models)\n",
      absl::GetFlag(FLAGS_jobs), absl::GetFlag(FLAGS_min_job_s), absl::GetFlag(FLAGS_max_job_s));
  std::printf("%-5s %-4s %-8s %12s %12s %12s %12s %10s\n", "load", "seed", "policy", "mean JCT s", "median s", "p95 s",
              "makespan s", "FIFO/this");
  JsonWriter json;
  json.BeginObject();
  json.Key("benchmark").String("sched_bench_jct");
  json.Key("jobs_per_trace").Int(absl::GetFlag(FLAGS_jobs));
  json.Key("min_job_s").Number(absl::GetFlag(FLAGS_min_job_s));
  json.Key("max_job_s").Number(absl::GetFlag(FLAGS_max_job_s));
  json.Key("interference").String(absl::GetFlag(FLAGS_interference));
  json.Key("runs").BeginArray();
  // Per load and policy: sum over seeds of mean JCT, for the summary.
  std::map<std::pair<double, std::string>, double> sum_mean_jct;
  for (double load : loads) {
    for (int seed = 1; seed <= absl::GetFlag(FLAGS_seeds); ++seed) {
      PoissonTraceOptions poisson;
      poisson.num_jobs = absl::GetFlag(FLAGS_jobs);
      poisson.seed = static_cast<uint64_t>(seed);
      poisson.load = load;
      poisson.min_job_seconds = absl::GetFlag(FLAGS_min_job_s);
      poisson.max_job_seconds = absl::GetFlag(FLAGS_max_job_s);
      absl::StatusOr<std::vector<sched::sim::TraceJob>> trace = sched::sim::PoissonTrace(poisson, catalog);
      if (!trace.ok()) {
        std::fprintf(stderr, "%s\n", trace.status().ToString().c_str());
        return 2;
      }
      double fifo_mean = 0;
      for (const std::string& policy : policies) {
        SimOptions options;
        options.scheduler.policy = policy;
        const SimResult result = RunOrExit(options, *table, *trace);
        if (policy == "fifo") fifo_mean = result.mean_jct;
        sum_mean_jct[{load, policy}] += result.mean_jct;
        const double ratio = fifo_mean > 0 ? fifo_mean / result.mean_jct : 0;
        std::printf("%-5.2f %-4d %-8s %12.1f %12.1f %12.1f %12.1f %10.2f\n", load, seed, policy.c_str(),
                    result.mean_jct, result.median_jct, result.p95_jct, result.makespan, ratio);
        json.BeginObject();
        json.Key("load").Number(load);
        json.Key("seed").Int(seed);
        json.Key("fifo_mean_jct_over_this").Number(ratio);
        json.Key("result");
        sched::sim::WriteResultJson(result, /*with_jobs=*/false, json);
        json.EndObject();
      }
    }
  }
  json.EndArray();
  std::printf("\nSummary: FIFO's mean JCT / the policy's (means over %d seeds)\n", absl::GetFlag(FLAGS_seeds));
  json.Key("summary").BeginArray();
  for (double load : loads) {
    const double fifo = sum_mean_jct[{load, "fifo"}];
    for (const std::string& policy : policies) {
      const double mine = sum_mean_jct[{load, policy}];
      const double ratio = mine > 0 && fifo > 0 ? fifo / mine : 0;
      std::printf("  load %.2f %-8s mean JCT %10.1f s   FIFO/this %.2fx\n", load, policy.c_str(),
                  mine / absl::GetFlag(FLAGS_seeds), ratio);
      json.BeginObject();
      json.Key("load").Number(load);
      json.Key("policy").String(policy);
      json.Key("mean_jct_s").Number(mine / absl::GetFlag(FLAGS_seeds));
      json.Key("fifo_mean_jct_over_this").Number(ratio);
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
