// Access control against a real daemon, as a second user would try it: a
// job of another user cannot be seen, killed, reprioritized or read; the
// policy and drain are an administrator's; ceilings bound what a user's job
// may ask for; a ZeroMQ routing id reused by another process gets nothing of
// the session it named; a second daemon cannot take a socket path in use.
//
// The second user is `nobody` (uid 65534), which needs the test to run as
// root (CI does); elsewhere the tests that need it report themselves
// skipped.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/graph_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/mlp_trainer.h"
#include "tests/raw_session.h"

namespace tandem::testing {
namespace {

using client::Client;
using client::GraphBuilder;
using client::HostTensor;
using ::testing::HasSubstr;

constexpr uid_t kNobody = 65534;

// Runs `checks` in a child process as `nobody`; returns what it returned
// (the failed checks, one per line; empty when all passed).
std::string AsNobody(const std::function<std::string()>& checks) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return "pipe failed";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    std::string result;
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) {
      result = "cannot become nobody";
    } else {
      result = checks();
    }
    (void)!::write(pipe_fds[1], result.data(), result.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  ::waitpid(pid, nullptr, 0);
  return out;
}

// Collects failed checks in a child process (where gtest's do not reach).
class Checks {
 public:
  void Expect(bool ok, const std::string& what) {
    if (!ok) absl::StrAppend(&failed_, what, "\n");
  }
  void ExpectCode(const absl::Status& s, absl::StatusCode code, const std::string& what) {
    if (s.code() != code) absl::StrAppend(&failed_, what, ": got ", s.ToString(), "\n");
  }
  std::string Result() const { return failed_; }

 private:
  std::string failed_;
};

v1::RegisterJobRequest TinyJob(int priority = 0) {
  GraphBuilder b("tiny");
  std::string x = b.Feed("x", v1::FLOAT32, {2, 2});
  std::string w = b.Persistent("w", HostTensor::Floats({2, 2}, {1, 2, 3, 4}));
  b.Fetch(b.Op("mm", {x, w}, {}, "y"));
  b.hints().set_priority(priority);
  return std::move(b).Build();
}

class AccessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) return;
    daemon_ = new DaemonProcess({"--policy=priority", "--max_user_priority=1", "--max_job_memory_mib=64"});
    // Let another user reach the sockets (a test folder is 0700).
    ::chmod(daemon_->dir().c_str(), 0755);
    const std::string sock = IpcSocketPath();
    ::chmod(sock.c_str(), 0666);
    ::chmod((sock + ".fd").c_str(), 0666);
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root, to act as a second user (nobody)";
  }
  void TearDown() override {
    if (daemon_ != nullptr) {
      ASSERT_TRUE(daemon_->Alive()) << daemon_->Log();
    }
  }
  static std::string IpcSocketPath() { return daemon_->endpoint().substr(std::string("ipc://").size()); }
  static std::unique_ptr<Client> Connect(const std::string& name) {
    auto c = Client::Connect({.endpoint = daemon_->endpoint(), .name = name});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  static DaemonProcess* daemon_;
};

DaemonProcess* AccessTest::daemon_ = nullptr;

absl::Status CallAdmin(Client& c, const std::function<void(v1::Request&)>& fill) {
  v1::Request r;
  fill(r);
  return c.Call(std::move(r)).status();
}

TEST_F(AccessTest, AnotherUsersJobIsOutOfReach) {
  auto owner = Connect("owner");
  auto job = owner->RegisterJob(TinyJob());
  ASSERT_TRUE(job.ok()) << job.status();
  const uint64_t id = job->job_id();
  const std::string endpoint = daemon_->endpoint();
  std::string failed = AsNobody([&]() {
    Checks check;
    auto c = Client::Connect({.endpoint = endpoint, .name = "intruder"});
    if (!c.ok()) return absl::StrCat("connect: ", c.status().ToString());
    Client& other = **c;
    check.ExpectCode(other.ReadTensor(id, "w").status(), absl::StatusCode::kNotFound, "read");
    check.ExpectCode(CallAdmin(other, [&](v1::Request& r) { r.mutable_kill_job()->set_job_id(id); }),
                     absl::StatusCode::kNotFound, "kill");
    check.ExpectCode(CallAdmin(other,
                               [&](v1::Request& r) {
                                 r.mutable_set_priority()->set_job_id(id);
                                 r.mutable_set_priority()->set_priority(-1);
                               }),
                     absl::StatusCode::kNotFound, "set-priority");
    check.ExpectCode(CallAdmin(other, [&](v1::Request& r) { r.mutable_set_policy()->set_policy("fifo"); }),
                     absl::StatusCode::kPermissionDenied, "set-policy");
    check.ExpectCode(CallAdmin(other, [&](v1::Request& r) { r.mutable_drain(); }), absl::StatusCode::kPermissionDenied,
                     "drain");
    auto list = other.ListSessions();
    check.Expect(list.ok(), "list");
    if (list.ok()) {
      for (const auto& s : list->sessions()) {
        check.Expect(s.client_name() == "intruder", absl::StrCat("sees session '", s.client_name(), "'"));
      }
    }
    return check.Result();
  });
  EXPECT_EQ(failed, "");
  // The owner's job is untouched, and the policy is the daemon's.
  auto run = owner->RunIteration(id, {{"x", HostTensor::Floats({2, 2}, {1, 0, 0, 1})}}, {"y"});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->fetches.at("y").values<float>(), (std::vector<float>{1, 2, 3, 4}));
  auto stats = owner->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->policy(), "priority");
  EXPECT_FALSE(stats->draining());
  // An administrator (root here) sees every session.
  auto list = owner->ListSessions();
  ASSERT_TRUE(list.ok());
  EXPECT_GE(list->sessions_size(), 1);
}

