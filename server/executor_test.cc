// An executor runs its items in post order on its one thread and counts
// them, their time and their wait behind earlier items.
#include "server/executor.h"

#include <chrono>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace tandem::server {
namespace {

TEST(Executor, RunsItemsInPostOrderAndCountsTheirWait) {
  constexpr auto kSlow = std::chrono::milliseconds(30);
  std::vector<int> order;  // touched by the executor's thread only, read after it stopped
  std::thread::id ran_on[2];
  HandlerStats stats;
  {
    Executor executor("test");
    EXPECT_EQ(executor.name(), "test");
    absl::Notification release;
    // The first item holds the thread until every item is posted: the others
    // are queued behind it and wait at least as long as it runs.
    executor.Post([&] {
      release.WaitForNotification();
      std::this_thread::sleep_for(kSlow);
      order.push_back(0);
      ran_on[0] = std::this_thread::get_id();
    });
    for (int i = 1; i <= 20; ++i) executor.Post([&order, i] { order.push_back(i); });
    executor.Post([&] { ran_on[1] = std::this_thread::get_id(); });
    release.Notify();
    // An item is counted once it returned.
    for (int i = 0; i < 5000 && executor.Stats().count < 22; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    stats = executor.Stats();
  }
  ASSERT_EQ(order.size(), 21u);
  for (int i = 0; i <= 20; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_EQ(ran_on[0], ran_on[1]);
  EXPECT_NE(ran_on[0], std::this_thread::get_id());
  EXPECT_EQ(stats.count, 22u);
  EXPECT_GE(stats.total_seconds, 0.029);
  // 21 items each waited at least the slow item's 30 ms.
  EXPECT_GE(stats.wait_seconds, 21 * 0.029);
  EXPECT_GE(stats.max_wait_seconds, 0.029);
  EXPECT_LE(stats.max_wait_seconds, stats.wait_seconds);
}

TEST(Executor, TwoExecutorsRunSideBySide) {
  // Each item waits for the other's: with one thread for both, neither
  // would ever return.
  Executor a("a"), b("b");
  absl::Notification a_started, b_started, done_a, done_b;
  a.Post([&] {
    a_started.Notify();
    EXPECT_TRUE(b_started.WaitForNotificationWithTimeout(absl::Seconds(10)));
    done_a.Notify();
  });
  b.Post([&] {
    b_started.Notify();
    EXPECT_TRUE(a_started.WaitForNotificationWithTimeout(absl::Seconds(10)));
    done_b.Notify();
  });
  EXPECT_TRUE(done_a.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_TRUE(done_b.WaitForNotificationWithTimeout(absl::Seconds(20)));
}

}  // namespace
}  // namespace tandem::server
