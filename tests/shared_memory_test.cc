// The shared-memory feed path against a real daemon: large feeds travel
// through the session's region and give the same results as inline feeds;
// slices that point outside the region, or at a region of another session,
// are refused without disturbing anything.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include <string>
#include <vector>

#include "client/client.h"
#include "client/graph_builder.h"
#include "client/sealed_memfd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/fd_message.h"
#include "tests/daemon_process.h"

namespace tandem::testing {
namespace {

using client::Client;
using client::GraphBuilder;
using client::HostTensor;
using ::testing::HasSubstr;

constexpr int64_t kRows = 512, kCols = 256;  // a 512 KiB feed

v1::RegisterJobRequest ColumnSums() {
  GraphBuilder b("column-sums");
  std::string x = b.Feed("x", v1::FLOAT32, {kRows, kCols});
  std::string s = b.Op("sum.dim_IntList", {x}, {{"dim", client::AttrInts({0})}}, "s");
  b.Fetch(s);
  return std::move(b).Build();
}

std::vector<float> Batch(int k) {
  std::vector<float> x(kRows * kCols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7 + k * 13) % 101) * 0.25f;
  return x;
}

std::vector<float> ColumnSumsOf(const std::vector<float>& x) {
  std::vector<double> s(kCols, 0.0);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kCols; ++c) s[c] += x[r * kCols + c];
  return std::vector<float>(s.begin(), s.end());
}

TEST(SharedMemory, LargeFeedsGoThroughTheRegionAndMatchInline) {
  DaemonProcess daemon({"--policy=fair"});
  auto shared = Client::Connect({.endpoint = daemon.endpoint(), .name = "shm"});
  ASSERT_TRUE(shared.ok()) << shared.status();
  // Set up only when first wanted: nothing until then.
  EXPECT_EQ((*shared)->shared_memory_status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*shared)->EnsureSharedMemory().ok()) << (*shared)->shared_memory_status();
  ASSERT_TRUE((*shared)->shared_memory_status().ok()) << (*shared)->shared_memory_status();
  EXPECT_TRUE((*shared)->shared_memory_pinned()) << "the CPU device registers any host memory";
  auto inline_client = Client::Connect({.endpoint = daemon.endpoint(), .name = "inline", .shared_memory_bytes = 0});
  ASSERT_TRUE(inline_client.ok());
  EXPECT_FALSE((*inline_client)->EnsureSharedMemory().ok());
  EXPECT_FALSE((*inline_client)->shared_memory_status().ok());
  EXPECT_FALSE((*inline_client)->shared_memory_pinned());

  auto a = (*shared)->RegisterJob(ColumnSums());
  auto b = (*inline_client)->RegisterJob(ColumnSums());
  ASSERT_TRUE(a.ok() && b.ok());
  // Several in flight, so the ring holds several slices at once.
  std::vector<uint64_t> tickets;
  for (int k = 0; k < 6; ++k) {
    auto t = (*shared)->SubmitIteration(a->job_id(), {{"x", HostTensor::Floats({kRows, kCols}, Batch(k))}}, {"s"});
    ASSERT_TRUE(t.ok()) << t.status();
    tickets.push_back(*t);
  }
  for (int k = 0; k < 6; ++k) {
    auto r = (*shared)->WaitIteration(tickets[k]);
    ASSERT_TRUE(r.ok()) << r.status();
    auto inline_r =
        (*inline_client)->RunIteration(b->job_id(), {{"x", HostTensor::Floats({kRows, kCols}, Batch(k))}}, {"s"});
    ASSERT_TRUE(inline_r.ok()) << inline_r.status();
    std::vector<float> got = r->fetches.at("s").values<float>();
    EXPECT_EQ(got, inline_r->fetches.at("s").values<float>()) << "batch " << k;
    std::vector<float> want = ColumnSumsOf(Batch(k));
    for (int64_t c = 0; c < kCols; ++c) ASSERT_NEAR(got[c], want[c], 1e-3 * std::abs(want[c]) + 1e-3) << c;
  }
  EXPECT_THAT(daemon.Log(), HasSubstr("shared memory mapped"));
}

