// The daemon's ZeroMQ transport: a ROUTER socket on its own thread.
//
// Each incoming message is [peer routing id][payload]; the transport hands
// (peer, identity, payload) to `on_message` on its socket thread (which
// posts to the control loop). The identity is the connection's, as the
// kernel or ZeroMQ's security reports it (server/peer_identity.h), never a
// claim of the client's. Replies are queued with Send() from any thread and written
// by the socket thread. The socket uses ROUTER_MANDATORY, so a reply to a
// client that has gone away fails at once and `on_peer_gone` reports it.
// ZeroMQ heartbeats (ZMTP PING, answered by the client's I/O thread) close a
// connection whose peer stopped answering (a hung or stopped process, a lost
// host) within the heartbeat timeout; a dead process's ipc connection closes
// at once. Either way a socket monitor reports the closed connection to
// `on_disconnect`, which cannot tell whose it was (ZeroMQ names the file
// descriptor, not the routing id): the service then probes its sessions'
// peers, and a probe to a routing id that is gone fails with on_peer_gone.
// Messages above the hard size limit
// (twice the protocol limit) are dropped by ZeroMQ with the connection; the
// service answers those between the two limits with a clear error.
//
// An ipc socket path that another daemon is listening on is refused; a stale
// socket file (nobody listening) is replaced. On exit the file is removed
// only while it is still this daemon's (another daemon may have replaced a
// path it was told to take over).
//
// Thread-safety: Send() and Stop() from any thread.
#ifndef TANDEM_SERVER_TRANSPORT_H_
#define TANDEM_SERVER_TRANSPORT_H_

#include <sys/types.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include <zmq.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/peer_identity.h"
#include "server/request_frames.h"
#include "server/socket_path.h"

namespace tandem::server {

struct TransportOptions {
  std::string endpoint;            // ipc://path or tcp://host:port
  uint64_t max_message_bytes = 0;  // the protocol limit; the hard limit is twice it
  // A connection that answers no ZMTP PING for heartbeat_timeout_ms closes.
  // Not less than a few seconds: a live client whose I/O thread is not
  // scheduled in time (200 clients on 2 cores) would lose its job, and
  // libzmq counts an arriving frame as the answer only once it is whole.
  int heartbeat_interval_ms = 200;
  int heartbeat_timeout_ms = 3000;
};

class ZmqTransport {
 public:
  // `frames`: the message's frames after its first, or null when it had one.
  using MessageHandler = std::function<void(std::string peer, PeerIdentity identity, std::string payload,
                                            std::shared_ptr<const RequestFrames> frames)>;
  using PeerGoneHandler = std::function<void(std::string peer)>;
  // A client connection closed (socket thread); whose is not known.
  using DisconnectHandler = std::function<void()>;

  // Binds and starts the socket thread. For ipc endpoints the socket file is
  // made group-accessible (0660) and its directory must exist; UNAVAILABLE
  // when another process listens on the path.
  static absl::StatusOr<std::unique_ptr<ZmqTransport>> Create(const TransportOptions& options,
                                                              MessageHandler on_message, PeerGoneHandler on_peer_gone,
                                                              DisconnectHandler on_disconnect = nullptr);
  ~ZmqTransport();

  void Send(std::string peer, std::string payload);
  // Bytes of replies to `peer` queued and not yet written to its connection
  // (in the outbox or ZeroMQ's queues): what its client has not read.
  uint64_t QueuedBytes(const std::string& peer) const;
  // For a clean stop: the socket thread takes in every message clients have
  // already sent (until 50 ms pass with none, 500 ms at most), handing each
  // to on_message as usual, then calls `then` on its thread. Messages sent
  // later are not read.
  void DrainThen(std::function<void()> then);
  void Stop();
  const std::string& endpoint() const { return endpoint_; }

 private:
  ZmqTransport(std::string endpoint, MessageHandler on_message, PeerGoneHandler on_peer_gone,
               DisconnectHandler on_disconnect);
  void Run();
  void Flush();
  // Hands every message readable now to on_message (socket thread).
  void ReceiveReadable();
  // DrainThen's reading (socket thread).
  void DrainIncoming();
  // zmq_free_fn of a reply's body (ZeroMQ's I/O thread).
  static void FreeReply(void* data, void* hint);
  // Reads the monitor's events; calls on_disconnect once if a connection
  // closed (socket thread).
  void ReadMonitor();

  const std::string endpoint_;
  const bool tcp_;               // the endpoint is tcp:// (identities are addresses)
  BoundSocketFile socket_file_;  // ipc: the socket file this daemon bound
  const MessageHandler on_message_;
  const PeerGoneHandler on_peer_gone_;
  const DisconnectHandler on_disconnect_;
  zmq::context_t context_;
  zmq::socket_t router_;   // used by the socket thread only (after Create)
  zmq::socket_t monitor_;  // the router's DISCONNECTED events (socket thread)
  int wake_fd_ = -1;       // eventfd: Send() and Stop() wake the socket thread

  // A reply's bytes count against its peer from Send until ZeroMQ has
  // written them (the message's free function, on ZeroMQ's I/O thread).
  using ByteCounter = std::shared_ptr<std::atomic<uint64_t>>;
  struct OutgoingReply {
    std::string peer;
    std::string payload;
    ByteCounter counter;
  };

  mutable absl::Mutex mu_;
  std::deque<OutgoingReply> outbox_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, ByteCounter> queued_bytes_ ABSL_GUARDED_BY(mu_);
  uint64_t sends_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> drain_then_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_TRANSPORT_H_
