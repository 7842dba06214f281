#include "sched/pack_policy.h"

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "sched/scheduler.h"

namespace tandem::sched {
namespace {

class PackPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(3); }
  // A fresh PACK scheduler with up to `max_lanes` lanes.
  void Start(int max_lanes) {
    SchedulerOptions options;
    options.policy = "pack";
    options.clock = clock_;
    options.max_lanes = max_lanes;
    scheduler_ = std::move(CreateScheduler(options)).value();
  }
  void Add(JobId job, const std::string& key, int lane) {
    JobParams params;
    params.interference_key = key;
    params.lane = lane;
    ASSERT_TRUE(scheduler_->AddJob(job, params).ok());
  }
  // Runs one iteration of `job` alone in `lane`.
  void RunAlone(JobId job, int lane, double seconds) {
    ASSERT_TRUE(scheduler_->Enqueue(job, 1).ok());
    auto d = scheduler_->Next(lane);
    ASSERT_TRUE(d.has_value());
    ASSERT_EQ(d->job, job);
    clock_->Advance(seconds);
    scheduler_->OnIterationDone(job, lane, seconds);
  }
  // Runs one iteration of a (lane 0) and b (lane 1) side by side, both
  // starting together; each takes its solo time x its r.
  void RunPair(JobId a, double ta, JobId b, double tb) {
    ASSERT_TRUE(scheduler_->Enqueue(a, 1).ok());
    ASSERT_TRUE(scheduler_->Enqueue(b, 1).ok());
    ASSERT_TRUE(scheduler_->Next(0).has_value());
    ASSERT_TRUE(scheduler_->Next(1).has_value());
    // Keep both busy for the whole of each other's iteration: the shorter one
    // restarts at once, so its samples see the partner all the time.
    const double first = std::min(ta, tb);
    clock_->Advance(first);
    if (ta <= tb) {
      scheduler_->OnIterationDone(a, 0, ta);
      clock_->Advance(tb - ta);
      scheduler_->OnIterationDone(b, 1, tb);
    } else {
      scheduler_->OnIterationDone(b, 1, tb);
      clock_->Advance(ta - tb);
      scheduler_->OnIterationDone(a, 0, ta);
    }
  }
  // Runs n iterations of `job` in `lane`, the next one always queued behind
  // the running one (as a training job's), then the last alone.
  void RunBacklogged(JobId job, int lane, int n, double seconds) {
    ASSERT_TRUE(scheduler_->Enqueue(job, next_ticket_++).ok());
    for (int i = 0; i <= n; ++i) {
      if (i < n) {
        ASSERT_TRUE(scheduler_->Enqueue(job, next_ticket_++).ok());
      }
      auto d = scheduler_->Next(lane);
      ASSERT_TRUE(d.has_value());
      ASSERT_EQ(d->job, job);
      clock_->Advance(seconds);
      scheduler_->OnIterationDone(job, lane, seconds);
    }
  }
  // Jobs 1 (key a, lane 0) and 2 (key b, lane 1) measured to clash (r 2.4
  // both ways) and folded into one lane, *shared.
  void FoldAClashingPair(int* shared) {
    Add(1, "a", 0);
    Add(2, "b", 1);
    MeasureSolo();
    for (int i = 0; i < 4; ++i) RunPair(1, 0.048, 2, 0.048);
    std::vector<LaneChange> fold = scheduler_->Rebalance(2);
    ASSERT_EQ(fold.size(), 1u);
    ASSERT_TRUE(scheduler_->MoveJob(fold[0].job, fold[0].to_lane).ok());
    *shared = fold[0].to_lane;
  }
  void MeasureSolo() {
    for (int i = 0; i < 3; ++i) {
      RunAlone(1, 0, 0.020);
      RunAlone(2, 1, 0.020);
    }
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::unique_ptr<Scheduler> scheduler_;
  Ticket next_ticket_ = 1000;
};

TEST_F(PackPolicyTest, UntriedJobsGoSideBySide) {
  EXPECT_EQ(scheduler_->ChooseLane(JobParams{}, 0), 0);
  Add(1, "a", 0);
  EXPECT_EQ(scheduler_->ChooseLane(JobParams{}, 1), 1);  // a new lane
  EXPECT_EQ(scheduler_->ChooseLane(JobParams{}, 3), 1);  // an empty existing lane first
  Add(2, "b", 1);
  Add(3, "c", 2);
  EXPECT_LT(scheduler_->ChooseLane(JobParams{}, 3), 3) << "max_lanes is 3";
}

TEST_F(PackPolicyTest, AnUnmeasuredJobProbesAloneFirst) {
  Add(1, "a", 0);
  Add(2, "b", 1);
  ASSERT_TRUE(scheduler_->Enqueue(1, 10).ok());
  ASSERT_TRUE(scheduler_->Enqueue(2, 20).ok());
  auto d = scheduler_->Next(0);
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(scheduler_->Next(1).has_value()) << "job 1's probe must run alone";
  clock_->Advance(0.02);
  scheduler_->OnIterationDone(1, 0, 0.02);
  // Job 1 has nothing queued now: job 2's probe runs, alone.
  d = scheduler_->Next(1);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->job, 2u);
  ASSERT_TRUE(scheduler_->Enqueue(1, 11).ok());
  EXPECT_FALSE(scheduler_->Next(0).has_value()) << "job 1's next probe waits for job 2's";
  clock_->Advance(0.02);
  scheduler_->OnIterationDone(2, 1, 0.02);
  d = scheduler_->Next(0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->job, 1u);
}

