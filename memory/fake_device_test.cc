#include "memory/fake_device.h"

#include <gtest/gtest.h>

#include <cstring>

namespace tandem::memory {
namespace {

TEST(FakeDeviceTest, SimulatedAllocationsAreAlignedBoundedAndDistinct) {
  FakeDevice device({.capacity_bytes = 4096});
  auto a = device.Allocate(1000);
  auto b = device.Allocate(0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*a) % device::kDeviceAlignment, 0u);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(device.used_bytes(), 1024u + 256);
  EXPECT_EQ(device.FreeBytes(), 4096u - 1280);
  auto too_big = device.Allocate(4096);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(device.IsLive(*a, 1024));
  EXPECT_FALSE(device.IsLive(*a, 1025));
  device.Free(*a);
  device.Free(*a);
  EXPECT_EQ(device.bad_frees(), 1);
  EXPECT_EQ(device.live_allocations(), 1);
  device.Free(*b);
  EXPECT_EQ(device.used_bytes(), 0u);
}

TEST(FakeDeviceTest, InjectedFailures) {
  FakeDevice device({.capacity_bytes = 1 << 20});
  device.FailNextAllocations(2);
  EXPECT_FALSE(device.Allocate(256).ok());
  EXPECT_FALSE(device.Allocate(256).ok());
  auto ok = device.Allocate(256);
  ASSERT_TRUE(ok.ok());
  auto other = device.Allocate(256);
  ASSERT_TRUE(other.ok());
  auto stream = device.CreateStream();
  ASSERT_TRUE(stream.ok());
  device.FailNextCopies(1);
  EXPECT_EQ(device.CopyOnDevice(**stream, *ok, *other, 256).code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(device.CopyOnDevice(**stream, *ok, *other, 256).ok());
  EXPECT_EQ(device.device_copies(), 1);
}

TEST(FakeDeviceTest, CopiesOutsideLiveMemoryOrOverlappingAreRefused) {
  FakeDevice device({.capacity_bytes = 1 << 20});
  auto a = device.Allocate(1024);
  ASSERT_TRUE(a.ok());
  auto stream = device.CreateStream();
  ASSERT_TRUE(stream.ok());
  char* base = static_cast<char*>(*a);
  EXPECT_FALSE(device.CopyOnDevice(**stream, base, base + 256, 512).ok());  // overlap
  EXPECT_TRUE(device.CopyOnDevice(**stream, base, base + 512, 512).ok());
  EXPECT_FALSE(device.CopyOnDevice(**stream, base + 768, base, 512).ok());  // past the end
  char host[16];
  EXPECT_FALSE(device.CopyToHost(**stream, host, base - 256, 16).ok());
  EXPECT_FALSE(device.Fill(**stream, base + 1020, 0, 8).ok());
  EXPECT_EQ(device.bad_copies(), 4);
}

TEST(FakeDeviceTest, BackedCopiesMoveData) {
  FakeDevice device({.capacity_bytes = 1 << 20, .backed = true});
  auto a = device.Allocate(64);
  auto b = device.Allocate(64);
  ASSERT_TRUE(a.ok() && b.ok());
  auto stream = device.CreateStream();
  ASSERT_TRUE(stream.ok());
  const char text[] = "tandem";
  ASSERT_TRUE(device.CopyToDevice(**stream, *a, text, sizeof(text)).ok());
  ASSERT_TRUE(device.CopyOnDevice(**stream, *b, *a, sizeof(text)).ok());
  char back[sizeof(text)] = {};
  ASSERT_TRUE(device.CopyToHost(**stream, back, *b, sizeof(text)).ok());
  EXPECT_STREQ(back, "tandem");
  ASSERT_TRUE(device.Fill(**stream, *b, 'x', 3).ok());
  ASSERT_TRUE(device.CopyToHost(**stream, back, *b, sizeof(text)).ok());
  EXPECT_STREQ(back, "xxxdem");
  bool called = false;
  ASSERT_TRUE(device.OnComplete(**stream, [&](absl::Status s) { called = s.ok(); }).ok());
  EXPECT_TRUE(called);
  device.Free(*a);
  device.Free(*b);
}

}  // namespace
}  // namespace tandem::memory
