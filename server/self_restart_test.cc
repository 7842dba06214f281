#include "server/self_restart.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tandem::server {
namespace {

TEST(SelfRestartTest, CountsRestartsFromTheEnvironment) {
  ::unsetenv("TANDEM_FAULT_RESTARTS");
  EXPECT_EQ(SelfRestarts(), 0);
  ::setenv("TANDEM_FAULT_RESTARTS", "3", 1);
  EXPECT_EQ(SelfRestarts(), 3);
  ::setenv("TANDEM_FAULT_RESTARTS", "-2", 1);
  EXPECT_EQ(SelfRestarts(), 0);
  ::setenv("TANDEM_FAULT_RESTARTS", "x", 1);
  EXPECT_EQ(SelfRestarts(), 0);
  ::unsetenv("TANDEM_FAULT_RESTARTS");
}

TEST(SelfRestartTest, SuspectsAreTakenOnce) {
  ::setenv("TANDEM_FAULT_SUSPECTS", "/state/a.ckpt\n/state/b.ckpt\n", 1);
  EXPECT_EQ(TakeFaultSuspects(), (std::vector<std::string>{"/state/a.ckpt", "/state/b.ckpt"}));
  EXPECT_EQ(std::getenv("TANDEM_FAULT_SUSPECTS"), nullptr);
  EXPECT_TRUE(TakeFaultSuspects().empty());
}

// The variable names descriptors to close; one that is not a GPU's device
// file (it came from somewhere else, or the number was reused) stays open.
TEST(SelfRestartTest, ReleasesOnlyGpuDeviceFiles) {
  const int other = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(other, 0);
  ::setenv("TANDEM_HELD_DEVICE_FILES", absl::StrCat(other, ",1,junk,,99999").c_str(), 1);
  EXPECT_EQ(ReleaseHeldDeviceFiles(), 0);
  EXPECT_EQ(std::getenv("TANDEM_HELD_DEVICE_FILES"), nullptr);
  EXPECT_GE(::fcntl(other, F_GETFD), 0) << "a descriptor of /dev/null was closed";
  EXPECT_GE(::fcntl(1, F_GETFD), 0) << "stdout was closed";
  ::close(other);
  EXPECT_EQ(ReleaseHeldDeviceFiles(), 0);
}

}  // namespace
}  // namespace tandem::server
