// ShmObject: a named, mapped, writable object the daemon can open; gone
// (unlinked and unmapped) with the object; and an object /dev/shm has no
// room for is an error, not a crash when its bytes are written.
#include "client/shm_object.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace tandem::client {
namespace {

TEST(ShmObjectTest, IsNamedMappedAndGoneWithTheObject) {
  std::string name;
  {
    auto object = ShmObject::Create(1 << 20, /*populate=*/true);
    ASSERT_TRUE(object.ok()) << object.status();
    name = object->name();
    EXPECT_EQ(name.rfind("/tandem-", 0), 0u) << name;
    EXPECT_EQ(name.size(), std::string("/tandem-").size() + 32);
    ASSERT_EQ(object->bytes(), 1u << 20);
    std::memset(object->data(), 0x5a, object->bytes());  // every page writable
    // Another mapping of the name sees the bytes (as the daemon's does).
    int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    void* view = ::mmap(nullptr, object->bytes(), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    ASSERT_NE(view, MAP_FAILED);
    EXPECT_EQ(static_cast<const unsigned char*>(view)[(1 << 20) - 1], 0x5a);
    ::munmap(view, object->bytes());
  }
  errno = 0;
  EXPECT_LT(::shm_open(name.c_str(), O_RDONLY, 0), 0) << "the name outlived its object";
  EXPECT_EQ(errno, ENOENT);
}

TEST(ShmObjectTest, AnObjectWithoutRoomIsAnError) {
  // Far more than any /dev/shm holds: refused when reserved, so nothing is
  // left behind and nothing faults later.
  auto object = ShmObject::Create(uint64_t{1} << 50);
  ASSERT_FALSE(object.ok());
  EXPECT_EQ(object.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(object.status().message()).find("shared memory"), std::string::npos);
}

}  // namespace
}  // namespace tandem::client
