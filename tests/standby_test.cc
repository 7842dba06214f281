// tandemd's keeper and standby (server/standby.h), on the CPU backend with its
// stand-in for a sticky device fault: the standby forked at start takes over
// after a fault under the pid that was started; signals reach the worker;
// the children die with the keeper; and with --standby=false the daemon
// restarts itself in place by exec, as before.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/fault_device.h"

namespace tandem::testing {
namespace {

// The values of `key=` on the log's lines that contain `line`, in order.
std::vector<int> LoggedValues(const std::string& log, const std::string& line, const std::string& key) {
  std::vector<int> values;
  const std::regex value(" " + key + "=([0-9]+)");
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    const std::string text = log.substr(start, end - start);
    std::smatch m;
    if (text.find(line) != std::string::npos && std::regex_search(text, m, value)) {
      values.push_back(std::stoi(m[1]));
    }
    start = end + 1;
  }
  return values;
}

// Waits until `count` lines of the log contain `line`.
bool WaitForLines(const DaemonProcess& daemon, const std::string& line, size_t count) {
  for (int i = 0; i < 1000; ++i) {
    const std::string log = daemon.Log();
    size_t n = 0;
    for (size_t at = log.find(line); at != std::string::npos; at = log.find(line, at + 1)) ++n;
    if (n >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A client says hello and registers nothing: the daemon serves.
bool Serves(const std::string& endpoint) {
  auto c = client::Client::Connect({.endpoint = endpoint, .name = "probe"});
  return c.ok();
}

TEST(StandbyTest, TheStandbyTakesOverAfterADeviceFaultUnderTheSamePid) {
  DaemonProcess daemon({"--test_faults=true"});
  ASSERT_TRUE(WaitForLines(daemon, "tandemd listening", 1)) << daemon.Log();
  const std::string before = daemon.Log();
  const std::vector<int> keeper = LoggedValues(before, "tandemd keeper started", "pid");
  const std::vector<int> worker = LoggedValues(before, "tandemd keeper started", "worker");
  const std::vector<int> standby = LoggedValues(before, "tandemd keeper started", "standby");
  ASSERT_EQ(keeper, std::vector<int>{daemon.pid()}) << before;
  ASSERT_EQ(LoggedValues(before, "tandemd listening", "pid"), worker) << before;
  ASSERT_EQ(standby.size(), 1u);
  ASSERT_NE(standby[0], worker[0]);

  ASSERT_TRUE(FaultTheDevice(daemon.endpoint()).ok());
  ASSERT_TRUE(WaitForLines(daemon, "tandemd listening", 2)) << daemon.Log();
  const std::string after = daemon.Log();
  // The worker handed over and exited; the standby forked at start (not a
  // fresh process) listens now, as restart 1; a new standby waits.
  EXPECT_NE(after.find("tandemd starts again after a device fault by=standby"), std::string::npos) << after;
  EXPECT_EQ(LoggedValues(after, "tandemd listening", "pid"), (std::vector<int>{worker[0], standby[0]})) << after;
  EXPECT_EQ(LoggedValues(after, "standby takes over", "worker"), standby) << after;
  EXPECT_EQ(LoggedValues(after, "tandemd starting", "restarts"), (std::vector<int>{0, 1})) << after;
  EXPECT_TRUE(WaitUntilGone(worker[0]));
  EXPECT_TRUE(daemon.Alive());
  EXPECT_TRUE(Serves(daemon.endpoint())) << daemon.Log();

  // A second fault: the next standby takes over as restart 2.
  ASSERT_TRUE(FaultTheDevice(daemon.endpoint()).ok());
  ASSERT_TRUE(WaitForLines(daemon, "tandemd listening", 3)) << daemon.Log();
  EXPECT_EQ(LoggedValues(daemon.Log(), "tandemd starting", "restarts"), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(Serves(daemon.endpoint())) << daemon.Log();

  // SIGTERM reaches the worker; the keeper exits as it did, and no child stays.
  const std::vector<int> workers = LoggedValues(daemon.Log(), "tandemd listening", "pid");
  const int status = daemon.Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(WaitUntilGone(workers.back()));
  EXPECT_NE(daemon.Log().find("shutting down signal=SIGTERM"), std::string::npos);
}

TEST(StandbyTest, SighupReachesTheWorker) {
  DaemonProcess daemon;
  ASSERT_TRUE(WaitForLines(daemon, "tandemd listening", 1));
  ::kill(daemon.pid(), SIGHUP);
  EXPECT_TRUE(WaitForLines(daemon, "SIGHUP: reloading the config", 1)) << daemon.Log();
  EXPECT_TRUE(daemon.Alive());
  EXPECT_TRUE(Serves(daemon.endpoint()));
}

// SIGHUP reloads; by default action it would end a process. The keeper
// forwards every SIGHUP to its worker, which holds them until its handler
// is installed: a burst from the moment the keeper runs kills nothing.
TEST(StandbyTest, SignalsDuringTheWorkersStartWaitForItsHandler) {
  const std::string dir = MakeTempDir("tandem-standby-");
  ASSERT_FALSE(dir.empty());
  const std::string endpoint = "ipc://" + dir + "/tandemd.sock";
  const pid_t keeper = Spawn({TandemdPath(), "--endpoint=" + endpoint, "--device=cpu"}, dir + "/tandemd.log");
  bool keeper_started = false;
  for (int i = 0; i < 20000 && !keeper_started; ++i) {
    keeper_started = ReadFile(dir + "/tandemd.log").find("tandemd keeper started") != std::string::npos;
    if (!keeper_started) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ASSERT_TRUE(keeper_started) << ReadFile(dir + "/tandemd.log");
  for (int i = 0; i < 200; ++i) {
    ::kill(keeper, SIGHUP);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  bool serves = false;
  for (int i = 0; i < 200 && !serves; ++i) {
    serves = Serves(endpoint);
    if (!serves) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int status = 0;
  EXPECT_EQ(::waitpid(keeper, &status, WNOHANG), 0) << "tandemd ended: " << status << "\n"
                                                    << ReadFile(dir + "/tandemd.log");
  EXPECT_TRUE(serves);
  ::kill(keeper, SIGTERM);
  ::waitpid(keeper, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(StandbyTest, TheChildrenDieWithTheKeeper) {
  DaemonProcess daemon;
  ASSERT_TRUE(WaitForLines(daemon, "tandemd listening", 1));
  const std::string log = daemon.Log();
  const int worker = LoggedValues(log, "tandemd keeper started", "worker").at(0);
  const int standby = LoggedValues(log, "tandemd keeper started", "standby").at(0);
  ::kill(daemon.pid(), SIGKILL);
  EXPECT_TRUE(WaitUntilGone(worker));
  EXPECT_TRUE(WaitUntilGone(standby));
}

TEST(StandbyTest, AWorkerThatFailsEndsTheKeeperWithItsStatus) {
  // A second daemon on a socket another one serves: its worker exits 1.
  DaemonProcess first;
  const std::string log_path = first.dir() + "/second.log";
  const pid_t second = Spawn({TandemdPath(), "--endpoint=" + first.endpoint(), "--device=cpu"}, log_path);
  int status = 0;
  ASSERT_EQ(::waitpid(second, &status, 0), second);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status << ReadFile(log_path);
  const std::vector<int> standby = LoggedValues(ReadFile(log_path), "tandemd keeper started", "standby");
  ASSERT_EQ(standby.size(), 1u);
  EXPECT_TRUE(WaitUntilGone(standby[0]));
  EXPECT_TRUE(Serves(first.endpoint()));
}

TEST(StandbyTest, WithoutAStandbyTheDaemonRestartsItselfInPlace) {
  DaemonProcess daemon({"--test_faults=true", "--standby=false"});
  ASSERT_TRUE(WaitForLines(daemon, "tandemd listening", 1));
  EXPECT_EQ(daemon.Log().find("tandemd keeper started"), std::string::npos);
  ASSERT_TRUE(FaultTheDevice(daemon.endpoint()).ok());
  ASSERT_TRUE(WaitForLines(daemon, "tandemd listening", 2)) << daemon.Log();
  const std::string log = daemon.Log();
  EXPECT_NE(log.find("tandemd starts again after a device fault by=exec"), std::string::npos) << log;
  EXPECT_EQ(LoggedValues(log, "tandemd listening", "pid"), (std::vector<int>{daemon.pid(), daemon.pid()}));
  EXPECT_TRUE(Serves(daemon.endpoint())) << log;
}

}  // namespace
}  // namespace tandem::testing
