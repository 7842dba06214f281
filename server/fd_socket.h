// The daemon's side socket for file descriptors (proto/fd_message.h): a
// Unix SOCK_SEQPACKET listener beside the ipc endpoint, served by a thread
// of its own. Each connection may send one message carrying one
// descriptor; the thread checks the message's form, reads the sender's
// credentials (SO_PEERCRED), hands the descriptor on (on_received, on its
// thread: it posts to the control loop, which matches the token to a
// session and the uid to that session's), acknowledges and closes the
// connection. A connection that sends nothing within a second is closed;
// at most kMaxPending connections wait at once (the oldest is dropped).
//
// The socket file is made 0660 like the ipc socket, and removed on exit
// while it is still this daemon's. Thread-safety: constructed and
// destroyed on one thread; the handler runs on the socket's thread.
#ifndef TANDEM_SERVER_FD_SOCKET_H_
#define TANDEM_SERVER_FD_SOCKET_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "proto/fd_message.h"
#include "server/peer_identity.h"
#include "server/socket_path.h"

namespace tandem::server {

struct ReceivedFd {
  PeerIdentity sender;  // kLocal, from SO_PEERCRED
  v1::FdMessage message;
  std::shared_ptr<UniqueFd> fd;  // shared: the loop's work items are copyable
};

class FdSocket {
 public:
  static constexpr int kMaxPending = 64;
  using Handler = std::function<void(ReceivedFd)>;

  // Binds `path` (a stale socket file there is replaced; UNAVAILABLE when a
  // process listens on it) and starts the thread.
  static absl::StatusOr<std::unique_ptr<FdSocket>> Create(const std::string& path, Handler on_received);
  ~FdSocket();
  FdSocket(const FdSocket&) = delete;
  FdSocket& operator=(const FdSocket&) = delete;

  const std::string& path() const { return path_; }

 private:
  FdSocket(std::string path, Handler on_received) : path_(std::move(path)), on_received_(std::move(on_received)) {}
  void Run();

  const std::string path_;
  const Handler on_received_;
  UniqueFd listener_;
  UniqueFd wake_;  // eventfd: the destructor wakes the thread to stop
  BoundSocketFile socket_file_;
  std::thread thread_;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_FD_SOCKET_H_
