#include "sched/srtf_policy.h"

#include <memory>

#include "gtest/gtest.h"
#include "sched/scheduler.h"

namespace tandem::sched {
namespace {

class SrtfPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedulerOptions options;
    options.policy = "srtf";
    options.clock = clock_;
    scheduler_ = std::move(CreateScheduler(options)).value();
  }
  void Add(JobId job, int64_t expected) {
    JobParams params;
    params.expected_iterations = expected;
    ASSERT_TRUE(scheduler_->AddJob(job, params).ok());
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(scheduler_->Enqueue(job, job * 100 + i).ok());
  }
  // Runs the next iteration of lane 0 for `seconds`; returns its job.
  JobId RunOne(double seconds) {
    auto d = scheduler_->Next(0);
    EXPECT_TRUE(d.has_value());
    if (!d) return 0;
    clock_->Advance(seconds);
    scheduler_->OnIterationDone(d->job, 0, seconds);
    EXPECT_TRUE(scheduler_->Enqueue(d->job, d->ticket + 10).ok());
    return d->job;
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SrtfPolicyTest, ProbesUnmeasuredJobsThenRunsTheShortestRemaining) {
  Add(1, 1000);  // 1000 x 10 ms = 10 s
  Add(2, 100);   // 100 x 30 ms = 3 s
  Add(3, 0);     // unknown length: long
  // Probes in arrival order (job 3 needs none: unknown length is long anyway).
  EXPECT_EQ(RunOne(0.010), 1u);
  EXPECT_EQ(RunOne(0.030), 2u);
  // Then job 2 (2.97 s left) over job 1 (9.99 s) over job 3 (infinite).
  for (int i = 0; i < 5; ++i) EXPECT_EQ(RunOne(0.030), 2u);
}

TEST_F(SrtfPolicyTest, AShorterArrivalPreemptsAtTheNextIterationBoundary) {
  Add(1, 1000);
  EXPECT_EQ(RunOne(0.010), 1u);
  auto running = scheduler_->Next(0);
  ASSERT_TRUE(running.has_value());
  Add(2, 10);  // arrives while job 1's iteration runs: no preemption mid-iteration
  EXPECT_FALSE(scheduler_->Next(0).has_value());
  clock_->Advance(0.010);
  scheduler_->OnIterationDone(1, 0, 0.010);
  EXPECT_EQ(RunOne(0.010), 2u);
  EXPECT_EQ(RunOne(0.010), 2u);
}

TEST_F(SrtfPolicyTest, AJobPastItsDeclaredLengthCountsAsLong) {
  Add(1, 2);
  Add(2, 500);
  EXPECT_EQ(RunOne(0.010), 1u);
  EXPECT_EQ(RunOne(0.010), 2u);  // probe
  EXPECT_EQ(RunOne(0.010), 1u);  // 1 left x 10 ms
  // Job 1 has run its 2 declared iterations but keeps submitting: it now
  // counts as long, behind job 2 (498 left) for good.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(RunOne(0.010), 2u);
}

TEST_F(SrtfPolicyTest, ExpectedIterationsCanBeUpdated) {
  Add(1, 100);
  Add(2, 200);
  EXPECT_EQ(RunOne(0.010), 1u);
  EXPECT_EQ(RunOne(0.010), 2u);
  EXPECT_EQ(RunOne(0.010), 1u);
  ASSERT_TRUE(scheduler_->SetExpectedIterations(1, 100000).ok());
  EXPECT_EQ(RunOne(0.010), 2u);
}

}  // namespace
}  // namespace tandem::sched
