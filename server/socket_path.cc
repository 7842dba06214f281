#include "server/socket_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/socket_probe.h"

namespace tandem::server {

absl::Status ClaimSocketPath(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a socket; refusing to replace it"));
  }
  const int error = ProbeUnixSocket(path);
  if (error == ENAMETOOLONG) return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " is too long"));
  if (error == 0) {
    return absl::UnavailableError(
        absl::StrCat("another process (a tandemd?) is listening on ", path, "; stop it or choose another --endpoint"));
  }
  ::unlink(path.c_str());  // stale: its daemon is gone
  return absl::OkStatus();
}

BoundSocketFile::BoundSocketFile(std::string path) : path_(std::move(path)) {
  struct stat st;
  if (::lstat(path_.c_str(), &st) == 0) {
    inode_ = st.st_ino;
    device_ = st.st_dev;
  }
}

void BoundSocketFile::RemoveIfOurs() const {
  struct stat st;
  if (!path_.empty() && ::lstat(path_.c_str(), &st) == 0 && st.st_ino == inode_ && st.st_dev == device_) {
    ::unlink(path_.c_str());
  }
}

}  // namespace tandem::server
