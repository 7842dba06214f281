#include "client/shm_ring.h"

#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::client {
namespace {

TEST(ShmRing, AllocatesInOrderWrapsAndReclaimsFromTheOldest) {
  ShmRing ring(1024);
  auto a = ring.Allocate(1, 300);  // rounded to 512
  auto b = ring.Allocate(2, 256);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 512u);
  EXPECT_FALSE(ring.Allocate(3, 512));  // only 256 left at the end
  ring.Release(2);                      // not the oldest: nothing reclaimed yet
  EXPECT_FALSE(ring.Allocate(3, 512));
  ring.Release(1);  // now both go
  EXPECT_EQ(ring.in_use(), 0u);
  auto c = ring.Allocate(3, 768);
  ASSERT_TRUE(c);
  auto d = ring.Allocate(4, 256);
  ASSERT_TRUE(d);
  ring.Release(3);
  auto e = ring.Allocate(5, 512);  // wraps to the front
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, 0u);
  EXPECT_FALSE(ring.Allocate(6, 1024 + 256));
}

TEST(ShmRing, RandomUseNeverOverlapsLiveSlices) {
  std::mt19937 rng(7);
  ShmRing ring(1 << 16);
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> live;  // owner -> [begin, end)
  uint64_t next = 1;
  for (int step = 0; step < 20000; ++step) {
    if (!live.empty() && rng() % 3 == 0) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      ring.Release(it->first);
      live.erase(it);
      continue;
    }
    uint64_t bytes = 1 + rng() % 9000;
    auto off = ring.Allocate(next, bytes);
    if (!off) continue;
    ASSERT_LE(*off + bytes, ring.capacity());
    for (const auto& [owner, range] : live) {
      ASSERT_TRUE(*off + bytes <= range.first || range.second <= *off) << "overlap at step " << step;
    }
    live[next++] = {*off, *off + bytes};
  }
}

}  // namespace
}  // namespace tandem::client
