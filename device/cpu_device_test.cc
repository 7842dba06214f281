#include "device/cpu_device.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::device {
namespace {

std::unique_ptr<Device> MakeDevice(uint64_t capacity = uint64_t{1} << 20) {
  auto d = CreateCpuDevice({.capacity_bytes = capacity});
  EXPECT_TRUE(d.ok());
  return *std::move(d);
}

TEST(CpuDevice, AllocationIsAlignedAndBoundedByCapacity) {
  auto dev = MakeDevice(4096);
  auto a = dev->Allocate(1000);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*a) % kDeviceAlignment, 0u);
  EXPECT_EQ(dev->FreeBytes(), 4096u - 1024u);
  auto b = dev->Allocate(4000);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  dev->Free(*a);
  EXPECT_EQ(dev->FreeBytes(), 4096u);
  EXPECT_FALSE(CreateCpuDevice({.capacity_bytes = 0}).ok());
}

TEST(CpuDevice, StreamRunsWorkInOrderAndCopies) {
  auto dev = MakeDevice();
  auto stream = dev->CreateStream();
  ASSERT_TRUE(stream.ok());
  std::vector<float> host(256), back(256, -1.f);
  for (int i = 0; i < 256; ++i) host[i] = static_cast<float>(i) * 0.5f + 1;
  void* d = *dev->Allocate(1024);
  ASSERT_TRUE(dev->CopyToDevice(**stream, d, host.data(), 1024).ok());
  std::vector<int> order;
  auto& cpu = static_cast<CpuStream&>(**stream);
  for (int i = 0; i < 5; ++i) {
    cpu.Enqueue([&order, i] {
      order.push_back(i);
      return absl::OkStatus();
    });
  }
  ASSERT_TRUE(dev->CopyToHost(**stream, back.data(), d, 1024).ok());
  ASSERT_TRUE(dev->Synchronize(**stream).ok());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(std::memcmp(host.data(), back.data(), 1024), 0);
  dev->Free(d);
}

TEST(CpuDevice, FailedWorkSkipsTheRestUntilCompletionReportsIt) {
  auto dev = MakeDevice();
  auto stream = *dev->CreateStream();
  auto& cpu = static_cast<CpuStream&>(*stream);
  std::atomic<int> ran{0};
  cpu.Enqueue([] { return absl::InvalidArgumentError("bad label 12"); });
  cpu.Enqueue([&] {
    ran++;
    return absl::OkStatus();
  });
  absl::Status reported;
  std::atomic<bool> done{false};
  ASSERT_TRUE(dev->OnComplete(*stream,
                              [&](absl::Status s) {
                                reported = s;
                                done = true;
                              })
                  .ok());
  ASSERT_TRUE(dev->Synchronize(*stream).ok());  // the error was consumed by OnComplete
  EXPECT_TRUE(done);
  EXPECT_EQ(reported.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ran.load(), 0);
  // The stream works again afterwards.
  cpu.Enqueue([&] {
    ran++;
    return absl::OkStatus();
  });
  ASSERT_TRUE(dev->Synchronize(*stream).ok());
  EXPECT_EQ(ran.load(), 1);
}

TEST(CpuDevice, EventsOrderStreamsAndTime) {
  auto dev = MakeDevice();
  auto s1 = *dev->CreateStream();
  auto s2 = *dev->CreateStream();
  auto start = *dev->CreateEvent();
  auto end = *dev->CreateEvent();
  std::atomic<int> value{0};
  ASSERT_TRUE(dev->RecordEvent(*s1, *start).ok());
  static_cast<CpuStream&>(*s1).Enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    value = 1;
    return absl::OkStatus();
  });
  ASSERT_TRUE(dev->RecordEvent(*s1, *end).ok());
  ASSERT_TRUE(dev->WaitEvent(*s2, *end).ok());
  int seen = -1;
  static_cast<CpuStream&>(*s2).Enqueue([&] {
    seen = value;
    return absl::OkStatus();
  });
  ASSERT_TRUE(dev->Synchronize(*s2).ok());
  EXPECT_EQ(seen, 1);
  auto elapsed = dev->ElapsedSeconds(*start, *end);
  ASSERT_TRUE(elapsed.ok());
  EXPECT_GE(*elapsed, 0.025);
}

}  // namespace
}  // namespace tandem::device