v1::RegisterJobRequest RowSums(int64_t rows) {
  GraphBuilder b("row-sums");
  std::string x = b.Feed("x", v1::FLOAT32, {rows, kCols});
  std::string s = b.Op("sum.dim_IntList", {x}, {{"dim", client::AttrInts({1})}}, "s");
  b.Fetch(s);
  return std::move(b).Build();
}

// A job whose batches outgrow the region gets a larger one for the
// iterations that follow, instead of sending its feeds inline from then on.
TEST(SharedMemory, TheRegionGrowsWithTheFeeds) {
  DaemonProcess daemon({"--policy=fair"});
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  auto client = Client::Connect({.endpoint = daemon.endpoint(), .name = "grow", .shared_memory_bytes = kMiB});
  ASSERT_TRUE(client.ok()) << client.status();
  for (int64_t rows : {int64_t{128}, int64_t{1024}, int64_t{4096}}) {  // 128 KiB, 1 MiB, 4 MiB feeds
    auto job = (*client)->RegisterJob(RowSums(rows));
    ASSERT_TRUE(job.ok()) << job.status();
    std::vector<float> x(rows * kCols);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 5 + rows) % 17);
    std::vector<uint64_t> tickets;
    for (int k = 0; k < 3; ++k) {
      auto t = (*client)->SubmitIteration(job->job_id(), {{"x", HostTensor::Floats({rows, kCols}, x)}}, {"s"});
      ASSERT_TRUE(t.ok()) << t.status();
      tickets.push_back(*t);
    }
    for (uint64_t t : tickets) {
      auto r = (*client)->WaitIteration(t);
      ASSERT_TRUE(r.ok()) << r.status();
      std::vector<float> got = r->fetches.at("s").values<float>();
      for (int64_t row = 0; row < rows; row += 97) {
        double want = 0;
        for (int64_t c = 0; c < kCols; ++c) want += x[row * kCols + c];
        ASSERT_NEAR(got[row], want, 1e-3 * want) << rows << " rows, row " << row;
      }
    }
    // Three iterations' feeds fit, rounded up to 2 MiB.
    const uint64_t feed = static_cast<uint64_t>(rows * kCols) * 4;
    EXPECT_GE((*client)->shared_memory_bytes(), 3 * feed) << rows << " rows";
  }
  // 2 MiB (the first, for three 128 KiB feeds and the 1 MiB minimum), 4 MiB
  // (three 1 MiB feeds: twice the first), 12 MiB (three 4 MiB feeds).
  EXPECT_EQ((*client)->shared_memory_bytes(), 12 * kMiB);
  size_t mapped = 0;
  const std::string log = daemon.Log();
  for (size_t at = log.find("shared memory mapped"); at != std::string::npos;
       at = log.find("shared memory mapped", at + 1)) {
    ++mapped;
  }
  EXPECT_EQ(mapped, 3u) << log;
}

