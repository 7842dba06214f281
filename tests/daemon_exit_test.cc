// A daemon that exits under a client: on a local (ipc) socket the client
// sees the connection close and fails its calls with UNAVAILABLE at once,
// not after the heartbeat silence limit (a quarter of the daemon's session
// timeout, times four: 30 s here).
#include <signal.h>

#include <chrono>

#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/mlp_trainer.h"

namespace tandem::testing {
namespace {

TEST(DaemonExit, CallsFailAtOnceWhenTheDaemonDies) {
  DaemonProcess daemon({"--session_timeout=30"});
  GoodTrainer trainer(daemon.endpoint());
  trainer.Step(2);
  ASSERT_TRUE(trainer.client().Stats().ok());
  ASSERT_EQ(::kill(daemon.pid(), SIGKILL), 0);
  const auto start = std::chrono::steady_clock::now();
  auto stats = trainer.client().Stats();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kUnavailable) << stats.status();
  EXPECT_NE(stats.status().message().find("closed the connection"), std::string::npos) << stats.status();
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace tandem::testing