// Beside a job that has run, a probe goes in segments and takes turns with
// it: it pauses once it has run probe_turn_fraction of that job's iteration
// (2 ms), the job then runs one, and the probe goes on.
TEST_F(PackPolicyTest, ASegmentedProbeTakesTurnsWithTheJobItHoldsUp) {
  Add(1, "a", 0);
  for (int i = 0; i < 4; ++i) RunAlone(1, 0, 0.002);
  Add(2, "b", 1);
  ASSERT_TRUE(scheduler_->Enqueue(2, 20).ok());
  ASSERT_TRUE(scheduler_->Enqueue(1, 10).ok());
  EXPECT_FALSE(scheduler_->Next(0).has_value()) << "job 2's probe is due: lane 0 waits";
  auto d = scheduler_->Next(1);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->job, 2u);
  EXPECT_TRUE(d->segmented);
  EXPECT_FALSE(scheduler_->ShouldYield(1));
  const double probe_turn = 0.002 * SchedulerOptions{}.probe_turn_fraction;
  ASSERT_LT(probe_turn, 0.002);
  for (int turn = 0; turn < 3; ++turn) {
    clock_->Advance(0.5 * probe_turn);
    EXPECT_FALSE(scheduler_->ShouldYield(1)) << turn << ": its turn is not over";
    EXPECT_FALSE(scheduler_->Next(0).has_value()) << turn;
    clock_->Advance(0.7 * probe_turn);
    ASSERT_TRUE(scheduler_->ShouldYield(1)) << turn;
    scheduler_->OnIterationYielded(1);
    d = scheduler_->Next(0);
    ASSERT_TRUE(d.has_value()) << turn << ": job 1 runs while the probe is paused";
    EXPECT_EQ(d->job, 1u);
    EXPECT_FALSE(d->segmented);
    EXPECT_TRUE(scheduler_->ShouldYield(1)) << turn << ": job 1's iteration is running";
    clock_->Advance(0.002);
    scheduler_->OnIterationDone(1, 0, 0.002);
    ASSERT_TRUE(scheduler_->Enqueue(1, 11 + turn).ok());
    EXPECT_FALSE(scheduler_->ShouldYield(1)) << turn << ": the pause window has passed";
    scheduler_->OnIterationResumed(1);
    EXPECT_FALSE(scheduler_->Next(0).has_value()) << turn << ": the probe runs alone again";
  }
  clock_->Advance(0.001);
  scheduler_->OnIterationDone(2, 1, 0.0115);
  d = scheduler_->Next(0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->job, 1u);
}

