// SealedMemfd: a mapped, writable object that nobody can shrink or grow
// (so the daemon's mapping can never fault), with no name in /dev/shm; an
// object there is no memory for is an error, not a crash.
#include "client/sealed_memfd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace tandem::client {
namespace {

TEST(SealedMemfdTest, IsMappedWritableAndSealed) {
  auto object = SealedMemfd::Create(1 << 20, /*populate=*/true);
  ASSERT_TRUE(object.ok()) << object.status();
  ASSERT_EQ(object->bytes(), 1u << 20);
  std::memset(object->data(), 0x5a, object->bytes());  // every page writable
  // Another mapping of the descriptor sees the bytes (as the daemon's does).
  void* view = ::mmap(nullptr, object->bytes(), PROT_READ, MAP_SHARED, object->fd(), 0);
  ASSERT_NE(view, MAP_FAILED);
  EXPECT_EQ(static_cast<const unsigned char*>(view)[(1 << 20) - 1], 0x5a);
  ::munmap(view, object->bytes());
  // Nobody, its creator included, can shrink it, grow it or lift the seals.
  const int seals = ::fcntl(object->fd(), F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  errno = 0;
  EXPECT_NE(::ftruncate(object->fd(), 4096), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::fcntl(object->fd(), F_ADD_SEALS, F_SEAL_WRITE), 0);
  struct stat st;
  ASSERT_EQ(::fstat(object->fd(), &st), 0);
  EXPECT_EQ(st.st_size, 1 << 20);
}

TEST(SealedMemfdTest, AnObjectWithoutRoomIsAnError) {
  // Far more than any machine holds: refused when reserved, so nothing
  // faults later.
  auto object = SealedMemfd::Create(uint64_t{1} << 50);
  ASSERT_FALSE(object.ok());
  EXPECT_EQ(object.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(object.status().message()).find("shared memory"), std::string::npos);
}

TEST(SealedMemfdTest, PassingToNoSocketIsUnavailable) {
  auto object = SealedMemfd::Create(4096);
  ASSERT_TRUE(object.ok()) << object.status();
  absl::Status s = object->PassTo("/nonexistent/tandemd.sock.fd", std::string(16, 'x'), 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

}  // namespace
}  // namespace tandem::client
