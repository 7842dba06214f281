#include "base/endpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

std::string Dirname(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool EnsureWritableDir(const std::string& dir, mode_t mode) {
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) return false;
  return ::access(dir.c_str(), W_OK | X_OK) == 0;
}

}  // namespace

std::string IpcPath(const std::string& endpoint) {
  if (!absl::StartsWith(endpoint, "ipc://")) return "";
  return endpoint.substr(6);
}

std::string UserEndpoint() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string dir = (runtime != nullptr && runtime[0] != '\0')
                        ? absl::StrCat(runtime, "/tandem")
                        : absl::StrCat("/tmp/tandem-", ::getuid());
  return absl::StrCat("ipc://", dir, "/tandemd.sock");
}

std::string DaemonDefaultEndpoint() {
  if (EnsureWritableDir(Dirname(IpcPath(kSystemEndpoint)), 0755)) return kSystemEndpoint;
  std::string user = UserEndpoint();
  EnsureWritableDir(Dirname(IpcPath(user)), 0700);
  return user;
}

std::string ClientDefaultEndpoint() {
  const char* env = std::getenv("TANDEM_ENDPOINT");
  if (env != nullptr && env[0] != '\0') return env;
  struct stat st;
  if (::stat(IpcPath(kSystemEndpoint).c_str(), &st) == 0) return kSystemEndpoint;
  return UserEndpoint();
}

}  // namespace tandem
