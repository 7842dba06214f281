#include "sched/sim/lane_memory.h"

#include "gtest/gtest.h"

namespace tandem::sched::sim {
namespace {

constexpr uint64_t kGB = 1'000'000'000;

TEST(LaneMemoryModelTest, LaneArenaIsTheLargestPeakOfItsJobs) {
  LaneMemoryModel memory(20 * kGB, 4);
  ASSERT_EQ(memory.Admit(1, 1 * kGB, 6 * kGB, 0).value(), 0);
  ASSERT_EQ(memory.Admit(2, 1 * kGB, 4 * kGB, 0).value(), 0);  // shares lane 0: no growth
  EXPECT_EQ(memory.UsedBytes(), 8 * kGB);
  ASSERT_EQ(memory.Admit(3, 1 * kGB, 5 * kGB, 1).value(), 1);  // a new lane
  EXPECT_EQ(memory.UsedBytes(), 14 * kGB);
  EXPECT_EQ(memory.NumLanes(), 2);
}

TEST(LaneMemoryModelTest, RefusesWhatDoesNotFitAndChangesNothing) {
  LaneMemoryModel memory(10 * kGB, 2);
  ASSERT_TRUE(memory.Admit(1, 2 * kGB, 6 * kGB, 0).ok());
  const auto refused = memory.Admit(2, 1 * kGB, 3 * kGB, 1);  // 2+1+6+3 > 10
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(memory.NumLanes(), 1);
  EXPECT_EQ(memory.UsedBytes(), 8 * kGB);
  // Memory picks: lane 0 takes it without growing.
  EXPECT_EQ(memory.Admit(2, 1 * kGB, 3 * kGB, -1).value(), 0);
  EXPECT_EQ(memory.UsedBytes(), 9 * kGB);
}

TEST(LaneMemoryModelTest, NeverMoreLanesThanAllowed) {
  LaneMemoryModel memory(100 * kGB, 1);
  ASSERT_TRUE(memory.Admit(1, kGB, kGB, 0).ok());
  EXPECT_FALSE(memory.Admit(2, kGB, kGB, 1).ok());
  EXPECT_FALSE(memory.Move(1, 1).ok());
}

TEST(LaneMemoryModelTest, ReleaseAndMoveShrinkLanes) {
  LaneMemoryModel memory(100 * kGB, 4);
  ASSERT_TRUE(memory.Admit(1, kGB, 8 * kGB, 0).ok());
  ASSERT_TRUE(memory.Admit(2, kGB, 2 * kGB, 0).ok());
  EXPECT_EQ(memory.UsedBytes(), 10 * kGB);
  ASSERT_EQ(memory.Move(1, 1).value(), 1);  // lane 0 shrinks to 2, lane 1 is 8
  EXPECT_EQ(memory.UsedBytes(), 12 * kGB);
  memory.Release(1);
  EXPECT_EQ(memory.UsedBytes(), 3 * kGB);
  EXPECT_EQ(memory.NumLanes(), 2);  // lanes keep their numbers
  EXPECT_EQ(memory.Move(7, 0).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem::sched::sim
