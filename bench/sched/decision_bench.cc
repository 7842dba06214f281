// sched_bench_decision: the scheduler's host time per iteration end as the
// number of jobs grows, without a device.
//
// What the control loop pays for scheduling under a crowd of small inference
// models (bench/inference/hosting.py): every job keeps one iteration queued
// (a model with a request always waiting), every lane keeps `inflight`
// iterations started (the daemon's --max_inflight_per_lane), and each
// iteration end reports the lane's oldest started one, queues the job's next
// and offers the lane again, as Service::FinishIteration and DispatchAll do.
// Rebalance is asked every --rebalance_ms of virtual time (the daemon's
// kRebalanceInterval) and its moves are applied. Jobs share interference
// keys in groups (--jobs_per_key), as models of one kind and batch do.
//
// Printed per policy and job count: microseconds of host time per iteration
// end in Next, OnIterationDone and Rebalance (amortized), and their sum.
//
//   sched_bench_decision --jobs=16,64,256,1024 --policies=pack,fifo,fair,srtf
#include <chrono>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/sched/bench_common.h"
#include "sched/clock.h"
#include "sched/scheduler.h"

ABSL_FLAG(std::string, jobs, "16,64,256,1024", "job counts, comma-separated");
ABSL_FLAG(std::string, policies, "pack,fifo,fair,srtf,srtf_pack,priority", "policies, comma-separated");
ABSL_FLAG(int, max_lanes, 4, "the scheduler's max_lanes");
ABSL_FLAG(int, inflight, 2, "iterations started ahead per lane (lookahead + 1)");
ABSL_FLAG(int, jobs_per_key, 16, "jobs sharing one interference key");
ABSL_FLAG(double, iteration_us, 300, "virtual device time of one iteration");
ABSL_FLAG(double, rebalance_ms, 2, "Rebalance is asked at most this often (virtual time)");
ABSL_FLAG(double, slowdown, 0,
          "an iteration's reported time grows by this fraction per other busy lane (0: no interference; "
          "0.6 makes every pair of keys measure to clash, so PACK folds and Rebalance has work)");
ABSL_FLAG(int, ends, 200000, "timed iteration ends per row");
ABSL_FLAG(std::string, json, "", "write the results as JSON to this path");

