#include "sched/priority_policy.h"

#include <memory>

#include "gtest/gtest.h"
#include "sched/scheduler.h"

namespace tandem::sched {
namespace {

constexpr int kHigh = 10;
constexpr int kBestEffort = 0;

std::unique_ptr<Scheduler> MakePriority(std::shared_ptr<ManualClock> clock, const std::string& preemption) {
  SchedulerOptions options;
  options.policy = "priority";
  options.preemption = preemption;
  options.clock = std::move(clock);
  return std::move(CreateScheduler(options)).value();
}

// Adds a job where the policy wants it (lanes are created as asked).
int AddPlaced(Scheduler& s, JobId job, int priority, int* num_lanes) {
  JobParams params;
  params.priority = priority;
  params.lane = s.ChooseLane(params, *num_lanes);
  if (params.lane == *num_lanes) ++*num_lanes;
  EXPECT_TRUE(s.AddJob(job, params).ok());
  return params.lane;
}

TEST(PriorityPolicyTest, EachLevelGetsItsOwnLane) {
  auto s = MakePriority(std::make_shared<ManualClock>(), "op");
  int lanes = 0;
  const int high = AddPlaced(*s, 1, kHigh, &lanes);
  const int low = AddPlaced(*s, 2, kBestEffort, &lanes);
  const int high2 = AddPlaced(*s, 3, kHigh, &lanes);
  EXPECT_NE(high, low);
  EXPECT_EQ(high, high2);
  EXPECT_EQ(lanes, 2);
}

TEST(PriorityPolicyTest, BestEffortFillsGapsAndYieldsAtOpBoundaries) {
  auto clock = std::make_shared<ManualClock>();
  auto s = MakePriority(clock, "op");
  int lanes = 0;
  const int high = AddPlaced(*s, 1, kHigh, &lanes);
  const int low = AddPlaced(*s, 2, kBestEffort, &lanes);

  // Gap: only best effort has work, so it runs.
  ASSERT_TRUE(s->Enqueue(2, 20).ok());
  ASSERT_TRUE(s->Enqueue(2, 21).ok());
  auto be = s->Next(low);
  ASSERT_TRUE(be && be->job == 2);
  EXPECT_FALSE(s->ShouldYield(low));

  // High priority arrives: best effort should pause; high starts beside it.
  ASSERT_TRUE(s->Enqueue(1, 10).ok());
  EXPECT_TRUE(s->ShouldYield(low));
  EXPECT_FALSE(s->ShouldYield(high));
  s->OnIterationYielded(low);
  auto hi = s->Next(high);
  ASSERT_TRUE(hi && hi->job == 1);
  EXPECT_TRUE(s->ShouldYield(low)) << "high is still running";

  clock->Advance(0.02);
  s->OnIterationDone(1, high, 0.02);
  EXPECT_FALSE(s->ShouldYield(low)) << "nothing of higher priority is left";
  s->OnIterationResumed(low);
  clock->Advance(0.01);
  s->OnIterationDone(2, low, 0.03);

  // While a high iteration is queued or running, best effort does not start.
  ASSERT_TRUE(s->Enqueue(1, 11).ok());
  EXPECT_FALSE(s->Next(low).has_value());
  hi = s->Next(high);
  ASSERT_TRUE(hi.has_value());
  EXPECT_FALSE(s->Next(low).has_value());
  s->OnIterationDone(1, high, 0.02);
  be = s->Next(low);
  ASSERT_TRUE(be.has_value());
  EXPECT_EQ(be->ticket, 21u);
}

TEST(PriorityPolicyTest, IterationGranularityNeverYields) {
  auto clock = std::make_shared<ManualClock>();
  auto s = MakePriority(clock, "iteration");
  int lanes = 0;
  AddPlaced(*s, 1, kHigh, &lanes);
  const int low = AddPlaced(*s, 2, kBestEffort, &lanes);
  ASSERT_TRUE(s->Enqueue(2, 20).ok());
  ASSERT_TRUE(s->Next(low).has_value());
  ASSERT_TRUE(s->Enqueue(1, 10).ok());
  EXPECT_FALSE(s->ShouldYield(low));
}

TEST(PriorityPolicyTest, SharedLaneRunsHighestFirstThenRoundRobin) {
  auto clock = std::make_shared<ManualClock>();
  auto s = MakePriority(clock, "op");
  JobParams low;
  low.priority = kBestEffort;
  JobParams mid_a;
  mid_a.priority = 5;
  ASSERT_TRUE(s->AddJob(1, low).ok());
  ASSERT_TRUE(s->AddJob(2, mid_a).ok());
  ASSERT_TRUE(s->AddJob(3, mid_a).ok());
  for (Ticket t = 0; t < 3; ++t) {
    for (JobId j : {1, 2, 3}) ASSERT_TRUE(s->Enqueue(j, j * 100 + t).ok());
  }
  std::vector<JobId> order;
  for (int i = 0; i < 9; ++i) {
    auto d = s->Next(0);
    ASSERT_TRUE(d.has_value());
    order.push_back(d->job);
    s->OnIterationDone(d->job, 0, 0.001);
  }
  EXPECT_EQ(order, (std::vector<JobId>{2, 3, 2, 3, 2, 3, 1, 1, 1}));
}

TEST(PriorityPolicyTest, RaisingAPriorityTakesEffectAtTheNextPick) {
  auto clock = std::make_shared<ManualClock>();
  auto s = MakePriority(clock, "op");
  ASSERT_TRUE(s->AddJob(1, JobParams{}).ok());
  ASSERT_TRUE(s->AddJob(2, JobParams{}).ok());
  ASSERT_TRUE(s->Enqueue(1, 10).ok());
  ASSERT_TRUE(s->Enqueue(2, 20).ok());
  ASSERT_TRUE(s->SetPriority(2, 7).ok());
  auto d = s->Next(0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->job, 2u);
}

}  // namespace
}  // namespace tandem::sched
