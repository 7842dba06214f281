#include "server/transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/endpoint.h"
#include "base/log.h"
#include "server/socket_path.h"

namespace tandem::server {
namespace {

// Frames left in ZeroMQ's receive buffers.
class ZmqFrames final : public RequestFrames {
 public:
  explicit ZmqFrames(std::vector<zmq::message_t> parts) : parts_(std::move(parts)) {}
  size_t size() const override { return parts_.size(); }
  absl::string_view frame(size_t i) const override {
    return absl::string_view(static_cast<const char*>(parts_[i].data()), parts_[i].size());
  }

 private:
  std::vector<zmq::message_t> parts_;
};

// The remote "ip:port" of the tcp connection a message came on ("" when it
// cannot be read: the connection closed meanwhile).
std::string RemoteAddress(zmq::message_t& message) {
  const int fd = zmq_msg_get(message.handle(), ZMQ_SRCFD);
  if (fd < 0) return "";
  sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    return absl::StrCat(text, ":", ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    return absl::StrCat("[", text, "]:", ntohs(in6->sin6_port));
  }
  return "";
}

}  // namespace

void ZmqTransport::FreeReply(void* /*data*/, void* hint) {
  auto* reply = static_cast<OutgoingReply*>(hint);
  reply->counter->fetch_sub(reply->payload.size());
  delete reply;
}

namespace {

// Who sent `message`, a frame that came from the peer.
PeerIdentity IdentityOf(zmq::message_t& message, bool tcp) {
  const char* address = zmq_msg_gets(message.handle(), "Peer-Address");
  if (address == nullptr) return PeerIdentity{};
  if (!tcp) return ParsePeerAddress(address, "");
  std::string remote = RemoteAddress(message);
  if (remote.empty()) return PeerIdentity{};
  PeerIdentity id = ParsePeerAddress(address, remote);
  if (const char* user = zmq_msg_gets(message.handle(), "User-Id"); user != nullptr) id.user = user;
  return id;
}

// Whether a tcp:// endpoint binds only the loopback interface.
bool IsLoopbackTcp(absl::string_view endpoint) {
  absl::string_view host = endpoint.substr(std::string_view("tcp://").size());
  const size_t colon = host.rfind(':');
  if (colon != absl::string_view::npos) host = host.substr(0, colon);
  return absl::StartsWith(host, "127.") || host == "localhost" || host == "[::1]" || host == "lo";
}

}  // namespace

ZmqTransport::ZmqTransport(std::string endpoint, MessageHandler on_message, PeerGoneHandler on_peer_gone,
                           DisconnectHandler on_disconnect)
    : endpoint_(std::move(endpoint)),
      tcp_(absl::StartsWith(endpoint_, "tcp://")),
      on_message_(std::move(on_message)),
      on_peer_gone_(std::move(on_peer_gone)),
      on_disconnect_(std::move(on_disconnect)),
      context_(1),
      router_(context_, zmq::socket_type::router),
      monitor_(context_, zmq::socket_type::pair) {}

absl::StatusOr<std::unique_ptr<ZmqTransport>> ZmqTransport::Create(const TransportOptions& options,
                                                                   MessageHandler on_message,
                                                                   PeerGoneHandler on_peer_gone,
                                                                   DisconnectHandler on_disconnect) {
  std::unique_ptr<ZmqTransport> t(
      new ZmqTransport(options.endpoint, std::move(on_message), std::move(on_peer_gone), std::move(on_disconnect)));
  const std::string path = IpcPath(options.endpoint);
  if (!path.empty()) {
    if (absl::Status s = ClaimSocketPath(path); !s.ok()) return s;
  }
  // Without authentication, anyone who can reach a tcp port can submit
  // jobs and read their own results on the GPU: beyond loopback, refuse.
  if (t->tcp_ && !IsLoopbackTcp(options.endpoint)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to listen on ", options.endpoint,
        ": tcp endpoints carry no authentication, so tandemd binds tcp only on loopback (127.0.0.1, [::1]); "
        "use an ipc endpoint, or reach a remote daemon through an ssh tunnel to its loopback port"));
  }
  try {
    t->router_.set(zmq::sockopt::router_mandatory, 1);
    t->router_.set(zmq::sockopt::linger, 0);
    t->router_.set(zmq::sockopt::sndhwm, 0);
    t->router_.set(zmq::sockopt::rcvhwm, 0);
    t->router_.set(zmq::sockopt::heartbeat_ivl, options.heartbeat_interval_ms);
    t->router_.set(zmq::sockopt::heartbeat_timeout, options.heartbeat_timeout_ms);
    if (options.max_message_bytes > 0) {
      t->router_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options.max_message_bytes * 2 + 65536));
    }
    // An ipc socket is created 0660 (nobody sees it with the process's
    // default mode, even between bind and the chmod below).
    const mode_t old_mask = ::umask(0117);
    try {
      t->router_.bind(options.endpoint);
    } catch (...) {
      ::umask(old_mask);
      throw;
    }
    ::umask(old_mask);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.endpoint, ": ", e.what()));
  }
  // The monitor's inproc address is unique to this transport (tests run
  // several in one process).
  const std::string monitor_address =
      absl::StrCat("inproc://tandem-transport-monitor-", absl::Hex(reinterpret_cast<uintptr_t>(t.get())));
  if (zmq_socket_monitor(t->router_.handle(), monitor_address.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) {
    return absl::InternalError(absl::StrCat("zmq_socket_monitor: ", zmq_strerror(zmq_errno())));
  }
  t->monitor_.set(zmq::sockopt::linger, 0);
  t->monitor_.connect(monitor_address);
  if (!path.empty()) {
    ::chmod(path.c_str(), 0660);
    t->socket_file_ = BoundSocketFile(path);
  }
  t->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (t->wake_fd_ < 0) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  t->thread_ = std::thread([raw = t.get()] {
    pthread_setname_np(pthread_self(), "zmq transport");  // visible in top -H and /proc/<pid>/task
    raw->Run();
  });
  return t;
}

