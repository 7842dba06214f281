// A client survives signals its process handles: a handler installed
// without SA_RESTART (like Python's for SIGINT) interrupts the client's wait
// for a reply with EINTR, and the call must simply wait on.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/mlp_trainer.h"

namespace tandem::testing {
namespace {

std::atomic<int> g_handled{0};

void CountSignal(int) { g_handled.fetch_add(1, std::memory_order_relaxed); }

TEST(ClientSignals, HandledSignalsDoNotBreakACall) {
  struct sigaction action = {};
  action.sa_handler = CountSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: interrupted system calls fail with EINTR
  struct sigaction previous = {};
  ASSERT_EQ(sigaction(SIGUSR1, &action, &previous), 0);

  DaemonProcess daemon;
  GoodTrainer trainer(daemon.endpoint());
  const pthread_t caller = pthread_self();
  std::atomic<bool> stop{false};
  std::thread pester([&] {
    while (!stop.load()) {
      pthread_kill(caller, SIGUSR1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  // Every loss is checked against the reference. At least 30 steps, and on
  // until more than 10 signals have landed (a loaded machine may schedule
  // the pester thread late), within the reference's 200 losses.
  for (int steps = 0; steps < 150 && (steps < 30 || g_handled.load() <= 10); ++steps) trainer.Step(1);
  stop.store(true);
  pester.join();
  sigaction(SIGUSR1, &previous, nullptr);
  EXPECT_GT(g_handled.load(), 10);
}

}  // namespace
}  // namespace tandem::testing
