#include "base/endpoint.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

bool EnsureWritableDir(const std::string& dir, mode_t mode) {
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) return false;
  return ::access(dir.c_str(), W_OK | X_OK) == 0;
}

// The uid of the packaged daemon's system user, if it exists.
bool SystemUserUid(uid_t* uid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  char buffer[1024];
  if (::getpwnam_r(kSystemUser, &pw, buffer, sizeof(buffer), &found) != 0 || found == nullptr) return false;
  *uid = found->pw_uid;
  return true;
}

// The system socket's folder: owned by root or the system user (or by this
// user, who then runs the daemon), writable by nobody but its owner.
absl::Status CheckSystemDir(const std::string& dir) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": ", std::strerror(errno)));
  }
  uid_t system_uid;
  const bool trusted_owner =
      st.st_uid == 0 || st.st_uid == ::geteuid() || (SystemUserUid(&system_uid) && st.st_uid == system_uid);
  if (!S_ISDIR(st.st_mode) || !trusted_owner || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing the default socket in ", dir, ": it must be a directory owned by root or '", kSystemUser,
        "' that only its owner may write (it is owned by uid ", st.st_uid, ", mode ",
        absl::StrCat(absl::Hex(st.st_mode & 07777)), "); set TANDEM_ENDPOINT to choose a socket explicitly"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string Dirname(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status CheckPrivateDir(const std::string& dir, uid_t owner) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory (a symbolic link or a file)"));
  }
  if (st.st_uid != owner) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " belongs to uid ", st.st_uid, ", not to uid ", owner,
                                                      ": another user may have made it; remove it"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is writable by others (mode ", absl::Hex(st.st_mode & 07777), "); chmod 700 it"));
  }
  return absl::OkStatus();
}

std::string IpcPath(const std::string& endpoint) {
  if (!absl::StartsWith(endpoint, "ipc://")) return "";
  return endpoint.substr(6);
}

std::string UserEndpoint() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string dir = (runtime != nullptr && runtime[0] != '\0') ? absl::StrCat(runtime, "/tandem")
                                                               : absl::StrCat("/tmp/tandem-", ::getuid());
  return absl::StrCat("ipc://", dir, "/tandemd.sock");
}

absl::StatusOr<std::string> DaemonDefaultEndpoint() {
  const std::string system_dir = Dirname(IpcPath(kSystemEndpoint));
  if (EnsureWritableDir(system_dir, 0755) && CheckSystemDir(system_dir).ok()) return std::string(kSystemEndpoint);
  std::string user = UserEndpoint();
  const std::string dir = Dirname(IpcPath(user));
  EnsureWritableDir(dir, 0700);
  if (absl::Status s = CheckPrivateDir(dir, ::geteuid()); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("refusing the per-user socket folder: ", s.message(), " (or choose one with --endpoint)"));
  }
  return user;
}

absl::StatusOr<std::string> ClientDefaultEndpoint() {
  const char* env = std::getenv("TANDEM_ENDPOINT");
  if (env != nullptr && env[0] != '\0') return std::string(env);
  struct stat st;
  if (::stat(IpcPath(kSystemEndpoint).c_str(), &st) == 0) {
    if (absl::Status s = CheckSystemDir(Dirname(IpcPath(kSystemEndpoint))); !s.ok()) return s;
    return std::string(kSystemEndpoint);
  }
  std::string user = UserEndpoint();
  const std::string dir = Dirname(IpcPath(user));
  // A folder that does not exist holds no daemon: connecting says so.
  if (::lstat(dir.c_str(), &st) != 0) return user;
  if (absl::Status s = CheckPrivateDir(dir, ::geteuid()); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("refusing the per-user tandemd socket: ", s.message(), " (or set TANDEM_ENDPOINT explicitly)"));
  }
  return user;
}

}  // namespace tandem
