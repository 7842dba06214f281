// What a client is told before it connects: a missing socket, a socket file
// nobody listens on (the daemon was killed), a file that is not a socket,
// and a live listener, each told apart without waiting.
#include "base/socket_probe.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace tandem {
namespace {

class SocketProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tandem-probe-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override {
    if (listener_ >= 0) ::close(listener_);
    (void)!std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  // A unix stream socket bound at dir_/name; listening if `listen`, else
  // closed at once (the file stays: what a killed daemon leaves).
  std::string Bind(const std::string& name, bool listen) {
    const std::string path = dir_ + "/" + name;
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
    if (listen) {
      EXPECT_EQ(::listen(fd, 4), 0);
      listener_ = fd;
    } else {
      ::close(fd);
    }
    return path;
  }
  std::string dir_;
  int listener_ = -1;
};

TEST_F(SocketProbeTest, TellsAListenerFromAStaleFile) {
  const std::string live = Bind("live.sock", true);
  const std::string stale = Bind("stale.sock", false);
  EXPECT_EQ(ProbeUnixSocket(live), 0);
  EXPECT_EQ(ProbeUnixSocket(stale), ECONNREFUSED);
  EXPECT_EQ(ProbeUnixSocket(dir_ + "/none.sock"), ENOENT);
  EXPECT_EQ(ProbeUnixSocket(dir_ + "/" + std::string(200, 'x')), ENAMETOOLONG);
}

TEST_F(SocketProbeTest, ClientEndpointCheckSaysWhatIsWrong) {
  const std::string live = Bind("live.sock", true);
  const std::string stale = Bind("stale.sock", false);
  EXPECT_TRUE(CheckClientEndpoint("ipc://" + live).ok());
  EXPECT_TRUE(CheckClientEndpoint("tcp://127.0.0.1:1").ok()) << "only ipc endpoints are probed";

  absl::Status s = CheckClientEndpoint("ipc://" + stale);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "tandemd is not running: nobody listens on " + stale + " (a socket left by a daemon that stopped)");

  s = CheckClientEndpoint("ipc://" + dir_ + "/none.sock");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message().rfind("tandemd is not running: no socket at " + dir_ + "/none.sock", 0), 0u) << s;

  const std::string file = dir_ + "/plain";
  std::ofstream(file) << "not a socket";
  s = CheckClientEndpoint("ipc://" + file);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

}  // namespace
}  // namespace tandem
