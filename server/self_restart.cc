#include "server/self_restart.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tandem::server {
namespace {

constexpr char kRestartsVariable[] = "TANDEM_FAULT_RESTARTS";
constexpr char kSuspectsVariable[] = "TANDEM_FAULT_SUSPECTS";  // checkpoint paths, one per line

// close_range(CLOSE_RANGE_CLOEXEC) needs Linux 5.11; older kernels get the
// descriptors of /proc/self/fd marked one by one.
void MarkDescriptorsCloseOnExec() {
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return;
  const int own = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    int fd = 0;
    if (!absl::SimpleAtoi(entry->d_name, &fd) || fd <= 2 || fd == own) continue;
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  ::closedir(dir);
}

}  // namespace

int SelfRestarts() {
  int n = 0;
  const char* value = std::getenv(kRestartsVariable);
  return value != nullptr && absl::SimpleAtoi(value, &n) && n > 0 ? n : 0;
}

std::vector<std::string> TakeFaultSuspects() {
  const char* value = std::getenv(kSuspectsVariable);
  std::vector<std::string> paths;
  if (value != nullptr) paths = absl::StrSplit(value, '\n', absl::SkipEmpty());
  ::unsetenv(kSuspectsVariable);
  return paths;
}

absl::Status ExecSelf(char** argv, const std::vector<std::string>& suspects) {
  MarkDescriptorsCloseOnExec();
  ::setenv(kRestartsVariable, absl::StrCat(SelfRestarts() + 1).c_str(), 1);
  if (suspects.empty()) {
    ::unsetenv(kSuspectsVariable);
  } else {
    ::setenv(kSuspectsVariable, absl::StrJoin(suspects, "\n").c_str(), 1);
  }
  ::execv("/proc/self/exe", argv);
  return absl::InternalError(absl::StrCat("exec /proc/self/exe: ", std::strerror(errno)));
}

}  // namespace tandem::server
