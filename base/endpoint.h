// Where tandemd listens by default, shared by the daemon and its clients,
// and whether a socket's folder can be trusted.
//
// The system endpoint is ipc:///run/tandem/tandemd.sock (the systemd units
// create /run/tandem). Where /run/tandem is not writable (a daemon started by
// hand, or by a user), the daemon falls back to a per-user runtime directory:
// $XDG_RUNTIME_DIR/tandem/tandemd.sock, else /tmp/tandem-<uid>/tandemd.sock.
// Clients look for the system socket first, then the per-user one.
//
// A default endpoint is used only in a folder nobody else could have put a
// socket in: the per-user one must be this user's own and writable by nobody
// else (another user could otherwise pre-create /tmp/tandem-<uid> and run a
// fake daemon there that receives the client's model), the system one must
// be owned by root or the daemon's system user and writable by nobody else.
// An endpoint named explicitly (--endpoint, $TANDEM_ENDPOINT) is the user's
// choice and is not checked.
#ifndef TANDEM_BASE_ENDPOINT_H_
#define TANDEM_BASE_ENDPOINT_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace tandem {

inline constexpr char kSystemEndpoint[] = "ipc:///run/tandem/tandemd.sock";
// The system user of the packaged daemon (deploy/systemd/tandem.sysusers).
inline constexpr char kSystemUser[] = "tandem";

// The per-user fallback endpoint ("ipc://" + path).
std::string UserEndpoint();

// For a daemon: the system endpoint if its directory exists or can be made
// and is writable, else the per-user one (its directory is created, 0700).
// FAILED_PRECONDITION when the per-user directory exists but is not this
// user's private directory.
absl::StatusOr<std::string> DaemonDefaultEndpoint();

// For a client: $TANDEM_ENDPOINT if set; else the system endpoint if its
// socket file exists; else the per-user one. FAILED_PRECONDITION when the
// default's folder fails the checks above.
absl::StatusOr<std::string> ClientDefaultEndpoint();

// OK when `dir` is a directory (not a symbolic link) owned by `owner` and
// writable by nobody else; FAILED_PRECONDITION saying which is not so.
absl::Status CheckPrivateDir(const std::string& dir, uid_t owner);

// For ipc:// endpoints, the filesystem path; "" otherwise.
std::string IpcPath(const std::string& endpoint);

// The parent folder of a path ("." for a bare name).
std::string Dirname(const std::string& path);

}  // namespace tandem

#endif  // TANDEM_BASE_ENDPOINT_H_