ZmqTransport::~ZmqTransport() {
  Stop();
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  socket_file_.RemoveIfOurs();
}

void ZmqTransport::Send(std::string peer, std::string payload) {
  bool first;
  {
    absl::MutexLock lock(&mu_);
    first = outbox_.empty();
    ByteCounter& counter = queued_bytes_[peer];
    if (counter == nullptr) counter = std::make_shared<std::atomic<uint64_t>>(0);
    counter->fetch_add(payload.size());
    outbox_.push_back({std::move(peer), std::move(payload), counter});
    // Now and then, forget peers with nothing queued (one per connection
    // ever made would pile up over months).
    if (++sends_ % 4096 == 0) {
      absl::erase_if(queued_bytes_,
                     [](const auto& entry) { return entry.second.use_count() == 1 && entry.second->load() == 0; });
    }
  }
  // Only the reply that finds the outbox empty wakes the socket thread: one
  // already waiting there has its wake pending (Run reads the wake before it
  // takes the outbox), and a burst of replies costs one system call, not one
  // each, on the control loop.
  if (!first) return;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void ZmqTransport::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
}

uint64_t ZmqTransport::QueuedBytes(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  auto it = queued_bytes_.find(peer);
  return it == queued_bytes_.end() ? 0 : it->second->load();
}

void ZmqTransport::Flush() {
  std::deque<OutgoingReply> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(outbox_);
  }
  for (OutgoingReply& reply : batch) {
    const std::string peer = std::move(reply.peer);
    const size_t bytes = reply.payload.size();
    try {
      zmq::message_t id(peer.data(), peer.size());
      // Zero-copy: ZeroMQ owns the reply until it has written it, then
      // FreeReply returns its bytes to the peer's count (also when the send
      // fails and the message is closed here).
      auto* owned = new OutgoingReply(std::move(reply));
      zmq::message_t body(owned->payload.data(), owned->payload.size(), &FreeReply, owned);
      if (!router_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait) ||
          !router_.send(body, zmq::send_flags::dontwait)) {
        TLOG_WARNING("reply dropped: peer not writable").With("bytes", bytes);
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == EHOSTUNREACH) {
        on_peer_gone_(peer);
      } else {
        TLOG_WARNING("reply failed").With("error", e.what());
      }
    }
  }
}

