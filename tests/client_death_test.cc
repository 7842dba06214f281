// Death detection: a client process that dies (SIGKILL) or stops answering
// (SIGSTOP) loses its session, its jobs and their memory within about a
// second, whether it had iterations in flight or sat between two steps (a
// slow data loader). The victim is mlp_train, a C++ client; the Python
// client (the same library underneath) is tested in client/python/tests.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"

namespace tandem::testing {
namespace {

using client::Client;
using Seconds = std::chrono::duration<double>;

class ClientDeathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<DaemonProcess>();
    auto c = Client::Connect({.endpoint = daemon_->endpoint(), .name = "observer"});
    ASSERT_TRUE(c.ok()) << c.status();
    observer_ = *std::move(c);
  }

  // Starts mlp_train as `name` and waits until it has finished a step (with
  // a pause, it is then on the host) or 3 (without, it is training).
  pid_t StartVictim(const std::string& name, int pause_ms, int inflight) {
    const std::string step = pause_ms > 0 ? "iter 0 " : "iter 3 ";
    const std::string log = daemon_->dir() + "/" + name + ".log";
    pid_t pid = Spawn({MlpTrainPath(), "--endpoint=" + daemon_->endpoint(), "--iterations=100000", "--batch=64",
                       "--hidden=256", "--print_every=1", "--inflight=" + std::to_string(inflight),
                       "--pause_ms=" + std::to_string(pause_ms), "--name=" + name},
                      log);
    for (int i = 0; i < 1000 && !absl::StrContains(ReadFile(log), step); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(absl::StrContains(ReadFile(log), step)) << ReadFile(log);
    return pid;
  }

  uint64_t PersistentBytes() {
    auto stats = observer_->Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? stats->devices(0).persistent_bytes() : 0;
  }

  // Seconds from now until the daemon holds no job but none (the observer
  // has none), its memory back to nothing persistent; -1 after 10 s.
  double SecondsUntilFreed() {
    const auto start = std::chrono::steady_clock::now();
    while (Seconds(std::chrono::steady_clock::now() - start).count() < 10) {
      auto stats = observer_->Stats();
      if (!stats.ok()) return -1;
      if (stats->jobs() == 0 && stats->devices(0).persistent_bytes() == 0) {
        return Seconds(std::chrono::steady_clock::now() - start).count();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> observer_;
};

TEST_F(ClientDeathTest, KilledBetweenStepsIsFreedWithinASecond) {
  // One step in flight at most, then 10 s on the host: killed there, the
  // client has nothing in flight whose reply could bounce.
  pid_t pid = StartVictim("idle-victim", 10000, 1);
  ASSERT_GT(PersistentBytes(), 0u);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  const double seconds = SecondsUntilFreed();
  EXPECT_GE(seconds, 0) << daemon_->Log();
  EXPECT_LT(seconds, 1.0) << daemon_->Log();
  std::printf("killed between steps: freed after %.3f s\n", seconds);
}

TEST_F(ClientDeathTest, KilledWithIterationsInFlightIsFreedWithinASecond) {
  pid_t pid = StartVictim("busy-victim", 0, 4);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  const double seconds = SecondsUntilFreed();
  EXPECT_GE(seconds, 0) << daemon_->Log();
  EXPECT_LT(seconds, 1.0) << daemon_->Log();
  std::printf("killed with iterations in flight: freed after %.3f s\n", seconds);
}

TEST_F(ClientDeathTest, StoppedClientIsFreedAfterTheHeartbeatTimeout) {
  // SIGSTOP: the process lives, its socket stays open, but nothing of it
  // answers ZeroMQ's heartbeats (200 ms apart, 3 s to answer).
  pid_t pid = StartVictim("stopped-victim", 10000, 1);
  ::kill(pid, SIGSTOP);
  const double seconds = SecondsUntilFreed();
  ::kill(pid, SIGKILL);
  ::kill(pid, SIGCONT);
  ::waitpid(pid, nullptr, 0);
  EXPECT_GE(seconds, 0) << daemon_->Log();
  // Within the heartbeat interval plus its timeout (3.2 s) and a re-probe;
  // 4.5 s leaves room for a loaded CI machine.
  EXPECT_LT(seconds, 4.5) << daemon_->Log();
  std::printf("stopped: freed after %.3f s\n", seconds);
}

TEST_F(ClientDeathTest, ALiveIdleClientKeepsItsSession) {
  // The other side: a client between two slow steps (3 s on the host,
  // longer than the heartbeat timeout) answers the heartbeats from its I/O
  // thread and keeps its job.
  const std::string log = daemon_->dir() + "/slow.log";
  pid_t pid = Spawn({MlpTrainPath(), "--endpoint=" + daemon_->endpoint(), "--iterations=3", "--batch=16",
                     "--print_every=1", "--inflight=1", "--pause_ms=1500", "--name=slow", "--eval_samples=0"},
                    log);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(log) << daemon_->Log();
  EXPECT_TRUE(absl::StrContains(ReadFile(log), "iter 2 ")) << ReadFile(log);
}

}  // namespace
}  // namespace tandem::testing
