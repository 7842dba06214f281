#include "server/standby.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "server/self_restart.h"

namespace tandem::server {
namespace {

constexpr char kHandOver[] = "hand over";  // the first line a worker reports after a device fault
constexpr int kExitDeviceFault = 75;
constexpr int kMaxSpareRespawns = 5;  // spares that died unasked; then the keeper runs without one

int g_report_fd = -1;      // in a worker: the pipe to its keeper
pid_t g_keeper = -1;       // in a worker: its keeper
sigset_t g_worker_mask;    // the signal mask before the keeper blocked its signals
std::vector<int> g_owned;  // the keeper's descriptors, which a child closes

// The keeper's view of a child.
struct Child {
  pid_t pid = -1;
  int report = -1;  // read end of what the child reports (nonblocking)
  int go = -1;      // a spare's wake-up: write end
  bool report_open = true;
  std::string reported;
};

void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Reads what `fd` has now (nonblocking) into `out`; false once it is at its end.
bool ReadAvailable(int fd, std::string* out) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      out->append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// Blocking read until the writer closes.
std::string ReadToEnd(int fd) {
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      out.append(buffer, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return out;
    }
  }
}

void Forget(int fd) {
  if (fd < 0) return;
  ::close(fd);
  std::erase(g_owned, fd);
}

// A spare's wait: until the keeper writes "<restarts>\n<suspect>\n..." and
// closes the pipe (then it is a worker, set up as after an exec), or closes
// it with nothing written (the keeper is gone or stopping: exit).
void WaitToTakeOver(int go) {
  const std::string message = ReadToEnd(go);
  ::close(go);
  std::vector<std::string> lines = absl::StrSplit(message, '\n', absl::SkipEmpty());
  int restarts = 0;
  if (lines.empty() || !absl::SimpleAtoi(lines[0], &restarts)) ::_exit(0);
  SetRestartEnvironment(restarts, std::vector<std::string>(lines.begin() + 1, lines.end()));
}

// Forks a worker (or a spare). Returns the child to the keeper, and nullopt
// in the child once it is to run as the worker (a spare: once woken).
std::optional<Child> Fork(bool spare, bool* failed) {
  int report[2] = {-1, -1}, go[2] = {-1, -1};
  if (::pipe2(report, O_CLOEXEC) != 0 || (spare && ::pipe2(go, O_CLOEXEC) != 0)) {
    *failed = true;
    return Child{};
  }
  const pid_t keeper = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (int fd : g_owned) ::close(fd);
    g_owned.clear();
    ::close(report[0]);
    if (spare) ::close(go[1]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != keeper) ::_exit(0);  // the keeper died before prctl
    g_report_fd = report[1];
    g_keeper = keeper;
    if (spare) WaitToTakeOver(go[0]);
    // SIGTERM, SIGINT and SIGHUP stay blocked (pending) until the worker has
    // its handlers (AcceptSignals): one forwarded during its start must not
    // kill it by default action.
    sigset_t mask = g_worker_mask;
    for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, s);
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
    return std::nullopt;
  }
  ::close(report[1]);
  if (spare) ::close(go[0]);
  if (pid < 0) {
    ::close(report[0]);
    if (spare) ::close(go[1]);
    *failed = true;
    return Child{};
  }
  ::fcntl(report[0], F_SETFL, ::fcntl(report[0], F_GETFL) | O_NONBLOCK);
  g_owned.push_back(report[0]);
  if (spare) g_owned.push_back(go[1]);
  *failed = false;
  return Child{.pid = pid, .report = report[0], .go = spare ? go[1] : -1};
}

void Release(Child* child) {
  Forget(child->report);
  Forget(child->go);
  *child = Child{};
}

// Ends the keeper as its worker ended.
[[noreturn]] void EndLike(int status) {
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    std::fflush(nullptr);
    std::signal(signal, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, signal);
    ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
    ::raise(signal);
    ::_exit(128 + signal);
  }
  std::fflush(nullptr);
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

}  // namespace

bool UnderKeeper() { return g_report_fd >= 0; }

void AcceptSignals() {
  if (!UnderKeeper()) return;
  sigset_t stop;
  sigemptyset(&stop);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) {
    if (!sigismember(&g_worker_mask, s)) sigaddset(&stop, s);
  }
  ::sigprocmask(SIG_UNBLOCK, &stop, nullptr);
}

