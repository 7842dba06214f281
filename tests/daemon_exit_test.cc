// A daemon that exits under a client: on a local (ipc) socket the client
// sees the connection close and fails its calls with UNAVAILABLE at once,
// not after the heartbeat silence limit (a quarter of the daemon's session
// timeout, times four: 30 s here), and a client that connects afterwards
// is told at once that nobody listens on the socket the daemon left.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <vector>

#include "client/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/mlp_trainer.h"

namespace tandem::testing {
namespace {

TEST(DaemonExit, CallsFailAtOnceWhenTheDaemonDies) {
  DaemonProcess daemon({"--session_timeout=30"});
  GoodTrainer trainer(daemon.endpoint());
  trainer.Step(2);
  auto before = trainer.client().Stats();
  ASSERT_TRUE(before.ok());
  // The keeper's children die with it (server/standby.h): the daemon is
  // gone once the process that served is.
  ASSERT_EQ(::kill(daemon.pid(), SIGKILL), 0);
  ASSERT_TRUE(WaitUntilGone(static_cast<pid_t>(before->worker_pid())));
  const auto start = std::chrono::steady_clock::now();
  auto stats = trainer.client().Stats();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kUnavailable) << stats.status();
  EXPECT_NE(stats.status().message().find("closed the connection"), std::string::npos) << stats.status();
  EXPECT_LT(seconds, 5.0);

  // The killed daemon left its socket file; a new client is told at once
  // that nobody listens there, not after the handshake's 30 s deadline.
  const auto again = std::chrono::steady_clock::now();
  auto late = client::Client::Connect({.endpoint = daemon.endpoint(), .name = "late"});
  const double connect_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - again).count();
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable) << late.status();
  EXPECT_NE(late.status().message().find("nobody listens on"), std::string::npos) << late.status();
  EXPECT_LT(connect_seconds, 2.0);
}

// SIGTERM while iterations with shared-memory feeds are queued and running:
// every request is answered (a result, or CANCELLED), the daemon exits 0
// within 2 s, and nothing crashes (the loop's pending completions used to be
// destroyed after the devices, and their shared regions unregistered host
// memory on a device already gone: SIGSEGV after "tandemd stopped").
TEST(DaemonExit, SigtermWithSharedFeedsInFlightAnswersEveryRequest) {
  DaemonProcess daemon({"--policy=fifo"});
  auto c = client::Client::Connect({.endpoint = daemon.endpoint(), .name = "inflight"});
  ASSERT_TRUE(c.ok()) << c.status();
  client::GraphBuilder b("matmuls");
  constexpr int64_t kN = 384;  // a 576 KiB feed: through shared memory
  std::string x = b.Feed("x", v1::FLOAT32, {kN, kN});
  std::string y = x;
  for (int i = 0; i < 6; ++i) y = b.Op("mm", {y, x});
  b.Fetch(b.Op("sum", {y}, {}, "s"));
  auto job = (*c)->RegisterJob(std::move(b).Build());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*c)->EnsureSharedMemory().ok());
  client::HostTensor batch = client::HostTensor::Floats({kN, kN}, std::vector<float>(kN * kN, 1e-3f));
  std::vector<uint64_t> tickets;
  for (int i = 0; i < 6; ++i) {
    auto t = (*c)->SubmitIteration(job->job_id(), {{"x", batch}}, {"s"});
    ASSERT_TRUE(t.ok()) << t.status();
    tickets.push_back(*t);
  }
  // A round trip behind them: the daemon has read every iteration (it reads
  // a connection's messages in order) before it is told to stop. A request
  // still on its way when the daemon exits is the client's to fail
  // (UNAVAILABLE: the connection closed).
  ASSERT_TRUE((*c)->Stats().ok());
  const auto start = std::chrono::steady_clock::now();
  const int status = daemon.Stop();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << daemon.Log();
  EXPECT_LT(seconds, 2.0);
  int answered = 0;
  for (uint64_t t : tickets) {
    auto r = (*c)->WaitIteration(t);
    if (r.ok() || r.status().code() == absl::StatusCode::kCancelled) {
      ++answered;
    } else {
      ADD_FAILURE() << "ticket " << t << ": " << r.status();
    }
  }
  EXPECT_EQ(answered, 6);
}

}  // namespace
}  // namespace tandem::testing
