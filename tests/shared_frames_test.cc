// Registration through a shared-memory object (RegisterJobRequest.
// shared_frames) against a real daemon: a large model's initial values read
// from the client's object give the same job as the same values sent as
// ZeroMQ frames (a tensor in several frames); a missing object, a slice past its end, mismatched slice
// lists or sizes, and shared frames beside ZeroMQ frames are refused without
// disturbing the daemon.
#include <cstring>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/graph_builder.h"
#include "client/sealed_memfd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"

namespace tandem::testing {
namespace {

using client::Client;
using client::FeedView;
using client::GraphBuilder;
using client::HostTensor;
using client::SealedMemfd;
using ::testing::HasSubstr;

constexpr int64_t kN = 512;  // w is kN x kN floats: 1 MiB, the default threshold

// y = x @ w + b; w and b come from the registration's views.
v1::RegisterJobRequest Affine() {
  GraphBuilder g("affine");
  std::string x = g.Feed("x", v1::FLOAT32, {4, kN});
  std::string w = g.Persistent("w", HostTensor::Floats({kN, kN}, std::vector<float>(kN * kN, 0.0f)));
  std::string bias = g.Persistent("b", HostTensor::Floats({kN}, std::vector<float>(kN, 0.0f)));
  std::string y = g.Op("mm", {x, w}, {}, "xw");
  y = g.Op("add.Tensor", {y, bias}, {}, "y");
  g.Fetch(y);
  return std::move(g).Build();
}

struct Values {
  std::vector<float> w, b, x;
  Values() : w(kN * kN), b(kN), x(4 * kN) {
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 37 + 11) % 97) / 97.0f - 0.5f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 13) * 0.1f;
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 5 + 3) % 31) / 31.0f;
  }
  std::vector<FeedView> Views() const {
    return {FeedView{"w", v1::FLOAT32, {kN, kN}, w.data(), w.size() * 4},
            FeedView{"b", v1::FLOAT32, {kN}, b.data(), b.size() * 4}};
  }
};

std::vector<float> RunAffine(Client& c, uint64_t job, const Values& v) {
  auto r = c.RunIteration(job, {{"x", HostTensor::Floats({4, kN}, v.x)}}, {"y"});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->fetches.at("y").values<float>() : std::vector<float>();
}

TEST(SharedFrames, LargeModelsRegisterThroughSharedMemoryAndMatchFrames) {
  DaemonProcess daemon({"--policy=fair"});
  auto shared = Client::Connect({.endpoint = daemon.endpoint(), .name = "shared"});
  client::ClientOptions framed_options{.endpoint = daemon.endpoint(), .name = "framed"};
  framed_options.shared_frames_threshold = UINT64_MAX;
  framed_options.frame_bytes = 100000;  // w (1 MiB) in 11 frames, the last one short
  auto framed = Client::Connect(framed_options);
  ASSERT_TRUE(shared.ok()) << shared.status();
  ASSERT_TRUE(framed.ok()) << framed.status();
  const Values v;
  auto a = (*shared)->RegisterJob(Affine(), v.Views());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(daemon.Log(), HasSubstr("registration reads its initial values from shared memory"));
  auto b = (*framed)->RegisterJob(Affine(), v.Views());
  ASSERT_TRUE(b.ok()) << b.status();
  auto framed_w = (*framed)->ReadTensor(b->job_id(), "w");
  ASSERT_TRUE(framed_w.ok()) << framed_w.status();
  EXPECT_EQ(framed_w->values<float>(), v.w) << "w's 11 frames, in order";

  auto w = (*shared)->ReadTensor(a->job_id(), "w");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->values<float>(), v.w);
  auto bias = (*shared)->ReadTensor(a->job_id(), "b");
  ASSERT_TRUE(bias.ok()) << bias.status();
  EXPECT_EQ(bias->values<float>(), v.b);
  std::vector<float> y = RunAffine(**shared, a->job_id(), v);
  EXPECT_EQ(y, RunAffine(**framed, b->job_id(), v));
  ASSERT_EQ(y.size(), static_cast<size_t>(4 * kN));
  for (int64_t r = 0; r < 4; r += 3) {
    for (int64_t c = 0; c < kN; c += 101) {
      double want = v.b[c];
      for (int64_t k = 0; k < kN; ++k) want += static_cast<double>(v.x[r * kN + k]) * v.w[k * kN + c];
      EXPECT_NEAR(y[r * kN + c], want, 1e-3 * (1 + std::abs(want))) << r << "," << c;
    }
  }
}

// Initial values written into the request (GraphBuilder's HostTensors, no
// views) take the same road: through shared memory on a local daemon, past
// the message limit, and never as one large ZeroMQ frame (whose transfer
// libzmq's heartbeat timeout would cut short on a loaded machine).
TEST(SharedFrames, InlineInitialValuesGoThroughSharedMemoryToo) {
  DaemonProcess daemon({"--policy=fair", "--max_message_bytes=1048576"});  // w alone is 1 MiB
  auto c = Client::Connect({.endpoint = daemon.endpoint(), .name = "inline"});
  ASSERT_TRUE(c.ok()) << c.status();
  const Values v;
  GraphBuilder g("affine-inline");
  std::string x = g.Feed("x", v1::FLOAT32, {4, kN});
  std::string w = g.Persistent("w", HostTensor::Floats({kN, kN}, v.w));
  std::string bias = g.Persistent("b", HostTensor::Floats({kN}, v.b));
  std::string y = g.Op("mm", {x, w}, {}, "xw");
  y = g.Op("add.Tensor", {y, bias}, {}, "y");
  g.Fetch(y);
  auto job = (*c)->RegisterJob(std::move(g).Build());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(daemon.Log(), HasSubstr("registration reads its initial values from shared memory"));
  auto read_w = (*c)->ReadTensor(job->job_id(), "w");
  ASSERT_TRUE(read_w.ok()) << read_w.status();
  EXPECT_EQ(read_w->values<float>(), v.w);
  auto read_b = (*c)->ReadTensor(job->job_id(), "b");
  ASSERT_TRUE(read_b.ok()) << read_b.status();
  EXPECT_EQ(read_b->values<float>(), v.b);
  const std::vector<float> out = RunAffine(**c, job->job_id(), v);
  ASSERT_EQ(out.size(), static_cast<size_t>(4 * kN));
  for (int64_t col = 0; col < kN; col += 37) {
    double want = v.b[col];
    for (int64_t k = 0; k < kN; ++k) want += static_cast<double>(v.x[k]) * v.w[k * kN + col];
    EXPECT_NEAR(out[col], want, 1e-3 * (1 + std::abs(want))) << col;
  }
}

