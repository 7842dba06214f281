#include "device/completion_pass.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::device {
namespace {

TEST(CompletionPass, ALaterCompletionThatEndsDuringThePassWaitsForTheEarlierOne) {
  int a = 0, b = 0;
  // Completion 0 (stream a) ends at t=1.5; 1 (stream b) at 0; 2 (stream a)
  // at 1.8. The pass asks at t=1, 2, 3: 0 is pending when asked, 2 has
  // ended by the time it is asked. Reporting 2 now would put it before 0.
  const std::vector<const void*> streams = {&a, &b, &a};
  const std::vector<double> ends_at = {1.5, 0.0, 1.8};
  double now = 0;
  std::vector<size_t> asked;
  auto ended = [&](size_t i) {
    now += 1;
    asked.push_back(i);
    return ends_at[i] <= now;
  };
  EXPECT_EQ(CompletionPass(streams, ended), (std::vector<size_t>{1}));
  EXPECT_EQ(asked, (std::vector<size_t>{0, 1})) << "nothing more is asked of stream a once 0 is pending";
  // The next pass finds both of stream a's, in order.
  asked.clear();
  EXPECT_EQ(CompletionPass(std::vector<const void*>{&a, &a},
                           [&](size_t i) {
                             now += 1;
                             return ends_at[i == 0 ? 0 : 2] <= now;
                           }),
            (std::vector<size_t>{0, 1}));
}

TEST(CompletionPass, ManyStreamsUnderRandomTimingReportEachStreamInOrder) {
  std::mt19937_64 rng(std::random_device{}());
  constexpr int kStreams = 8;
  constexpr int kPerStream = 200;
  std::vector<int> tags(kStreams);
  // Pending completions, oldest first: (stream, sequence, end time).
  struct Pending {
    int stream;
    int seq;
    double ends_at;
  };
  std::vector<Pending> pending;
  std::vector<double> last_end(kStreams, 0);
  std::uniform_int_distribution<int> pick(0, kStreams - 1);
  std::exponential_distribution<double> gap(1.0);
  for (int n = 0; n < kStreams * kPerStream; ++n) {
    const int s = pick(rng);
    last_end[s] += gap(rng);
    pending.push_back({s, 0, last_end[s]});
  }
  std::vector<int> next_seq(kStreams, 0);
  for (Pending& p : pending) p.seq = next_seq[p.stream]++;
  std::vector<std::vector<int>> reported(kStreams);
  double now = 0;
  int passes = 0;
  while (!pending.empty()) {
    ASSERT_LT(++passes, 100000);
    std::vector<const void*> streams;
    for (const Pending& p : pending) streams.push_back(&tags[p.stream]);
    const std::vector<size_t> ready = CompletionPass(streams, [&](size_t i) {
      now += 0.05;  // the queries of a pass are spread over time
      return pending[i].ends_at <= now;
    });
    for (size_t i : ready) reported[pending[i].stream].push_back(pending[i].seq);
    std::vector<Pending> left;
    for (size_t i = 0, r = 0; i < pending.size(); ++i) {
      if (r < ready.size() && ready[r] == i) {
        ++r;
      } else {
        left.push_back(pending[i]);
      }
    }
    pending = std::move(left);
    now += 0.2;  // the poll interval
  }
  for (int s = 0; s < kStreams; ++s) {
    for (size_t k = 0; k < reported[s].size(); ++k) {
      ASSERT_EQ(reported[s][k], static_cast<int>(k)) << "stream " << s << " reported out of order";
    }
  }
}

}  // namespace
}  // namespace tandem::device
