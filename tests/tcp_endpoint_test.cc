// tandemd over TCP (loopback): the same protocol and results as over ipc,
// with feeds inline or in frames after the request (no shared memory across
// a network).
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/graph_builder.h"
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

// A large feed over tcp travels in frames of at most frame_bytes after the
// request (one large frame would hold up libzmq's sign of life for as long
// as it takes to cross): the daemon computes the same as from the same bytes
// inline.
TEST(TcpEndpoint, LargeFeedsTravelInFrames) {
  std::random_device rd;
  int port = 20000 + static_cast<int>(rd() % 30000);
  DaemonProcess daemon("tcp://127.0.0.1:" + std::to_string(port), {});
  std::mt19937 gen(rd());
  std::normal_distribution<float> normal;
  std::vector<float> w(256 * 4), x(300 * 256);
  for (float& v : w) v = normal(gen);
  for (float& v : x) v = normal(gen);
  auto out_of = [&](client::ClientOptions options) {
    options.endpoint = daemon.endpoint();
    auto c = client::Client::Connect(options);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return std::vector<float>{};
    client::GraphBuilder b("framed");
    std::string xn = b.Feed("x", v1::FLOAT32, {300, 256});
    std::string wn = b.Persistent("w", client::HostTensor::Floats({256, 4}, w));
    b.Fetch(b.Op("mm", {xn, wn}, {}, "out"));
    auto job = (*c)->RegisterJob(std::move(b).Build());
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return std::vector<float>{};
    auto r = (*c)->RunIteration(job->job_id(), {{"x", client::HostTensor::Floats({300, 256}, x)}}, {"out"});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->fetches.at("out").values<float>() : std::vector<float>{};
  };
  // x is 300 KiB: 308 frames of 1,000 bytes, the last one short; or inline.
  const std::vector<float> framed = out_of({.name = "framed", .frame_bytes = 1000});
  const std::vector<float> inline_bytes = out_of({.name = "inline", .frame_threshold = UINT64_MAX});
  ASSERT_EQ(framed.size(), 300u * 4);
  EXPECT_EQ(framed, inline_bytes);
  // And not all zeros or equal: the check could fail.
  EXPECT_NE(framed[0], framed[4]);
}

}  // namespace
}  // namespace tandem::testing
