#include "memory/range_allocator.h"

#include <gtest/gtest.h>

#include <random>

namespace tandem::memory {
namespace {

using End = RangeAllocator::End;

TEST(RangeAllocatorTest, RoundsToAlignmentAndZeroTakesOneUnit) {
  RangeAllocator space(10 * 256 + 100, 256);
  EXPECT_EQ(space.size(), 10u * 256);
  EXPECT_EQ(space.Aligned(1), 256u);
  EXPECT_EQ(space.Aligned(256), 256u);
  EXPECT_EQ(space.Aligned(257), 512u);
  EXPECT_EQ(space.Aligned(0), 256u);
  auto a = space.Allocate(1);
  auto b = space.Allocate(0);
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(*a % 256, 0u);
  EXPECT_EQ(*b % 256, 0u);
  EXPECT_EQ(space.free_bytes(), 8u * 256);
}

TEST(RangeAllocatorTest, BestFitPicksTheSmallestRangeThatHolds) {
  RangeAllocator space(100 * 256, 256);
  // Layout: [a 10][b 5][c 10][d 3][e 10][rest 62]; freeing b and d leaves
  // holes of 5 and 3 units below the big free tail.
  std::vector<uint64_t> sizes = {10, 5, 10, 3, 10};
  std::vector<uint64_t> offsets;
  for (uint64_t units : sizes) offsets.push_back(*space.Allocate(units * 256));
  ASSERT_TRUE(space.Free(offsets[1], 5 * 256));
  ASSERT_TRUE(space.Free(offsets[3], 3 * 256));
  // 3 units fit the 3-unit hole exactly, not the 5-unit one nor the tail.
  EXPECT_EQ(*space.Allocate(3 * 256), offsets[3]);
  // 4 units: the 5-unit hole is the best fit.
  EXPECT_EQ(*space.Allocate(4 * 256), offsets[1]);
  // 2 units: only the tail (62 units) and a 1-unit leftover; the tail wins.
  EXPECT_EQ(*space.Allocate(2 * 256), offsets[4] + 10 * 256);
  // 1 unit: the leftover of the 5-unit hole.
  EXPECT_EQ(*space.Allocate(256), offsets[1] + 4 * 256);
}

TEST(RangeAllocatorTest, HighEndPlacesAtTheTopOfTheRange) {
  RangeAllocator space(16 * 256, 256);
  auto low = space.Allocate(256, End::kLow);
  auto high = space.Allocate(2 * 256, End::kHigh);
  ASSERT_TRUE(low && high);
  EXPECT_EQ(*low, 0u);
  EXPECT_EQ(*high, 14u * 256);
  EXPECT_EQ(space.largest_free(), 13u * 256);
}

TEST(RangeAllocatorTest, FreeCoalescesWithBothNeighbours) {
  RangeAllocator space(8 * 256, 256);
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 8; ++i) offsets.push_back(*space.Allocate(256));
  EXPECT_EQ(space.free_bytes(), 0u);
  ASSERT_TRUE(space.Free(offsets[2], 256));
  ASSERT_TRUE(space.Free(offsets[4], 256));
  EXPECT_EQ(space.FreeRanges().size(), 2u);
  ASSERT_TRUE(space.Free(offsets[3], 256));  // joins 2 and 4
  ASSERT_EQ(space.FreeRanges().size(), 1u);
  EXPECT_EQ(space.FreeRanges()[0], (Range{offsets[2], 3 * 256}));
  EXPECT_EQ(space.largest_free(), 3u * 256);
  for (int i : {0, 1, 5, 6, 7}) ASSERT_TRUE(space.Free(offsets[i], 256));
  ASSERT_EQ(space.FreeRanges().size(), 1u);
  EXPECT_EQ(space.FreeRanges()[0], (Range{0, 8 * 256}));
}

TEST(RangeAllocatorTest, RefusesDoubleFreeMisalignedAndOutOfBounds) {
  RangeAllocator space(8 * 256, 256);
  auto a = space.Allocate(2 * 256);
  ASSERT_TRUE(a);
  ASSERT_TRUE(space.Free(*a, 2 * 256));
  EXPECT_FALSE(space.Free(*a, 2 * 256));
  EXPECT_FALSE(space.Free(100, 256));
  EXPECT_FALSE(space.Free(8 * 256, 256));
  EXPECT_EQ(space.free_bytes(), 8u * 256);
}

TEST(RangeAllocatorTest, AllocateAtNeedsAFreeAlignedRange) {
  RangeAllocator space(8 * 256, 256);
  EXPECT_TRUE(space.AllocateAt(2 * 256, 2 * 256));
  EXPECT_FALSE(space.AllocateAt(3 * 256, 256));      // taken
  EXPECT_FALSE(space.AllocateAt(1 * 256, 2 * 256));  // overlaps the taken range
  EXPECT_FALSE(space.AllocateAt(7 * 256, 2 * 256));  // past the end
  EXPECT_FALSE(space.AllocateAt(10, 256));           // misaligned
  EXPECT_EQ(space.FreeBytesEndingAt(2 * 256), 2u * 256);
  EXPECT_EQ(space.FreeBytesStartingAt(4 * 256), 4u * 256);
  EXPECT_TRUE(space.IsFree(4 * 256, 4 * 256));
  EXPECT_FALSE(space.IsFree(3 * 256, 2 * 256));
}

TEST(RangeAllocatorTest, HighestAndLowestBelow) {
  RangeAllocator space(16 * 256, 256);
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 16; ++i) offsets.push_back(*space.Allocate(256));
  for (int i : {1, 2, 5, 6, 7, 12, 13}) ASSERT_TRUE(space.Free(offsets[i], 256));
  // Highest range of >= 2 units: [12, 14); the block goes to its top.
  EXPECT_EQ(*space.AllocateHighest(256), 13u * 256);
  EXPECT_EQ(space.LowestFitBelow(16 * 256, 3 * 256)->offset, 5u * 256);
  EXPECT_EQ(space.LowestFitBelow(16 * 256, 2 * 256)->offset, 1u * 256);
  EXPECT_FALSE(space.LowestFitBelow(4 * 256, 3 * 256).has_value());
  EXPECT_FALSE(space.AllocateHighest(4 * 256).has_value());
}

