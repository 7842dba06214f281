#include "sched/fifo_policy.h"

#include <map>
#include <memory>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "sched/scheduler.h"

namespace tandem::sched {
namespace {

std::unique_ptr<Scheduler> MakeFifo(std::shared_ptr<ManualClock> clock) {
  SchedulerOptions options;
  options.policy = "fifo";
  options.clock = std::move(clock);
  return std::move(CreateScheduler(options)).value();
}

TEST(FifoPolicyTest, EveryJobGoesToLaneZero) {
  auto s = MakeFifo(std::make_shared<ManualClock>());
  EXPECT_EQ(s->ChooseLane(JobParams{}, 0), 0);
  EXPECT_EQ(s->ChooseLane(JobParams{}, 3), 0);
  EXPECT_TRUE(s->Rebalance(3).empty());
  EXPECT_FALSE(s->ShouldYield(0));
}

TEST(FifoPolicyTest, TheOldestJobHoldsTheLaneUntilItCloses) {
  auto clock = std::make_shared<ManualClock>();
  auto s = MakeFifo(clock);
  ASSERT_TRUE(s->AddJob(1, JobParams{}).ok());
  ASSERT_TRUE(s->AddJob(2, JobParams{}).ok());
  ASSERT_TRUE(s->Enqueue(2, 20).ok());  // the younger job queues first
  EXPECT_FALSE(s->Next(0).has_value()) << "job 2 ran while the older job 1 was open";
  ASSERT_TRUE(s->Enqueue(1, 10).ok());
  ASSERT_TRUE(s->Enqueue(1, 11).ok());
  for (Ticket expected : {10, 11}) {
    auto d = s->Next(0);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->job, 1u);
    EXPECT_EQ(d->ticket, expected);
    clock->Advance(0.003);
    s->OnIterationDone(1, 0, 0.003);
  }
  // Job 1 has nothing queued but is still open: job 2 keeps waiting.
  EXPECT_FALSE(s->Next(0).has_value());
  s->RemoveJob(1);
  auto d = s->Next(0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->job, 2u);
  EXPECT_EQ(d->ticket, 20u);
}

// Random arrivals, enqueues, completions and closes over three lanes: never
// two iterations at once in a lane, and every dispatch belongs to the oldest
// open job of its lane.
TEST(FifoPolicyTest, NeverTwoJobsAtOnceInALaneUnderRandomEvents) {
  auto clock = std::make_shared<ManualClock>();
  auto s = MakeFifo(clock);
  std::mt19937_64 rng(42);
  std::map<int, std::vector<JobId>> open_by_lane;  // arrival order
  std::map<int, JobId> running;                    // lane -> job
  JobId next_job = 1;
  Ticket next_ticket = 1;
  int dispatches = 0;
  for (int step = 0; step < 20000; ++step) {
    clock->Advance(0.001);
    const int action = static_cast<int>(rng() % 10);
    if (action == 0) {
      const int lane = static_cast<int>(rng() % 3);
      JobParams params;
      params.lane = lane;
      ASSERT_TRUE(s->AddJob(next_job, params).ok());
      open_by_lane[lane].push_back(next_job++);
    } else if (action <= 4) {
      const int lane = static_cast<int>(rng() % 3);
      auto& open = open_by_lane[lane];
      if (!open.empty()) {
        ASSERT_TRUE(s->Enqueue(open[rng() % open.size()], next_ticket++).ok());
      }
    } else if (action <= 7) {
      if (!running.empty()) {
        auto it = running.begin();
        std::advance(it, rng() % running.size());
        s->OnIterationDone(it->second, it->first, 0.001);
        running.erase(it);
      }
    } else if (action == 8) {
      const int lane = static_cast<int>(rng() % 3);
      auto& open = open_by_lane[lane];
      if (!open.empty() && rng() % 4 == 0) {
        s->RemoveJob(open.front());
        open.erase(open.begin());
      }
    }
    for (int lane = 0; lane < 3; ++lane) {
      auto d = s->Next(lane);
      if (!d) continue;
      ++dispatches;
      ASSERT_EQ(running.count(lane), 0u) << "two iterations at once in lane " << lane;
      ASSERT_FALSE(open_by_lane[lane].empty());
      ASSERT_EQ(d->job, open_by_lane[lane].front()) << "a younger job ran in lane " << lane;
      running[lane] = d->job;
    }
  }
  EXPECT_GT(dispatches, 1000);
}

}  // namespace
}  // namespace tandem::sched
