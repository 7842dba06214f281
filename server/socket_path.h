// Unix socket files the daemon binds: a path another process listens on is
// refused (a second tandemd must not take over the first one's socket), a
// stale one (nobody listening) is replaced, and on exit the file is removed
// only while it is still the one this daemon bound.
#ifndef TANDEM_SERVER_SOCKET_PATH_H_
#define TANDEM_SERVER_SOCKET_PATH_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"

namespace tandem::server {

// Before binding `path`: UNAVAILABLE when a process accepts connections
// there, FAILED_PRECONDITION when it is not a socket; a stale socket file
// is removed.
absl::Status ClaimSocketPath(const std::string& path);

// The file a daemon bound, to remove it later only if it is still that file.
class BoundSocketFile {
 public:
  BoundSocketFile() = default;
  // Records the file now at `path` (just bound).
  explicit BoundSocketFile(std::string path);
  // Removes the file if it is still the one recorded.
  void RemoveIfOurs() const;

 private:
  std::string path_;
  ino_t inode_ = 0;
  dev_t device_ = 0;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_SOCKET_PATH_H_
