#include "sched/scheduler.h"

#include <cmath>
#include <limits>
#include <memory>

#include "gtest/gtest.h"

namespace tandem::sched {
namespace {

std::unique_ptr<Scheduler> Make(const std::string& policy, std::shared_ptr<ManualClock> clock) {
  SchedulerOptions options;
  options.policy = policy;
  options.clock = std::move(clock);
  auto scheduler = CreateScheduler(options);
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  return std::move(scheduler).value();
}

TEST(CreateSchedulerTest, EveryPolicyNameWorks) {
  for (const std::string& name : PolicyNames()) {
    SchedulerOptions options;
    options.policy = name;
    auto scheduler = CreateScheduler(options);
    ASSERT_TRUE(scheduler.ok()) << name << ": " << scheduler.status();
    EXPECT_EQ((*scheduler)->policy(), name);
  }
}

TEST(CreateSchedulerTest, UnknownPolicyListsTheValidNames) {
  SchedulerOptions options;
  options.policy = "lottery";
  auto scheduler = CreateScheduler(options);
  ASSERT_FALSE(scheduler.ok());
  EXPECT_EQ(scheduler.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(scheduler.status().message());
  EXPECT_NE(message.find("lottery"), std::string::npos) << message;
  for (const std::string& name : PolicyNames()) {
    EXPECT_NE(message.find(name), std::string::npos) << message;
  }
}

TEST(CreateSchedulerTest, BadOptionsAreRefused) {
  SchedulerOptions options;
  options.preemption = "instruction";
  EXPECT_EQ(CreateScheduler(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = SchedulerOptions{};
  options.max_lanes = 0;
  EXPECT_EQ(CreateScheduler(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = SchedulerOptions{};
  options.fair_window_seconds = std::nan("");
  EXPECT_EQ(CreateScheduler(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SchedulerValidationTest, BadJobParamsAreRefusedAndLeaveNothingBehind) {
  auto clock = std::make_shared<ManualClock>();
  auto s = Make("fair", clock);
  JobParams negative_weight;
  negative_weight.weight = -1;
  EXPECT_EQ(s->AddJob(1, negative_weight).code(), absl::StatusCode::kInvalidArgument);
  JobParams nan_weight;
  nan_weight.weight = std::nan("");
  EXPECT_EQ(s->AddJob(1, nan_weight).code(), absl::StatusCode::kInvalidArgument);
  JobParams zero_weight;
  zero_weight.weight = 0;
  EXPECT_EQ(s->AddJob(1, zero_weight).code(), absl::StatusCode::kInvalidArgument);
  JobParams negative_iterations;
  negative_iterations.expected_iterations = -5;
  EXPECT_EQ(s->AddJob(1, negative_iterations).code(), absl::StatusCode::kInvalidArgument);
  JobParams absurd_iterations;
  absurd_iterations.expected_iterations = kMaxExpectedIterations + 1;
  EXPECT_EQ(s->AddJob(1, absurd_iterations).code(), absl::StatusCode::kInvalidArgument);
  JobParams negative_lane;
  negative_lane.lane = -1;
  EXPECT_EQ(s->AddJob(1, negative_lane).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s->Stats().empty());

  JobParams largest;
  largest.expected_iterations = kMaxExpectedIterations;
  EXPECT_TRUE(s->AddJob(1, largest).ok());
  EXPECT_EQ(s->AddJob(1, JobParams{}).code(), absl::StatusCode::kAlreadyExists);
}

TEST(SchedulerValidationTest, ChangesToAGoneJobFailClearlyAndDisturbNothing) {
  auto clock = std::make_shared<ManualClock>();
  auto s = Make("priority", clock);
  JobParams params;
  params.priority = 3;
  params.weight = 2;
  ASSERT_TRUE(s->AddJob(1, params).ok());
  ASSERT_TRUE(s->AddJob(2, JobParams{}).ok());
  ASSERT_TRUE(s->Enqueue(2, 20).ok());
  ASSERT_TRUE(s->Enqueue(2, 21).ok());
  EXPECT_EQ(s->RemoveJob(2), (std::vector<Ticket>{20, 21}));

  const absl::Status priority = s->SetPriority(2, 9);
  EXPECT_EQ(priority.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(priority.message()).find("job 2"), std::string::npos) << priority;
  EXPECT_EQ(s->SetWeight(2, 1.0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->SetExpectedIterations(2, 10).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->Enqueue(2, 22).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->MoveJob(2, 1).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(s->RemoveJob(2).empty());

  // Bad values for a live job are refused and leave it as it was.
  EXPECT_EQ(s->SetWeight(1, -3).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->SetWeight(1, std::numeric_limits<double>::infinity()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->SetExpectedIterations(1, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->SetExpectedIterations(1, int64_t{2'000'000'000'000}).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<JobSchedStats> stats = s->Stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].job, 1u);
  EXPECT_EQ(stats[0].priority, 3);
  EXPECT_EQ(stats[0].weight, 2);
  EXPECT_EQ(stats[0].expected_iterations, 0);
}

TEST(SchedulerTest, NextStartsTheIterationAndTheLaneIsBusyUntilDone) {
  auto clock = std::make_shared<ManualClock>();
  auto s = Make("fifo", clock);
  ASSERT_TRUE(s->AddJob(7, JobParams{}).ok());
  EXPECT_FALSE(s->Next(0).has_value());  // nothing queued
  ASSERT_TRUE(s->Enqueue(7, 100).ok());
  ASSERT_TRUE(s->Enqueue(7, 101).ok());
  auto first = s->Next(0);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->job, 7u);
  EXPECT_EQ(first->ticket, 100u);
  EXPECT_FALSE(s->Next(0).has_value());  // busy
  EXPECT_FALSE(s->Next(5).has_value());  // no such lane
  EXPECT_FALSE(s->Next(-1).has_value());
  clock->Advance(0.01);
  s->OnIterationDone(7, 0, 0.01);
  auto second = s->Next(0);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->ticket, 101u);
  s->OnIterationAborted(7, 0);
  const std::vector<JobSchedStats> stats = s->Stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].iterations_done, 1u);
  EXPECT_DOUBLE_EQ(stats[0].device_seconds, 0.01);
  EXPECT_FALSE(stats[0].running);
  EXPECT_EQ(stats[0].interference_key, "job:7");
}

TEST(SchedulerTest, ADoneReportForTheWrongJobIsIgnored) {
  auto clock = std::make_shared<ManualClock>();
  auto s = Make("fifo", clock);
  ASSERT_TRUE(s->AddJob(1, JobParams{}).ok());
  ASSERT_TRUE(s->Enqueue(1, 1).ok());
  ASSERT_TRUE(s->Next(0).has_value());
  s->OnIterationDone(2, 0, 0.5);  // not running there
  s->OnIterationDone(1, 3, 0.5);  // wrong lane
  EXPECT_TRUE(s->Stats()[0].running);
  s->OnIterationDone(1, 0, 0.5);
  EXPECT_FALSE(s->Stats()[0].running);
  EXPECT_EQ(s->Stats()[0].iterations_done, 1u);
}

TEST(SchedulerTest, ARemovedJobsRunningIterationKeepsItsLaneUntilReported) {
  auto clock = std::make_shared<ManualClock>();
  auto s = Make("fair", clock);
  ASSERT_TRUE(s->AddJob(1, JobParams{}).ok());
  ASSERT_TRUE(s->AddJob(2, JobParams{}).ok());
  ASSERT_TRUE(s->Enqueue(1, 10).ok());
  ASSERT_TRUE(s->Enqueue(1, 11).ok());
  ASSERT_TRUE(s->Enqueue(2, 20).ok());
  auto d = s->Next(0);
  ASSERT_TRUE(d && d->job == 1);
  EXPECT_EQ(s->RemoveJob(1), (std::vector<Ticket>{11}));
  EXPECT_FALSE(s->Next(0).has_value()) << "job 1's iteration still occupies the lane";
  clock->Advance(0.01);
  s->OnIterationDone(1, 0, 0.01);
  d = s->Next(0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->job, 2u);
}

TEST(SchedulerTest, MoveJobCarriesTheQueueAndRefusesWhileRunning) {
  auto clock = std::make_shared<ManualClock>();
  auto s = Make("pack", clock);
  ASSERT_TRUE(s->AddJob(1, JobParams{}).ok());
  ASSERT_TRUE(s->Enqueue(1, 10).ok());
  ASSERT_TRUE(s->Enqueue(1, 11).ok());
  ASSERT_TRUE(s->Next(0).has_value());
  EXPECT_EQ(s->MoveJob(1, 1).code(), absl::StatusCode::kFailedPrecondition);
  clock->Advance(0.01);
  s->OnIterationDone(1, 0, 0.01);
  EXPECT_EQ(s->MoveJob(1, -2).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(s->MoveJob(1, 1).ok());
  EXPECT_FALSE(s->Next(0).has_value());
  auto moved = s->Next(1);
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->ticket, 11u);
  EXPECT_EQ(s->Stats()[0].lane, 1);
}

TEST(SchedulerTest, SetPolicyKeepsJobsAndQueues) {
  auto clock = std::make_shared<ManualClock>();
  auto s = Make("fifo", clock);
  JobParams long_job;
  long_job.expected_iterations = 1000;
  JobParams short_job;
  short_job.expected_iterations = 2;
  ASSERT_TRUE(s->AddJob(1, long_job).ok());
  ASSERT_TRUE(s->AddJob(2, short_job).ok());
  for (Ticket t = 0; t < 3; ++t) {
    ASSERT_TRUE(s->Enqueue(1, 10 + t).ok());
    ASSERT_TRUE(s->Enqueue(2, 20 + t).ok());
  }
  // Both run once so that their iteration times are known.
  auto d = s->Next(0);
  ASSERT_TRUE(d && d->job == 1);
  clock->Advance(0.01);
  s->OnIterationDone(1, 0, 0.01);
  EXPECT_EQ(s->SetPolicy("round-robin").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->policy(), "fifo");
  ASSERT_TRUE(s->SetPolicy("srtf").ok());
  EXPECT_EQ(s->policy(), "srtf");
  d = s->Next(0);  // job 2 has never run: its probe comes first, then it is shortest
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->job, 2u);
  EXPECT_EQ(d->ticket, 20u);
  clock->Advance(0.01);
  s->OnIterationDone(2, 0, 0.01);
  d = s->Next(0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->job, 2u);
}

TEST(SchedulerTest, SoloTimeIsMeasuredWhenNothingElseRuns) {
  auto clock = std::make_shared<ManualClock>();
  SchedulerOptions options;
  options.policy = "pack";
  options.clock = clock;
  options.min_interference_samples = 2;
  auto s = std::move(CreateScheduler(options)).value();
  JobParams params;
  params.interference_key = "resnet50";
  ASSERT_TRUE(s->AddJob(1, params).ok());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(s->Enqueue(1, i).ok());
    ASSERT_TRUE(s->Next(0).has_value());
    clock->Advance(0.020);
    s->OnIterationDone(1, 0, 0.020);
  }
  const auto stats = s->Stats();
  EXPECT_NEAR(stats[0].solo_iteration_seconds, 0.020, 1e-12);
  EXPECT_EQ(stats[0].interference_key, "resnet50");
}

TEST(SchedulerTest, ChooseLaneNeverExceedsMaxLanes) {
  auto clock = std::make_shared<ManualClock>();
  SchedulerOptions options;
  options.policy = "pack";
  options.clock = clock;
  options.max_lanes = 2;
  auto s = std::move(CreateScheduler(options)).value();
  EXPECT_EQ(s->ChooseLane(JobParams{}, 0), 0);
  JobParams in_lane0;
  ASSERT_TRUE(s->AddJob(1, in_lane0).ok());
  EXPECT_EQ(s->ChooseLane(JobParams{}, 1), 1);  // untried pairs go side by side
  JobParams in_lane1;
  in_lane1.lane = 1;
  ASSERT_TRUE(s->AddJob(2, in_lane1).ok());
  const int lane = s->ChooseLane(JobParams{}, 2);
  EXPECT_GE(lane, 0);
  EXPECT_LT(lane, 2);
}

}  // namespace
}  // namespace tandem::sched
