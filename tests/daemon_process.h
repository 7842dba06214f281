// Starts a real tandemd process for a test and stops it afterwards.
//
// Each instance listens on its own ipc socket in a fresh temporary folder,
// so tests can run in parallel. The daemon's log goes to a file in that
// folder (printed when a test fails, via Log()).
#ifndef TANDEM_TESTS_DAEMON_PROCESS_H_
#define TANDEM_TESTS_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace tandem::testing {

class DaemonProcess {
 public:
  // Starts tandemd on the CPU device with `extra_flags` (e.g.
  // "--session_timeout=2"; a later "--device=cuda" overrides the device)
  // and waits until its socket exists. Aborts the test binary if it cannot.
  explicit DaemonProcess(std::vector<std::string> extra_flags = {});
  // Listens on `endpoint` (e.g. tcp://127.0.0.1:PORT) instead of a socket
  // file; ready once a client can say hello.
  DaemonProcess(std::string endpoint, std::vector<std::string> extra_flags);
  ~DaemonProcess();

  const std::string& endpoint() const { return endpoint_; }
  const std::string& dir() const { return dir_; }
  pid_t pid() const { return pid_; }
  std::string Log() const;
  bool Alive() const;
  // SIGTERM and wait; returns the exit status (as from waitpid).
  int Stop();

 private:
  std::string dir_;
  std::string endpoint_;
  pid_t pid_ = -1;
};

// Paths of the binaries under test: $TANDEMD / $MLP_TRAIN when set (a
// bundle on the GPU machine), else the build tree's.
std::string TandemdPath();
std::string MlpTrainPath();

// Waits up to 5 s until process `pid` is gone: no such process, or a zombie
// nobody has reaped (a container's first process may never reap orphans,
// such as a daemon's worker after its keeper was killed).
bool WaitUntilGone(pid_t pid);

// A new folder /tmp/<prefix>XXXXXX; empty when it cannot be made.
std::string MakeTempDir(const std::string& prefix);

// Runs `argv` as a child process with its output to `log_path`; returns its pid.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log_path);
std::string ReadFile(const std::string& path);

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_DAEMON_PROCESS_H_
