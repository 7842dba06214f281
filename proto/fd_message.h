// The daemon's side socket, where a client hands over a file descriptor that
// ZeroMQ cannot carry: the sealed memfd of its shared-memory region
// (MapSharedMemoryRequest) or of a registration's initial values
// (SharedFrames). Part of protocol v1.
//
// The socket is a Unix SOCK_SEQPACKET socket beside the ipc endpoint
// (HelloResponse.fd_socket). A client connects and sends one message of
// kFdMessageBytes: the magic "TFD1", its session's 16-byte token
// (HelloResponse.session_token) and a 64-bit nonce of its choosing
// (little-endian), with exactly one descriptor in SCM_RIGHTS. The daemon
// answers with one byte, kFdReceived or kFdMalformed, and closes the
// connection. The nonce then names the descriptor in the ZeroMQ request
// that uses it; the daemon gives it to the session whose token it carries
// only if the sender's uid (SO_PEERCRED) is the session's.
#ifndef TANDEM_PROTO_FD_MESSAGE_H_
#define TANDEM_PROTO_FD_MESSAGE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace tandem::v1 {

inline constexpr char kFdMagic[4] = {'T', 'F', 'D', '1'};
inline constexpr size_t kSessionTokenBytes = 16;
inline constexpr size_t kFdMessageBytes = sizeof(kFdMagic) + kSessionTokenBytes + sizeof(uint64_t);
inline constexpr uint8_t kFdReceived = 0;
inline constexpr uint8_t kFdMalformed = 1;
// The side socket's path beside an ipc socket path.
inline std::string FdSocketPath(const std::string& ipc_path) { return ipc_path + ".fd"; }

struct FdMessage {
  std::string token;  // kSessionTokenBytes bytes
  uint64_t nonce = 0;
};

inline std::string EncodeFdMessage(const FdMessage& m) {
  std::string out(kFdMessageBytes, '\0');
  std::memcpy(out.data(), kFdMagic, sizeof(kFdMagic));
  std::memcpy(out.data() + sizeof(kFdMagic), m.token.data(), std::min(m.token.size(), kSessionTokenBytes));
  for (size_t i = 0; i < sizeof(uint64_t); ++i) {
    out[sizeof(kFdMagic) + kSessionTokenBytes + i] = static_cast<char>((m.nonce >> (8 * i)) & 0xff);
  }
  return out;
}

inline std::optional<FdMessage> DecodeFdMessage(const char* data, size_t size) {
  if (size != kFdMessageBytes || std::memcmp(data, kFdMagic, sizeof(kFdMagic)) != 0) return std::nullopt;
  FdMessage m;
  m.token.assign(data + sizeof(kFdMagic), kSessionTokenBytes);
  for (size_t i = 0; i < sizeof(uint64_t); ++i) {
    m.nonce |= static_cast<uint64_t>(static_cast<uint8_t>(data[sizeof(kFdMagic) + kSessionTokenBytes + i])) << (8 * i);
  }
  return m;
}

}  // namespace tandem::v1

#endif  // TANDEM_PROTO_FD_MESSAGE_H_
