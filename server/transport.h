// The daemon's ZeroMQ transport: a ROUTER socket on its own thread.
//
// Each incoming message is [peer routing id][payload]; the transport hands
// (peer, payload) to `on_message` on its socket thread (which posts to the
// control loop). Replies are queued with Send() from any thread and written
// by the socket thread. The socket uses ROUTER_MANDATORY, so a reply to a
// client that has gone away fails at once and `on_peer_gone` reports it;
// ZeroMQ heartbeats close dead TCP peers. Messages above the hard size limit
// (twice the protocol limit) are dropped by ZeroMQ with the connection; the
// service answers those between the two limits with a clear error.
//
// Thread-safety: Send() and Stop() from any thread.
#ifndef TANDEM_SERVER_TRANSPORT_H_
#define TANDEM_SERVER_TRANSPORT_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include <zmq.hpp>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/request_frames.h"

namespace tandem::server {

struct TransportOptions {
  std::string endpoint;             // ipc://path or tcp://host:port
  uint64_t max_message_bytes = 0;   // the protocol limit; the hard limit is twice it
};

class ZmqTransport {
 public:
  // `frames`: the message's frames after its first, or null when it had one.
  using MessageHandler =
      std::function<void(std::string peer, std::string payload, std::shared_ptr<const RequestFrames> frames)>;
  using PeerGoneHandler = std::function<void(std::string peer)>;

  // Binds and starts the socket thread. For ipc endpoints the socket file is
  // made group-accessible (0660) and its directory must exist.
  static absl::StatusOr<std::unique_ptr<ZmqTransport>> Create(const TransportOptions& options,
                                                              MessageHandler on_message,
                                                              PeerGoneHandler on_peer_gone);
  ~ZmqTransport();

  void Send(std::string peer, std::string payload);
  void Stop();
  const std::string& endpoint() const { return endpoint_; }

 private:
  ZmqTransport(std::string endpoint, MessageHandler on_message, PeerGoneHandler on_peer_gone);
  void Run();
  void Flush();

  const std::string endpoint_;
  const MessageHandler on_message_;
  const PeerGoneHandler on_peer_gone_;
  zmq::context_t context_;
  zmq::socket_t router_;  // used by the socket thread only (after Create)
  int wake_fd_ = -1;      // eventfd: Send() and Stop() wake the socket thread

  absl::Mutex mu_;
  std::deque<std::pair<std::string, std::string>> outbox_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_TRANSPORT_H_