TEST_F(PackPolicyTest, AJobArrivingAfterEveryKeyIsMeasuredStillProbesAlone) {
  Add(1, "a", 0);
  Add(2, "b", 1);
  MeasureSolo();
  // Both keys measured: nothing waits for a probe (and Pick stops looking).
  ASSERT_TRUE(scheduler_->Enqueue(1, 10).ok());
  ASSERT_TRUE(scheduler_->Enqueue(2, 20).ok());
  ASSERT_TRUE(scheduler_->Next(0).has_value());
  ASSERT_TRUE(scheduler_->Next(1).has_value());
  clock_->Advance(0.02);
  scheduler_->OnIterationDone(1, 0, 0.02);
  scheduler_->OnIterationDone(2, 1, 0.02);
  // A job of a new key arrives: its probe is due again, and runs alone.
  Add(3, "c", 2);
  ASSERT_TRUE(scheduler_->Enqueue(1, 11).ok());
  ASSERT_TRUE(scheduler_->Enqueue(3, 30).ok());
  EXPECT_FALSE(scheduler_->Next(0).has_value()) << "job 3's probe comes first";
  auto d = scheduler_->Next(2);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->job, 3u);
  // A job of a measured key adds no probe.
  clock_->Advance(0.02);
  scheduler_->OnIterationDone(3, 2, 0.02);
  scheduler_->RemoveJob(3);
  Add(4, "a", 2);
  d = scheduler_->Next(0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->job, 1u);
}

TEST_F(PackPolicyTest, FoldsAPairThatClashes) {
  Add(1, "a", 0);
  Add(2, "b", 1);
  MeasureSolo();
  EXPECT_TRUE(scheduler_->Rebalance(2).empty()) << "nothing measured: nothing to fold";
  // r = 2.4 both ways: 1/2.4 + 1/2.4 = 0.83 < 1.
  for (int i = 0; i < 4; ++i) RunPair(1, 0.048, 2, 0.048);
  const auto pairs = scheduler_->Interference();
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_NEAR(pairs[0].r, 2.4, 1e-6);
  const std::vector<LaneChange> changes = scheduler_->Rebalance(2);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_NE(changes[0].from_lane, changes[0].to_lane);
  ASSERT_TRUE(scheduler_->MoveJob(changes[0].job, changes[0].to_lane).ok());
  EXPECT_TRUE(scheduler_->Rebalance(2).empty()) << "folded: no more moves, no oscillation";
  // A newcomer alike to job 1, a job whose next iteration is always queued
  // (training), joins the lane of the clash, not a new lane (a request
  // stream's newcomer: ANewJobJoinsAClashingPartnerOnlyWithinTheLanesShare).
  RunBacklogged(1, changes[0].to_lane, 20, 0.048);
  JobParams alike;
  alike.interference_key = "a";
  EXPECT_EQ(scheduler_->ChooseLane(alike, 2), changes[0].to_lane);
}

TEST_F(PackPolicyTest, JobsSharingALaneAreServedInRequestOrder) {
  Add(1, "a", 0);
  Add(2, "b", 1);
  MeasureSolo();
  ASSERT_TRUE(scheduler_->MoveJob(2, 0).ok());
  // Job 2 (the younger) asked first, then job 1, then job 2 again: the lane
  // serves the requests in that order, not the older job first.
  ASSERT_TRUE(scheduler_->Enqueue(2, 100).ok());
  ASSERT_TRUE(scheduler_->Enqueue(1, 101).ok());
  ASSERT_TRUE(scheduler_->Enqueue(2, 102).ok());
  for (JobId expected : {JobId{2}, JobId{1}, JobId{2}}) {
    auto d = scheduler_->Next(0);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->job, expected);
    clock_->Advance(0.02);
    scheduler_->OnIterationDone(d->job, 0, 0.02);
  }
  EXPECT_FALSE(scheduler_->Next(0).has_value()) << "nothing left queued";
}

