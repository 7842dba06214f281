// The default endpoints are used only in folders nobody else could have put
// a socket in (another user pre-creating /tmp/tandem-<uid> for a fake daemon
// received a client's whole model).
#include "base/endpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace tandem {
namespace {

class EndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tandem-endpoint-test-XXXXXX";
    root_ = ::mkdtemp(tmpl);
    const char* old = std::getenv("XDG_RUNTIME_DIR");
    if (old != nullptr) saved_runtime_ = old;
    had_runtime_ = old != nullptr;
    ::setenv("XDG_RUNTIME_DIR", root_.c_str(), 1);
    ::unsetenv("TANDEM_ENDPOINT");
  }
  void TearDown() override {
    if (had_runtime_) {
      ::setenv("XDG_RUNTIME_DIR", saved_runtime_.c_str(), 1);
    } else {
      ::unsetenv("XDG_RUNTIME_DIR");
    }
    (void)!std::system(("rm -rf '" + root_ + "'").c_str());
  }
  std::string root_;
  std::string saved_runtime_;
  bool had_runtime_ = false;
};

TEST_F(EndpointTest, APrivateFolderIsAccepted) {
  const std::string dir = root_ + "/tandem";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  EXPECT_TRUE(CheckPrivateDir(dir, ::geteuid()).ok());
  auto endpoint = ClientDefaultEndpoint();
  if (::access("/run/tandem/tandemd.sock", F_OK) == 0) GTEST_SKIP() << "a system tandemd runs here";
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  EXPECT_EQ(*endpoint, "ipc://" + dir + "/tandemd.sock");
}

TEST_F(EndpointTest, AFolderOthersMayWriteIsRefused) {
  const std::string dir = root_ + "/tandem";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  absl::Status s = CheckPrivateDir(dir, ::geteuid());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("writable by others"), std::string::npos) << s;
  if (::access("/run/tandem/tandemd.sock", F_OK) == 0) GTEST_SKIP() << "a system tandemd runs here";
  EXPECT_EQ(ClientDefaultEndpoint().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DaemonDefaultEndpoint().status().code(),
            ::access("/run", W_OK) == 0 ? absl::StatusCode::kOk : absl::StatusCode::kFailedPrecondition);
}

TEST_F(EndpointTest, AFolderOfAnotherUserIsRefused) {
  const std::string dir = root_ + "/tandem";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  // As its owner were another user: the check names the owner.
  absl::Status s = CheckPrivateDir(dir, ::geteuid() + 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("belongs to uid"), std::string::npos) << s;
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
    EXPECT_EQ(CheckPrivateDir(dir, 0).code(), absl::StatusCode::kFailedPrecondition);
  }
}

TEST_F(EndpointTest, ASymbolicLinkIsRefused) {
  const std::string target = root_ + "/elsewhere";
  const std::string dir = root_ + "/tandem";
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(target.c_str(), dir.c_str()), 0);
  EXPECT_EQ(CheckPrivateDir(dir, ::geteuid()).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(EndpointTest, AnExplicitEndpointIsTheUsersChoice) {
  ::setenv("TANDEM_ENDPOINT", "tcp://127.0.0.1:5555", 1);
  auto endpoint = ClientDefaultEndpoint();
  ::unsetenv("TANDEM_ENDPOINT");
  ASSERT_TRUE(endpoint.ok());
  EXPECT_EQ(*endpoint, "tcp://127.0.0.1:5555");
}

}  // namespace
}  // namespace tandem