// A model's initial values are bounded by what its graph declares, not by
// the message limit: a job whose weights exceed max_message_bytes registers
// through shared memory.
TEST(SharedFrames, InitialValuesMayExceedTheMessageLimit) {
  DaemonProcess daemon({"--policy=fair", "--max_message_bytes=1048576"});  // w alone is 1 MiB
  auto shared = Client::Connect({.endpoint = daemon.endpoint(), .name = "shared"});
  ASSERT_TRUE(shared.ok()) << shared.status();
  const Values v;
  auto job = (*shared)->RegisterJob(Affine(), v.Views());
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<float> y = RunAffine(**shared, job->job_id(), v);
  ASSERT_EQ(y.size(), static_cast<size_t>(4 * kN));
  for (int64_t c = 0; c < kN; c += 37) {
    double want = v.b[c];
    for (int64_t k = 0; k < kN; ++k) want += static_cast<double>(v.x[k]) * v.w[k * kN + c];
    EXPECT_NEAR(y[c], want, 1e-3 * (1 + std::abs(want))) << c;
  }
}

TEST(SharedFrames, BadSharedFramesAreRefused) {
  DaemonProcess daemon({"--policy=fair"});
  auto c = Client::Connect({.endpoint = daemon.endpoint(), .name = "bad"});
  ASSERT_TRUE(c.ok());
  const Values v;
  const uint64_t w_bytes = v.w.size() * 4, b_bytes = v.b.size() * 4;
  auto object = SealedMemfd::Create(w_bytes + b_bytes);
  ASSERT_TRUE(object.ok()) << object.status();
  std::memcpy(object->data(), v.w.data(), w_bytes);
  std::memcpy(object->data() + w_bytes, v.b.data(), b_bytes);

  // A registration naming `object`, passed under a fresh nonce (or a nonce
  // under which nothing was passed, 0), with the given slices.
  const v1::HelloResponse& hello = (*c)->hello();
  uint64_t next_nonce = 100;
  auto pass = [&]() {
    const uint64_t nonce = next_nonce++;
    EXPECT_TRUE(object->PassTo(hello.fd_socket(), hello.session_token(), nonce).ok());
    return nonce;
  };
  auto register_with = [&](uint64_t nonce, std::vector<uint64_t> offsets, std::vector<uint64_t> sizes) {
    v1::Request r;
    v1::RegisterJobRequest* reg = r.mutable_register_job();
    *reg = Affine();
    for (v1::Tensor& t : *reg->mutable_persistent()) {
      t.clear_data();
      t.set_frame(t.spec().name() == "w" ? 1 : 2);
    }
    v1::SharedFrames* frames = reg->mutable_shared_frames();
    frames->set_fd_nonce(nonce);
    frames->set_bytes(object->bytes());
    for (uint64_t o : offsets) frames->add_offsets(o);
    for (uint64_t s : sizes) frames->add_sizes(s);
    return (*c)->Call(std::move(r));
  };
  auto r = register_with(0, {0, w_bytes}, {w_bytes, b_bytes});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  r = register_with(pass(), {0, w_bytes + 8}, {w_bytes, b_bytes});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("ends past"));
  r = register_with(pass(), {0, ~uint64_t{0}}, {w_bytes, 16});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = register_with(pass(), {0}, {w_bytes, b_bytes});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("1 offsets but 2 sizes"));
  r = register_with(pass(), {0, w_bytes}, {w_bytes - 4, b_bytes});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("frame 1 has"));
  r = register_with(pass(), {0}, {w_bytes});  // frame 2 named, only one slice
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);

  // Shared frames and ZeroMQ frames together.
  {
    v1::Request req;
    *req.mutable_register_job() = Affine();
    req.mutable_register_job()->mutable_shared_frames()->set_fd_nonce(pass());
    req.mutable_register_job()->mutable_shared_frames()->set_bytes(object->bytes());
    std::vector<zmq::message_t> extra;
    extra.emplace_back(16);
    auto id = (*c)->SendWithFrames(std::move(req), std::move(extra));
    ASSERT_TRUE(id.ok()) << id.status();
    auto both = (*c)->Wait(*id);
    ASSERT_FALSE(both.ok());
    EXPECT_THAT(std::string(both.status().message()), HasSubstr("send one"));
  }

  // The right slices register, and the job computes with the object's values.
  r = register_with(pass(), {0, w_bytes}, {w_bytes, b_bytes});
  ASSERT_TRUE(r.ok()) << r.status();
  const uint64_t job = r->register_job().job_id();
  auto w = (*c)->ReadTensor(job, "w");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->values<float>(), v.w);
  EXPECT_EQ(RunAffine(**c, job, v).size(), static_cast<size_t>(4 * kN));
}

}  // namespace
}  // namespace tandem::testing
