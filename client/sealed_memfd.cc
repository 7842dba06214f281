#include "client/sealed_memfd.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/fd_message.h"

namespace tandem::client {

namespace {

// MemAvailable of /proc/meminfo: what can be allocated without swapping;
// UINT64_MAX when it cannot be read.
uint64_t AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return UINT64_MAX;
}

}  // namespace

absl::StatusOr<SealedMemfd> SealedMemfd::Create(uint64_t bytes, bool populate) {
  // A memfd lives in the kernel's internal tmpfs, which has no size limit
  // of its own: reserving more than the machine has would not fail, it
  // would run the machine out of memory.
  if (const uint64_t available = AvailableMemoryBytes(); bytes > available) {
    return absl::UnavailableError(absl::StrCat("cannot reserve ", bytes, " bytes of shared memory: only ", available,
                                               " bytes of memory are available"));
  }
  UniqueFd fd(::memfd_create("tandem-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return absl::UnavailableError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  // posix_fallocate reserves the pages now: too little memory for the
  // object is an error here, not a fault when its bytes are written.
  int error = 0;
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    error = errno;
  } else if (int reserved = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); reserved != 0) {
    error = reserved;
  } else if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    error = errno;
  }
  void* base = MAP_FAILED;
  if (error == 0) {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd.get(), 0);
    if (base == MAP_FAILED) error = errno;
  }
  if (base == MAP_FAILED) {
    return absl::UnavailableError(
        absl::StrCat("cannot size, reserve, seal or map ", bytes, " bytes of shared memory: ", std::strerror(error)));
  }
  return SealedMemfd(std::move(fd), static_cast<char*>(base), bytes);
}

SealedMemfd::SealedMemfd(SealedMemfd&& other) noexcept
    : fd_(std::move(other.fd_)), base_(std::exchange(other.base_, nullptr)), bytes_(other.bytes_) {}

SealedMemfd::~SealedMemfd() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

char* SealedMemfd::ReleaseMapping() { return std::exchange(base_, nullptr); }

absl::Status SealedMemfd::PassTo(const std::string& path, const std::string& token, uint64_t nonce) const {
  return PassFileDescriptor(path, token, nonce, fd_.get());
}

absl::Status PassFileDescriptor(const std::string& path, const std::string& token, uint64_t nonce, int fd) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::UnavailableError(absl::StrCat("no usable fd socket path '", path, "'"));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot reach tandemd's fd socket ", path, ": ", std::strerror(errno)));
  }
  const std::string message = v1::EncodeFdMessage({token, nonce});
  iovec iov{const_cast<char*>(message.data()), message.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (::sendmsg(sock.get(), &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(message.size())) {
    return absl::UnavailableError(absl::StrCat("sending to tandemd's fd socket: ", std::strerror(errno)));
  }
  pollfd p{sock.get(), POLLIN, 0};
  uint8_t answer = v1::kFdMalformed;
  if (::poll(&p, 1, 5000) != 1 || ::recv(sock.get(), &answer, 1, 0) != 1) {
    return absl::UnavailableError(absl::StrCat("no answer from tandemd's fd socket ", path));
  }
  if (answer != v1::kFdReceived) return absl::InvalidArgumentError("tandemd refused the descriptor as malformed");
  return absl::OkStatus();
}

}  // namespace tandem::client
