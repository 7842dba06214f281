#include "server/fd_socket.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "server/socket_path.h"

namespace tandem::server {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr auto kConnectionDeadline = std::chrono::seconds(1);

struct Pending {
  UniqueFd fd;
  SteadyClock::time_point deadline;
};

void Answer(int fd, uint8_t code) { (void)!::send(fd, &code, 1, MSG_NOSIGNAL | MSG_DONTWAIT); }

// Reads the connection's one message; the descriptor it carried, or an
// invalid one when the message is malformed (its descriptors, if any, are
// closed).
UniqueFd ReadMessage(int fd, v1::FdMessage* message) {
  char data[v1::kFdMessageBytes + 1];
  iovec iov{data, sizeof(data)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t got = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  std::vector<UniqueFd> fds;
  if (got >= 0) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.emplace_back(received);
      }
    }
  }
  if (got < 0 || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || fds.size() != 1) return UniqueFd();
  std::optional<v1::FdMessage> decoded = v1::DecodeFdMessage(data, static_cast<size_t>(got));
  if (!decoded.has_value()) return UniqueFd();
  *message = *std::move(decoded);
  return std::move(fds[0]);
}

}  // namespace

absl::StatusOr<std::unique_ptr<FdSocket>> FdSocket::Create(const std::string& path, Handler on_received) {
  std::unique_ptr<FdSocket> s(new FdSocket(path, std::move(on_received)));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("fd socket path ", path, " is too long"));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (absl::Status claimed = ClaimSocketPath(path); !claimed.ok()) return claimed;
  s->listener_.Reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s->listener_.valid()) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const mode_t old_mask = ::umask(0117);  // 0660 from the start, as the ipc socket
  const int bound = ::bind(s->listener_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int bind_error = errno;
  ::umask(old_mask);
  if (bound != 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind the fd socket ", path, ": ", std::strerror(bind_error)));
  }
  s->socket_file_ = BoundSocketFile(path);
  if (::listen(s->listener_.get(), kMaxPending) != 0) {
    return absl::InternalError(absl::StrCat("listen on ", path, ": ", std::strerror(errno)));
  }
  s->wake_.Reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!s->wake_.valid()) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  s->thread_ = std::thread([raw = s.get()] {
    pthread_setname_np(pthread_self(), "fd socket");
    raw->Run();
  });
  return s;
}

FdSocket::~FdSocket() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
    thread_.join();
  }
  socket_file_.RemoveIfOurs();
}

void FdSocket::Run() {
  std::deque<Pending> pending;
  while (true) {
    std::vector<pollfd> polled{{wake_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    for (const Pending& p : pending) polled.push_back({p.fd.get(), POLLIN, 0});
    int timeout_ms = -1;
    if (!pending.empty()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(pending.front().deadline - SteadyClock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count()) + 1);
    }
    if (::poll(polled.data(), polled.size(), timeout_ms) < 0 && errno != EINTR) {
      TLOG_ERROR("fd socket poll failed").With("error", std::strerror(errno));
      return;
    }
    if (polled[0].revents != 0) return;
    // Connections that sent their message (or hung up).
    std::deque<Pending> waiting;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      const short events = polled[2 + i].revents;
      if (events == 0) {
        if (SteadyClock::now() < p.deadline) waiting.push_back(std::move(p));
        continue;  // else dropped: it sent nothing in time
      }
      v1::FdMessage message;
      UniqueFd received = ReadMessage(p.fd.get(), &message);
      ucred cred{};
      socklen_t len = sizeof(cred);
      if (!received.valid() || ::getsockopt(p.fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        Answer(p.fd.get(), v1::kFdMalformed);
        continue;
      }
      ReceivedFd r;
      r.sender.kind = PeerIdentity::Kind::kLocal;
      r.sender.uid = cred.uid;
      r.sender.gid = cred.gid;
      r.sender.pid = cred.pid;
      r.message = std::move(message);
      r.fd = std::make_shared<UniqueFd>(std::move(received));
      // Handed on before the answer: the client's next ZeroMQ request,
      // sent after the answer, reaches the loop after this descriptor.
      on_received_(std::move(r));
      Answer(p.fd.get(), v1::kFdReceived);
    }
    pending.swap(waiting);
    if (polled[1].revents != 0) {
      while (true) {
        int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        if (pending.size() >= static_cast<size_t>(kMaxPending)) pending.pop_front();
        pending.push_back(Pending{UniqueFd(fd), SteadyClock::now() + kConnectionDeadline});
      }
    }
  }
}

}  // namespace tandem::server
