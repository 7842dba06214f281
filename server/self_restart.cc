#include "server/self_restart.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tandem::server {
namespace {

constexpr char kRestartsVariable[] = "TANDEM_FAULT_RESTARTS";
constexpr char kSuspectsVariable[] = "TANDEM_FAULT_SUSPECTS";      // checkpoint paths, one per line
constexpr char kHeldFilesVariable[] = "TANDEM_HELD_DEVICE_FILES";  // descriptors, comma-separated

// The NVIDIA driver's control file and one file per GPU.
bool IsGpuDeviceFile(absl::string_view name) {
  if (name == "nvidiactl") return true;
  if (!absl::ConsumePrefix(&name, "nvidia") || name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

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

void HoldDeviceFiles() {
  std::vector<int> fds;
  if (DIR* dir = ::opendir("/dev"); dir != nullptr) {
    while (const dirent* entry = ::readdir(dir)) {
      if (!IsGpuDeviceFile(entry->d_name)) continue;
      const int fd = ::open(absl::StrCat("/dev/", entry->d_name).c_str(), O_RDWR | O_NOCTTY);
      if (fd >= 0) fds.push_back(fd);
    }
    ::closedir(dir);
  }
  if (fds.empty()) {
    ::unsetenv(kHeldFilesVariable);
  } else {
    ::setenv(kHeldFilesVariable, absl::StrJoin(fds, ",").c_str(), 1);
  }
}

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

int ReleaseHeldDeviceFiles() {
  const char* value = std::getenv(kHeldFilesVariable);
  int closed = 0;
  if (value != nullptr) {
    for (absl::string_view word : absl::StrSplit(value, ',', absl::SkipEmpty())) {
      int fd = 0;
      if (!absl::SimpleAtoi(word, &fd) || fd <= 2) continue;
      // Only a descriptor that still names a GPU device file: the variable
      // may have come from somewhere else.
      char target[64] = {};
      const ssize_t n = ::readlink(absl::StrCat("/proc/self/fd/", fd).c_str(), target, sizeof(target) - 1);
      absl::string_view path(target, n > 0 ? static_cast<size_t>(n) : 0);
      if (!absl::ConsumePrefix(&path, "/dev/") || !IsGpuDeviceFile(path)) continue;
      closed += ::close(fd) == 0 ? 1 : 0;
    }
  }
  ::unsetenv(kHeldFilesVariable);
  return closed;
}

void SetRestartEnvironment(int restarts, const std::vector<std::string>& suspects) {
  ::setenv(kRestartsVariable, absl::StrCat(restarts).c_str(), 1);
  if (suspects.empty()) {
    ::unsetenv(kSuspectsVariable);
  } else {
    ::setenv(kSuspectsVariable, absl::StrJoin(suspects, "\n").c_str(), 1);
  }
}

absl::Status ExecSelf(char** argv, const std::vector<std::string>& suspects) {
  MarkDescriptorsCloseOnExec();
  HoldDeviceFiles();
  SetRestartEnvironment(SelfRestarts() + 1, suspects);
  ::execv("/proc/self/exe", argv);
  return absl::InternalError(absl::StrCat("exec /proc/self/exe: ", std::strerror(errno)));
}

}  // namespace tandem::server
