#include "tests/daemon_process.h"

#include "base/socket_probe.h"
#include "client/client.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace tandem::testing {

std::string TandemdPath() {
  const char* env = std::getenv("TANDEMD");
  return env != nullptr && env[0] != '\0' ? env : TANDEMD_PATH;
}

std::string MlpTrainPath() {
  const char* env = std::getenv("MLP_TRAIN");
  return env != nullptr && env[0] != '\0' ? env : MLP_TRAIN_PATH;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log_path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::perror("execv");
    ::_exit(127);
  }
  return pid;
}

std::string MakeTempDir(const std::string& prefix) {
  std::string pattern = "/tmp/" + prefix + "XXXXXX";
  return ::mkdtemp(pattern.data()) != nullptr ? pattern : std::string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

DaemonProcess::DaemonProcess(std::vector<std::string> extra_flags) {
  dir_ = MakeTempDir("tandem-test-");
  endpoint_ = "ipc://" + dir_ + "/tandemd.sock";
  std::vector<std::string> argv{TandemdPath(), "--endpoint=" + endpoint_, "--device=cpu"};
  for (auto& f : extra_flags) argv.push_back(std::move(f));
  pid_ = Spawn(argv, dir_ + "/tandemd.log");
  std::string sock = dir_ + "/tandemd.sock";
  for (int i = 0; i < 3000; ++i) {  // a CUDA daemon takes a while to start
    // Listening, not only there: between bind and listen a client's connect
    // is refused, and it takes that for a daemon that stopped (preemption_test
    // failed so once in CI).
    if (ProbeUnixSocket(sock) == 0) return;
    if (!Alive()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fprintf(stderr, "tandemd did not start; its log:\n%s\n", Log().c_str());
  std::abort();
}

DaemonProcess::DaemonProcess(std::string endpoint, std::vector<std::string> extra_flags) {
  dir_ = MakeTempDir("tandem-test-");
  endpoint_ = std::move(endpoint);
  std::vector<std::string> argv{TandemdPath(), "--endpoint=" + endpoint_, "--device=cpu"};
  for (auto& f : extra_flags) argv.push_back(std::move(f));
  pid_ = Spawn(argv, dir_ + "/tandemd.log");
  for (int i = 0; i < 300 && Alive(); ++i) {
    auto c = client::Client::Connect({.endpoint = endpoint_,
                                      .connect_timeout = absl::Milliseconds(100),
                                      .heartbeat = false,
                                      .shared_memory_bytes = 0});
    if (c.ok()) return;
  }
  std::fprintf(stderr, "tandemd did not start on %s; its log:\n%s\n", endpoint_.c_str(), Log().c_str());
  std::abort();
}

DaemonProcess::~DaemonProcess() {
  Stop();
  std::string cmd = "rm -rf '" + dir_ + "'";
  if (std::getenv("TANDEM_KEEP_TEST_DIRS") == nullptr) (void)!std::system(cmd.c_str());
}

std::string DaemonProcess::Log() const { return ReadFile(dir_ + "/tandemd.log"); }

bool DaemonProcess::Alive() const {
  if (pid_ <= 0) return false;
  int status;
  return ::waitpid(pid_, &status, WNOHANG) == 0;
}

int DaemonProcess::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 1000; ++i) {
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

bool WaitUntilGone(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    if (::kill(pid, 0) != 0) return true;
    const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || stat.compare(paren + 2, 1, "Z") == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace tandem::testing
