#include "sched/sim/simulator.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "gtest/gtest.h"
#include "sched/sim/trace.h"
#include "sched/sim/trace_test_util.h"

namespace tandem::sched::sim {
namespace {

SimResult RunOrDie(const SimOptions& options, const std::vector<TraceJob>& trace,
                   InterferenceTable table = InterferenceTable::Preset("mps").value()) {
  Simulator simulator(options, ModelCatalog::Reference(), std::move(table));
  absl::StatusOr<SimResult> result = simulator.Run(trace);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : SimResult{};
}

SimOptions WithPolicy(const std::string& policy) {
  SimOptions options;
  options.scheduler.policy = policy;
  return options;
}

const JobResult& ById(const SimResult& result, JobId id) {
  const JobResult* job = result.Job(id);
  if (job == nullptr) ADD_FAILURE() << "no job " << id;
  return job != nullptr ? *job : result.jobs.front();
}

// Every job ran all its iterations, never faster than alone, and no lane ran
// more than the device time that passed.
void ExpectSane(const SimResult& result) {
  ASSERT_EQ(result.finished, static_cast<int>(result.jobs.size()));
  for (const JobResult& job : result.jobs) {
    EXPECT_EQ(job.done, job.iterations) << "job " << job.id;
    EXPECT_GE(job.first_start, job.arrival) << "job " << job.id;
    EXPECT_GE(job.jct(), job.iterations * job.solo_seconds * (1 - 1e-9)) << "job " << job.id;
    EXPECT_GE(job.mean_iteration_seconds(), job.solo_seconds * (1 - 1e-9)) << "job " << job.id;
  }
  EXPECT_LE(result.busy_seconds, result.end_time + 1e-9);
  EXPECT_LE(result.lane_seconds, result.busy_seconds * std::max(1, result.lanes_used) + 1e-6);
}

TEST(SimulatorTest, FifoRunsOneJobAtATimeInArrivalOrder) {
  const std::vector<TraceJob> trace = {Job(1, 0, "vgg19", 50), Job(2, 0.1, "fcn5", 200), Job(3, 0.2, "resnet50", 30),
                                       Job(4, 0.3, "lstm", 100)};
  const SimResult result = RunOrDie(WithPolicy("fifo"), trace);
  ExpectSane(result);
  EXPECT_EQ(result.lanes_used, 1);
  // Sequential: each job starts only after the previous one finished.
  for (size_t i = 1; i < result.jobs.size(); ++i) {
    EXPECT_GE(result.jobs[i].first_start, result.jobs[i - 1].finish)
        << "job " << result.jobs[i].id << " overlapped job " << result.jobs[i - 1].id;
  }
  // Alone on the device, every iteration takes its solo time (+ one switch).
  for (const JobResult& job : result.jobs) {
    EXPECT_NEAR(job.mean_iteration_seconds(), job.solo_seconds, 1e-6) << "job " << job.id;
  }
}

TEST(SimulatorTest, SrtfFinishesTheShortestJobFirstAndPreemptsAtIterationBoundaries) {
  // The long job arrives first; shorter jobs arrive while it runs.
  const std::vector<TraceJob> trace = {Job(1, 0, "resnet50", 2000), Job(2, 1.0, "resnet50", 100),
                                       Job(3, 1.5, "fcn5", 300), Job(4, 2.0, "vgg19", 500)};
  const SimResult result = RunOrDie(WithPolicy("srtf"), trace);
  ExpectSane(result);
  std::vector<JobResult> by_finish = result.jobs;
  std::sort(by_finish.begin(), by_finish.end(),
            [](const JobResult& a, const JobResult& b) { return a.finish < b.finish; });
  // Remaining solo work at their arrival: job 3 0.89 s < job 2 2.13 s < job 4 15.5 s < job 1.
  EXPECT_EQ(by_finish[0].id, 3u);
  EXPECT_EQ(by_finish[1].id, 2u);
  EXPECT_EQ(by_finish[2].id, 4u);
  EXPECT_EQ(by_finish[3].id, 1u);
  // Job 2 did not wait for the long job: it started within an iteration of arriving.
  EXPECT_LT(ById(result, 2).first_start - 1.0, 0.0213 + 1e-3);

  const SimResult fifo = RunOrDie(WithPolicy("fifo"), trace);
  EXPECT_LT(result.mean_jct, fifo.mean_jct / 2);
}

TEST(SimulatorTest, FairKeepsWeightedSharesWithinFivePercent) {
  std::vector<TraceJob> trace = {Job(1, 0, "resnet50", 100000), Job(2, 0, "vgg19", 100000), Job(3, 0, "fcn5", 1000000)};
  trace[0].weight = 1;
  trace[1].weight = 2;
  trace[2].weight = 3;
  for (auto [start, end] : {std::pair{10.0, 60.0}, std::pair{30.0, 32.0}}) {
    SimOptions options = WithPolicy("fair");
    options.window_start_seconds = start;
    options.window_end_seconds = end;
    options.end_seconds = end;
    const SimResult result = RunOrDie(options, trace);
    double total = 0;
    for (const JobResult& job : result.jobs) total += job.window_device_seconds;
    ASSERT_GT(total, 0.9 * (end - start));
    for (const JobResult& job : result.jobs) {
      const double share = job.window_device_seconds / total;
      const double target = job.weight / 6.0;
      EXPECT_NEAR(share / target, 1.0, 0.05) << "job " << job.id << " got " << share << " of the device in [" << start
                                             << ", " << end << "], its weight asks for " << target;
    }
  }
}

TEST(SimulatorTest, FairNeverSlowsTheSmallJobOfAMixedPairBeyondTwiceItsSoloTime) {
  for (const auto& [small, large] :
       {std::pair{"fcn5", "vgg19"}, std::pair{"lstm", "vgg19"}, std::pair{"fcn5", "resnet50"}}) {
    const std::vector<TraceJob> trace = {Job(1, 0, large, 1000000), Job(2, 0, small, 10000000)};
    SimOptions options = WithPolicy("fair");
    options.window_start_seconds = 5;
    options.window_end_seconds = 25;
    options.end_seconds = 25;
    const SimResult result = RunOrDie(options, trace);
    for (const JobResult& job : result.jobs) {
      ASSERT_GT(job.window_iterations, 0);
      // Effective time per iteration over the window (what a user sees).
      const double effective = 20.0 / static_cast<double>(job.window_iterations);
      // Two jobs of equal weight take turns: each gets half the device, so 2x
      // its solo time, plus the lane switch cost (microseconds).
      EXPECT_LE(effective / job.solo_seconds, 2.0 * 1.02) << job.model << " beside " << (job.id == 1 ? small : large);
      EXPECT_GE(effective / job.solo_seconds, 1.9) << job.model;
    }
  }
}

TEST(SimulatorTest, PriorityWithOpPreemptionKeepsHighPriorityNearSolo) {
  // A high-priority job that leaves gaps (a client with 10 ms between
  // iterations) and a best-effort job that always has work.
  TraceJob high = Job(1, 0.5, "resnet50", 400);
  high.priority = 10;
  high.depth = 1;
  high.think_seconds = 0.010;
  const std::vector<TraceJob> trace = {Job(2, 0, "vgg19", 100000), high};
  for (const std::string preemption : {"op", "iteration"}) {
    SimOptions options = WithPolicy("priority");
    options.scheduler.preemption = preemption;
    options.end_seconds = 30;
    const SimResult result = RunOrDie(options, trace);
    const JobResult& hi = ById(result, 1);
    const JobResult& be = ById(result, 2);
    ASSERT_TRUE(hi.finished());
    EXPECT_GT(be.done, 100) << "best effort must fill the gaps";
    const double slowdown = hi.mean_iteration_seconds() / hi.solo_seconds;
    if (preemption == "op") {
      EXPECT_LE(slowdown, 1.05) << "high priority's iterations slowed by the best-effort job";
      EXPECT_GT(result.yields, 100u);
      EXPECT_LE(hi.max_iteration_seconds / hi.solo_seconds, 1.05);
    } else {
      // Without mid-iteration yields, it often runs beside a best-effort iteration.
      EXPECT_GT(slowdown, 1.05);
      EXPECT_EQ(result.yields, 0u);
    }
  }
}

TEST(SimulatorTest, PackRunsSideBySideOnlyWhenItPays) {
  const std::vector<TraceJob> trace = {Job(1, 0, "resnet50", 3000), Job(2, 0, "vgg19", 2000)};
  for (double r : {1.4, 2.5}) {
    InterferenceTable table(r);
    table.SetAll(r);
    const SimResult pack = RunOrDie(WithPolicy("pack"), trace, table);
    const SimResult fifo = RunOrDie(WithPolicy("fifo"), trace, table);
    ExpectSane(pack);
    const bool pays = 2 / r > 1;
    const JobResult& a = ById(pack, 1);
    const JobResult& b = ById(pack, 2);
    if (pays) {
      EXPECT_NE(a.final_lane, b.final_lane) << "r = " << r << ": side by side pays";
      EXPECT_LT(pack.makespan, fifo.makespan * 0.85);
    } else {
      EXPECT_EQ(a.final_lane, b.final_lane) << "r = " << r << ": taking turns is better";
      EXPECT_GE(pack.moves, 1u);
      // It measured before deciding, so it lost a little, but not much.
      EXPECT_LT(pack.makespan, fifo.makespan * 1.02);
    }
    // The scheduler measured the r it acted on.
    bool measured = false;
    for (const PairInterference& p : pack.interference) {
      if (p.a == "resnet50" && p.b == "vgg19") {
        measured = true;
        EXPECT_NEAR(p.r, r, 0.02 * r);
      }
    }
    EXPECT_TRUE(measured);
  }
}

TEST(SimulatorTest, PackPacksASweepOfAlikeJobs) {
  SweepTraceOptions sweep;
  sweep.num_jobs = 16;
  sweep.iterations = 300;
  const std::vector<TraceJob> trace = SweepTrace(sweep, ModelCatalog::Reference()).value();
  const SimResult pack = RunOrDie(WithPolicy("pack"), trace);
  const SimResult fifo = RunOrDie(WithPolicy("fifo"), trace);
  ExpectSane(pack);
  ExpectSane(fifo);
  EXPECT_EQ(pack.lanes_used, 4);
  // Four lanes with r = 1.44: 4 / (1 + 3 x 0.44) = 1.72x the throughput.
  EXPECT_NEAR(fifo.makespan / pack.makespan, 1.72, 0.05);
}

// Request streams of unequal cost (a client thinking between iterations),
// placed by count so that every ResNet-50 stream shares lane 0: PACK levels
// the lanes' loads, and although each move costs the moved job an
// iteration 30 times its solo time (op by op and a new capture on the
// GPU), the moves stop once the lanes are level: no churn. (How many moves
// levelling takes depends on the first seconds: 12 before PACK's solo
// probes went in segments, 20 since, all within the first 40 s.)
TEST(SimulatorTest, PackLevelsRequestStreamsDespiteTheCostOfAMove) {
  std::vector<TraceJob> trace;
  for (int i = 0; i < 24; ++i) {
    const bool heavy = i % 4 == 0;  // lands in lane 0 each time, by count
    TraceJob job = Job(i + 1, 0.001 * i, heavy ? "resnet50" : "fcn5", 100000);
    job.depth = 1;
    job.think_seconds = heavy ? 0.2 : 0.1;
    trace.push_back(job);
  }
  SimOptions options = WithPolicy("pack");
  options.move_capture_factor = 30;
  options.end_seconds = 40;
  options.window_start_seconds = 20;
  options.window_end_seconds = 40;
  const SimResult result = RunOrDie(options, trace);
  std::map<int, double> lane_busy;
  for (const JobResult& job : result.jobs) lane_busy[job.final_lane] += job.window_device_seconds / 20.0;
  ASSERT_EQ(lane_busy.size(), 4u);
  double lo = 1, hi = 0;
  for (const auto& [lane, busy] : lane_busy) {
    lo = std::min(lo, busy);
    hi = std::max(hi, busy);
  }
  // Unlevelled, lane 0 would run 6 x 21.3 / 221.3 = 58% of the time and
  // the others 6 x 3.0 / 103 = 17%.
  EXPECT_LT(hi - lo, 0.15) << "lanes busy " << lo << " to " << hi;
  EXPECT_GE(result.moves, 3);
  EXPECT_LE(result.moves, trace.size()) << "levelling churned";
  // Once level, the lanes stay put: twice as long a run makes no more moves.
  options.end_seconds = 80;
  options.window_end_seconds = 80;
  EXPECT_EQ(RunOrDie(options, trace).moves, result.moves) << "levelling churned";
}

TEST(SimulatorTest, ThousandJobTraceRunsUnderEveryPolicy) {
  PoissonTraceOptions poisson;
  poisson.num_jobs = 1000;
  poisson.seed = 11;
  poisson.load = 0.9;
  poisson.min_job_seconds = 1;
  poisson.max_job_seconds = 60;
  const std::vector<TraceJob> trace = PoissonTrace(poisson, ModelCatalog::Reference()).value();
  for (const std::string& policy : PolicyNames()) {
    const SimResult result = RunOrDie(WithPolicy(policy), trace);
    ExpectSane(result);
    RecordProperty(policy + "_cpu_seconds", std::to_string(result.cpu_seconds));
    std::printf("%s: %d jobs, %llu iterations simulated in %.2f s\n", policy.c_str(), result.finished,
                static_cast<unsigned long long>(result.iterations), result.cpu_seconds);
  }
}

TEST(SimulatorTest, SameTraceSameResult) {
  PoissonTraceOptions poisson;
  poisson.num_jobs = 50;
  poisson.max_job_seconds = 30;
  const std::vector<TraceJob> trace = PoissonTrace(poisson, ModelCatalog::Reference()).value();
  const SimResult a = RunOrDie(WithPolicy("pack"), trace);
  const SimResult b = RunOrDie(WithPolicy("pack"), trace);
  ASSERT_EQ(a.jobs.size(), b.jobs.size());
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    EXPECT_EQ(a.jobs[i].finish, b.jobs[i].finish);
    EXPECT_EQ(a.jobs[i].final_lane, b.jobs[i].final_lane);
  }
  EXPECT_EQ(a.events, b.events);
}

TEST(SimulatorTest, JobsThatDoNotFitWaitForMemory) {
  // 3 GB of device: two vgg19 jobs (1.7 GB persistent each) cannot be in at once.
  std::vector<TraceJob> trace = {Job(1, 0, "vgg19", 10), Job(2, 0, "vgg19", 10)};
  SimOptions options = WithPolicy("pack");
  options.capacity_bytes = 7'000'000'000;
  const SimResult result = RunOrDie(options, trace);
  ExpectSane(result);
  EXPECT_GE(ById(result, 2).first_start, ById(result, 1).finish);
}

TEST(SimulatorTest, BadTracesAreRefused) {
  Simulator simulator(WithPolicy("fifo"), ModelCatalog::Reference(), InterferenceTable::Preset("mps").value());
  std::vector<TraceJob> trace = {Job(1, 0, "fcn5", 10)};
  trace[0].weight = -1;
  EXPECT_EQ(simulator.Run(trace).status().code(), absl::StatusCode::kInvalidArgument);
  trace[0].weight = 1;
  trace[0].model = "bert";
  EXPECT_EQ(simulator.Run(trace).status().code(), absl::StatusCode::kInvalidArgument);
  SimOptions bad_policy = WithPolicy("random");
  Simulator unknown(bad_policy, ModelCatalog::Reference(), InterferenceTable(1.5));
  EXPECT_EQ(unknown.Run({Job(1, 0, "fcn5", 10)}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::sched::sim