pid_t DaemonPid() { return UnderKeeper() ? g_keeper : ::getpid(); }

void HandOverToSpare(const std::vector<std::string>& suspects) {
  if (g_report_fd < 0) return;
  std::string message = absl::StrCat(kHandOver, "\n");
  for (const std::string& s : suspects) absl::StrAppend(&message, s, "\n");
  WriteAll(g_report_fd, message);
}

void RunUnderKeeper() {
  sigset_t handled;
  sigemptyset(&handled);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&handled, s);
  ::sigprocmask(SIG_BLOCK, &handled, &g_worker_mask);
  const int signals = ::signalfd(-1, &handled, SFD_CLOEXEC);
  if (signals < 0) {
    ::sigprocmask(SIG_SETMASK, &g_worker_mask, nullptr);
    TLOG_WARNING("no standby: signalfd failed; tandemd runs as one process").With("error", std::strerror(errno));
    return;
  }
  // The GPUs' device files stay open in the keeper for as long as it runs,
  // so that a driver without persistence mode keeps each GPU set up between
  // one worker and the next; each worker closes its copies once its devices
  // are open (ReleaseHeldDeviceFiles).
  HoldDeviceFiles();
  g_owned.push_back(signals);

  bool failed = false;
  std::optional<Child> worker = Fork(/*spare=*/false, &failed);
  if (!worker) return;
  if (failed) {
    TLOG_ERROR("tandemd could not fork its worker").With("error", std::strerror(errno));
    std::exit(1);
  }
  std::optional<Child> spare = Fork(/*spare=*/true, &failed);
  if (!spare) return;
  if (failed) spare.reset();
  TLOG_INFO("tandemd keeper started")
      .With("pid", ::getpid())
      .With("worker", worker->pid)
      .With("standby", spare ? spare->pid : 0);
  int restarts = 0, respawns = 0;
  for (;;) {
    pollfd fds[2] = {{.fd = signals, .events = POLLIN, .revents = 0},
                     {.fd = worker->report_open ? worker->report : -1, .events = POLLIN, .revents = 0}};
    if (::poll(fds, 2, -1) < 0) continue;  // EINTR
    if (fds[1].revents != 0) worker->report_open = ReadAvailable(worker->report, &worker->reported);
    if ((fds[0].revents & POLLIN) == 0) continue;
    signalfd_siginfo info{};
    if (::read(signals, &info, sizeof(info)) != sizeof(info)) continue;
    if (info.ssi_signo != SIGCHLD) {
      ::kill(worker->pid, static_cast<int>(info.ssi_signo));
      continue;
    }
    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      if (spare && pid == spare->pid) {
        TLOG_WARNING("tandemd's standby exited").With("pid", pid).With("status", status);
        Release(&*spare);
        spare.reset();
        if (++respawns <= kMaxSpareRespawns) {
          spare = Fork(/*spare=*/true, &failed);
          if (!spare) return;
          if (failed) spare.reset();
        }
        continue;
      }
      if (pid != worker->pid) continue;
      // It has exited: everything it reported is in the pipe.
      (void)ReadAvailable(worker->report, &worker->reported);
      const bool hand_over =
          WIFEXITED(status) && WEXITSTATUS(status) == kExitDeviceFault && worker->reported.rfind(kHandOver, 0) == 0;
      if (!hand_over || !spare) {
        if (hand_over) TLOG_ERROR("no standby to take over after a device fault");
        if (spare) {
          ::kill(spare->pid, SIGKILL);
          ::waitpid(spare->pid, nullptr, 0);
        }
        EndLike(status);
      }
      // The worker is gone, and its device contexts with it: the spare takes over.
      std::vector<std::string> lines = absl::StrSplit(worker->reported, '\n', absl::SkipEmpty());
      lines[0] = absl::StrCat(++restarts);
      WriteAll(spare->go, absl::StrCat(absl::StrJoin(lines, "\n"), "\n"));
      Forget(spare->go);
      spare->go = -1;
      TLOG_WARNING("tandemd's standby takes over after a device fault")
          .With("worker", spare->pid)
          .With("restarts", restarts);
      Release(&*worker);
      worker = *spare;
      spare = Fork(/*spare=*/true, &failed);
      if (!spare) return;
      if (failed) spare.reset();
    }
  }
}

}  // namespace tandem::server