namespace tandem::bench {
namespace {

using Steady = std::chrono::steady_clock;

struct Row {
  std::string policy;
  int jobs = 0;
  int lanes = 0;
  double next_us = 0;       // per iteration end
  double done_us = 0;       // per iteration end
  double rebalance_us = 0;  // per iteration end, amortized
  double rebalance_call_us = 0;
  int rebalance_calls = 0;
  int moves = 0;
};

double Micros(Steady::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// One row: a scheduler with `jobs` always-queued jobs, run for `ends` timed
// iteration ends after as many untimed ones (the solo probes and the first
// interference samples happen there).
Row RunRow(const std::string& policy, int jobs) {
  auto clock = std::make_shared<sched::ManualClock>();
  sched::SchedulerOptions options;
  options.policy = policy;
  options.clock = clock;
  options.max_lanes = absl::GetFlag(FLAGS_max_lanes);
  options.lookahead = absl::GetFlag(FLAGS_inflight) - 1;
  absl::StatusOr<std::unique_ptr<sched::Scheduler>> made = sched::CreateScheduler(options);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    std::exit(1);
  }
  sched::Scheduler& s = **made;
  int lanes = 0;
  sched::Ticket next_ticket = 1;
  for (int j = 0; j < jobs; ++j) {
    sched::JobParams params;
    params.interference_key = absl::StrCat("key", j / absl::GetFlag(FLAGS_jobs_per_key));
    params.lane = s.ChooseLane(params, lanes);
    if (params.lane == lanes) ++lanes;
    const sched::JobId id = j + 1;
    if (absl::Status st = s.AddJob(id, params); !st.ok()) {
      std::fprintf(stderr, "AddJob: %s\n", st.ToString().c_str());
      std::exit(1);
    }
    (void)s.Enqueue(id, next_ticket++);
  }

  const int inflight = absl::GetFlag(FLAGS_inflight);
  const double iteration_s = absl::GetFlag(FLAGS_iteration_us) * 1e-6;
  const double rebalance_s = absl::GetFlag(FLAGS_rebalance_ms) * 1e-3;
  const int timed = absl::GetFlag(FLAGS_ends);
  std::vector<std::deque<sched::JobId>> started;
  Steady::duration next_time{}, done_time{}, rebalance_time{};
  Row row{policy, jobs};
  double last_rebalance = -1;
  auto fill = [&](int lane, bool timing) {
    while (static_cast<int>(started[lane].size()) < inflight) {
      const Steady::time_point t0 = Steady::now();
      std::optional<sched::Dispatch> d = s.Next(lane);
      if (timing) next_time += Steady::now() - t0;
      if (!d) break;
      started[lane].push_back(d->job);
    }
  };
  for (int round = 0; round < 2; ++round) {
    const bool timing = round == 1;
    for (int end = 0; end < timed;) {
      started.resize(lanes);
      for (int lane = 0; lane < lanes; ++lane) fill(lane, timing);
      bool any = false;
      for (int lane = 0; lane < lanes && end < timed; ++lane) {
        if (started[lane].empty()) continue;
        any = true;
        const sched::JobId job = started[lane].front();
        started[lane].pop_front();
        clock->Advance(iteration_s / lanes);
        int others = 0;
        for (int o = 0; o < lanes; ++o) others += o != lane && !started[o].empty();
        const double reported = iteration_s * (1 + absl::GetFlag(FLAGS_slowdown) * others);
        Steady::time_point t0 = Steady::now();
        s.OnIterationDone(job, lane, reported);
        if (timing) done_time += Steady::now() - t0;
        (void)s.Enqueue(job, next_ticket++);
        ++end;
        if (clock->Now() - last_rebalance >= rebalance_s) {
          last_rebalance = clock->Now();
          t0 = Steady::now();
          std::vector<sched::LaneChange> changes = s.Rebalance(lanes);
          if (timing) {
            rebalance_time += Steady::now() - t0;
            ++row.rebalance_calls;
          }
          for (const sched::LaneChange& c : changes) {
            bool busy = false;
            for (const auto& q : started) {
              for (sched::JobId k : q) busy = busy || k == c.job;
            }
            if (busy || !s.MoveJob(c.job, c.to_lane).ok()) continue;
            if (c.to_lane == lanes) ++lanes;
            if (timing) ++row.moves;
          }
          started.resize(lanes);
        }
        fill(lane, timing);
      }
      if (!any) {
        std::fprintf(stderr, "%s with %d jobs: no lane started anything\n", policy.c_str(), jobs);
        std::exit(1);
      }
    }
  }
  row.lanes = lanes;
  row.next_us = Micros(next_time) / timed;
  row.done_us = Micros(done_time) / timed;
  row.rebalance_us = Micros(rebalance_time) / timed;
  row.rebalance_call_us = row.rebalance_calls > 0 ? Micros(rebalance_time) / row.rebalance_calls : 0;
  return row;
}

std::vector<std::string> List(const std::string& text) { return absl::StrSplit(text, ',', absl::SkipEmpty()); }

int Main() {
  WarnIfUnoptimized("sched_bench_decision");
  std::vector<int> counts;
  for (const std::string& c : List(absl::GetFlag(FLAGS_jobs))) {
    int n = 0;
    if (!absl::SimpleAtoi(c, &n) || n < 1) {
      std::fprintf(stderr, "--jobs: '%s' is not a positive count\n", c.c_str());
      return 2;
    }
    counts.push_back(n);
  }
  std::printf(
      "host microseconds per iteration end (max_lanes %d, %d in flight per lane, %d jobs per key, "
      "slowdown %.2f per busy lane)\n",
      absl::GetFlag(FLAGS_max_lanes), absl::GetFlag(FLAGS_inflight), absl::GetFlag(FLAGS_jobs_per_key),
      absl::GetFlag(FLAGS_slowdown));
  std::printf("%-10s %6s %5s %9s %9s %11s %9s %14s %6s\n", "policy", "jobs", "lanes", "next", "done", "rebalance",
              "total", "per rebalance", "moves");
  std::vector<Row> rows;
  for (const std::string& policy : List(absl::GetFlag(FLAGS_policies))) {
    for (int n : counts) {
      Row r = RunRow(policy, n);
      std::printf("%-10s %6d %5d %9.3f %9.3f %11.3f %9.3f %14.1f %6d\n", r.policy.c_str(), r.jobs, r.lanes, r.next_us,
                  r.done_us, r.rebalance_us, r.next_us + r.done_us + r.rebalance_us, r.rebalance_call_us, r.moves);
      std::fflush(stdout);
      rows.push_back(r);
    }
  }
  sched::sim::JsonWriter json;
  json.BeginObject().Key("bench").String("sched_bench_decision");
  json.Key("max_lanes").Int(absl::GetFlag(FLAGS_max_lanes)).Key("inflight").Int(absl::GetFlag(FLAGS_inflight));
  json.Key("jobs_per_key").Int(absl::GetFlag(FLAGS_jobs_per_key));
  json.Key("iteration_us").Number(absl::GetFlag(FLAGS_iteration_us));
  json.Key("rebalance_ms").Number(absl::GetFlag(FLAGS_rebalance_ms));
  json.Key("slowdown").Number(absl::GetFlag(FLAGS_slowdown));
  json.Key("ends").Int(absl::GetFlag(FLAGS_ends)).Key("rows").BeginArray();
  for (const Row& r : rows) {
    json.BeginObject().Key("policy").String(r.policy).Key("jobs").Int(r.jobs).Key("lanes").Int(r.lanes);
    json.Key("next_us").Number(r.next_us).Key("done_us").Number(r.done_us);
    json.Key("rebalance_us").Number(r.rebalance_us).Key("rebalance_call_us").Number(r.rebalance_call_us);
    json.Key("rebalance_calls").Int(r.rebalance_calls).Key("moves").Int(r.moves).EndObject();
  }
  json.EndArray().EndObject();
  WriteJsonOrExit(absl::GetFlag(FLAGS_json), json);
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tandem::bench::Main();
}
