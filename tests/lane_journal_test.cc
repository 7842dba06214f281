// The device journal through a real tandemd (CPU device): a training job
// that keeps three iterations in flight makes each wait behind the ones
// before it, and the stats reply lists those waits as "slow_wait" events
// of that job with wall-clock times inside the run; nothing moved and
// nothing was captured (one job under FIFO, CPU programs have no graphs).
// Moves and captures are checked on the GPU (tests/gpu/daemon_gpu_test.cc).
#include <sys/wait.h>

#include <chrono>
#include <string>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"

namespace tandem::testing {
namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(LaneJournal, ListsIterationsThatWaitedInTheDaemon) {
  DaemonProcess daemon({"--policy=fifo"});
  const double started = UnixNow();
  const std::string log = daemon.dir() + "/mlp.log";
  // Products of 256 x 512 x 512 per layer: milliseconds per iteration on
  // one core, so the third iteration in flight waits well over 5 ms.
  const pid_t pid = Spawn({MlpTrainPath(), "--endpoint=" + daemon.endpoint(), "--iterations=12", "--batch=256",
                           "--inputs=512", "--hidden=512", "--layers=3", "--classes=10", "--inflight=3"},
                          log);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(log) << "\ndaemon log:\n" << daemon.Log();
  const double ended = UnixNow();

  auto client = client::Client::Connect({.endpoint = daemon.endpoint(), .name = "journal-test"});
  ASSERT_TRUE(client.ok()) << client.status();
  auto stats = (*client)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_GE(stats->devices_size(), 1);
  const v1::DeviceStats& dev = stats->devices(0);
  int waits = 0;
  for (const v1::DeviceEvent& e : dev.events()) {
    EXPECT_NE(e.kind(), "move");
    EXPECT_NE(e.kind(), "capture");
    if (e.kind() != "slow_wait") continue;
    ++waits;
    EXPECT_GT(e.job(), 0u);
    EXPECT_GE(e.lane(), 0);
    EXPECT_EQ(e.from_lane(), -1);
    EXPECT_GE(e.seconds(), 0.005);
    EXPECT_GE(e.unix_seconds(), started);
    EXPECT_LE(e.unix_seconds(), ended);
  }
  EXPECT_GE(waits, 1) << "daemon log:\n" << daemon.Log();
  EXPECT_EQ(dev.events_dropped(), 0u);
}

}  // namespace
}  // namespace tandem::testing