void ZmqTransport::ReceiveReadable() {
  while (true) {
    zmq::message_t id;
    auto got = router_.recv(id, zmq::recv_flags::dontwait);
    if (!got) break;
    std::string peer(static_cast<const char*>(id.data()), id.size());
    PeerIdentity identity;
    std::string payload;
    std::vector<zmq::message_t> extra;
    int frames = 0;
    while (router_.get(zmq::sockopt::rcvmore)) {
      zmq::message_t part;
      (void)router_.recv(part, zmq::recv_flags::none);
      if (frames++ == 0) {
        // The connection's metadata rides on the frames it sent (the
        // routing-id frame is the ROUTER's own and carries none).
        identity = IdentityOf(part, tcp_);
        payload.assign(static_cast<const char*>(part.data()), part.size());
      } else {
        extra.push_back(std::move(part));
      }
    }
    std::shared_ptr<const RequestFrames> rest;
    if (!extra.empty()) rest = std::make_shared<ZmqFrames>(std::move(extra));
    on_message_(std::move(peer), std::move(identity), std::move(payload), std::move(rest));
  }
}

void ZmqTransport::DrainIncoming() {
  // Until nothing has arrived for 50 ms (what a client sent before the
  // daemon was told to stop is in ZeroMQ's queues well before that), at
  // most 500 ms.
  using SteadyClock = std::chrono::steady_clock;
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(500);
  auto quiet_until = SteadyClock::now() + std::chrono::milliseconds(50);
  zmq::pollitem_t item = {static_cast<void*>(router_), 0, ZMQ_POLLIN, 0};
  while (SteadyClock::now() < std::min(deadline, quiet_until)) {
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(10));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      return;
    }
    if (item.revents & ZMQ_POLLIN) {
      ReceiveReadable();
      quiet_until = SteadyClock::now() + std::chrono::milliseconds(50);
    }
  }
}

void ZmqTransport::DrainThen(std::function<void()> then) {
  {
    absl::MutexLock lock(&mu_);
    drain_then_ = std::move(then);
  }
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
}

void ZmqTransport::ReadMonitor() {
  bool closed = false;
  while (true) {
    // An event is two frames: 6 bytes (uint16 event, uint32 value), then the
    // endpoint.
    zmq::message_t event;
    if (!monitor_.recv(event, zmq::recv_flags::dontwait)) break;
    zmq::message_t address;
    if (event.more()) (void)monitor_.recv(address, zmq::recv_flags::dontwait);
    uint16_t id = 0;
    if (event.size() >= sizeof(id)) std::memcpy(&id, event.data(), sizeof(id));
    if (id == ZMQ_EVENT_DISCONNECTED) closed = true;
  }
  if (closed && on_disconnect_) on_disconnect_();
}

void ZmqTransport::Run() {
  zmq::pollitem_t items[] = {
      {static_cast<void*>(router_), 0, ZMQ_POLLIN, 0},
      {nullptr, wake_fd_, ZMQ_POLLIN, 0},
      {static_cast<void*>(monitor_), 0, ZMQ_POLLIN, 0},
  };
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    try {
      zmq::poll(items, 3, std::chrono::milliseconds(-1));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      TLOG_ERROR("transport poll failed").With("error", e.what());
      break;
    }
    if (items[1].revents & ZMQ_POLLIN) {
      // The wake is read before the outbox is taken: a reply queued after
      // the take finds the outbox empty and wakes this thread again.
      uint64_t count;
      (void)!::read(wake_fd_, &count, sizeof(count));
      Flush();
    }
    if (items[0].revents & ZMQ_POLLIN) ReceiveReadable();
    if (items[2].revents & ZMQ_POLLIN) ReadMonitor();
    std::function<void()> then;
    {
      absl::MutexLock lock(&mu_);
      then = std::move(drain_then_);
      drain_then_ = nullptr;
    }
    if (then) {
      DrainIncoming();
      then();
    }
  }
  Flush();
}

}  // namespace tandem::server
