#include "client/parallel_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace tandem::client {
namespace {

TEST(ParallelCopyTest, ThreadCountFollowsSizeAndLimit) {
  EXPECT_EQ(CopyThreadsFor(0, 8), 1);
  EXPECT_EQ(CopyThreadsFor(kMinBytesPerCopyThread - 1, 8), 1);
  EXPECT_EQ(CopyThreadsFor(3 * kMinBytesPerCopyThread, 8), 3);
  EXPECT_EQ(CopyThreadsFor(100 * kMinBytesPerCopyThread, 8), 8);
  EXPECT_EQ(CopyThreadsFor(100 * kMinBytesPerCopyThread, 2), 2);
  const int automatic = CopyThreadsFor(100 * kMinBytesPerCopyThread);
  EXPECT_GE(automatic, 1);
  EXPECT_LE(automatic, 8);
}

// Every byte arrives, nothing outside the range is written, for sizes that
// split evenly, unevenly, and into fewer pages than threads.
TEST(ParallelCopyTest, CopiesEveryByteAndNothingElse) {
  std::mt19937_64 rng(7);
  const size_t sizes[] = {0,
                          1,
                          4095,
                          4097,
                          kMinBytesPerCopyThread * 2 + 13,
                          kMinBytesPerCopyThread * 5 - 1,
                          kMinBytesPerCopyThread * 9 + 4096 * 3 + 7};
  for (size_t bytes : sizes) {
    for (int threads : {1, 2, 3, 8}) {
      std::vector<uint8_t> src(bytes);
      for (auto& b : src) b = static_cast<uint8_t>(rng());
      std::vector<uint8_t> dst(bytes + 64, 0xA5);
      ParallelCopy(dst.data() + 32, src.data(), bytes, threads);
      ASSERT_TRUE(std::equal(src.begin(), src.end(), dst.begin() + 32)) << bytes << " bytes, " << threads;
      for (size_t k = 0; k < 32; ++k) {
        ASSERT_EQ(dst[k], 0xA5) << "before the range: " << bytes << " bytes, " << threads;
        ASSERT_EQ(dst[32 + bytes + k], 0xA5) << "after the range: " << bytes << " bytes, " << threads;
      }
    }
  }
}

}  // namespace
}  // namespace tandem::client
