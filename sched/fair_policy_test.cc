#include "sched/fair_policy.h"

#include <map>
#include <memory>

#include "gtest/gtest.h"
#include "sched/scheduler.h"

namespace tandem::sched {
namespace {

class FairPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedulerOptions options;
    options.policy = "fair";
    options.clock = clock_;
    options.fair_window_seconds = 1.0;
    scheduler_ = std::move(CreateScheduler(options)).value();
  }
  void Add(JobId job, double weight, double iteration_seconds) {
    JobParams params;
    params.weight = weight;
    ASSERT_TRUE(scheduler_->AddJob(job, params).ok());
    iteration_[job] = iteration_seconds;
  }
  // Gives the job one queued iteration; a job that ran keeps one queued.
  void Activate(JobId job) { ASSERT_TRUE(scheduler_->Enqueue(job, 0).ok()); }
  // Runs lane 0 for `seconds` of device time; every job that runs submits
  // its next iteration at once. Returns device seconds per job.
  std::map<JobId, double> Run(double seconds) {
    std::map<JobId, double> got;
    const double end = clock_->Now() + seconds;
    while (clock_->Now() < end - 1e-12) {
      auto d = scheduler_->Next(0);
      if (!d) break;
      const double t = iteration_[d->job];
      clock_->Advance(t);
      scheduler_->OnIterationDone(d->job, 0, t);
      got[d->job] += t;
      EXPECT_TRUE(scheduler_->Enqueue(d->job, 0).ok());
    }
    return got;
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::unique_ptr<Scheduler> scheduler_;
  std::map<JobId, double> iteration_;
};

TEST_F(FairPolicyTest, SharesFollowWeightsWhateverTheIterationTimes) {
  Add(1, 1.0, 0.0309);   // vgg19-like
  Add(2, 1.0, 0.00296);  // fcn5-like
  Add(3, 2.0, 0.0213);   // resnet50-like
  for (JobId job : {1, 2, 3}) Activate(job);
  const std::map<JobId, double> got = Run(20.0);
  double total = 0;
  for (const auto& [job, seconds] : got) total += seconds;
  EXPECT_NEAR(got.at(1) / total, 0.25, 0.25 * 0.05);
  EXPECT_NEAR(got.at(2) / total, 0.25, 0.25 * 0.05);
  EXPECT_NEAR(got.at(3) / total, 0.50, 0.50 * 0.05);
}

TEST_F(FairPolicyTest, ANewJobGetsNoCreditForThePast) {
  Add(1, 1.0, 0.010);
  Activate(1);
  Run(5.0);
  Add(2, 1.0, 0.010);
  Activate(2);
  const std::map<JobId, double> got = Run(2.0);
  // Equal shares from the moment job 2 arrived, not 5 s of catch-up.
  EXPECT_NEAR(got.at(1) / got.at(2), 1.0, 0.05);
}

TEST_F(FairPolicyTest, AnIdleJobClaimsBackAtMostTheWindow) {
  Add(1, 1.0, 0.010);
  Add(2, 1.0, 0.010);
  // Only job 1 has work for 5 s; job 2 then returns.
  Activate(1);
  std::map<JobId, double> alone = Run(5.0);
  EXPECT_NEAR(alone[1], 5.0, 0.02);
  Activate(2);
  // Job 2 may catch up by the 1 s window, then shares equally.
  const std::map<JobId, double> got = Run(1.0);
  EXPECT_NEAR(got.at(2), 1.0, 0.02) << "job 2 claims its banked window first";
  EXPECT_EQ(got.count(1), 0u);
  const std::map<JobId, double> after = Run(2.0);
  EXPECT_NEAR(after.at(1) / after.at(2), 1.0, 0.05);
}

TEST_F(FairPolicyTest, AWeightChangeTakesEffect) {
  Add(1, 1.0, 0.010);
  Add(2, 1.0, 0.010);
  Activate(1);
  Activate(2);
  Run(1.0);
  ASSERT_TRUE(scheduler_->SetWeight(2, 3.0).ok());
  const std::map<JobId, double> got = Run(4.0);
  EXPECT_NEAR(got.at(2) / got.at(1), 3.0, 0.15);
}

}  // namespace
}  // namespace tandem::sched
