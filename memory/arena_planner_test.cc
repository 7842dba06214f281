#include "memory/arena_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "memory/byte_format.h"

namespace tandem::memory {
namespace {

constexpr uint64_t kAlign = 256;

// No two buffers with intersecting lifetimes share a byte; offsets are
// aligned; the reported peak is the highest end.
void ExpectValidPlan(const std::vector<BufferLifetime>& buffers, const ArenaPlan& plan) {
  ASSERT_EQ(plan.offsets.size(), buffers.size());
  uint64_t peak = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % kAlign, 0u) << "buffer " << i;
    if (buffers[i].bytes == 0) continue;
    peak = std::max(peak, plan.offsets[i] + AlignUp(buffers[i].bytes, kAlign));
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      if (buffers[j].bytes == 0) continue;
      const bool live_together = buffers[i].first <= buffers[j].last && buffers[j].first <= buffers[i].last;
      if (!live_together) continue;
      const uint64_t end_i = plan.offsets[i] + AlignUp(buffers[i].bytes, kAlign);
      const uint64_t end_j = plan.offsets[j] + AlignUp(buffers[j].bytes, kAlign);
      EXPECT_TRUE(end_i <= plan.offsets[j] || end_j <= plan.offsets[i])
          << "buffers " << i << " and " << j << " overlap";
    }
  }
  EXPECT_EQ(plan.peak_bytes, peak);
}

TEST(ArenaPlannerTest, ChainReusesTheBufferTwoStepsBack) {
  // x0 -> x1 -> x2 -> ... each read by the next step only: at most two are
  // live at a time, so the peak is two buffers.
  std::vector<BufferLifetime> buffers;
  for (int i = 0; i < 10; ++i) buffers.push_back({1000, i, i + 1});
  ArenaPlan plan = PlanArena(buffers, kAlign);
  ExpectValidPlan(buffers, plan);
  EXPECT_EQ(plan.peak_bytes, 2 * AlignUp(1000, kAlign));
  EXPECT_EQ(plan.peak_bytes, LowerBoundBytes(buffers, kAlign));
  // Reuse happened: x0 and x2 share an offset.
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
}

TEST(ArenaPlannerTest, AllLiveTogetherNeedTheirSum) {
  std::vector<BufferLifetime> buffers = {{300, 0, 5}, {1024, 1, 5}, {10, 2, 5}, {4096, 0, 5}};
  ArenaPlan plan = PlanArena(buffers, kAlign);
  ExpectValidPlan(buffers, plan);
  EXPECT_EQ(plan.peak_bytes, 512u + 1024 + 256 + 4096);
}

TEST(ArenaPlannerTest, DisjointLifetimesNeedOnlyTheLargest) {
  std::vector<BufferLifetime> buffers = {{5000, 0, 0}, {700, 1, 1}, {9000, 2, 3}, {100, 4, 9}};
  ArenaPlan plan = PlanArena(buffers, kAlign);
  ExpectValidPlan(buffers, plan);
  EXPECT_EQ(plan.peak_bytes, AlignUp(9000, kAlign));
  for (uint64_t offset : plan.offsets) EXPECT_EQ(offset, 0u);
}

TEST(ArenaPlannerTest, ReusesAFreedRangeForASmallerBuffer) {
  // A big buffer dies at step 2; two small ones born at 3 fit in its range
  // while a long-lived buffer stays beside it.
  std::vector<BufferLifetime> buffers = {{4096, 0, 2}, {1024, 0, 6}, {2048, 3, 5}, {2048, 3, 6}};
  ArenaPlan plan = PlanArena(buffers, kAlign);
  ExpectValidPlan(buffers, plan);
  EXPECT_EQ(plan.peak_bytes, 4096u + 1024);
  EXPECT_EQ(plan.peak_bytes, LowerBoundBytes(buffers, kAlign));
}

TEST(ArenaPlannerTest, ZeroByteBuffersTakeNoSpace) {
  std::vector<BufferLifetime> buffers = {{0, 0, 9}, {512, 0, 9}, {0, 3, 4}};
  ArenaPlan plan = PlanArena(buffers, kAlign);
  ExpectValidPlan(buffers, plan);
  EXPECT_EQ(plan.peak_bytes, 512u);
  EXPECT_EQ(PlanArena({}, kAlign).peak_bytes, 0u);
}

TEST(ArenaPlannerTest, LowerBoundCountsBuffersLiveAtTheSameStep) {
  // Steps: 0:{a} 1:{a,b} 2:{b,c} 3:{c}; buffers meeting at one step count together.
  std::vector<BufferLifetime> buffers = {{256, 0, 1}, {512, 1, 2}, {1024, 2, 3}};
  EXPECT_EQ(LowerBoundBytes(buffers, kAlign), 512u + 1024);
}

