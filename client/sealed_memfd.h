// Shared memory for tandemd: a memfd this process creates, sized, reserved,
// sealed so that it can never shrink or grow (F_SEAL_SHRINK | F_SEAL_GROW |
// F_SEAL_SEAL: the daemon refuses a descriptor it could fault on), mapped
// read-write here, and passed to the daemon over its side socket
// (proto/fd_message.h). A memfd has no name: only this process and the
// daemon it is passed to can reach its bytes (a POSIX object in /dev/shm
// could be opened by anyone its mode allowed).
//
// The destructor closes the descriptor and unmaps (unless the mapping was
// released to the caller). Not thread-safe.
#ifndef TANDEM_CLIENT_SEALED_MEMFD_H_
#define TANDEM_CLIENT_SEALED_MEMFD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace tandem::client {

class SealedMemfd {
 public:
  // UNAVAILABLE when the object cannot be created, sized, reserved, sealed
  // or mapped (too little memory for it): callers fall back to the socket.
  // `populate` maps every page at once (for an object about to be written
  // whole: one call instead of a fault per page).
  static absl::StatusOr<SealedMemfd> Create(uint64_t bytes, bool populate = false);

  SealedMemfd(SealedMemfd&& other) noexcept;
  SealedMemfd& operator=(SealedMemfd&&) = delete;
  SealedMemfd(const SealedMemfd&) = delete;
  SealedMemfd& operator=(const SealedMemfd&) = delete;
  ~SealedMemfd();

  char* data() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  int fd() const { return fd_.get(); }

  // Passes the descriptor to the daemon's side socket (PassFileDescriptor).
  absl::Status PassTo(const std::string& path, const std::string& token, uint64_t nonce) const;

  // Hands the mapping to the caller, who unmaps it (munmap(data(), bytes())).
  char* ReleaseMapping();

 private:
  SealedMemfd(UniqueFd fd, char* base, uint64_t bytes) : fd_(std::move(fd)), base_(base), bytes_(bytes) {}

  UniqueFd fd_;
  char* base_;  // null once released
  uint64_t bytes_;
};

// Passes `fd` to the daemon's side socket at `path` for the session of
// `token`, under `nonce` (proto/fd_message.h), and waits (up to 5 s) for
// its acknowledgement. UNAVAILABLE when the socket cannot be reached,
// INVALID_ARGUMENT when the daemon calls the message malformed.
absl::Status PassFileDescriptor(const std::string& path, const std::string& token, uint64_t nonce, int fd);

}  // namespace tandem::client

#endif  // TANDEM_CLIENT_SEALED_MEMFD_H_