TEST_F(AccessTest, AUserManagesItsOwnJobsWithinTheCeilings) {
  const std::string endpoint = daemon_->endpoint();
  std::string failed = AsNobody([&]() {
    Checks check;
    auto c = Client::Connect({.endpoint = endpoint, .name = "user"});
    if (!c.ok()) return absl::StrCat("connect: ", c.status().ToString());
    Client& user = **c;
    check.ExpectCode(user.RegisterJob(TinyJob(/*priority=*/5)).status(), absl::StatusCode::kPermissionDenied,
                     "priority 5 above max_user_priority 1");
    v1::RegisterJobRequest big = TinyJob();
    big.mutable_hints()->set_memory_quota_bytes(uint64_t{1} << 30);
    check.ExpectCode(user.RegisterJob(big).status(), absl::StatusCode::kPermissionDenied, "quota above the limit");
    auto job = user.RegisterJob(TinyJob(/*priority=*/1));
    check.Expect(job.ok(), absl::StrCat("register: ", job.status().ToString()));
    if (!job.ok()) return check.Result();
    auto set = [&](int priority) {
      return CallAdmin(user, [&](v1::Request& r) {
        r.mutable_set_priority()->set_job_id(job->job_id());
        r.mutable_set_priority()->set_priority(priority);
      });
    };
    check.ExpectCode(set(0), absl::StatusCode::kOk, "lower its own priority");
    check.ExpectCode(set(2), absl::StatusCode::kPermissionDenied, "raise above the ceiling");
    // Another process of the same user may kill it.
    auto again = Client::Connect({.endpoint = endpoint, .name = "user-again"});
    check.Expect(again.ok(), "second connection");
    if (again.ok()) {
      check.ExpectCode(CallAdmin(**again, [&](v1::Request& r) { r.mutable_kill_job()->set_job_id(job->job_id()); }),
                       absl::StatusCode::kOk, "kill its own job from another process");
    }
    return check.Result();
  });
  EXPECT_EQ(failed, "");
}

TEST_F(AccessTest, AReusedRoutingIdGetsNothingOfTheSession) {
  // The victim's session registers a job and its connection closes. The
  // daemon notices the closed connection and ends the session within
  // milliseconds (death detection), but a thief quick enough to reuse the
  // routing id before that finds a session bound to another connection:
  // either way it gets nothing of it.
  uint64_t job = 0;
  {
    RawSession victim(daemon_->endpoint(), "victim-id");
    v1::Request reg;
    *reg.mutable_register_job() = TinyJob();
    v1::Response r = victim.Call(reg, {});
    ASSERT_EQ(r.status().code(), 0) << r.status().message();
    job = r.register_job().job_id();
  }
  const std::string endpoint = daemon_->endpoint();
  std::string failed = AsNobody([&]() {
    Checks check;
    RawSession thief(endpoint, "victim-id", /*say_hello=*/false);
    v1::Request read;
    read.mutable_read_tensor()->set_job_id(job);
    read.mutable_read_tensor()->set_name("w");
    v1::Response r = thief.Call(read, {});
    // PERMISSION_DENIED: the session was still there, bound to the victim's
    // connection; UNAVAILABLE: it had ended ("no session").
    const auto code = absl::StatusCode(r.status().code());
    check.Expect(
        code == absl::StatusCode::kPermissionDenied || code == absl::StatusCode::kUnavailable,
        code == absl::StatusCode::kOk ? "read the victim's weights" : absl::StrCat("read: ", r.status().message()));
    check.Expect(!r.has_read_tensor() || r.read_tensor().tensor().data().empty(), "weights came back");
    v1::Request hello;
    hello.mutable_hello()->set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
    r = thief.Call(hello, {});
    if (r.status().code() == 0) {
      // A session of its own: the victim's job is not in it.
      v1::Response again = thief.Call(read, {});
      check.Expect(absl::StatusCode(again.status().code()) == absl::StatusCode::kNotFound,
                   absl::StrCat("read in a new session: ", again.status().message()));
    } else {
      check.Expect(r.status().code() == static_cast<int>(absl::StatusCode::kPermissionDenied),
                   absl::StrCat("hello: ", r.status().message()));
    }
    return check.Result();
  });
  EXPECT_EQ(failed, "");
}

TEST(SocketPath, ASecondDaemonCannotTakeASocketInUse) {
  DaemonProcess first(std::vector<std::string>{});
  const std::string log = first.dir() + "/second.log";
  pid_t second = Spawn({TandemdPath(), "--endpoint=" + first.endpoint(), "--device=cpu"}, log);
  int status = 0;
  ::waitpid(second, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << ReadFile(log);
  EXPECT_THAT(ReadFile(log), HasSubstr("listening on"));
  // The first daemon still serves on its socket.
  GoodTrainer good(first.endpoint());
  good.Step(2);
}

TEST(SocketPath, TcpBeyondLoopbackIsRefused) {
  DaemonProcess scratch(std::vector<std::string>{});
  const std::string log = scratch.dir() + "/tcp.log";
  pid_t daemon = Spawn({TandemdPath(), "--endpoint=tcp://0.0.0.0:0", "--device=cpu"}, log);
  int status = 0;
  ::waitpid(daemon, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << ReadFile(log);
  EXPECT_THAT(ReadFile(log), HasSubstr("binds tcp only on loopback"));
}

}  // namespace
}  // namespace tandem::testing
