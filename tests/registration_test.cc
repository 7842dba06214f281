// Registration off the control loop: a job's graph, frames and layout, and
// a client's shared-memory region, are prepared on their own thread, so the
// daemon keeps serving other sessions while a large model registers, and a
// session that ends meanwhile leaves nothing behind. The daemon is slowed
// on purpose: each preparation first sleeps TANDEM_TEST_PREPARE_DELAY_MS,
// and each parse of a large message (Service::kParseOnLoopBytes or more,
// parsed off the loop too) TANDEM_TEST_PARSE_DELAY_MS (read by tandemd for
// tests only).
#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "client/client.h"
#include "client/sealed_memfd.h"
#include "examples/mlp_train/mlp_graph.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/mlp_trainer.h"
#include "tests/raw_session.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;
using Seconds = std::chrono::duration<double>;

constexpr int kDelayMs = 800;

// A daemon slowed by kDelayMs where the test variable `variable` says
// (TANDEM_TEST_PREPARE_DELAY_MS: every registration's preparation;
// TANDEM_TEST_PARSE_DELAY_MS: every large message's parse).
std::unique_ptr<DaemonProcess> SlowedDaemon(const char* variable) {
  ::setenv(variable, std::to_string(kDelayMs).c_str(), 1);
  auto daemon = std::make_unique<DaemonProcess>(std::vector<std::string>{"--policy=fair"});
  ::unsetenv(variable);
  return daemon;
}
std::unique_ptr<DaemonProcess> SlowRegistrations() { return SlowedDaemon("TANDEM_TEST_PREPARE_DELAY_MS"); }
std::unique_ptr<DaemonProcess> SlowParses() { return SlowedDaemon("TANDEM_TEST_PARSE_DELAY_MS"); }

v1::RegisterJobRequest SecondJob() {
  examples::MlpJobOptions o = GoodJob();
  o.name = "second";
  o.seed = 9;
  return examples::BuildMlpTrainingJob(o);
}

// Sends `request`, then closes the session at once: the close must be
// answered first (the request's work runs on the preparation thread);
// returns the request's own answer.
v1::Response SendThenClose(RawSession& raw, const v1::Request& request) {
  const uint64_t id = raw.Send(request);
  v1::Request close;
  close.mutable_close_session();
  const uint64_t close_id = raw.Send(close);
  const v1::Response first = raw.Receive();
  EXPECT_EQ(first.request_id(), close_id) << first.DebugString();
  EXPECT_TRUE(first.has_close_session()) << first.DebugString();
  v1::Response answer = raw.Receive();
  EXPECT_EQ(answer.request_id(), id) << answer.DebugString();
  return answer;
}

