#include "sched/srtf_pack_policy.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sched/scheduler.h"
#include "sched/sim/simulator.h"
#include "sched/sim/trace.h"
#include "sched/sim/trace_test_util.h"

namespace tandem::sched {
namespace {

using sim::InterferenceTable;
using sim::Job;
using sim::JobResult;
using sim::ModelCatalog;
using sim::SimOptions;
using sim::SimResult;
using sim::Simulator;
using sim::TraceJob;

InterferenceTable Uniform(double r) {
  InterferenceTable table(r);
  table.SetAll(r);
  return table;
}

SimResult Simulate(const std::string& policy, const std::vector<TraceJob>& trace, InterferenceTable table) {
  SimOptions options;
  options.scheduler.policy = policy;
  Simulator simulator(options, ModelCatalog::Reference(), std::move(table));
  absl::StatusOr<SimResult> result = simulator.Run(trace);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return SimResult{};
  EXPECT_EQ(result->finished, static_cast<int>(trace.size())) << policy;
  return *std::move(result);
}

std::vector<JobId> FinishOrder(const SimResult& result) {
  std::vector<JobResult> jobs = result.jobs;
  std::sort(jobs.begin(), jobs.end(), [](const JobResult& a, const JobResult& b) { return a.finish < b.finish; });
  std::vector<JobId> order;
  for (const JobResult& job : jobs) order.push_back(job.id);
  return order;
}

const JobResult& ById(const SimResult& result, JobId id) {
  const JobResult* job = result.Job(id);
  if (job == nullptr) ADD_FAILURE() << "no job " << id;
  return job != nullptr ? *job : result.jobs.front();
}

// The long job arrives first; shorter jobs arrive while it runs. Remaining
// solo work at arrival: job 3 0.89 s < job 2 2.13 s < job 4 15.5 s < job 1.
std::vector<TraceJob> MixedTrace() {
  return {Job(1, 0, "resnet50", 2000), Job(2, 1.0, "resnet50", 100), Job(3, 1.5, "fcn5", 300),
          Job(4, 2.0, "vgg19", 500)};
}

TEST(SrtfPackPolicyTest, FinishesTheShortestJobFirstLikeSrtf) {
  const SimResult result = Simulate("srtf_pack", MixedTrace(), InterferenceTable::Preset("mps").value());
  EXPECT_EQ(FinishOrder(result), (std::vector<JobId>{3, 2, 4, 1}));
  // Job 2 did not wait for the long job to finish.
  EXPECT_LT(ById(result, 2).first_start, ById(result, 1).finish);
  EXPECT_LT(ById(result, 2).first_start - 1.0, 0.5);
  const SimResult fifo = Simulate("fifo", MixedTrace(), InterferenceTable::Preset("mps").value());
  EXPECT_LT(result.mean_jct, fifo.mean_jct / 2);
}

TEST(SrtfPackPolicyTest, RunsTwoJobsSideBySideWhenThatPays) {
  // r = 1.4 both ways: 1/1.4 + 1/1.4 = 1.43 > 1.
  const std::vector<TraceJob> trace = {Job(1, 0, "resnet50", 3000), Job(2, 0, "vgg19", 3000)};
  const SimResult packed = Simulate("srtf_pack", trace, Uniform(1.4));
  const SimResult srtf = Simulate("srtf", trace, Uniform(1.4));
  EXPECT_EQ(packed.lanes_used, 2);
  // Both lanes ran most of the time (alone, lane time equals busy time).
  EXPECT_GT(packed.lane_seconds, 1.5 * packed.busy_seconds);
  EXPECT_LT(packed.makespan, 0.8 * srtf.makespan);
  EXPECT_LT(packed.mean_jct, srtf.mean_jct);
  // Both started right away rather than one after the other.
  EXPECT_LT(ById(packed, 2).first_start, ById(packed, 1).finish / 4);
}

TEST(SrtfPackPolicyTest, TakesTurnsInShortestFirstOrderWhenSideBySideDoesNotPay) {
  // r = 2.5 both ways: 1/2.5 + 1/2.5 = 0.8 < 1.
  const SimResult packed = Simulate("srtf_pack", MixedTrace(), Uniform(2.5));
  const SimResult srtf = Simulate("srtf", MixedTrace(), Uniform(2.5));
  EXPECT_EQ(FinishOrder(packed), FinishOrder(srtf));
  // Side by side only while pairs were being measured: a few iterations.
  EXPECT_LT(packed.lane_seconds, 1.02 * packed.busy_seconds);
  EXPECT_LT(packed.mean_jct, 1.02 * srtf.mean_jct);
}

TEST(SrtfPackPolicyTest, RebalanceSplitsTheTwoShortestJobsOfOneLane) {
  SchedulerOptions options;
  options.policy = "srtf_pack";
  auto clock = std::make_shared<ManualClock>();
  options.clock = clock;
  options.max_lanes = 3;
  std::unique_ptr<Scheduler> scheduler = std::move(CreateScheduler(options)).value();
  JobParams params;
  params.interference_key = "a";
  params.expected_iterations = 100;
  ASSERT_TRUE(scheduler->AddJob(1, params).ok());
  params.interference_key = "b";
  params.expected_iterations = 1000;
  ASSERT_TRUE(scheduler->AddJob(2, params).ok());  // memory put both in lane 0
  // Solo probes, one job at a time in lane 0.
  for (int i = 0; i < 3; ++i) {
    for (JobId job : {JobId{1}, JobId{2}}) {
      ASSERT_TRUE(scheduler->Enqueue(job, 10 * job + i).ok());
      auto d = scheduler->Next(0);
      ASSERT_TRUE(d.has_value());
      EXPECT_EQ(d->job, job);
      clock->Advance(0.01);
      scheduler->OnIterationDone(job, 0, 0.01);
    }
  }
  ASSERT_TRUE(scheduler->Enqueue(1, 100).ok());
  ASSERT_TRUE(scheduler->Enqueue(2, 200).ok());
  // The pair is unmeasured, so it is tried side by side: job 2 (ranked
  // second) gets a lane of its own; job 1 (the shortest) stays.
  std::vector<LaneChange> changes = scheduler->Rebalance(1);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].job, 2u);
  EXPECT_EQ(changes[0].from_lane, 0);
  EXPECT_EQ(changes[0].to_lane, 1);
  // Until the move, lane 0 runs the shortest job only.
  auto d = scheduler->Next(0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->job, 1u);
  ASSERT_TRUE(scheduler->MoveJob(2, 1).ok());
  d = scheduler->Next(1);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->job, 2u);
  EXPECT_TRUE(scheduler->Rebalance(2).empty()) << "split: no more moves";
}