TEST_F(PackPolicyTest, KeepsAPairThatPaysApartAndSpreadsACrowdedLane) {
  Add(1, "a", 0);
  Add(2, "b", 1);
  MeasureSolo();
  // r = 1.4 both ways: 1/1.4 + 1/1.4 = 1.43 > 1.
  for (int i = 0; i < 4; ++i) RunPair(1, 0.028, 2, 0.028);
  EXPECT_TRUE(scheduler_->Rebalance(2).empty());
  // Both in one lane (memory put them there): PACK asks for a lane of its own.
  ASSERT_TRUE(scheduler_->MoveJob(2, 0).ok());
  ASSERT_TRUE(scheduler_->Enqueue(2, 5).ok());
  const std::vector<LaneChange> changes = scheduler_->Rebalance(2);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].job, 2u);
  EXPECT_EQ(changes[0].to_lane, 1);  // the empty lane before a new one
}

// Runs `rounds` rounds of 10 ms in which each job (id, lane, load) runs one
// iteration alone of load x 10 ms of device time: its recent device time
// per second tends to `load`.
void RunLoads(Scheduler& s, ManualClock& clock, const std::vector<std::tuple<JobId, int, double>>& jobs, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    for (const auto& [job, lane, load] : jobs) {
      ASSERT_TRUE(s.Enqueue(job, r + 1).ok());
      auto d = s.Next(lane);
      ASSERT_TRUE(d.has_value()) << "job " << job << " round " << r;
      ASSERT_EQ(d->job, job);
      clock.Advance(0.01 / jobs.size());
      s.OnIterationDone(job, lane, load * 0.01);
    }
  }
}

TEST_F(PackPolicyTest, LevelsLoadWhenEveryLaneIsTaken) {
  // Lane 0 holds two costly request streams, lanes 1 and 2 one cheap each.
  Add(1, "heavy", 0);
  Add(2, "heavy", 0);
  Add(3, "light", 1);
  Add(4, "light", 2);
  RunLoads(*scheduler_, *clock_, {{1, 0, 0.4}, {2, 0, 0.4}, {3, 1, 0.05}, {4, 2, 0.05}}, 300);
  std::vector<LaneChange> changes = scheduler_->Rebalance(3);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].job == 1 || changes[0].job == 2) << changes[0].job;
  EXPECT_EQ(changes[0].from_lane, 0);
  EXPECT_EQ(changes[0].to_lane, 1);  // the first of the least busy lanes
  // Applied, the lanes are within the gap: nothing more to do.
  ASSERT_TRUE(scheduler_->MoveJob(changes[0].job, 1).ok());
  const JobId stayed = changes[0].job == 1 ? 2 : 1;
  RunLoads(*scheduler_, *clock_, {{stayed, 0, 0.4}, {changes[0].job, 1, 0.4}, {3, 1, 0.05}, {4, 2, 0.35}}, 300);
  EXPECT_TRUE(scheduler_->Rebalance(3).empty());
}

TEST_F(PackPolicyTest, EachBusyLaneGivesALessBusyOneAJobInOneCall) {
  // Four lanes: 0 and 1 hold two costly request streams each, 2 and 3 one
  // cheap one each. One call moves a stream out of each busy lane, into
  // different lanes (a lane takes one newcomer at a time).
  Start(4);
  Add(1, "heavy", 0);
  Add(2, "heavy", 0);
  Add(3, "heavy", 1);
  Add(4, "heavy", 1);
  Add(5, "light", 2);
  Add(6, "light", 3);
  RunLoads(*scheduler_, *clock_, {{1, 0, 0.35}, {2, 0, 0.35}, {3, 1, 0.3}, {4, 1, 0.3}, {5, 2, 0.05}, {6, 3, 0.04}},
           300);
  std::vector<LaneChange> changes = scheduler_->Rebalance(4);
  ASSERT_EQ(changes.size(), 2u);
  std::sort(changes.begin(), changes.end(),
            [](const LaneChange& a, const LaneChange& b) { return a.from_lane < b.from_lane; });
  // The busiest lane gives the least busy one (lane 3) a job, the next two pair up.
  EXPECT_EQ(changes[0].from_lane, 0);
  EXPECT_EQ(changes[0].to_lane, 3);
  EXPECT_EQ(changes[1].from_lane, 1);
  EXPECT_EQ(changes[1].to_lane, 2);
}

