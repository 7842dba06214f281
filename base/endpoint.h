// Where tandemd listens by default, shared by the daemon and its clients.
//
// The system endpoint is ipc:///run/tandem/tandemd.sock (the systemd units
// create /run/tandem). Where /run/tandem is not writable (a daemon started by
// hand, or by a user), the daemon falls back to a per-user runtime directory:
// $XDG_RUNTIME_DIR/tandem/tandemd.sock, else /tmp/tandem-<uid>/tandemd.sock.
// Clients look for the system socket first, then the per-user one.
#ifndef TANDEM_BASE_ENDPOINT_H_
#define TANDEM_BASE_ENDPOINT_H_

#include <string>

namespace tandem {

inline constexpr char kSystemEndpoint[] = "ipc:///run/tandem/tandemd.sock";

// The per-user fallback endpoint ("ipc://" + path).
std::string UserEndpoint();

// For a daemon: the system endpoint if its directory exists or can be made
// and is writable, else the per-user one (its directory is created, 0700).
std::string DaemonDefaultEndpoint();

// For a client: $TANDEM_ENDPOINT if set; else the system endpoint if its
// socket file exists; else the per-user one.
std::string ClientDefaultEndpoint();

// For ipc:// endpoints, the filesystem path; "" otherwise.
std::string IpcPath(const std::string& endpoint);

}  // namespace tandem

#endif  // TANDEM_BASE_ENDPOINT_H_