TEST(Registration, AnotherSessionTrainsWhileAJobIsPrepared) {
  std::unique_ptr<DaemonProcess> daemon = SlowRegistrations();
  GoodTrainer good(daemon->endpoint());  // its own registration took the delay too
  good.Step(2);

  auto second = client::Client::Connect({.endpoint = daemon->endpoint(), .name = "second"});
  ASSERT_TRUE(second.ok()) << second.status();
  std::atomic<bool> registered{false};
  absl::Status status;
  double took = 0;
  std::thread registering([&] {
    const auto start = std::chrono::steady_clock::now();
    auto job = (*second)->RegisterJob(SecondJob());
    took = Seconds(std::chrono::steady_clock::now() - start).count();
    status = job.status();
    registered = true;
  });
  // Were the registration on the loop, the loop would answer nothing else
  // for kDelayMs: at most the iteration in flight when it arrived.
  // (At most 150 steps: the reference has 200 losses.)
  int steps = 0;
  while (!registered) {
    if (steps < 150) {
      good.Step(1);  // checks every loss against the reference
      ++steps;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  registering.join();
  ASSERT_TRUE(status.ok()) << status << daemon->Log();
  EXPECT_GE(took, kDelayMs / 1e3);
  EXPECT_GE(steps, 5) << "iterations of the other session while the job was prepared for " << took << " s";
  good.Step(2);
}

TEST(Registration, ASessionThatEndsWhileItsJobIsPreparedLeavesNothing) {
  std::unique_ptr<DaemonProcess> daemon = SlowRegistrations();
  RawSession raw(daemon->endpoint());
  v1::Request reg;
  *reg.mutable_register_job() = SecondJob();
  const v1::Response second = SendThenClose(raw, reg);
  EXPECT_EQ(second.status().code(), static_cast<int>(absl::StatusCode::kCancelled)) << second.DebugString();
  EXPECT_THAT(second.status().message(), HasSubstr("session ended while the job was being registered"));

  // No job and no memory left; the daemon registers and trains the next one.
  auto c = client::Client::Connect({.endpoint = daemon->endpoint(), .name = "after"});
  ASSERT_TRUE(c.ok()) << c.status();
  auto stats = (*c)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->jobs(), 0u);
  ASSERT_GT(stats->devices_size(), 0);
  EXPECT_EQ(stats->devices(0).persistent_bytes(), 0u);
  GoodTrainer good(daemon->endpoint());
  good.Step(3);
}

TEST(Registration, ASessionThatEndsWhileItsMemoryIsMappedGetsCancelled) {
  std::unique_ptr<DaemonProcess> daemon = SlowRegistrations();
  auto object = client::SealedMemfd::Create(1 << 20);
  ASSERT_TRUE(object.ok()) << object.status();
  RawSession raw(daemon->endpoint());
  ASSERT_TRUE(object->PassTo(raw.hello().fd_socket(), raw.hello().session_token(), 1).ok());
  v1::Request map;
  map.mutable_map_shared_memory()->set_fd_nonce(1);
  map.mutable_map_shared_memory()->set_bytes(object->bytes());
  const v1::Response second = SendThenClose(raw, map);
  EXPECT_EQ(second.status().code(), static_cast<int>(absl::StatusCode::kCancelled)) << second.DebugString();
  EXPECT_THAT(second.status().message(), HasSubstr("session ended while its shared memory was being mapped"));
  ASSERT_TRUE(daemon->Alive()) << daemon->Log();
  GoodTrainer good(daemon->endpoint());
  good.Step(3);
}

// A registration with 2 MB of weights inline: parsed off the loop.
v1::RegisterJobRequest LargeJob() {
  examples::MlpJobOptions o = GoodJob();
  o.name = "large";
  o.shape.inputs = 512;
  o.shape.hidden = 512;
  return examples::BuildMlpTrainingJob(o);
}

TEST(Registration, AnotherSessionTrainsWhileALargeRegistrationIsParsed) {
  std::unique_ptr<DaemonProcess> daemon = SlowParses();
  GoodTrainer good(daemon->endpoint());  // small: parsed on the loop, at once
  good.Step(2);

  RawSession raw(daemon->endpoint());
  v1::Request reg;
  *reg.mutable_register_job() = LargeJob();
  ASSERT_GE(reg.ByteSizeLong(), 1u << 20);
  v1::Request stats;
  stats.mutable_stats();
  const auto sent = std::chrono::steady_clock::now();
  const uint64_t reg_id = raw.Send(reg);
  const uint64_t stats_id = raw.Send(stats);  // small, but behind the large one of its session
  // The loop goes on meanwhile: the other session trains.
  int steps = 0;
  while (Seconds(std::chrono::steady_clock::now() - sent).count() < kDelayMs / 2e3 && steps < 150) {
    good.Step(1);
    ++steps;
  }
  EXPECT_GE(steps, 5) << "iterations of the other session while a registration was parsed";

  // Both answered; the stats only after the registration's parse (its
  // session's requests are taken in the order sent), whose preparation
  // then runs on its own thread: either answer may come first.
  double stats_after = 0;
  bool registered = false;
  for (int i = 0; i < 2; ++i) {
    const v1::Response r = raw.Receive();
    if (r.request_id() == stats_id) {
      ASSERT_TRUE(r.has_stats()) << r.DebugString();
      stats_after = Seconds(std::chrono::steady_clock::now() - sent).count();
    } else {
      ASSERT_EQ(r.request_id(), reg_id) << r.DebugString();
      ASSERT_TRUE(r.has_register_job()) << r.DebugString() << daemon->Log();
      registered = true;
    }
  }
  EXPECT_TRUE(registered);
  EXPECT_GE(stats_after, kDelayMs / 1e3) << "the stats request overtook the registration sent ahead of it";
  good.Step(2);
}

TEST(Registration, MessagesWaitingForAParseAreAnsweredAtShutdown) {
  std::unique_ptr<DaemonProcess> daemon = SlowParses();
  RawSession raw(daemon->endpoint());
  v1::Request reg;
  *reg.mutable_register_job() = LargeJob();
  v1::Request stats;
  stats.mutable_stats();
  const uint64_t reg_id = raw.Send(reg);
  const uint64_t stats_id = raw.Send(stats);  // waits behind the registration's parse
  std::this_thread::sleep_for(std::chrono::milliseconds(kDelayMs / 4));
  ASSERT_EQ(::kill(daemon->pid(), SIGTERM), 0);
  // Both answered, though the daemon stops before the parse ends.
  std::vector<uint64_t> answered;
  for (int i = 0; i < 2; ++i) {
    const v1::Response r = raw.Receive();
    EXPECT_EQ(r.status().code(), static_cast<int>(absl::StatusCode::kUnavailable)) << r.DebugString();
    answered.push_back(r.request_id());
  }
  EXPECT_THAT(answered, ::testing::UnorderedElementsAre(reg_id, stats_id)) << daemon->Log();
}

TEST(Registration, ALargeMalformedMessageIsRefusedOffTheLoop) {
  std::unique_ptr<DaemonProcess> daemon = SlowParses();
  RawSession raw(daemon->endpoint());
  // A valid Request's first bytes, then a field of wire type 7 (none such):
  // not a Request, found only once parsed.
  v1::Request reg;
  *reg.mutable_register_job() = LargeJob();
  std::string bytes = reg.SerializeAsString();
  bytes.push_back(static_cast<char>(0xff));
  raw.SendBytes(bytes);
  const v1::Response answer = raw.Receive();
  EXPECT_EQ(answer.status().code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << answer.DebugString();
  EXPECT_THAT(answer.status().message(), HasSubstr("malformed request"));
  ASSERT_TRUE(daemon->Alive()) << daemon->Log();
  GoodTrainer good(daemon->endpoint());
  good.Step(3);
}

}  // namespace
}  // namespace tandem::testing
