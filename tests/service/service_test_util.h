// Helpers for the service tests: a daemon started under a generated config
// file, child processes with captured output (tandemctl, mlp_train), and
// the Prometheus endpoint scraped over TCP.
#ifndef TANDEM_TESTS_SERVICE_SERVICE_TEST_UTIL_H_
#define TANDEM_TESTS_SERVICE_SERVICE_TEST_UTIL_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace tandem::testing {

struct ProcessResult {
  int exit_code = -1;  // -1: killed by a signal or the timeout
  std::string out;
  std::string err;
};

// Runs `argv` to completion with `env` ("KEY=VALUE") added to the
// environment, as user `uid` when given (needs root); captures stdout and
// stderr apart. Killed after `timeout_seconds`.
ProcessResult RunProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                         double timeout_seconds = 120, int uid = -1);

// Starts `argv` in the background with `env` added, output to `log_path`.
pid_t SpawnWithEnv(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                   const std::string& log_path);
// Waits up to `timeout_seconds` for `pid` to exit; its exit code, or -1.
int WaitExit(pid_t pid, double timeout_seconds);

std::string MakeTempDir();
void WriteFile(const std::string& path, const std::string& text);

// A TCP port that was free a moment ago.
int FreeTcpPort();
// GET http://127.0.0.1:port/path; the body, or "" when it fails. `status`
// gets the HTTP status line.
std::string HttpGet(int port, const std::string& path, std::string* status = nullptr);
// Prometheus text -> {"name{labels}": value}; comment lines skipped.
std::map<std::string, double> ParsePrometheus(const std::string& text);

// tandemd started as `tandemd --config=DIR/tandemd.conf --endpoint=ipc://DIR/tandemd.sock`
// plus `extra_flags`, with `env` added (NOTIFY_SOCKET, say).
class ConfiguredDaemon {
 public:
  ConfiguredDaemon(const std::string& config_text, std::vector<std::string> extra_flags = {},
                   std::vector<std::string> env = {});
  ~ConfiguredDaemon();

  const std::string& dir() const { return dir_; }
  const std::string& endpoint() const { return endpoint_; }
  const std::string& config_path() const { return config_path_; }
  pid_t pid() const { return pid_; }
  bool started() const { return started_; }
  std::string Log() const;
  bool Alive() const;
  // Rewrites the config file and sends SIGHUP.
  void Reload(const std::string& config_text);
  int Stop();

 private:
  std::string dir_, endpoint_, config_path_;
  pid_t pid_ = -1;
  bool started_ = false;
};

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_SERVICE_SERVICE_TEST_UTIL_H_
