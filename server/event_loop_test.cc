// The control loop's bookkeeping: per work item its time and its wait in
// the queue behind the items before it; sections have no wait.
#include "server/event_loop.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace tandem::server {
namespace {

TEST(EventLoop, AnItemQueuedBehindASlowOneCountsItsWait) {
  EventLoop loop;
  constexpr auto kSlow = std::chrono::milliseconds(30);
  // Both are queued before the loop runs: "fast" starts only after "slow"
  // ended, so it waited at least as long as "slow" ran.
  loop.Post("Test.Slow", [&] {
    LoopSection part(loop, "Test.Slow/part");
    std::this_thread::sleep_for(kSlow);
  });
  loop.Post("Test.Fast", [&] { loop.Stop(); });
  loop.Run();

  const auto stats = loop.Stats();
  ASSERT_EQ(stats.count("Test.Slow"), 1u);
  ASSERT_EQ(stats.count("Test.Fast"), 1u);
  ASSERT_EQ(stats.count("Test.Slow/part"), 1u);
  const HandlerStats& slow = stats.at("Test.Slow");
  const HandlerStats& fast = stats.at("Test.Fast");
  const HandlerStats& part = stats.at("Test.Slow/part");
  EXPECT_EQ(slow.count, 1u);
  EXPECT_GE(slow.total_seconds, 0.029);
  EXPECT_GE(fast.wait_seconds, slow.total_seconds);
  EXPECT_EQ(fast.max_wait_seconds, fast.wait_seconds);
  EXPECT_LT(slow.wait_seconds, fast.wait_seconds);
  EXPECT_LT(fast.total_seconds, slow.total_seconds);
  EXPECT_EQ(part.wait_seconds, 0.0);
  EXPECT_LE(part.total_seconds, slow.total_seconds);
}

TEST(EventLoop, WaitsAddUpOverItemsOfOneName) {
  EventLoop loop;
  for (int i = 0; i < 3; ++i) {
    loop.Post("Test.Sleep", [] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); });
  }
  loop.Post("Test.Stop", [&] { loop.Stop(); });
  loop.Run();
  const HandlerStats s = loop.Stats().at("Test.Sleep");
  EXPECT_EQ(s.count, 3u);
  // The three waited about 0, 10 and 20 ms.
  EXPECT_GE(s.wait_seconds, 0.029);
  EXPECT_GE(s.max_wait_seconds, 0.019);
  EXPECT_LT(s.max_wait_seconds, s.wait_seconds);
}

}  // namespace
}  // namespace tandem::server
