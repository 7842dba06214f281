// Admission against a real daemon with a small device: a job that can never
// fit is refused at once with the breakdown; a job that does not fit now
// either is refused or, when it asks to, waits and starts when memory frees.
#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/graph_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"

namespace tandem::testing {
namespace {

using client::Client;
using client::GraphBuilder;
using client::HostTensor;
using ::testing::HasSubstr;

constexpr int64_t kMiB = 1 << 20;

// A job holding `persistent_mib` of weights whose iteration needs about
// `ephemeral_mib` of activations.
v1::RegisterJobRequest SizedJob(const std::string& name, int64_t persistent_mib, int64_t ephemeral_mib,
                                bool queue_if_full) {
  GraphBuilder b(name);
  int64_t n = persistent_mib * kMiB / 4;
  std::string w = b.Persistent("w", HostTensor::Floats({n}, std::vector<float>(n, 1.f)));
  int64_t m = ephemeral_mib * kMiB / 4;
  std::string x = b.Feed("x", v1::FLOAT32, {m});
  std::string y = b.Op("mul.Scalar", {x}, {{"other", client::AttrFloat(2)}}, "y");
  std::string s = b.Op("sum", {y}, {}, "s");
  std::string t = b.Op("sum", {w}, {}, "t");
  b.Fetch(s);
  b.Fetch(t);
  b.hints().set_queue_if_full(queue_if_full);
  return std::move(b).Build();
}

std::unique_ptr<Client> Connect(const DaemonProcess& d, const std::string& name) {
  auto c = Client::Connect({.endpoint = d.endpoint(), .name = name});
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

TEST(Admission, JobThatCanNeverFitIsRefusedWithBreakdown) {
  DaemonProcess daemon({"--cpu_memory_mib=64", "--policy=fair"});
  auto c = Connect(daemon, "big");
  auto r = c->RegisterJob(SizedJob("huge", 80, 1, /*queue_if_full=*/true));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << daemon.Log();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("huge"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("MiB"));
  // Nothing was left behind.
  auto stats = c->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->devices(0).persistent_bytes(), 0u);
  EXPECT_EQ(stats->jobs(), 0u);
}

TEST(Admission, JobThatDoesNotFitNowWaitsWhenAskedAndStartsLater) {
  DaemonProcess daemon({"--cpu_memory_mib=64", "--policy=fair"});
  auto a = Connect(daemon, "a");
  auto first = a->RegisterJob(SizedJob("first", 40, 1, false));
  ASSERT_TRUE(first.ok()) << first.status();

  // Without queue_if_full: refused now, and told how to wait.
  auto b = Connect(daemon, "b");
  auto refused = b->RegisterJob(SizedJob("second", 40, 1, false));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("queue_if_full"));

  // With it: the registration is answered once the first job closes.
  auto waiting = std::async(std::launch::async, [&] { return b->RegisterJob(SizedJob("second", 40, 1, true)); });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  ASSERT_TRUE(a->CloseJob(first->job_id()).ok());
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto second = waiting.get();
  ASSERT_TRUE(second.ok()) << second.status();
  // And it runs: sum(2 * x) over a MiB of ones, and sum of its weights.
  int64_t m = kMiB / 4;
  auto r = b->RunIteration(second->job_id(), {{"x", HostTensor::Floats({m}, std::vector<float>(m, 1.f))}}, {"s", "t"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->fetches.at("s").values<float>()[0], 2.0f * m);
  EXPECT_FLOAT_EQ(r->fetches.at("t").values<float>()[0], 40.0f * kMiB / 4);
}

// A lane whose last job leaves gives its arena back at once, not when a
// later iteration ends there: jobs registered and closed without running
// leave nothing retired, and a job needing most of the device still fits.
TEST(Admission, ClosedLanesGiveTheirArenasBack) {
  DaemonProcess daemon({"--cpu_memory_mib=64", "--policy=fair"});
  auto c = Connect(daemon, "churn");
  for (int i = 0; i < 12; ++i) {
    auto a = c->RegisterJob(SizedJob("a" + std::to_string(i), 1, 8, false));
    ASSERT_TRUE(a.ok()) << i << ": " << a.status();
    auto b = c->RegisterJob(SizedJob("b" + std::to_string(i), 1, 8, false));
    ASSERT_TRUE(b.ok()) << i << ": " << b.status();
    ASSERT_TRUE(c->CloseJob(a->job_id()).ok());
    ASSERT_TRUE(c->CloseJob(b->job_id()).ok());
  }
  auto stats = c->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->devices(0).retired_bytes(), 0u);
  EXPECT_EQ(stats->devices(0).persistent_bytes(), 0u);
  auto big = c->RegisterJob(SizedJob("big", 20, 24, false));
  ASSERT_TRUE(big.ok()) << big.status();
  int64_t m = 24 * kMiB / 4;
  auto r = c->RunIteration(big->job_id(), {{"x", HostTensor::Floats({m}, std::vector<float>(m, 1.f))}}, {"s"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->fetches.at("s").values<float>()[0], 2.0f * m);
}

// $TANDEM_MEMORY_QUOTA_MIB (what cluster/slurm/'s TaskProlog sets for a job
// of N shards) is the quota of every registration that sets none itself.
TEST(Admission, QuotaFromTheEnvironmentBoundsJobsThatSetNone) {
  DaemonProcess daemon({"--cpu_memory_mib=64", "--policy=fair"});
  auto c = Connect(daemon, "quota");
  struct Unset {
    ~Unset() { ::unsetenv("TANDEM_MEMORY_QUOTA_MIB"); }
  } unset;
  ::setenv("TANDEM_MEMORY_QUOTA_MIB", "8", 1);
  auto over = c->RegisterJob(SizedJob("over", 8, 8, /*queue_if_full=*/true));
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("its own quota of 8.0 MiB"));
  auto under = c->RegisterJob(SizedJob("under", 1, 1, false));
  ASSERT_TRUE(under.ok()) << under.status();
  // A quota the request sets itself wins over the environment's.
  v1::RegisterJobRequest own = SizedJob("own", 8, 8, false);
  own.mutable_hints()->set_memory_quota_bytes(48 * kMiB);
  auto admitted = c->RegisterJob(std::move(own));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  // A value that is no number fails the registration before it is sent.
  ::setenv("TANDEM_MEMORY_QUOTA_MIB", "lots", 1);
  auto bad = c->RegisterJob(SizedJob("bad", 1, 1, false));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("TANDEM_MEMORY_QUOTA_MIB='lots'"));
  auto stats = c->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->jobs(), 2u);
}

}  // namespace
}  // namespace tandem::testing
