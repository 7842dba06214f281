#include "server/transport.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/endpoint.h"
#include "base/log.h"

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

}  // namespace

ZmqTransport::ZmqTransport(std::string endpoint, MessageHandler on_message, PeerGoneHandler on_peer_gone)
    : endpoint_(std::move(endpoint)),
      on_message_(std::move(on_message)),
      on_peer_gone_(std::move(on_peer_gone)),
      context_(1),
      router_(context_, zmq::socket_type::router) {}

absl::StatusOr<std::unique_ptr<ZmqTransport>> ZmqTransport::Create(const TransportOptions& options,
                                                                   MessageHandler on_message,
                                                                   PeerGoneHandler on_peer_gone) {
  std::unique_ptr<ZmqTransport> t(
      new ZmqTransport(options.endpoint, std::move(on_message), std::move(on_peer_gone)));
  try {
    t->router_.set(zmq::sockopt::router_mandatory, 1);
    t->router_.set(zmq::sockopt::linger, 0);
    t->router_.set(zmq::sockopt::sndhwm, 0);
    t->router_.set(zmq::sockopt::rcvhwm, 0);
    t->router_.set(zmq::sockopt::heartbeat_ivl, 2000);
    t->router_.set(zmq::sockopt::heartbeat_timeout, 10000);
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
  std::string path = IpcPath(options.endpoint);
  if (!path.empty()) ::chmod(path.c_str(), 0660);
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
  std::string path = IpcPath(endpoint_);
  if (!path.empty()) ::unlink(path.c_str());
}

void ZmqTransport::Send(std::string peer, std::string payload) {
  bool first;
  {
    absl::MutexLock lock(&mu_);
    first = outbox_.empty();
    outbox_.emplace_back(std::move(peer), std::move(payload));
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

void ZmqTransport::Flush() {
  std::deque<std::pair<std::string, std::string>> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(outbox_);
  }
  for (auto& [peer, payload] : batch) {
    try {
      zmq::message_t id(peer.data(), peer.size());
      zmq::message_t body(payload.data(), payload.size());
      if (!router_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait) ||
          !router_.send(body, zmq::send_flags::dontwait)) {
        TLOG_WARNING("reply dropped: peer not writable").With("bytes", payload.size());
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

void ZmqTransport::Run() {
  zmq::pollitem_t items[] = {
      {static_cast<void*>(router_), 0, ZMQ_POLLIN, 0},
      {nullptr, wake_fd_, ZMQ_POLLIN, 0},
  };
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(-1));
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
    if (items[0].revents & ZMQ_POLLIN) {
      // Drain everything readable now.
      while (true) {
        zmq::message_t id;
        auto got = router_.recv(id, zmq::recv_flags::dontwait);
        if (!got) break;
        std::string peer(static_cast<const char*>(id.data()), id.size());
        std::string payload;
        std::vector<zmq::message_t> extra;
        int frames = 0;
        while (router_.get(zmq::sockopt::rcvmore)) {
          zmq::message_t part;
          (void)router_.recv(part, zmq::recv_flags::none);
          if (frames++ == 0) {
            payload.assign(static_cast<const char*>(part.data()), part.size());
          } else {
            extra.push_back(std::move(part));
          }
        }
        std::shared_ptr<const RequestFrames> rest;
        if (!extra.empty()) rest = std::make_shared<ZmqFrames>(std::move(extra));
        on_message_(std::move(peer), std::move(payload), std::move(rest));
      }
    }
  }
  Flush();
}

}  // namespace tandem::server