// Random lifetimes: every heuristic gives a valid plan, the best is no worse
// than any, and none exceeds the bound without reuse.
TEST(ArenaPlannerTest, RandomPlansAreValidAndBestIsTheMinimum) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 60);
    const int steps = 1 + static_cast<int>(rng() % 40);
    std::vector<BufferLifetime> buffers;
    uint64_t no_reuse = 0;
    for (int i = 0; i < n; ++i) {
      const int first = static_cast<int>(rng() % steps);
      const int last = first + static_cast<int>(rng() % (steps - first));
      const uint64_t bytes = rng() % 5 == 0 ? 0 : 1 + rng() % 100000;
      buffers.push_back({bytes, first, last});
      no_reuse += bytes == 0 ? 0 : AlignUp(bytes, kAlign);
    }
    const uint64_t bound = LowerBoundBytes(buffers, kAlign);
    ArenaPlan best = PlanArena(buffers, kAlign);
    ExpectValidPlan(buffers, best);
    for (auto heuristic : {ArenaHeuristic::kGreedyBySizeBestGap, ArenaHeuristic::kGreedyBySizeLowestGap,
                           ArenaHeuristic::kOnlineBestFit}) {
      ArenaPlan plan = PlanArena(buffers, kAlign, heuristic);
      ExpectValidPlan(buffers, plan);
      EXPECT_LE(best.peak_bytes, plan.peak_bytes);
      EXPECT_GE(plan.peak_bytes, bound);
      EXPECT_LE(plan.peak_bytes, no_reuse);
    }
  }
}

// Graph-like lifetimes (a forward pass whose activations live until the
// mirrored backward step, plus short-lived temporaries): records how far
// above the lower bound each heuristic lands. The numbers are in
// docs/memory.md; the test asserts the best plan stays within 10% of the
// bound, which every heuristic met when this was written.
TEST(ArenaPlannerTest, TrainingLikeLifetimesStayNearTheLowerBound) {
  std::mt19937_64 rng(1);
  double sum_ratio[3] = {0, 0, 0};
  double worst_best = 1.0;
  constexpr int kTrials = 50;
  for (int trial = 0; trial < kTrials; ++trial) {
    const int layers = 20 + static_cast<int>(rng() % 60);
    const int steps = 2 * layers + 1;
    std::vector<BufferLifetime> buffers;
    for (int l = 0; l < layers; ++l) {
      const uint64_t activation = (1 + rng() % 64) * 4096;
      buffers.push_back({activation, l, steps - 1 - l});            // saved for backward
      buffers.push_back({activation * (1 + rng() % 3), l, l + 1});  // temporary
      buffers.push_back({activation, steps - 1 - l, steps - l});    // gradient
    }
    const double bound = static_cast<double>(LowerBoundBytes(buffers, kAlign));
    int k = 0;
    for (auto heuristic : {ArenaHeuristic::kGreedyBySizeBestGap, ArenaHeuristic::kGreedyBySizeLowestGap,
                           ArenaHeuristic::kOnlineBestFit}) {
      sum_ratio[k++] += PlanArena(buffers, kAlign, heuristic).peak_bytes / bound;
    }
    ArenaPlan best = PlanArena(buffers, kAlign);
    ExpectValidPlan(buffers, best);
    worst_best = std::max(worst_best, best.peak_bytes / bound);
  }
  std::printf(
      "peak / lower bound, mean over %d graphs: greedy best-gap %.3f, greedy "
      "lowest-gap %.3f, online best-fit %.3f; best-of worst case %.3f\n",
      kTrials, sum_ratio[0] / kTrials, sum_ratio[1] / kTrials, sum_ratio[2] / kTrials, worst_best);
  EXPECT_LE(worst_best, 1.10);
}

// Above kGreedyLimit only the online heuristic runs; it must still be valid
// and reuse memory.
TEST(ArenaPlannerTest, LargeInputsUseTheOnlinePlanner) {
  std::vector<BufferLifetime> buffers;
  const int n = static_cast<int>(kGreedyLimit) + 1000;
  for (int i = 0; i < n; ++i) buffers.push_back({1024, i, i + 2});
  ArenaPlan plan = PlanArena(buffers, kAlign);
  EXPECT_EQ(plan.peak_bytes, 3u * 1024);
  EXPECT_EQ(plan.peak_bytes, LowerBoundBytes(buffers, kAlign));
  // Spot-check validity on a window (the full pairwise check is quadratic).
  for (int i = 0; i + 2 < 500; ++i) {
    EXPECT_NE(plan.offsets[i], plan.offsets[i + 1]);
    EXPECT_NE(plan.offsets[i], plan.offsets[i + 2]);
  }
}

}  // namespace
}  // namespace tandem::memory
