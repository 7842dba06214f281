// sched_bench_sweep: makespan of a hyper-parameter sweep (many short jobs of
// one model, all submitted at once) under PACK vs one job at a time (FIFO
// without sharing), on the simulated H200.
//
// For each model and lane limit the sweep runs under FIFO and PACK; PACK
// measures r online and keeps the jobs side by side only while that beats
// taking turns. The "timeslice" rows use the r of two processes under the
// driver's time-slicing (about 2, no gain) to show PACK folding back to
// taking turns instead of losing.
//
//   sched_bench_sweep --json=sweep.json
//   sched_bench_sweep --models=resnet50 --lanes=4,8 --jobs=64
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/sched/bench_common.h"

ABSL_FLAG(int, jobs, 32, "jobs in the sweep");
ABSL_FLAG(int64_t, iterations, 2000, "iterations per job");
ABSL_FLAG(std::string, models, "resnet50,vgg19,lstm,fcn5", "models to sweep (one sweep each)");
ABSL_FLAG(std::string, lanes, "2,4,8,16", "PACK's lane limits to try");
ABSL_FLAG(std::string, presets, "mps,timeslice", "interference presets to run under");
ABSL_FLAG(std::string, json, "", "write the results as JSON to this path");

namespace tandem::bench {
namespace {

using sched::sim::InterferenceTable;
using sched::sim::JsonWriter;
using sched::sim::SimOptions;
using sched::sim::SimResult;

int Main() {
  WarnIfUnoptimized("sched_bench_sweep");
  std::vector<int> lane_limits;
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_lanes), ',')) {
    int lanes = 0;
    if (!absl::SimpleAtoi(text, &lanes) || lanes < 1) {
      std::fprintf(stderr, "bad lane limit %s\n", std::string(text).c_str());
      return 2;
    }
    lane_limits.push_back(lanes);
  }
  const std::vector<std::string> models = absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty());
  const std::vector<std::string> presets = absl::StrSplit(absl::GetFlag(FLAGS_presets), ',', absl::SkipEmpty());

  std::printf(
      "Hyper-parameter sweep makespan (simulated H200; %d jobs x %lld iterations, all "
      "submitted at t=0; 141 GB)\n",
      absl::GetFlag(FLAGS_jobs), static_cast<long long>(absl::GetFlag(FLAGS_iterations)));
  std::printf("%-9s %-10s %5s %14s %14s %8s %6s %10s\n", "model", "r preset", "lanes", "one-at-a-time", "PACK",
              "speedup", "moves", "lanes used");
  JsonWriter json;
  json.BeginObject();
  json.Key("benchmark").String("sched_bench_sweep");
  json.Key("jobs").Int(absl::GetFlag(FLAGS_jobs));
  json.Key("iterations").Int(absl::GetFlag(FLAGS_iterations));
  json.Key("runs").BeginArray();
  for (const std::string& model : models) {
    sched::sim::SweepTraceOptions sweep;
    sweep.num_jobs = absl::GetFlag(FLAGS_jobs);
    sweep.iterations = absl::GetFlag(FLAGS_iterations);
    sweep.model = model;
    absl::StatusOr<std::vector<sched::sim::TraceJob>> trace =
        sched::sim::SweepTrace(sweep, sched::sim::ModelCatalog::Reference());
    if (!trace.ok()) {
      std::fprintf(stderr, "%s\n", trace.status().ToString().c_str());
      return 2;
    }
    for (const std::string& preset : presets) {
      absl::StatusOr<InterferenceTable> table = InterferenceTable::Preset(preset);
      if (!table.ok()) {
        std::fprintf(stderr, "%s\n", table.status().ToString().c_str());
        return 2;
      }
      SimOptions fifo_options;
      fifo_options.scheduler.policy = "fifo";
      const SimResult fifo = RunOrExit(fifo_options, *table, *trace);
      for (int lanes : lane_limits) {
        SimOptions pack_options;
        pack_options.scheduler.policy = "pack";
        pack_options.scheduler.max_lanes = lanes;
        const SimResult pack = RunOrExit(pack_options, *table, *trace);
        const double speedup = fifo.makespan / pack.makespan;
        std::printf("%-9s %-10s %5d %12.1f s %12.1f s %7.2fx %6llu %10d\n", model.c_str(), preset.c_str(), lanes,
                    fifo.makespan, pack.makespan, speedup, static_cast<unsigned long long>(pack.moves),
                    pack.lanes_used);
        json.BeginObject();
        json.Key("model").String(model);
        json.Key("preset").String(preset);
        json.Key("max_lanes").Int(lanes);
        json.Key("fifo_makespan_s").Number(fifo.makespan);
        json.Key("pack_makespan_s").Number(pack.makespan);
        json.Key("speedup").Number(speedup);
        json.Key("pack");
        sched::sim::WriteResultJson(pack, /*with_jobs=*/false, json);
        json.EndObject();
      }
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
