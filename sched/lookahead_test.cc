// Lookahead: iterations started behind a lane's running one, so the device
// goes from one iteration to the next without waiting for the control loop.
#include <memory>

#include "gtest/gtest.h"
#include "sched/scheduler.h"

namespace tandem::sched {
namespace {

std::unique_ptr<Scheduler> Make(const std::string& policy, int lookahead) {
  SchedulerOptions options;
  options.policy = policy;
  options.clock = std::make_shared<ManualClock>();
  options.lookahead = lookahead;
  auto scheduler = CreateScheduler(options);
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  return std::move(scheduler).value();
}

JobParams InLane(int lane, int priority = 0) {
  JobParams p;
  p.lane = lane;
  p.priority = priority;
  return p;
}

// Runs `n` iterations of `job` one at a time (PACK measures a job alone
// before it lets anything run beside it, staged iterations included).
void RunAlone(Scheduler& s, JobId job, int lane, int n, Ticket first_ticket) {
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(s.Enqueue(job, first_ticket + i).ok());
    auto d = s.Next(lane);
    ASSERT_TRUE(d.has_value());
    ASSERT_EQ(d->job, job);
    s.OnIterationDone(job, lane, 0.01);
  }
}

bool Running(const Scheduler& s, JobId job) {
  for (const JobSchedStats& j : s.Stats()) {
    if (j.job == job) return j.running;
  }
  return false;
}

TEST(LookaheadTest, NegativeLookaheadIsRefused) {
  SchedulerOptions options;
  options.lookahead = -1;
  EXPECT_EQ(CreateScheduler(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LookaheadTest, WithoutLookaheadABusyLaneGetsNothing) {
  auto s = Make("pack", 0);
  ASSERT_TRUE(s->AddJob(1, InLane(0)).ok());
  ASSERT_TRUE(s->Enqueue(1, 10).ok());
  ASSERT_TRUE(s->Enqueue(1, 11).ok());
  ASSERT_TRUE(s->Next(0).has_value());
  EXPECT_FALSE(s->Next(0).has_value());
}

// Every policy stages up to `lookahead` iterations in order, and each done
// report promotes the next staged one to running.
TEST(LookaheadTest, StagedIterationsRunInOrderUnderEveryPolicy) {
  for (const std::string& policy : PolicyNames()) {
    SCOPED_TRACE(policy);
    auto s = Make(policy, 2);
    ASSERT_TRUE(s->AddJob(1, InLane(0)).ok());
    RunAlone(*s, 1, 0, 3, 1);
    for (Ticket t = 10; t < 14; ++t) ASSERT_TRUE(s->Enqueue(1, t).ok());
    std::vector<Ticket> started;
    while (auto d = s->Next(0)) started.push_back(d->ticket);
    ASSERT_EQ(started, (std::vector<Ticket>{10, 11, 12}));  // the running one and two staged
    EXPECT_TRUE(Running(*s, 1));
    s->OnIterationDone(1, 0, 0.01);
    EXPECT_TRUE(Running(*s, 1));  // ticket 11 runs now
    auto d = s->Next(0);          // room for one more behind 11 and 12
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->ticket, 13);
    for (int i = 0; i < 3; ++i) s->OnIterationDone(1, 0, 0.01);
    EXPECT_FALSE(Running(*s, 1));
    const std::vector<JobSchedStats> stats = s->Stats();
    ASSERT_EQ(stats.size(), 1u);
    EXPECT_EQ(stats[0].iterations_done, 7u);
    EXPECT_EQ(stats[0].queued, 0u);
  }
}

// Two jobs taking turns in one lane: the staged iteration may be the other
// job's, and a done report for it is accepted only once it runs.
TEST(LookaheadTest, AnotherJobsIterationIsStagedAndReportedInTurn) {
  auto s = Make("fair", 1);
  ASSERT_TRUE(s->AddJob(1, InLane(0)).ok());
  ASSERT_TRUE(s->AddJob(2, InLane(0)).ok());
  ASSERT_TRUE(s->Enqueue(1, 10).ok());
  ASSERT_TRUE(s->Enqueue(2, 20).ok());
  auto first = s->Next(0);
  auto second = s->Next(0);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->job, 1u);
  EXPECT_EQ(second->job, 2u);
  EXPECT_FALSE(s->Next(0).has_value());
  s->OnIterationDone(2, 0, 0.01);  // out of order: ignored
  EXPECT_TRUE(Running(*s, 1));
  EXPECT_FALSE(Running(*s, 2));
  s->OnIterationDone(1, 0, 0.01);
  EXPECT_FALSE(Running(*s, 1));
  EXPECT_TRUE(Running(*s, 2));
  s->OnIterationDone(2, 0, 0.01);
  EXPECT_FALSE(Running(*s, 2));
}

TEST(LookaheadTest, CancelledDispatchesUndoTheirNext) {
  auto s = Make("fair", 1);
  ASSERT_TRUE(s->AddJob(1, InLane(0)).ok());
  for (Ticket t = 10; t < 13; ++t) ASSERT_TRUE(s->Enqueue(1, t).ok());
  ASSERT_TRUE(s->Next(0).has_value());
  auto staged = s->Next(0);
  ASSERT_TRUE(staged.has_value());
  s->CancelDispatch(1, 0);  // the staged one: the running one stays
  EXPECT_TRUE(Running(*s, 1));
  auto again = s->Next(0);  // room behind the running one again
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->ticket, 12);
  s->OnIterationDone(1, 0, 0.01);
  s->OnIterationAborted(1, 0);  // ticket 12 failed on the device
  EXPECT_FALSE(Running(*s, 1));
  // With nothing staged, a cancel frees the lane.
  ASSERT_TRUE(s->Enqueue(1, 13).ok());
  ASSERT_TRUE(s->Next(0).has_value());
  s->CancelDispatch(1, 0);
  EXPECT_FALSE(Running(*s, 1));
  EXPECT_EQ(s->Stats()[0].iterations_done, 1u);  // aborted and cancelled ones do not count
}

