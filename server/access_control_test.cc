// The authorization rules and the identities they read, without a daemon.
#include "server/access_control.h"

#include <unistd.h>

#include "gtest/gtest.h"
#include "server/peer_identity.h"

namespace tandem::server {
namespace {

PeerIdentity Local(uid_t uid, pid_t pid) {
  PeerIdentity id;
  id.kind = PeerIdentity::Kind::kLocal;
  id.uid = uid;
  id.gid = uid;
  id.pid = pid;
  return id;
}

PeerIdentity Tcp(const std::string& address, const std::string& user = "") {
  PeerIdentity id;
  id.kind = PeerIdentity::Kind::kNetwork;
  id.address = address;
  id.user = user;
  return id;
}

TEST(PeerIdentityTest, IpcMetadataGivesTheKernelsCredentials) {
  PeerIdentity id = ParsePeerAddress("localhost:1000:1001:4242", "");
  EXPECT_EQ(id.kind, PeerIdentity::Kind::kLocal);
  EXPECT_EQ(id.uid, 1000u);
  EXPECT_EQ(id.gid, 1001u);
  EXPECT_EQ(id.pid, 4242);
  EXPECT_EQ(id.ToString(), "uid 1000 (pid 4242)");
  // Missing or malformed credentials identify nobody.
  EXPECT_EQ(ParsePeerAddress("", "").kind, PeerIdentity::Kind::kUnknown);
  EXPECT_EQ(ParsePeerAddress("localhost:x:1:2", "").kind, PeerIdentity::Kind::kUnknown);
  EXPECT_EQ(ParsePeerAddress("localhost", "").kind, PeerIdentity::Kind::kUnknown);
}

TEST(PeerIdentityTest, TcpIsTheConnectionsAddressAndPort) {
  PeerIdentity id = ParsePeerAddress("127.0.0.1", "127.0.0.1:41000");
  EXPECT_EQ(id.kind, PeerIdentity::Kind::kNetwork);
  EXPECT_EQ(id.address, "127.0.0.1:41000");
}

TEST(PeerIdentityTest, SameClientMeansTheSameProcessOrConnection) {
  EXPECT_TRUE(Local(1000, 7).SameClient(Local(1000, 7)));
  EXPECT_FALSE(Local(1000, 7).SameClient(Local(1000, 8)));  // another process of the same user
  EXPECT_FALSE(Local(1000, 7).SameClient(Local(1001, 7)));  // another user
  EXPECT_TRUE(Tcp("127.0.0.1:5").SameClient(Tcp("127.0.0.1:5")));
  EXPECT_FALSE(Tcp("127.0.0.1:5").SameClient(Tcp("127.0.0.1:6")));  // a new connection
  EXPECT_FALSE(PeerIdentity{}.SameClient(PeerIdentity{}));          // unknown matches nothing
  EXPECT_FALSE(Local(1000, 7).SameClient(Tcp("127.0.0.1:5")));
}

TEST(PeerIdentityTest, SamePrincipalIsTheUserNotTheProcess) {
  EXPECT_TRUE(Local(1000, 7).SamePrincipal(Local(1000, 9)));
  EXPECT_FALSE(Local(1000, 7).SamePrincipal(Local(1001, 7)));
  EXPECT_TRUE(Tcp("10.0.0.1:5", "alice").SamePrincipal(Tcp("10.0.0.2:9", "alice")));
  EXPECT_FALSE(Tcp("10.0.0.1:5", "alice").SamePrincipal(Tcp("10.0.0.1:5", "bob")));
  // Anonymous tcp peers are nobody's principal.
  EXPECT_FALSE(Tcp("127.0.0.1:5").SamePrincipal(Tcp("127.0.0.1:5")));
}

TEST(AccessControlTest, AdministratorsAreRootTheDaemonsUserAndCurveAdmins) {
  AccessOptions options{.daemon_uid = 4000};
  EXPECT_TRUE(IsAdministrator(Local(0, 1), options));
  EXPECT_TRUE(IsAdministrator(Local(4000, 1), options));
  EXPECT_FALSE(IsAdministrator(Local(1000, 1), options));
  EXPECT_FALSE(IsAdministrator(PeerIdentity{}, options));
  EXPECT_FALSE(IsAdministrator(Tcp("127.0.0.1:5"), options, /*curve_admin=*/true));  // no CURVE user
  EXPECT_TRUE(IsAdministrator(Tcp("10.0.0.1:5", "ops"), options, /*curve_admin=*/true));
  EXPECT_FALSE(IsAdministrator(Tcp("10.0.0.1:5", "alice"), options, /*curve_admin=*/false));
}

TEST(AccessControlTest, AdminGroupMembershipCountsThePrimaryGroup) {
  // A uid whose primary gid is the admin group administers, whoever it is.
  AccessOptions options{.daemon_uid = 4000, .admin_gid = 777};
  PeerIdentity member = Local(1000, 1);
  member.gid = 777;
  EXPECT_TRUE(IsAdministrator(member, options));
  EXPECT_FALSE(IsAdministrator(Local(1000, 1), options));
}

TEST(AccessControlTest, OwnersAndAdministratorsManageJobs) {
  const PeerIdentity alice = Local(1000, 7), alice_again = Local(1000, 8), bob = Local(1001, 9);
  EXPECT_TRUE(MayManageJob(alice_again, false, 2, alice, 1));  // her other process
  EXPECT_FALSE(MayManageJob(bob, false, 3, alice, 1));
  EXPECT_TRUE(MayManageJob(bob, true, 3, alice, 1));  // an administrator
  // An anonymous tcp session manages only its own session's jobs.
  EXPECT_TRUE(MayManageJob(Tcp("127.0.0.1:5"), false, 4, Tcp("127.0.0.1:5"), 4));
  EXPECT_FALSE(MayManageJob(Tcp("127.0.0.1:6"), false, 5, Tcp("127.0.0.1:5"), 4));
}

TEST(AccessControlTest, HintsAboveTheCeilingsNeedAnAdministrator) {
  AccessOptions options{.max_user_priority = 1, .max_user_weight = 2.0, .max_job_bytes = 1000};
  v1::JobHints ok;
  ok.set_priority(1);
  ok.set_weight(2.0);
  ok.set_memory_quota_bytes(1000);
  EXPECT_TRUE(CheckHintCeilings(ok, false, options).ok());
  v1::JobHints high = ok;
  high.set_priority(2);
  EXPECT_EQ(CheckHintCeilings(high, false, options).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckHintCeilings(high, true, options).ok());
  v1::JobHints heavy = ok;
  heavy.set_weight(2.5);
  EXPECT_EQ(CheckHintCeilings(heavy, false, options).code(), absl::StatusCode::kPermissionDenied);
  v1::JobHints big = ok;
  big.set_memory_quota_bytes(1001);
  absl::Status s = CheckHintCeilings(big, false, options);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("max_job_memory_mib"), std::string::npos) << s;
  // A lower priority than the ceiling is anyone's to ask for.
  EXPECT_TRUE(CheckPriorityCeiling(-5, false, options).ok());
  EXPECT_FALSE(CheckPriorityCeiling(5, false, options).ok());
}

}  // namespace
}  // namespace tandem::server
