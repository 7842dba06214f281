#include "server/peer_identity.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tandem::server {

bool PeerIdentity::SameClient(const PeerIdentity& other) const {
  if (kind != other.kind) return false;
  switch (kind) {
    case Kind::kLocal:
      return uid == other.uid && pid == other.pid;
    case Kind::kNetwork:
      return address == other.address && user == other.user;
    case Kind::kUnknown:
      return false;
  }
  return false;
}

bool PeerIdentity::SamePrincipal(const PeerIdentity& other) const {
  if (kind != other.kind) return false;
  switch (kind) {
    case Kind::kLocal:
      return uid == other.uid;
    case Kind::kNetwork:
      return !user.empty() && user == other.user;
    case Kind::kUnknown:
      return false;
  }
  return false;
}

std::string PeerIdentity::ToString() const {
  switch (kind) {
    case Kind::kLocal:
      return absl::StrCat("uid ", uid, " (pid ", pid, ")");
    case Kind::kNetwork:
      return user.empty() ? absl::StrCat("tcp ", address) : absl::StrCat("tcp ", address, " (user ", user, ")");
    case Kind::kUnknown:
      break;
  }
  return "unknown";
}

PeerIdentity ParsePeerAddress(absl::string_view peer_address, absl::string_view tcp_remote) {
  PeerIdentity id;
  // ipc: "<host>:<uid>:<gid>:<pid>"; the host part never holds a colon
  // there, while an IPv6 tcp address does, so the three numbers are taken
  // from the end and tcp is recognized by its remote address.
  if (tcp_remote.empty()) {
    std::vector<absl::string_view> parts = absl::StrSplit(peer_address, ':');
    uint32_t uid, gid, pid;
    if (parts.size() >= 4 && absl::SimpleAtoi(parts[parts.size() - 3], &uid) &&
        absl::SimpleAtoi(parts[parts.size() - 2], &gid) && absl::SimpleAtoi(parts[parts.size() - 1], &pid)) {
      id.kind = PeerIdentity::Kind::kLocal;
      id.uid = uid;
      id.gid = gid;
      id.pid = static_cast<pid_t>(pid);
    }
    return id;
  }
  id.kind = PeerIdentity::Kind::kNetwork;
  id.address = std::string(tcp_remote);
  return id;
}

}  // namespace tandem::server