TEST(SrtfPackPolicyTest, BadOptionsAndInputsAreRefused) {
  SchedulerOptions options;
  options.policy = "srtf_pack";
  EXPECT_TRUE(CreateScheduler(options).ok());
  options.max_lanes = 0;
  EXPECT_EQ(CreateScheduler(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.max_lanes = 4;
  options.pack_margin = -0.1;
  EXPECT_EQ(CreateScheduler(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.pack_margin = 0.02;
  options.policy = "srtf-pack";
  const absl::Status unknown = CreateScheduler(options).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("srtf_pack"), std::string::npos) << unknown.message();

  options.policy = "srtf_pack";
  std::unique_ptr<Scheduler> scheduler = std::move(CreateScheduler(options)).value();
  JobParams params;
  params.expected_iterations = -1;
  EXPECT_EQ(scheduler->AddJob(1, params).code(), absl::StatusCode::kInvalidArgument);
  params.expected_iterations = 10;
  ASSERT_TRUE(scheduler->AddJob(1, params).ok());
  EXPECT_EQ(scheduler->SetExpectedIterations(1, kMaxExpectedIterations + 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler->SetExpectedIterations(7, 5).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(scheduler->Next(3).has_value()) << "no such lane";
  EXPECT_EQ(scheduler->policy(), "srtf_pack");
}

}  // namespace
}  // namespace tandem::sched
