// A client's shared-memory region as the daemon maps it: one registered with
// a device is populated (every page resident) before the registration, so
// that pinning it does not fault its pages in under the driver's lock.
#include "server/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "base/unique_fd.h"
#include "device/cpu_device.h"
#include "gtest/gtest.h"

namespace tandem::server {
namespace {

constexpr uint64_t kBytes = uint64_t{4} << 20;

// A fresh sealed memfd of kBytes whose pages were never touched.
UniqueFd FreshMemfd() {
  UniqueFd fd(::memfd_create("region", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  EXPECT_GE(fd.get(), 0);
  EXPECT_EQ(::ftruncate(fd.get(), static_cast<off_t>(kBytes)), 0);
  EXPECT_EQ(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK), 0);
  return fd;
}

// How many of the mapping's pages are resident.
size_t ResidentPages(const SharedRegion& region) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((region.bytes() + page - 1) / page);
  EXPECT_EQ(::mincore(const_cast<char*>(region.base()), region.bytes(), in.data()), 0);
  size_t resident = 0;
  for (unsigned char c : in) resident += c & 1;
  return resident;
}

TEST(SharedRegion, ARegionForADeviceIsPopulatedBeforeItIsRegistered) {
  auto cpu = device::CreateCpuDevice(device::CpuDeviceOptions{});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const size_t pages = kBytes / static_cast<size_t>(::sysconf(_SC_PAGESIZE));

  UniqueFd plain = FreshMemfd();
  auto unregistered = SharedRegion::Map(1, plain, kBytes, /*devices=*/{}, kBytes);
  ASSERT_TRUE(unregistered.ok()) << unregistered.status();
  EXPECT_EQ(ResidentPages(**unregistered), 0u) << "nothing touched the pages yet";

  UniqueFd pinned = FreshMemfd();
  auto registered = SharedRegion::Map(2, pinned, kBytes, {cpu->get()}, kBytes);
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(ResidentPages(**registered), pages);
}

}  // namespace
}  // namespace tandem::server