TEST(LookaheadTest, AStagedJobCannotMove) {
  auto s = Make("fair", 1);
  ASSERT_TRUE(s->AddJob(1, InLane(0)).ok());
  ASSERT_TRUE(s->AddJob(2, InLane(0)).ok());
  ASSERT_TRUE(s->Enqueue(1, 10).ok());
  ASSERT_TRUE(s->Enqueue(2, 20).ok());
  ASSERT_TRUE(s->Next(0).has_value());
  auto staged = s->Next(0);
  ASSERT_TRUE(staged.has_value());
  EXPECT_EQ(staged->job, 2u);
  EXPECT_EQ(s->MoveJob(2, 1).code(), absl::StatusCode::kFailedPrecondition);
  s->OnIterationDone(1, 0, 0.01);
  s->OnIterationDone(2, 0, 0.01);
  EXPECT_TRUE(s->MoveJob(2, 1).ok());
}

// A staged iteration cannot be recalled, so while a job of higher priority
// exists, lower-priority jobs are never staged.
TEST(LookaheadTest, LowerPriorityJobsAreNotStagedBesideAHigherOne) {
  auto s = Make("priority", 1);
  ASSERT_TRUE(s->AddJob(1, InLane(0, /*priority=*/0)).ok());
  ASSERT_TRUE(s->AddJob(2, InLane(1, /*priority=*/5)).ok());
  for (Ticket t = 10; t < 13; ++t) ASSERT_TRUE(s->Enqueue(1, t).ok());
  ASSERT_TRUE(s->Next(0).has_value());
  EXPECT_FALSE(s->Next(0).has_value());  // job 2 is idle but present
  ASSERT_TRUE(s->Enqueue(2, 20).ok());
  ASSERT_TRUE(s->Enqueue(2, 21).ok());
  ASSERT_TRUE(s->Next(1).has_value());
  EXPECT_TRUE(s->Next(1).has_value());  // the high-priority job is staged
  EXPECT_FALSE(s->Next(0).has_value());
  s->RemoveJob(2);  // its two iterations still run
  EXPECT_FALSE(s->Next(0).has_value());
  s->OnIterationDone(2, 1, 0.01);
  s->OnIterationDone(2, 1, 0.01);
  EXPECT_TRUE(s->Next(0).has_value());  // alone again: staged
}

}  // namespace
}  // namespace tandem::sched