TEST_F(PackPolicyTest, AMovedJobIsHeldAndMovesAreSpaced) {
  Add(1, "heavy", 0);
  Add(2, "heavy", 0);
  Add(3, "light", 1);
  Add(4, "light", 2);
  RunLoads(*scheduler_, *clock_, {{1, 0, 0.4}, {2, 0, 0.4}, {3, 1, 0.05}, {4, 2, 0.05}}, 300);
  ASSERT_TRUE(scheduler_->MoveJob(1, 1).ok());
  // Right after a move, no other: the loads have not shown it yet.
  EXPECT_TRUE(scheduler_->Rebalance(3).empty());
  // Lane 1 now the busiest, jobs 1 and 3 alike there: job 1 would be the
  // first choice (the older), but it moved less than kHoldSeconds ago.
  RunLoads(*scheduler_, *clock_, {{2, 0, 0.05}, {1, 1, 0.3}, {3, 1, 0.3}, {4, 2, 0.05}}, 300);
  std::vector<LaneChange> changes = scheduler_->Rebalance(3);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].job, 3u);
  EXPECT_EQ(changes[0].from_lane, 1);
}

TEST_F(PackPolicyTest, AMovedJobThatStaysIdleDoesNotStopLevelling) {
  Add(1, "heavy", 0);
  Add(2, "heavy", 0);
  Add(5, "heavy", 0);
  Add(3, "light", 1);
  Add(4, "light", 2);
  RunLoads(*scheduler_, *clock_, {{1, 0, 0.3}, {2, 0, 0.3}, {5, 0, 0.3}, {3, 1, 0.05}, {4, 2, 0.05}}, 300);
  ASSERT_TRUE(scheduler_->MoveJob(1, 1).ok());
  // Job 1 never runs on its new lane (its client went quiet): levelling
  // waits for its first iteration there only kRecaptureWaitSeconds.
  RunLoads(*scheduler_, *clock_, {{2, 0, 0.4}, {5, 0, 0.4}, {3, 1, 0.05}, {4, 2, 0.05}}, 300);
  std::vector<LaneChange> changes = scheduler_->Rebalance(3);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].from_lane, 0);
}

TEST_F(PackPolicyTest, AnIterationOfACaptureDoesNotMakeAJobLookCostly) {
  // Equal lanes; then job 1 runs one iteration 50 times its usual device
  // time (op by op, capturing its graph again, as after a move): counted
  // at most twice its cost, it leaves the lanes level.
  Add(1, "a", 0);
  Add(2, "a", 1);
  Add(3, "a", 2);
  Add(4, "b", 0);
  RunLoads(*scheduler_, *clock_, {{1, 0, 0.2}, {2, 1, 0.2}, {3, 2, 0.2}, {4, 0, 0.02}}, 300);
  ASSERT_TRUE(scheduler_->Rebalance(3).empty());
  RunLoads(*scheduler_, *clock_, {{1, 0, 10.0}}, 1);
  EXPECT_TRUE(scheduler_->Rebalance(3).empty());
}

TEST_F(PackPolicyTest, RequestStreamsThatClashLeaveALanePastSaturation) {
  // Keys a and b clash (measured by jobs 1 and 2 kept busy): folded.
  int shared = -1;
  ASSERT_NO_FATAL_FAILURE(FoldAClashingPair(&shared));
  const int other = 1 - shared;
  // Now both are request streams, each keeping the shared lane 45% busy:
  // 90% together, where taking turns queues their requests. Two light
  // jobs fill the other lanes.
  Add(3, "c", other);
  Add(4, "c", 2);
  RunLoads(*scheduler_, *clock_, {{1, shared, 0.45}, {2, shared, 0.45}, {3, other, 0.05}, {4, 2, 0.05}}, 300);
  std::vector<LaneChange> changes = scheduler_->Rebalance(3);
  ASSERT_EQ(changes.size(), 1u) << "one of the pair leaves the saturated lane beside no clashing partner";
  EXPECT_TRUE(changes[0].job == 1 || changes[0].job == 2);
  EXPECT_EQ(changes[0].from_lane, shared);
  ASSERT_TRUE(scheduler_->MoveJob(changes[0].job, changes[0].to_lane).ok());
  const JobId stayed = changes[0].job == 1 ? 2 : 1;
  const int light_left = changes[0].to_lane == other ? 2 : other;
  const JobId light = light_left == other ? 3 : 4;
  RunLoads(*scheduler_, *clock_,
           {{stayed, shared, 0.45},
            {changes[0].job, changes[0].to_lane, 0.45},
            {light, light_left, 0.05},
            {JobId{7} - light, changes[0].to_lane, 0.05}},
           300);
  // Folding it back would make the shared lane 90% busy again: it stays
  // (levelling may still move a light job).
  for (const LaneChange& c : scheduler_->Rebalance(3)) {
    EXPECT_NE(c.job, changes[0].job) << "moved back to lane " << c.to_lane;
    EXPECT_NE(c.to_lane, shared) << "job " << c.job;
  }
}

