#include "tests/service/service_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/daemon_process.h"

namespace tandem::testing {
namespace {

using SteadyClock = std::chrono::steady_clock;

[[noreturn]] void ExecChild(const std::vector<std::string>& argv, const std::vector<std::string>& env, int uid) {
  for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
  if (uid >= 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(uid)) != 0 ||
        ::setuid(static_cast<uid_t>(uid)) != 0) {
      std::perror("setuid");
      ::_exit(126);
    }
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  std::perror("execv");
  ::_exit(127);
}

int ExitCode(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

}  // namespace

ProcessResult RunProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         double timeout_seconds, int uid) {
  int out_pipe[2], err_pipe[2];
  if (::pipe(out_pipe) != 0 || ::pipe(err_pipe) != 0) return {};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    ExecChild(argv, env, uid);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ProcessResult result;
  auto deadline = SteadyClock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open = 2;
  bool killed = false;
  while (open > 0) {
    if (SteadyClock::now() > deadline && !killed) {
      ::kill(pid, SIGKILL);
      killed = true;
    }
    if (::poll(fds, 2, 100) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      } else {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = killed ? -1 : ExitCode(status);
  return result;
}

pid_t SpawnWithEnv(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                   const std::string& log_path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    ExecChild(argv, env, -1);
  }
  return pid;
}

int WaitExit(pid_t pid, double timeout_seconds) {
  auto deadline = SteadyClock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  while (SteadyClock::now() < deadline) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return ExitCode(status);
    if (r < 0) return -1;  // already reaped
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

std::string MakeTempDir() {
  char tmpl[] = "/tmp/tandem-svc-test-XXXXXX";
  return ::mkdtemp(tmpl);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

int FreeTcpPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string HttpGet(int port, const std::string& path, std::string* status) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "";
  }
  std::string request = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  (void)!::write(fd, request.data(), request.size());
  std::string response;
  char buf[8192];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) response.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (status != nullptr) *status = response.substr(0, response.find("\r\n"));
  size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

std::map<std::string, double> ParsePrometheus(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    std::string value = line.substr(space + 1);
    samples[line.substr(0, space)] = value == "+Inf" ? INFINITY : std::strtod(value.c_str(), nullptr);
  }
  return samples;
}

ConfiguredDaemon::ConfiguredDaemon(const std::string& config_text, std::vector<std::string> extra_flags,
                                   std::vector<std::string> env) {
  dir_ = MakeTempDir();
  config_path_ = dir_ + "/tandemd.conf";
  endpoint_ = "ipc://" + dir_ + "/tandemd.sock";
  WriteFile(config_path_, config_text);
  std::vector<std::string> argv{TandemdPath(), "--config=" + config_path_, "--endpoint=" + endpoint_};
  for (auto& f : extra_flags) argv.push_back(std::move(f));
  pid_ = SpawnWithEnv(argv, env, dir_ + "/tandemd.log");
  std::string sock = dir_ + "/tandemd.sock";
  for (int i = 0; i < 1000; ++i) {
    struct stat st;
    if (::stat(sock.c_str(), &st) == 0) {
      started_ = true;
      return;
    }
    if (!Alive()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

ConfiguredDaemon::~ConfiguredDaemon() {
  Stop();
  if (std::getenv("TANDEM_KEEP_TEST_DIRS") == nullptr) (void)!std::system(("rm -rf '" + dir_ + "'").c_str());
}

std::string ConfiguredDaemon::Log() const { return ReadFile(dir_ + "/tandemd.log"); }

bool ConfiguredDaemon::Alive() const {
  if (pid_ <= 0) return false;
  int status;
  return ::waitpid(pid_, &status, WNOHANG) == 0;
}

void ConfiguredDaemon::Reload(const std::string& config_text) {
  WriteFile(config_path_, config_text);
  ::kill(pid_, SIGHUP);
}

int ConfiguredDaemon::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int code = WaitExit(pid_, 10);
  if (code == -1) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
  return code;
}

}  // namespace tandem::testing
