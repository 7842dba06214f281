#include "device/conv_workspace.h"

#include <gtest/gtest.h>

namespace tandem::device {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(ConvWorkspaceTest, DefaultIsASixtyFourthOfTheDeviceWithinBounds) {
  EXPECT_EQ(ConvWorkspaceLimitBytes(143771 * kMiB, nullptr), 2 * kGiB);  // an H200: capped
  EXPECT_EQ(ConvWorkspaceLimitBytes(80 * kGiB, nullptr), 1280 * kMiB);
  EXPECT_EQ(ConvWorkspaceLimitBytes(8 * kGiB, nullptr), 256 * kMiB);  // floor
}

TEST(ConvWorkspaceTest, TheEnvironmentOverridesWhenItIsAPositiveNumber) {
  EXPECT_EQ(ConvWorkspaceLimitBytes(143771 * kMiB, "512"), 512 * kMiB);
  EXPECT_EQ(ConvWorkspaceLimitBytes(8 * kGiB, "4096"), 4 * kGiB);
  for (const char* bad : {"", "0", "-5", "12x", "lots"}) {
    EXPECT_EQ(ConvWorkspaceLimitBytes(143771 * kMiB, bad), 2 * kGiB) << "value '" << bad << "'";
  }
}

}  // namespace
}  // namespace tandem::device