TEST_F(PackPolicyTest, ANewJobJoinsAClashingPartnerOnlyWithinTheLanesShare) {
  int shared = -1;
  ASSERT_NO_FATAL_FAILURE(FoldAClashingPair(&shared));
  const int other = 1 - shared;
  JobParams a;
  a.interference_key = "a";
  // As request streams keeping their lane 40% busy: 2 jobs, 3 lanes, so a
  // lane takes at most 2 (StreamLaneCap: a pair), and the pair's lane holds
  // 2. The newcomer gets the emptied lane.
  RunLoads(*scheduler_, *clock_, {{1, shared, 0.2}, {2, shared, 0.2}}, 300);
  EXPECT_EQ(scheduler_->ChooseLane(a, 2), other);
  // With 8 jobs the cap is 3: the pair's lane may take one more while it is
  // not busy...
  Add(3, "c", other);
  Add(4, "c", 2);
  Add(5, "c", other);
  Add(6, "c", 2);
  Add(7, "c", other);
  Add(8, "c", 2);
  auto light = [&](double pair_load) {
    return std::vector<std::tuple<JobId, int, double>>{
        {1, shared, pair_load}, {2, shared, pair_load}, {3, other, 0.05}, {4, 2, 0.05},
        {5, other, 0.05},       {6, 2, 0.05},           {7, other, 0.05}, {8, 2, 0.05}};
  };
  RunLoads(*scheduler_, *clock_, light(0.2), 300);
  EXPECT_EQ(scheduler_->ChooseLane(a, 3), shared);
  // ... but not once its request streams keep it 90% busy.
  RunLoads(*scheduler_, *clock_, light(0.45), 300);
  EXPECT_NE(scheduler_->ChooseLane(a, 3), shared);
}

TEST_F(PackPolicyTest, ARequestStreamOfASaturatedLaneSpreadsToANewLaneDespiteAClash) {
  int shared = -1;
  ASSERT_NO_FATAL_FAILURE(FoldAClashingPair(&shared));
  const int other = 1 - shared;
  Add(3, "c", other);
  // Two lanes of three open; the pair keeps its lane 90% busy.
  RunLoads(*scheduler_, *clock_, {{1, shared, 0.45}, {2, shared, 0.45}, {3, other, 0.05}}, 300);
  ASSERT_TRUE(scheduler_->Enqueue(1, 1000).ok());
  ASSERT_TRUE(scheduler_->Enqueue(2, 1001).ok());
  std::vector<LaneChange> changes = scheduler_->Rebalance(2);
  ASSERT_EQ(changes.size(), 1u) << "a request stream leaves the saturated lane for a new one";
  EXPECT_TRUE(changes[0].job == 1 || changes[0].job == 2) << changes[0].job;
  EXPECT_EQ(changes[0].from_lane, shared);
  EXPECT_EQ(changes[0].to_lane, 2);
}

