// Per-session caps: a session holds at most max_jobs_per_session jobs, and
// a client that sends requests without reading the replies is refused once
// the daemon holds max_unread_reply_mib of them; each with a clear error,
// and the session keeps working once it is back under the cap.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "client/client.h"
#include "client/graph_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/raw_session.h"

namespace tandem::testing {
namespace {

using client::Client;
using client::GraphBuilder;
using client::HostTensor;
using ::testing::HasSubstr;

// A job with `floats` persistent floats `w` (all 1) and a fetch of their sum.
v1::RegisterJobRequest WeightsJob(const std::string& name, int64_t floats) {
  GraphBuilder b(name);
  std::string w = b.Persistent("w", HostTensor::Floats({floats}, std::vector<float>(floats, 1.f)));
  b.Fetch(b.Op("sum", {w}, {}, "s"));
  return std::move(b).Build();
}

TEST(SessionCaps, JobsPerSession) {
  DaemonProcess daemon({"--max_jobs_per_session=3"});
  auto c = Client::Connect({.endpoint = daemon.endpoint(), .name = "many"});
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    auto r = (*c)->RegisterJob(WeightsJob("j" + std::to_string(i), 16));
    ASSERT_TRUE(r.ok()) << r.status();
    ids.push_back(r->job_id());
  }
  auto refused = (*c)->RegisterJob(WeightsJob("fourth", 16));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("job 'fourth'"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("max_jobs_per_session"));
  // Another session has its own allowance, and a closed job frees a place.
  auto other = Client::Connect({.endpoint = daemon.endpoint(), .name = "other"});
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE((*other)->RegisterJob(WeightsJob("elsewhere", 16)).ok());
  ASSERT_TRUE((*c)->CloseJob(ids[0]).ok());
  EXPECT_TRUE((*c)->RegisterJob(WeightsJob("fourth", 16)).ok());
}

TEST(SessionCaps, UnreadReplies) {
  DaemonProcess daemon({"--max_unread_reply_mib=8"});
  // A client whose ZeroMQ takes in at most 2 replies ahead of the reads.
  RawSession s(daemon.endpoint(), "", true, /*receive_queue=*/2);
  constexpr int64_t kFloats = 1 << 18;  // 1 MiB per read
  v1::Request reg;
  *reg.mutable_register_job() = WeightsJob("weights", kFloats);
  v1::Response registered = s.Call(reg, {});
  ASSERT_TRUE(registered.has_register_job()) << registered.status().message();
  const uint64_t job = registered.register_job().job_id();

  // 64 reads of 1 MiB sent before any reply is read, 4 at a time with a
  // pause for the daemon to answer them.
  constexpr int kReads = 64;
  for (int i = 0; i < kReads; ++i) {
    v1::Request read;
    read.mutable_read_tensor()->set_job_id(job);
    read.mutable_read_tensor()->set_name("w");
    s.Send(read);
    if (i % 4 == 3) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int answered = 0, refused = 0;
  for (int i = 0; i < kReads; ++i) {
    v1::Response r = s.Receive();
    if (r.has_read_tensor()) {
      ++answered;
    } else {
      EXPECT_EQ(r.status().code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
      EXPECT_THAT(r.status().message(), HasSubstr("max_unread_reply_mib"));
      ++refused;
    }
  }
  // About 8 MiB held by the daemon, plus what the kernel's socket buffers and
  // the client's queue took in, were answered; the rest refused.
  EXPECT_GE(answered, 8);
  EXPECT_GT(refused, 0);
  EXPECT_LT(answered, kReads / 2);
  // All read now: the session is served again.
  v1::Request read;
  read.mutable_read_tensor()->set_job_id(job);
  read.mutable_read_tensor()->set_name("w");
  v1::Response again = s.Call(read, {});
  EXPECT_TRUE(again.has_read_tensor()) << again.status().message();
}

}  // namespace
}  // namespace tandem::testing
