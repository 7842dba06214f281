// Who sent a message: what the kernel or the transport's security says about
// the connection it came on, never what the client claims.
//
// On an ipc endpoint ZeroMQ records the connecting process's credentials
// (SO_PEERCRED: uid, gid, pid) when the connection is accepted; on tcp the
// connection's remote address and port, and with CURVE the user name the
// key file gives the client's public key. A session is bound to the identity
// of the connection that opened it, so a client that reuses another's
// ZeroMQ routing id gets nothing of that session. Plain value type.
#ifndef TANDEM_SERVER_PEER_IDENTITY_H_
#define TANDEM_SERVER_PEER_IDENTITY_H_

#include <sys/types.h>

#include <string>

#include "absl/strings/string_view.h"

namespace tandem::server {

struct PeerIdentity {
  enum class Kind {
    kUnknown,  // no credentials (the transport could not tell): trusted with nothing but its own session
    kLocal,    // a process on this host, over ipc: uid, gid, pid are the kernel's
    kNetwork,  // a tcp connection: address is its remote "ip:port"; user its CURVE user, if any
  };
  Kind kind = Kind::kUnknown;
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  pid_t pid = 0;
  std::string address;
  std::string user;
  bool curve_admin = false;  // tcp: the key file lists this CURVE user as an administrator

  // Whether `other` comes from the same client connection's owner: the same
  // process on ipc, the same remote address and port on tcp. Unknown
  // identities match nothing.
  bool SameClient(const PeerIdentity& other) const;
  // Whether `other` is the same principal for ownership: the same uid on
  // ipc, the same CURVE user on tcp. Anonymous tcp peers own only what
  // their own session opened (false here).
  bool SamePrincipal(const PeerIdentity& other) const;
  // "uid 1000 (pid 4242)", "tcp 10.0.0.5:41000 (user alice)", "unknown".
  std::string ToString() const;
};

// The identity in ZeroMQ's "Peer-Address" metadata: "<host>:<uid>:<gid>:<pid>"
// on ipc (the credentials libzmq takes with SO_PEERCRED), a bare address on
// tcp (then `tcp_remote`, the connection's "ip:port", is the address).
PeerIdentity ParsePeerAddress(absl::string_view peer_address, absl::string_view tcp_remote);

}  // namespace tandem::server

#endif  // TANDEM_SERVER_PEER_IDENTITY_H_