TEST_F(PackPolicyTest, ARequestStreamDoesNotFoldIntoAFarBusierLane) {
  // Keys a and b clash. Job 1 (a) is a light stream in lane 0, its partner
  // job 2 (b) shares lane 1 with a heavy stream: folding job 1 there would
  // undo what levelling does. Lane 0 is at the cap (7 jobs, 3 lanes: 3), so
  // job 2 cannot come to it either: levelling moves job 2 to the idle lane.
  Add(1, "a", 0);
  Add(2, "b", 1);
  MeasureSolo();
  for (int i = 0; i < 4; ++i) RunPair(1, 0.048, 2, 0.048);
  Add(3, "c", 1);
  Add(4, "c", 2);
  Add(5, "c", 0);
  Add(6, "c", 0);
  Add(7, "c", 2);
  RunLoads(*scheduler_, *clock_,
           {{1, 0, 0.05}, {5, 0, 0.05}, {6, 0, 0.05}, {2, 1, 0.05}, {3, 1, 0.45}, {4, 2, 0.05}, {7, 2, 0.05}}, 300);
  std::vector<LaneChange> changes = scheduler_->Rebalance(3);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].job, 2u) << "job " << changes[0].job << " to lane " << changes[0].to_lane;
  EXPECT_EQ(changes[0].from_lane, 1);
  EXPECT_EQ(changes[0].to_lane, 2);
}

TEST_F(PackPolicyTest, IdleRequestStreamsFoldOnlyUpToTheLaneCap) {
  // Keys a and b clash. Jobs of key a, light request streams, would all
  // fold beside job 2 (key b): idle, no lane's load stops them.
  Add(1, "a", 0);
  Add(2, "b", 1);
  MeasureSolo();
  for (int i = 0; i < 4; ++i) RunPair(1, 0.048, 2, 0.048);
  for (JobId job = 3; job <= 6; ++job) Add(job, "a", 0);
  Add(7, "a", 2);
  RunLoads(*scheduler_, *clock_,
           {{1, 0, 0.02}, {2, 1, 0.02}, {3, 0, 0.02}, {4, 0, 0.02}, {5, 0, 0.02}, {6, 0, 0.02}, {7, 2, 0.02}}, 300);
  int into_b = 0;
  for (const LaneChange& c : scheduler_->Rebalance(3)) {
    if (c.to_lane == 1) ++into_b;
  }
  // 7 jobs, 3 lanes: a lane takes at most 3 (StreamLaneCap), job 2 and two more.
  EXPECT_EQ(into_b, 2);
}

TEST_F(PackPolicyTest, ARequestStreamMovedLatelyStaysPutAndItsPartnerFoldsToIt) {
  // Keys a and b clash; jobs 1 (a) and 2 (b) are light request streams.
  Add(1, "a", 0);
  Add(2, "b", 1);
  MeasureSolo();
  for (int i = 0; i < 4; ++i) RunPair(1, 0.048, 2, 0.048);
  RunLoads(*scheduler_, *clock_, {{1, 0, 0.02}, {2, 1, 0.02}}, 300);
  // Job 1 moved away and back: held in lane 0 for kHoldSeconds.
  ASSERT_TRUE(scheduler_->MoveJob(1, 2).ok());
  ASSERT_TRUE(scheduler_->MoveJob(1, 0).ok());
  std::vector<LaneChange> changes = scheduler_->Rebalance(3);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].job, 2) << "the held job 1 would have gone first (lane 0 comes first)";
  EXPECT_EQ(changes[0].from_lane, 1);
  EXPECT_EQ(changes[0].to_lane, 0);
}

TEST_F(PackPolicyTest, ARequestStreamNewcomerTakesTheFewestJobsAmongLanesOfAboutEqualLoad) {
  // Every lane taken by light request streams of key a: lane 0 holds five
  // and is the least busy by a hair, lanes 1 and 2 one and two.
  for (JobId job = 1; job <= 5; ++job) Add(job, "a", 0);
  Add(6, "a", 1);
  Add(7, "a", 2);
  Add(8, "a", 2);
  auto loads = [](double job6) {
    return std::vector<std::tuple<JobId, int, double>>{{1, 0, 0.001}, {2, 0, 0.001}, {3, 0, 0.001}, {4, 0, 0.001},
                                                       {5, 0, 0.001}, {6, 1, job6},  {7, 2, 0.01},  {8, 2, 0.01}};
  };
  JobParams a;
  a.interference_key = "a";
  // Loads 0.005, 0.01 and 0.02 are all idle: the lane with the fewest jobs.
  RunLoads(*scheduler_, *clock_, loads(0.01), 300);
  EXPECT_EQ(scheduler_->ChooseLane(a, 3), 1);
  // Lane 1 busy (0.3) is out of the tie: the fewest jobs of lanes 0 and 2.
  RunLoads(*scheduler_, *clock_, loads(0.3), 300);
  EXPECT_EQ(scheduler_->ChooseLane(a, 3), 2);
}

