#include "base/socket_probe.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/endpoint.h"

namespace tandem {

int ProbeUnixSocket(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return ENAMETOOLONG;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const bool connected = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  const int error = errno;
  ::close(fd);
  return connected || error == EPROTOTYPE ? 0 : error;
}

absl::Status CheckClientEndpoint(const std::string& endpoint) {
  const std::string path = IpcPath(endpoint);
  if (path.empty()) return absl::OkStatus();
  const std::string group_hint =
      "ask an administrator to add you to the socket's group (e.g. sudo usermod -aG tandem $USER), then log in again";
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == EACCES) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot reach ", path, ": permission denied on its folder; ", group_hint));
    }
    return absl::UnavailableError(absl::StrCat("tandemd is not running: no socket at ", path,
                                               " (start it, e.g. systemctl start tandemd, or point --endpoint or "
                                               "TANDEM_ENDPOINT at its socket)"));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a socket; is the endpoint right?"));
  }
  const int error = ProbeUnixSocket(path);
  if (error == 0) return absl::OkStatus();
  if (error == EACCES || error == EPERM) {
    struct group* g = ::getgrgid(st.st_gid);
    return absl::PermissionDeniedError(absl::StrCat("cannot open ", path, ": permission denied (it belongs to group '",
                                                    g != nullptr ? g->gr_name : absl::StrCat(st.st_gid), "', mode ",
                                                    absl::StrFormat("%04o", st.st_mode & 07777), "); ", group_hint));
  }
  if (error == ECONNREFUSED) {
    return absl::UnavailableError(
        absl::StrCat("tandemd is not running: nobody listens on ", path, " (a socket left by a daemon that stopped)"));
  }
  return absl::UnavailableError(absl::StrCat("cannot connect to ", path, ": ", std::strerror(error)));
}

}  // namespace tandem
