// Bad input against a real daemon: each case gets a clear error (or a clean
// session teardown), and a well-behaved client training beside it keeps
// training with exactly the losses it would have had alone.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "client/client.h"
#include "examples/mlp_train/mlp_graph.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/mlp_reference.h"
#include "tests/mlp_trainer.h"
#include "tests/raw_session.h"

namespace tandem::testing {
namespace {

using client::Client;
using client::GraphBuilder;
using client::HostTensor;
using ::testing::HasSubstr;

constexpr uint64_t kMaxMessage = 1 << 20;

class BadInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = new DaemonProcess(
        {"--policy=fair", "--max_message_bytes=" + std::to_string(kMaxMessage), "--session_timeout=1.5"});
    good_ = new GoodTrainer(daemon_->endpoint());
    good_->Step(3);
  }
  static void TearDownTestSuite() {
    delete good_;
    delete daemon_;
  }
  void TearDown() override {
    // After every bad case the daemon is alive and the good job trains on.
    ASSERT_TRUE(daemon_->Alive()) << daemon_->Log();
    good_->Step(2);
  }

  std::unique_ptr<Client> Connect(const std::string& name = "bad") {
    auto c = Client::Connect({.endpoint = daemon_->endpoint(), .name = name});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // A job whose graph is x -> mm(x, w) -> fetch, with `op` in place of mm.
  static v1::RegisterJobRequest TinyJob(const std::string& op, int64_t w_rows) {
    GraphBuilder b("tiny");
    std::string x = b.Feed("x", v1::FLOAT32, {4, 8});
    std::vector<float> w(static_cast<size_t>(w_rows) * 3, 0.5f);
    std::string wn = b.Persistent("w", HostTensor::Floats({w_rows, 3}, w));
    std::string out = b.Op(op, {x, wn}, {}, "out");
    b.Fetch(out);
    return std::move(b).Build();
  }

  static DaemonProcess* daemon_;
  static GoodTrainer* good_;
};

DaemonProcess* BadInputTest::daemon_ = nullptr;
GoodTrainer* BadInputTest::good_ = nullptr;

class TinyJobMaker : public BadInputTest {
 public:
  using BadInputTest::TinyJob;
};
v1::RegisterJobRequest BadInputTestTinyJob() { return TinyJobMaker::TinyJob("mm", 8); }

TEST_F(BadInputTest, RandomBytesGetInvalidArgument) {
  auto c = Connect();
  std::mt19937 rng(42);
  std::string junk(257, '\0');
  for (char& ch : junk) ch = static_cast<char>(rng());
  auto r = c->CallRaw(junk, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("malformed request"));
}

TEST_F(BadInputTest, TruncatedProtobufGetsInvalidArgument) {
  auto c = Connect();
  v1::Request request;
  request.set_request_id(0);
  *request.mutable_register_job() = TinyJob("mm", 8);
  std::string bytes = request.SerializeAsString();
  auto r = c->CallRaw(bytes.substr(0, bytes.size() - 7), 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(BadInputTest, MessageOverTheSizeLimitIsRefused) {
  auto c = Connect();
  std::string big(kMaxMessage + kMaxMessage / 2, 'x');
  auto r = c->CallRaw(big, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("exceeds the limit"));
  // The same client can go on.
  EXPECT_TRUE(c->Stats().ok());
}

TEST_F(BadInputTest, OversizedRequestIsAnsweredUnderItsOwnId) {
  auto c = Connect();
  // A well-formed request over the limit: the reply carries its id.
  v1::Request request;
  request.set_request_id(4242);
  v1::RegisterJobRequest* reg = request.mutable_register_job();
  *reg = TinyJob("mm", 8);
  reg->mutable_persistent(0)->mutable_data()->append(kMaxMessage, '\0');
  auto r = c->CallRaw(request.SerializeAsString(), 4242);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  // Through the SDK the same registration fails before it is sent: its
  // initial values would not travel in the message (shared memory or
  // frames), and this one's bytes do not match its shape.
  auto local = c->RegisterJob(*reg);
  ASSERT_FALSE(local.ok());
  EXPECT_EQ(local.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(local.status().message()), HasSubstr("its shape and dtype need"));
}

TEST_F(BadInputTest, UnknownOpIsRefusedAtRegistration) {
  auto c = Connect();
  auto r = c->RegisterJob(TinyJob("frobnicate.Tensor", 8));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("unknown op 'frobnicate.Tensor'"));
}

TEST_F(BadInputTest, ShapeMismatchIsRefusedAtRegistration) {
  auto c = Connect();
  auto r = c->RegisterJob(TinyJob("mm", 7));  // x is [4, 8], w is [7, 3]
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("mm"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("[7, 3]"));
}

TEST_F(BadInputTest, FeedOfTheWrongByteSizeIsRefused) {
  auto c = Connect();
  auto job = c->RegisterJob(TinyJob("mm", 8));
  ASSERT_TRUE(job.ok()) << job.status();
  HostTensor x = HostTensor::Floats({4, 8}, std::vector<float>(40, 1.f));  // 40 floats, not 32
  auto r = c->RunIteration(job->job_id(), {{"x", x}}, {"out"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("bytes"));
  // A wrong shape is named as such.
  r = c->RunIteration(job->job_id(), {{"x", HostTensor::Floats({8, 4}, std::vector<float>(32, 1.f))}}, {"out"});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("float32[4, 8]"));
  // And a correct one works: 8 x 0.5 per output.
  r = c->RunIteration(job->job_id(), {{"x", HostTensor::Floats({4, 8}, std::vector<float>(32, 1.f))}}, {"out"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->fetches.at("out").values<float>()[5], 4.0f);
}

TEST_F(BadInputTest, RequestForAnotherSessionsJobIsNotFound) {
  auto c = Connect();
  auto read = c->ReadTensor(good_->job(), "W0");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  auto run = c->RunIteration(good_->job(), {}, {"loss"});
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(c->CloseJob(good_->job()).ok());
}

// TinyJob("mm", 8) with w's bytes moved out into frame 1, as the client sends it.
v1::Request FramedTinyJob(std::string* w_bytes) {
  v1::Request request;
  *request.mutable_register_job() = BadInputTestTinyJob();
  v1::Tensor* w = request.mutable_register_job()->mutable_persistent(0);
  *w_bytes = w->data();
  w->clear_data();
  w->set_frame(1);
  return request;
}

// `request` with `frames` after it is refused as INVALID_ARGUMENT, saying `says`.
void ExpectInvalid(RawSession& raw, const v1::Request& request, const std::vector<std::string>& frames,
                   const std::string& says) {
  v1::Response r = raw.Call(request, frames);
  EXPECT_EQ(r.status().code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << says;
  EXPECT_THAT(r.status().message(), HasSubstr(says));
}

TEST_F(BadInputTest, PersistentFramesAreChecked) {
  RawSession raw(daemon_->endpoint());
  std::string w;
  const v1::Request good = FramedTinyJob(&w);
  auto expect_refused = [&](const v1::Request& request, const std::vector<std::string>& frames,
                            const std::string& says) { ExpectInvalid(raw, request, frames, says); };
  expect_refused(good, {}, "names frame 1 but 0 frame(s) followed");
  expect_refused(good, {w.substr(4)}, "frame 1 has 92 bytes; float32[8, 3] needs 96");
  expect_refused(good, {w, w}, "frame 2 of 2 after the request belongs to no persistent tensor");
  v1::Request both = good;
  both.mutable_register_job()->mutable_persistent(0)->set_data(w);
  expect_refused(both, {w}, "has both inline data and frame 1");
  v1::Request stats;
  stats.mutable_stats();
  expect_refused(stats, {w}, "only a job registration (its persistent tensors' bytes) or an iteration");
  // One tensor in pieces (frame_count): the pieces must exist, belong to it
  // alone and hold its bytes together.
  v1::Request pieces = good;
  pieces.mutable_register_job()->mutable_persistent(0)->set_frame_count(3);
  expect_refused(pieces, {w.substr(0, 40), w.substr(40)}, "names frames 1-3 but 2 frame(s) followed");
  expect_refused(pieces, {w.substr(0, 40), w.substr(40, 40), w.substr(80, 8)},
                 "frames 1-3 have 88 bytes; float32[8, 3] needs 96");
  expect_refused(pieces, {w.substr(0, 40), w.substr(40, 40), w.substr(80), w},
                 "frame 4 of 4 after the request belongs to no persistent tensor");
  // A well-formed registration registers, and its weights are its frames'
  // bytes, in order.
  auto registers_with_w = [&](const v1::Request& request, const std::vector<std::string>& frames) {
    v1::Response r = raw.Call(request, frames);
    ASSERT_EQ(r.status().code(), 0) << r.status().message();
    v1::Request read;
    read.mutable_read_tensor()->set_job_id(r.register_job().job_id());
    read.mutable_read_tensor()->set_name("w");
    v1::Response got = raw.Call(read, {});
    ASSERT_EQ(got.status().code(), 0) << got.status().message();
    EXPECT_EQ(got.read_tensor().tensor().data(), w) << frames.size() << " frame(s)";
    v1::Request close;
    close.mutable_close_job()->set_job_id(r.register_job().job_id());
    EXPECT_EQ(raw.Call(close, {}).status().code(), 0);
  };
  registers_with_w(pieces, {w.substr(0, 40), w.substr(40, 40), w.substr(80)});
  registers_with_w(good, {w});
}

// An iteration's feed in frames (Tensor.frame, frame_count), as the client
// sends a large feed that does not go through shared memory: the frames are
// checked as a registration's, and the feed's bytes are its frames in order.
TEST_F(BadInputTest, FeedFramesAreChecked) {
  RawSession raw(daemon_->endpoint());
  v1::Request reg;
  *reg.mutable_register_job() = TinyJob("mm", 8);
  v1::Response registered = raw.Call(reg, {});
  ASSERT_EQ(registered.status().code(), 0) << registered.status().message();
  std::vector<float> values(32);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 7) - 2.5f;
  const std::string x(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  auto run_with = [&](const std::function<void(v1::Tensor*)>& set) {
    v1::Request run;
    v1::RunIterationRequest* r = run.mutable_run_iteration();
    r->set_job_id(registered.register_job().job_id());
    r->add_fetches("out");
    v1::Tensor* feed = r->add_feeds();
    feed->mutable_spec()->set_name("x");
    set(feed);
    return run;
  };
  const v1::Request inline_x = run_with([&](v1::Tensor* t) { t->set_data(x); });
  const v1::Request framed_x = run_with([](v1::Tensor* t) { t->set_frame(1); });
  const v1::Request pieces_x = run_with([](v1::Tensor* t) {
    t->set_frame(1);
    t->set_frame_count(3);
  });
  auto expect_refused = [&](const v1::Request& request, const std::vector<std::string>& frames,
                            const std::string& says) { ExpectInvalid(raw, request, frames, says); };
  expect_refused(framed_x, {}, "feed 'x' names frame 1 but 0 frame(s) followed");
  expect_refused(framed_x, {x.substr(4)}, "feed 'x': frame 1 has 124 bytes; float32[4, 8] needs 128");
  expect_refused(framed_x, {x, x}, "frame 2 of 2 after the request belongs to no feed");
  expect_refused(inline_x, {x}, "frame 1 of 1 after the request belongs to no feed");
  expect_refused(run_with([&](v1::Tensor* t) {
                   t->set_data(x);
                   t->set_frame(1);
                 }),
                 {x}, "feed 'x' has both inline data and frame 1");
  expect_refused(pieces_x, {x.substr(0, 50), x.substr(50)}, "names frames 1-3 but 2 frame(s) followed");
  // Well formed: the same output as the same bytes inline (the session and
  // the job survived the refusals above).
  v1::Response want = raw.Call(inline_x, {});
  ASSERT_EQ(want.status().code(), 0) << want.status().message();
  ASSERT_EQ(want.run_iteration().fetches_size(), 1);
  for (const auto& [request, frames] : std::vector<std::pair<v1::Request, std::vector<std::string>>>{
           {framed_x, {x}}, {pieces_x, {x.substr(0, 50), x.substr(50, 50), x.substr(100)}}}) {
    v1::Response got = raw.Call(request, frames);
    ASSERT_EQ(got.status().code(), 0) << got.status().message();
    EXPECT_EQ(got.run_iteration().fetches(0).data(), want.run_iteration().fetches(0).data())
        << frames.size() << " frame(s)";
  }
}

// Regressions of sizes that wrapped around: zeros of 2^62 floats planned as
// 0 bytes and its first iteration killed the daemon; a 4-float tensor
// viewed as [2^62 + 1, 4] and sliced read another session's weights.
TEST_F(BadInputTest, SizesThatWrapAroundAreRefusedAtRegistration) {
  auto c = Connect();
  constexpr int64_t k2To62 = int64_t{1} << 62;
  {
    GraphBuilder b("zeros");
    std::string z = b.Op("zeros", {}, {{"size", client::AttrInts({k2To62})}}, "z");
    b.Fetch(z);
    auto r = c->RegisterJob(std::move(b).Build());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("exceeds the tensor size limit"));
  }
  {
    GraphBuilder b("view");
    std::string w = b.Persistent("w", HostTensor::Floats({4}, {1, 2, 3, 4}));
    std::string v = b.Op("view", {w}, {{"size", client::AttrInts({k2To62 + 1, 4})}}, "v");
    std::string s = b.Op("slice.Tensor", {v},
                         {{"dim", client::AttrInt(0)},
                          {"start", client::AttrInt(int64_t{1} << 16)},
                          {"end", client::AttrInt((int64_t{1} << 16) + 1)}},
                         "s");
    b.Fetch(s);
    auto r = c->RegisterJob(std::move(b).Build());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("more elements than an int64"));
  }
}

TEST_F(BadInputTest, RequestBeforeHelloIsRefused) {
  auto c = Connect();
  v1::Request request;
  request.set_request_id(77);
  request.mutable_stats();
  // A raw second connection has no session.
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 5000);
  s.connect(daemon_->endpoint());
  std::string bytes = request.SerializeAsString();
  s.send(zmq::buffer(bytes), zmq::send_flags::none);
  zmq::message_t reply;
  ASSERT_TRUE(s.recv(reply, zmq::recv_flags::none));
  v1::Response response;
  ASSERT_TRUE(response.ParseFromArray(reply.data(), static_cast<int>(reply.size())));
  EXPECT_EQ(response.request_id(), 77u);
  EXPECT_EQ(response.status().code(), static_cast<int>(absl::StatusCode::kUnavailable));
}

TEST_F(BadInputTest, ClientKilledMidIterationIsCleanedUp) {
  auto c = Connect("observer");
  // A separate training process, killed while its iterations are in flight.
  std::string log = daemon_->dir() + "/victim.log";
  pid_t pid = Spawn({MlpTrainPath(), "--endpoint=" + daemon_->endpoint(), "--iterations=100000", "--batch=64",
                     "--hidden=256", "--print_every=1", "--inflight=4", "--name=victim"},
                    log);
  // Wait until it has trained a little.
  for (int i = 0; i < 1000 && !absl::StrContains(ReadFile(log), "iter 3 "); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(absl::StrContains(ReadFile(log), "iter 3 ")) << ReadFile(log);
  auto before = c->Stats();
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->jobs(), 2u);  // the good job and the victim
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  // Its session ends (a reply that cannot be delivered, or the timeout) and
  // its memory comes back.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto list = c->ListSessions();
    ASSERT_TRUE(list.ok());
    gone = true;
    for (const auto& s : list->sessions()) gone &= s.client_name() != "victim";
  }
  EXPECT_TRUE(gone) << daemon_->Log();
  // Its job closes once the iterations it had in flight have completed,
  // which may be after the session is gone.
  absl::StatusOr<v1::StatsResponse> after = c->Stats();
  for (int i = 0; i < 100 && after.ok() && after->jobs() != 1u; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    after = c->Stats();
  }
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->jobs(), 1u) << daemon_->Log();
  EXPECT_LT(after->devices(0).persistent_bytes(), before->devices(0).persistent_bytes());
}

}  // namespace
}  // namespace tandem::testing