TEST(SharedMemory, BadSlicesAreRefused) {
  DaemonProcess daemon({"--policy=fair"});
  auto owner = Client::Connect({.endpoint = daemon.endpoint(), .name = "owner"});
  auto other = Client::Connect({.endpoint = daemon.endpoint(), .name = "other"});
  ASSERT_TRUE(owner.ok() && other.ok());
  // Regions 1 and 2, in this order.
  ASSERT_TRUE((*owner)->EnsureSharedMemory().ok());
  ASSERT_TRUE((*other)->EnsureSharedMemory().ok());
  auto job = (*other)->RegisterJob(ColumnSums());
  ASSERT_TRUE(job.ok());
  auto run_with = [&](uint64_t region, uint64_t offset, uint64_t bytes) {
    v1::Request r;
    v1::RunIterationRequest* run = r.mutable_run_iteration();
    run->set_job_id(job->job_id());
    run->add_fetches("s");
    v1::Tensor* t = run->add_feeds();
    t->mutable_spec()->set_name("x");
    v1::SharedSlice* slice = t->mutable_shared();
    slice->set_region_id(region);
    slice->set_offset(offset);
    slice->set_bytes(bytes);
    return (*other)->Call(std::move(r));
  };
  const uint64_t bytes = kRows * kCols * 4;
  // The owner's region (id 1) is not the other session's.
  auto r = run_with(1, 0, bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  // The other session's own region (id 2), but out of bounds or mis-sized.
  r = run_with(2, (uint64_t{64} << 20) - 1024, bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = run_with(2, ~uint64_t{0} - 8, bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = run_with(2, 0, bytes - 4);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("must hold exactly"));
  // A nonce under which nothing was passed names no region.
  auto map = [&](uint64_t nonce, uint64_t bytes) {
    v1::Request m;
    m.mutable_map_shared_memory()->set_fd_nonce(nonce);
    m.mutable_map_shared_memory()->set_bytes(bytes);
    return (*other)->Call(std::move(m));
  };
  auto mapped = map(9999, 4096);
  ASSERT_FALSE(mapped.ok());
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kNotFound);
  // A descriptor that is not a memfd sealed against shrinking (a client
  // could shrink it under the daemon's mapping: SIGBUS) is refused, and so
  // is one smaller than announced.
  const v1::HelloResponse& hello = (*other)->hello();
  int unsealed = ::memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(unsealed, 4096), 0);
  ASSERT_TRUE(client::PassFileDescriptor(hello.fd_socket(), hello.session_token(), 7001, unsealed).ok());
  mapped = map(7001, 4096);
  ASSERT_FALSE(mapped.ok());
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(mapped.status().message()), HasSubstr("F_SEAL_SHRINK"));
  ASSERT_EQ(::fcntl(unsealed, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  ASSERT_TRUE(client::PassFileDescriptor(hello.fd_socket(), hello.session_token(), 7002, unsealed).ok());
  mapped = map(7002, 8192);
  ASSERT_FALSE(mapped.ok());
  EXPECT_THAT(std::string(mapped.status().message()), HasSubstr("less than the 8192 bytes"));
  // The owner cannot shrink the sealed object it passed.
  EXPECT_NE(::ftruncate(unsealed, 0), 0);
  ::close(unsealed);
  // A descriptor passed with another session's token is not that session's.
  int sealed = ::memfd_create("sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(sealed, 4096), 0);
  ASSERT_EQ(::fcntl(sealed, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  ASSERT_TRUE(client::PassFileDescriptor(hello.fd_socket(), std::string(16, 'x'), 7003, sealed).ok());
  EXPECT_EQ(map(7003, 4096).status().code(), absl::StatusCode::kNotFound);
  // A malformed message on the fd socket (no descriptor, a wrong length)
  // is answered so, and harms nothing.
  {
    int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, hello.fd_socket().c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(::connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(::send(s, "TFD1garbage", 11, 0), 11);
    uint8_t answer = 0;
    ASSERT_EQ(::recv(s, &answer, 1, 0), 1);
    EXPECT_EQ(answer, v1::kFdMalformed);
    ::close(s);
  }
  ASSERT_TRUE(client::PassFileDescriptor(hello.fd_socket(), hello.session_token(), 7005, sealed).ok());
  EXPECT_TRUE(map(7005, 4096).ok());
  ::close(sealed);
  // And the job still runs.
  auto ok = (*other)->RunIteration(job->job_id(), {{"x", HostTensor::Floats({kRows, kCols}, Batch(1))}}, {"s"});
  EXPECT_TRUE(ok.ok()) << ok.status();
}

}  // namespace
}  // namespace tandem::testing