TEST_F(PackPolicyTest, ARequestStreamNewcomerPassesOverTheIdlestLaneAtTheCap) {
  // Lane 0 holds five light request streams of key a and is the idlest;
  // lanes 1 and 2 one busy stream each (0.3). Eight jobs, three lanes: a
  // lane takes three (StreamLaneCap), so lane 0 is passed over.
  for (JobId job = 1; job <= 5; ++job) Add(job, "a", 0);
  Add(6, "a", 1);
  Add(7, "a", 2);
  RunLoads(*scheduler_, *clock_,
           {{1, 0, 0.001}, {2, 0, 0.001}, {3, 0, 0.001}, {4, 0, 0.001}, {5, 0, 0.001}, {6, 1, 0.3}, {7, 2, 0.3}}, 300);
  JobParams a;
  a.interference_key = "a";
  const int lane = scheduler_->ChooseLane(a, 3);
  EXPECT_NE(lane, 0);
  // Once every lane holds the cap (15 jobs: 5), the idlest again.
  for (JobId job = 8; job <= 15; ++job) Add(job, "a", job <= 11 ? 1 : 2);
  EXPECT_EQ(scheduler_->ChooseLane(a, 3), 0);
}

TEST(LaneLoadsTest, RequestStreamsAreIdleAtMostIterationEndsAndLight) {
  LaneLoads loads;
  // 100 iterations a second of 2 ms each: load 0.2.
  for (int i = 1; i <= 1000; ++i) {  // 10 s: ten decay times
    const double now = i * 0.01;
    loads.OnIterationDone(1, now, 0.002, /*still_active=*/false);  // a request stream
    loads.OnIterationDone(2, now, 0.002, /*still_active=*/true);   // taking turns, next one queued
    loads.OnIterationDone(3, now, 0.009, /*still_active=*/false);  // idle after each, but 90% busy
  }
  EXPECT_NEAR(loads.Of(1, 10.0), 0.2, 0.01);
  EXPECT_NEAR(loads.Of(3, 10.0), 0.9, 0.02);
  ASSERT_TRUE(loads.RequestStreamLoad(1, 10.0).has_value());
  EXPECT_DOUBLE_EQ(*loads.RequestStreamLoad(1, 10.0), loads.Of(1, 10.0));
  EXPECT_FALSE(loads.RequestStreamLoad(2, 10.0).has_value());
  EXPECT_FALSE(loads.RequestStreamLoad(3, 10.0).has_value());
  EXPECT_FALSE(loads.RequestStreamLoad(4, 10.0).has_value()) << "never seen";
  // Quiet for a while: the rate, and so the load, decays.
  EXPECT_LT(loads.Of(1, 13.0), 0.2 * 0.06);
}

TEST_F(PackPolicyTest, LeavesLanesOfEqualLoadAlone) {
  // Unequal job counts but equal loads: no move.
  Add(1, "a", 0);
  Add(2, "a", 0);
  Add(3, "a", 1);
  Add(4, "a", 2);
  RunLoads(*scheduler_, *clock_, {{1, 0, 0.15}, {2, 0, 0.15}, {3, 1, 0.3}, {4, 2, 0.3}}, 300);
  EXPECT_TRUE(scheduler_->Rebalance(3).empty());
}

TEST_F(PackPolicyTest, LevelsOnlyOnceNoLaneCanBeOpened) {
  // Two of the three lanes taken, the first far busier: a lane can still be
  // opened, so levelling waits (spreading opens lanes for waiting jobs).
  Add(1, "a", 0);
  Add(2, "a", 0);
  Add(3, "b", 1);
  RunLoads(*scheduler_, *clock_, {{1, 0, 0.4}, {2, 0, 0.4}, {3, 1, 0.05}}, 300);
  EXPECT_TRUE(scheduler_->Rebalance(2).empty());
}

}  // namespace
}  // namespace tandem::sched
