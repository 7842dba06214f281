#include "server/socket_path.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tandem::server {

absl::Status ClaimSocketPath(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a socket; refusing to replace it"));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " is too long"));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // A listener of another socket type (the fd socket is a seqpacket one)
  // refuses a stream connection with EPROTOTYPE: it is there all the same.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const bool connected = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  const int error = errno;
  ::close(fd);
  if (connected || error == EPROTOTYPE) {
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
