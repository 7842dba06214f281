#include "server/session_table.h"

#include <utility>

#include "base/random_token.h"

namespace tandem::server {

Session& SessionTable::Open(const std::string& peer, const PeerIdentity& identity) {
  auto s = std::make_unique<Session>();
  s->id = next_id_++;
  s->peer = peer;
  s->identity = identity;
  s->token = RandomToken();
  Session& session = *s;
  by_peer_[peer] = session.id;
  by_token_[session.token] = session.id;
  by_id_[session.id] = std::move(s);
  return session;
}

Session* SessionTable::Find(uint64_t id) {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second.get();
}

const Session* SessionTable::Find(uint64_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second.get();
}

Session* SessionTable::FindByPeer(const std::string& peer) {
  auto it = by_peer_.find(peer);
  return it == by_peer_.end() ? nullptr : Find(it->second);
}

Session* SessionTable::FindByToken(const std::string& token) {
  auto it = by_token_.find(token);
  return it == by_token_.end() ? nullptr : Find(it->second);
}

bool SessionTable::Close(uint64_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  // Another session may hold the peer by now only if this one's entry was
  // replaced, which Open does not allow; erase only what is this session's.
  if (auto p = by_peer_.find(it->second->peer); p != by_peer_.end() && p->second == id) by_peer_.erase(p);
  if (auto t = by_token_.find(it->second->token); t != by_token_.end() && t->second == id) by_token_.erase(t);
  by_id_.erase(it);
  return true;
}

std::vector<uint64_t> SessionTable::Ids() const {
  std::vector<uint64_t> ids;
  ids.reserve(by_id_.size());
  for (const auto& [id, session] : by_id_) ids.push_back(id);
  return ids;
}

}  // namespace tandem::server
