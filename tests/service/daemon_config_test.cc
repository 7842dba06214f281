// tandemd's config file and systemd notifications, and tandemctl's answers
// when it cannot reach a daemon, against the real binaries.
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/service/service_test_util.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Runs tandemd with a config file of `text` and `flags`; it must exit.
ProcessResult RunTandemd(const std::string& dir, const std::string& text, std::vector<std::string> flags) {
  std::string path = dir + "/tandemd.conf";
  WriteFile(path, text);
  std::vector<std::string> argv{TandemdPath(), "--config=" + path, "--endpoint=ipc://" + dir + "/t.sock"};
  for (auto& f : flags) argv.push_back(std::move(f));
  return RunProcess(argv, {}, 30);
}

class DaemonConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override { (void)!std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string dir_;
};

TEST_F(DaemonConfigTest, UnknownKeyRefusesToStartAndNamesTheLine) {
  ProcessResult r = RunTandemd(dir_, "device = cpu\n\n# scheduling\npolcy = fair\n", {});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "tandemd: " + dir_ + "/tandemd.conf:4: unknown key 'polcy' (did you mean 'policy'?)\n");
  EXPECT_FALSE(absl::StrContains(r.err, "listening"));
}

TEST_F(DaemonConfigTest, BadValueRefusesToStartAndNamesTheLine) {
  ProcessResult r = RunTandemd(dir_, "device = cpu\nmax_lanes = lots\n", {});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "tandemd: " + dir_ + "/tandemd.conf:2: max_lanes = lots: expected an integer in [1, 64]\n");
  ProcessResult missing = RunProcess({TandemdPath(), "--config=" + dir_ + "/absent.conf"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, StartsWith("tandemd: cannot read config file " + dir_ + "/absent.conf: No such file"));
  ProcessResult flag = RunProcess({TandemdPath(), "--polcy=fair"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_EQ(flag.err, "tandemd: --polcy: unknown flag (did you mean --policy?); see --help\n");
}

TEST_F(DaemonConfigTest, FlagsOverrideTheFile) {
  ProcessResult r =
      RunTandemd(dir_, "device = cpu\npolicy = fair\nmax_lanes = 3\n", {"--policy=pack", "--check_config"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("policy = pack\n"));
  EXPECT_THAT(r.out, HasSubstr("max_lanes = 3\n"));
  EXPECT_THAT(r.out, HasSubstr("device = cpu\n"));
}

TEST_F(DaemonConfigTest, TheSampleConfigIsValid) {
  ProcessResult r = RunProcess({TandemdPath(), "--config=" TANDEM_SAMPLE_CONFIG, "--check_config"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("policy = fair\n"));
  // --help documents every key the sample mentions.
  ProcessResult help = RunProcess({TandemdPath(), "--help"});
  ASSERT_EQ(help.exit_code, 0);
  for (const char* key : {"--policy=", "--metrics_port=", "--socket_group=", "--max_job_memory_mib=", "(live)"}) {
    EXPECT_THAT(help.out, HasSubstr(key));
  }
}

TEST_F(DaemonConfigTest, SocketGroupOwnsTheSocket) {
  // The daemon's own primary group always exists and may be given away to.
  struct group* g = ::getgrgid(::getgid());
  ASSERT_NE(g, nullptr);
  ConfiguredDaemon daemon(absl::StrCat("device = cpu\nsocket_group = ", g->gr_name, "\n"));
  ASSERT_TRUE(daemon.started()) << daemon.Log();
  struct stat st;
  ASSERT_EQ(::stat((daemon.dir() + "/tandemd.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, ::getgid());
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  ProcessResult unknown = RunTandemd(dir_, "device = cpu\nsocket_group = no-such-group-tandem\n", {});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr(":2: socket_group = no-such-group-tandem: expected a group of this host"));
}

// A datagram socket standing in for systemd's notify socket.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    timeval tv{0, 100 * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~NotifySocket() { ::close(fd_); }

  // Collects messages until one contains `want` or `seconds` pass.
  bool WaitFor(const std::string& want, double seconds = 20) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n > 0) {
        messages_.emplace_back(buf, static_cast<size_t>(n));
        if (absl::StrContains(messages_.back(), want)) return true;
      }
    }
    return false;
  }
  std::string All() const {
    std::string all;
    for (const auto& m : messages_) absl::StrAppend(&all, "[", m, "]\n");
    return all;
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<std::string> messages_;
};

TEST_F(DaemonConfigTest, TellsSystemdReadyStatusWatchdogReloadAndStop) {
  NotifySocket notify(dir_ + "/notify.sock");
  ConfiguredDaemon daemon("device = cpu\n", {}, {"NOTIFY_SOCKET=" + dir_ + "/notify.sock", "WATCHDOG_USEC=400000"});
  ASSERT_TRUE(daemon.started()) << daemon.Log();
  EXPECT_TRUE(notify.WaitFor("READY=1")) << notify.All() << daemon.Log();
  EXPECT_THAT(notify.All(), HasSubstr("STATUS=serving 0 sessions, 0 jobs"));
  // Half the watchdog period: several pings a second from the loop.
  EXPECT_TRUE(notify.WaitFor("WATCHDOG=1", 5)) << notify.All();
  daemon.Reload("device = cpu\npolicy = pack\n");
  EXPECT_TRUE(notify.WaitFor("RELOADING=1")) << notify.All();
  EXPECT_TRUE(notify.WaitFor("READY=1")) << notify.All();
  ::kill(daemon.pid(), SIGTERM);
  EXPECT_TRUE(notify.WaitFor("STOPPING=1")) << notify.All();
}

// --- tandemctl without a usable daemon ---------------------------------------

TEST_F(DaemonConfigTest, TandemctlSaysWhenNoDaemonRuns) {
  ProcessResult r = RunProcess({TANDEMCTL_PATH, "--endpoint=ipc://" + dir_ + "/none.sock", "status"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, StartsWith("tandemctl: tandemd is not running: no socket at " + dir_ + "/none.sock"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  // A socket file nobody listens on (a daemon that died).
  std::string stale = dir_ + "/stale.sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, stale.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ::close(fd);
  ProcessResult s = RunProcess({TANDEMCTL_PATH, "--endpoint=ipc://" + stale, "jobs"});
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_EQ(s.err, "tandemctl: tandemd is not running: nobody listens on " + stale +
                       " (a socket left by a daemon that stopped)\n");
}

TEST_F(DaemonConfigTest, TandemctlSaysWhenItMayNotOpenTheSocket) {
  ConfiguredDaemon daemon("device = cpu\n");
  ASSERT_TRUE(daemon.started()) << daemon.Log();
  std::string sock = daemon.dir() + "/tandemd.sock";
  std::vector<std::string> argv{TANDEMCTL_PATH, "--endpoint=" + daemon.endpoint(), "status"};
  ProcessResult r;
  if (::geteuid() == 0) {
    // Root may open anything: run tandemctl as `nobody`, who can reach the
    // folder but is not in the socket's group.
    ASSERT_EQ(::chmod(daemon.dir().c_str(), 0755), 0);
    r = RunProcess(argv, {}, 30, /*uid=*/65534);
  } else {
    ASSERT_EQ(::chmod(sock.c_str(), 0), 0);
    r = RunProcess(argv, {}, 30);
  }
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, StartsWith("tandemctl: cannot open " + sock + ": permission denied (it belongs to group '"));
  EXPECT_THAT(r.err, HasSubstr("usermod -aG tandem"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // A folder it may not enter says so too.
  if (::geteuid() == 0) {
    ASSERT_EQ(::chmod(daemon.dir().c_str(), 0700), 0);
    ProcessResult folder = RunProcess(argv, {}, 30, 65534);
    EXPECT_EQ(folder.exit_code, 1);
    EXPECT_THAT(folder.err, StartsWith("tandemctl: cannot reach " + sock + ": permission denied on its folder"));
  }
}

TEST_F(DaemonConfigTest, TandemctlUsageErrors) {
  ProcessResult unknown = RunProcess({TANDEMCTL_PATH, "frobnicate"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, StartsWith("tandemctl: unknown command 'frobnicate'\nusage: tandemctl"));
  ProcessResult bad_job = RunProcess({TANDEMCTL_PATH, "kill", "seven"});
  EXPECT_EQ(bad_job.exit_code, 2);
  EXPECT_THAT(bad_job.err, StartsWith("tandemctl: 'seven' is not a job id"));
  ProcessResult top_json = RunProcess({TANDEMCTL_PATH, "top", "--json"});
  EXPECT_EQ(top_json.exit_code, 2);
  ProcessResult help = RunProcess({TANDEMCTL_PATH, "--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* command : {"status", "jobs", "lanes", "set-priority", "set-policy", "drain", "kill", "top"}) {
    EXPECT_THAT(help.out, HasSubstr(std::string("  ") + command));
  }
}

}  // namespace
}  // namespace tandem::testing
