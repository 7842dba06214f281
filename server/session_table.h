// The daemon's sessions: each client connection that said hello, found by
// its id, by its ZeroMQ routing id (the peer every message comes from) and
// by the token that descriptors on the side socket carry. The table owns the
// Session records; what a session holds (its jobs, regions, descriptors) is
// the Service's to tear down before it closes the session here.
//
// Loop thread only, like the rest of server/state.h.
#ifndef TANDEM_SERVER_SESSION_TABLE_H_
#define TANDEM_SERVER_SESSION_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "server/peer_identity.h"
#include "server/state.h"

namespace tandem::server {

class SessionTable {
 public:
  using Map = absl::flat_hash_map<uint64_t, std::unique_ptr<Session>>;

  // A new session for `peer`, with the next id (ids are never reused) and a
  // token of 16 random bytes. The peer must have no session (FindByPeer).
  Session& Open(const std::string& peer, const PeerIdentity& identity);
  // Null when there is no such session.
  Session* Find(uint64_t id);
  const Session* Find(uint64_t id) const;
  Session* FindByPeer(const std::string& peer);
  Session* FindByToken(const std::string& token);
  // Forgets the session (its id, peer and token find nothing after this);
  // false when there was none.
  bool Close(uint64_t id);

  size_t size() const { return by_id_.size(); }
  bool empty() const { return by_id_.empty(); }
  // Every session, in no set order: (id, session) pairs. Do not open or
  // close sessions while iterating; collect ids first (Ids()).
  Map::const_iterator begin() const { return by_id_.begin(); }
  Map::const_iterator end() const { return by_id_.end(); }
  std::vector<uint64_t> Ids() const;

 private:
  Map by_id_;
  absl::flat_hash_map<std::string, uint64_t> by_peer_;
  absl::flat_hash_map<std::string, uint64_t> by_token_;
  uint64_t next_id_ = 1;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_SESSION_TABLE_H_
