// Whether a daemon listens on an ipc socket path, asked before waiting for
// one: a socket file outlives a daemon killed with SIGKILL, and ZeroMQ's
// connect to it neither fails nor gets an answer, so a client would only
// learn at its handshake deadline (30 s) that nobody is there.
#ifndef TANDEM_BASE_SOCKET_PROBE_H_
#define TANDEM_BASE_SOCKET_PROBE_H_

#include <string>

#include "absl/status/status.h"

namespace tandem {

// Connects a unix stream socket to `path` and hangs up at once. 0 when
// something listens there (a listener of another socket type, which refuses
// a stream connection with EPROTOTYPE, counts); else the errno of the
// attempt: ECONNREFUSED for a socket file whose listener is gone, ENOENT,
// EACCES, ENAMETOOLONG for a path longer than a socket address holds.
int ProbeUnixSocket(const std::string& path);

// For a client about to connect to `endpoint`: OK for an endpoint that is
// not ipc:// and for a socket something listens on; UNAVAILABLE ("tandemd is
// not running: ...") for a missing socket file or one nobody listens on;
// PERMISSION_DENIED saying which group to join when the socket or its
// folder may not be opened; FAILED_PRECONDITION for a file that is not a
// socket.
absl::Status CheckClientEndpoint(const std::string& endpoint);

}  // namespace tandem

#endif  // TANDEM_BASE_SOCKET_PROBE_H_
