#include "server/session_table.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace tandem::server {
namespace {

PeerIdentity LocalUser(uid_t uid) {
  PeerIdentity identity;
  identity.kind = PeerIdentity::Kind::kLocal;
  identity.uid = uid;
  return identity;
}

TEST(SessionTable, FindsASessionByIdPeerAndToken) {
  SessionTable table;
  Session& a = table.Open("peer-a", LocalUser(1000));
  Session& b = table.Open("peer-b", LocalUser(1001));
  EXPECT_NE(a.id, b.id);
  EXPECT_EQ(a.peer, "peer-a");
  EXPECT_EQ(a.identity.uid, 1000u);
  EXPECT_EQ(a.token.size(), 16u);
  EXPECT_NE(a.token, b.token);
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.Find(a.id), &a);
  EXPECT_EQ(table.FindByPeer("peer-b"), &b);
  EXPECT_EQ(table.FindByToken(a.token), &a);
  EXPECT_EQ(table.Find(a.id + b.id + 1), nullptr);
  EXPECT_EQ(table.FindByPeer("peer-c"), nullptr);
  EXPECT_EQ(table.FindByToken(std::string(16, '\0')), nullptr);
}

TEST(SessionTable, AClosedSessionIsFoundByNothingAndItsIdIsNotReused) {
  SessionTable table;
  Session& a = table.Open("peer-a", LocalUser(1000));
  const uint64_t id = a.id;
  const std::string token = a.token;
  table.Open("peer-b", LocalUser(1000));
  EXPECT_TRUE(table.Close(id));
  EXPECT_FALSE(table.Close(id));
  EXPECT_EQ(table.Find(id), nullptr);
  EXPECT_EQ(table.FindByPeer("peer-a"), nullptr);
  EXPECT_EQ(table.FindByToken(token), nullptr);
  EXPECT_EQ(table.size(), 1u);
  // The same peer again (a reconnect) gets a new session, id and token.
  Session& again = table.Open("peer-a", LocalUser(1000));
  EXPECT_GT(again.id, id);
  EXPECT_NE(again.token, token);
  EXPECT_EQ(table.FindByPeer("peer-a"), &again);
}

TEST(SessionTable, IteratesOverEverySessionOnce) {
  SessionTable table;
  std::set<uint64_t> opened;
  for (int i = 0; i < 50; ++i) opened.insert(table.Open("peer-" + std::to_string(i), LocalUser(1000)).id);
  for (int i = 0; i < 50; i += 3) table.Close(table.FindByPeer("peer-" + std::to_string(i))->id);
  std::set<uint64_t> seen;
  for (const auto& [id, session] : table) {
    EXPECT_EQ(session->id, id);
    EXPECT_TRUE(seen.insert(id).second);
  }
  const std::vector<uint64_t> ids = table.Ids();
  EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()), seen);
  EXPECT_EQ(seen.size(), 50u - 17u);
  for (uint64_t id : seen) EXPECT_TRUE(opened.count(id));
}

}  // namespace
}  // namespace tandem::server
