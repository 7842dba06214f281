#include "server/lane_priority.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::server {
namespace {

TEST(WantedStreamLevels, LevelsAreAboveTheLowestPriorityPresentAndCapped) {
  // Lane 0: best effort (1); lane 1: priority 3; lane 2: priority 100; lane 3: empty.
  const std::vector<LaneJob> jobs = {{0, 1}, {1, 3}, {0, 1}, {2, 100}, {1, 2}};
  const auto wanted = WantedStreamLevels(4, jobs, 5);
  ASSERT_EQ(wanted.size(), 4u);
  EXPECT_EQ(wanted[0], 0);
  EXPECT_EQ(wanted[1], 2);  // its top job (3) is 2 above the lowest (1)
  EXPECT_EQ(wanted[2], 5);  // capped at the device's levels
  EXPECT_FALSE(wanted[3].has_value());
}

TEST(WantedStreamLevels, ADeviceWithoutLevelsWantsTheDefaultEverywhere) {
  const auto wanted = WantedStreamLevels(2, std::vector<LaneJob>{{0, 0}, {1, 9}}, 0);
  EXPECT_EQ(wanted[0], 0);
  EXPECT_EQ(wanted[1], 0);
}

TEST(WantedStreamLevels, ALoneJobRunsAtTheDefaultLevel) {
  // Nothing below it: no reason to rank its stream above anything.
  const auto wanted = WantedStreamLevels(1, std::vector<LaneJob>{{0, 7}}, 5);
  EXPECT_EQ(wanted[0], 0);
}

TEST(WantedStreamLevels, ExtremePrioritiesDoNotOverflow) {
  const auto wanted = WantedStreamLevels(2, std::vector<LaneJob>{{0, INT32_MIN}, {1, INT32_MAX}}, 5);
  EXPECT_EQ(wanted[0], 0);
  EXPECT_EQ(wanted[1], 5);
}

TEST(WantedStreamLevels, JobsOfUnknownLanesAreIgnored) {
  const auto wanted = WantedStreamLevels(1, std::vector<LaneJob>{{0, 4}, {3, -10}, {-1, -10}}, 5);
  EXPECT_EQ(wanted[0], 0);  // -10 belongs to no lane of this device
}

}  // namespace
}  // namespace tandem::server
