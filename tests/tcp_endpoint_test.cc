// tandemd over TCP (loopback): the same protocol and results as over ipc,
// with feeds inline (no shared memory across a network).
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/mlp_trainer.h"

namespace tandem::testing {
namespace {

TEST(TcpEndpoint, TrainsOverLoopback) {
  std::random_device rd;
  int port = 20000 + static_cast<int>(rd() % 30000);
  DaemonProcess daemon("tcp://127.0.0.1:" + std::to_string(port), {"--policy=fair"});
  GoodTrainer trainer(daemon.endpoint());
  trainer.Step(5);
  EXPECT_FALSE(trainer.client().EnsureSharedMemory().ok());  // not an ipc endpoint
  auto stats = trainer.client().Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->iterations(), 5u);
}

}  // namespace
}  // namespace tandem::testing