// Random allocations and frees against a bitmap model: the allocator never
// hands out a unit twice, and its free count matches the model.
TEST(RangeAllocatorTest, RandomizedAgainstABitmap) {
  constexpr uint64_t kUnits = 512;
  RangeAllocator space(kUnits * 256, 256);
  std::vector<bool> used(kUnits, false);
  std::vector<std::pair<uint64_t, uint64_t>> live;  // (offset, bytes)
  std::mt19937_64 rng(7);
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 2 == 0) {
      const uint64_t bytes = 1 + rng() % (8 * 256);
      auto end = rng() % 2 ? End::kLow : End::kHigh;
      auto offset = space.Allocate(bytes, end);
      if (!offset) {
        EXPECT_LT(space.largest_free(), space.Aligned(bytes));
        continue;
      }
      for (uint64_t u = *offset / 256; u < (*offset + space.Aligned(bytes)) / 256; ++u) {
        ASSERT_FALSE(used[u]) << "unit " << u << " handed out twice";
        used[u] = true;
      }
      live.emplace_back(*offset, bytes);
    } else {
      const size_t i = rng() % live.size();
      ASSERT_TRUE(space.Free(live[i].first, live[i].second));
      for (uint64_t u = live[i].first / 256; u < (live[i].first + space.Aligned(live[i].second)) / 256; ++u) {
        used[u] = false;
      }
      live[i] = live.back();
      live.pop_back();
    }
    uint64_t free_units = 0;
    for (bool u : used) free_units += u ? 0 : 1;
    ASSERT_EQ(space.free_bytes(), free_units * 256);
    // Coalesced: no two free ranges touch.
    auto ranges = space.FreeRanges();
    for (size_t i = 1; i < ranges.size(); ++i) ASSERT_LT(ranges[i - 1].end(), ranges[i].offset);
  }
}

}  // namespace
}  // namespace tandem::memory
