// The CUDA backend of the device interface: memory, copies, fills, streams,
// events, completions and deferred checks, on a real GPU.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <random>
#include <vector>

#include "device/cpu_device.h"
#include "device/cuda/cuda_stream.h"
#include "device/cuda_device.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

using device::Device;

TEST(CudaDevice, CountAndCreation) {
  const int count = device::CudaDeviceCount();
  EXPECT_GE(count, 0);
  auto bad = device::CreateCudaDevices(device::CudaDeviceOptions{{count + 5}});
  EXPECT_FALSE(bad.ok());
  if (count == 0) {
    std::printf("no GPU: skipping\n");
    GTEST_SKIP() << "no GPU";
  }
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  // The first count asked for CUDA's most hardware queues (run without the
  // variable set: a value from the environment is kept).
  const char* queues = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  ASSERT_NE(queues, nullptr);
  EXPECT_STREQ(queues, "32");
  auto twice = device::CreateCudaDevices(device::CudaDeviceOptions{{0, 0}});
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument) << twice.status();
  const device::DeviceInfo& info = Gpu()->info();
  EXPECT_EQ(info.backend, device::Backend::kCuda);
  EXPECT_EQ(info.name, "cuda:0");
  EXPECT_NE(info.description.find("SMs"), std::string::npos) << info.description;
  EXPECT_GT(info.capacity_bytes, uint64_t{1} << 30);
  const uint64_t free_bytes = Gpu()->FreeBytes();
  EXPECT_GT(free_bytes, 0u);
  EXPECT_LE(free_bytes, info.capacity_bytes);
}

TEST(CudaDevice, CopiesAndFillsRoundTrip) {
  TANDEM_SKIP_WITHOUT_GPU();
  Device& gpu = *Gpu();
  auto stream = gpu.CreateStream();
  ASSERT_TRUE(stream.ok());
  const size_t bytes = 3 * 1000 * 1000 + 17;
  Bytes host(bytes);
  for (auto& b : host) b = static_cast<uint8_t>(Rng()());
  auto a = gpu.Allocate(bytes);
  auto b = gpu.Allocate(bytes);
  auto pinned = gpu.AllocateHost(bytes);
  ASSERT_TRUE(a.ok() && b.ok() && pinned.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*a) % device::kDeviceAlignment, 0u);
  std::memcpy(*pinned, host.data(), bytes);
  ASSERT_TRUE(gpu.CopyToDevice(**stream, *a, *pinned, bytes).ok());
  ASSERT_TRUE(gpu.CopyOnDevice(**stream, *b, *a, bytes).ok());
  ASSERT_TRUE(gpu.CopyOnDevice(**stream, *b, *b, bytes).ok());  // same buffer: nothing to do
  ASSERT_TRUE(gpu.Fill(**stream, *a, 0x5A, bytes / 2).ok());
  Bytes back_b(bytes), back_a(bytes);
  ASSERT_TRUE(gpu.CopyToHost(**stream, back_b.data(), *b, bytes).ok());
  ASSERT_TRUE(gpu.CopyToHost(**stream, back_a.data(), *a, bytes).ok());
  ASSERT_TRUE(gpu.Synchronize(**stream).ok());
  EXPECT_TRUE(SameBytes(back_b, host));
  Bytes expect_a = host;
  std::memset(expect_a.data(), 0x5A, bytes / 2);
  EXPECT_TRUE(SameBytes(back_a, expect_a));
  auto empty = gpu.Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_NE(*empty, nullptr);
  gpu.Free(*empty);
  gpu.Free(*a);
  gpu.Free(*b);
  gpu.FreeHost(*pinned);
}

TEST(CudaDevice, OutOfMemoryIsResourceExhaustedAndRecoverable) {
  TANDEM_SKIP_WITHOUT_GPU();
  Device& gpu = *Gpu();
  auto huge = gpu.Allocate(gpu.info().capacity_bytes * 2);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_NE(huge.status().message().find("cuda:0"), absl::string_view::npos) << huge.status();
  // Nothing sticky is left behind.
  auto stream = gpu.CreateStream();
  ASSERT_TRUE(stream.ok());
  auto small = gpu.Allocate(4096);
  ASSERT_TRUE(small.ok()) << small.status();
  ASSERT_TRUE(gpu.Fill(**stream, *small, 1, 4096).ok());
  EXPECT_TRUE(gpu.Synchronize(**stream).ok());
  gpu.Free(*small);
}

TEST(CudaDevice, EventsOrderStreamsAndTime) {
  TANDEM_SKIP_WITHOUT_GPU();
  Device& gpu = *Gpu();
  auto producer = gpu.CreateStream();
  auto consumer = gpu.CreateStream();
  auto start = gpu.CreateEvent();
  auto end = gpu.CreateEvent();
  auto never = gpu.CreateEvent();
  ASSERT_TRUE(producer.ok() && consumer.ok() && start.ok() && end.ok() && never.ok());
  const size_t bytes = size_t{512} << 20;
  auto buffer = gpu.Allocate(bytes);
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE(gpu.RecordEvent(**producer, **start).ok());
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(gpu.Fill(**producer, *buffer, static_cast<uint8_t>(i), bytes).ok());
  ASSERT_TRUE(gpu.RecordEvent(**producer, **end).ok());
  // The consumer reads only after the producer's last fill.
  ASSERT_TRUE(gpu.WaitEvent(**consumer, **end).ok());
  Bytes tail(4096);
  ASSERT_TRUE(
      gpu.CopyToHost(**consumer, tail.data(), static_cast<uint8_t*>(*buffer) + bytes - tail.size(), tail.size()).ok());
  ASSERT_TRUE(gpu.Synchronize(**consumer).ok());
  for (uint8_t v : tail) ASSERT_EQ(v, 7);
  ASSERT_TRUE(gpu.Synchronize(**producer).ok());
  auto seconds = gpu.ElapsedSeconds(**start, **end);
  ASSERT_TRUE(seconds.ok()) << seconds.status();
  EXPECT_GT(*seconds, 0.0);
  std::printf("8 fills of 512 MiB: %.3f ms (%.0f GB/s)\n", *seconds * 1e3, 8.0 * bytes / *seconds / 1e9);
  EXPECT_FALSE(gpu.ElapsedSeconds(**start, **never).ok());
  gpu.Free(*buffer);
}

TEST(CudaDevice, CompletionsRunInOrderExactlyOnce) {
  TANDEM_SKIP_WITHOUT_GPU();
  Device& gpu = *Gpu();
  auto stream = gpu.CreateStream();
  ASSERT_TRUE(stream.ok());
  std::mutex mu;
  std::vector<int> order;
  std::promise<void> last;
  const int kCompletions = 50;
  for (int i = 0; i < kCompletions; ++i) {
    ASSERT_TRUE(gpu.OnComplete(**stream,
                               [&, i](absl::Status status) {
                                 EXPECT_TRUE(status.ok()) << status;
                                 std::lock_guard<std::mutex> lock(mu);
                                 order.push_back(i);
                                 if (i == kCompletions - 1) last.set_value();
                               })
                    .ok());
  }
  ASSERT_EQ(last.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(order.size(), static_cast<size_t>(kCompletions));
  for (int i = 0; i < kCompletions; ++i) EXPECT_EQ(order[i], i);
}

// Many streams with many completions pending at once: while the worker
// asks about one event, the stream's next may end too, and a stream's
// completions must still be reported in its order (the daemon's scheduler
// takes each report for the lane's oldest iteration).
TEST(CudaDevice, CompletionsOfManyBusyStreamsKeepEachStreamsOrder) {
  TANDEM_SKIP_WITHOUT_GPU();
  Device& gpu = *Gpu();
  constexpr int kStreams = 16;
  constexpr int kRounds = 400;
  constexpr size_t kBytes = size_t{1} << 20;  // a fill of a few microseconds
  std::vector<std::unique_ptr<device::Stream>> streams;
  std::vector<void*> buffers;
  for (int s = 0; s < kStreams; ++s) {
    auto stream = gpu.CreateStream();
    auto buffer = gpu.Allocate(kBytes);
    ASSERT_TRUE(stream.ok() && buffer.ok());
    streams.push_back(*std::move(stream));
    buffers.push_back(*buffer);
  }
  std::mutex mu;
  std::vector<std::vector<int>> order(kStreams);
  std::atomic<int> reported{0};
  std::promise<void> all;
  for (int round = 0; round < kRounds; ++round) {
    for (int s = 0; s < kStreams; ++s) {
      ASSERT_TRUE(gpu.Fill(*streams[s], buffers[s], static_cast<uint8_t>(round), kBytes).ok());
      ASSERT_TRUE(gpu.OnComplete(*streams[s],
                                 [&, s, round](absl::Status status) {
                                   EXPECT_TRUE(status.ok()) << status;
                                   {
                                     std::lock_guard<std::mutex> lock(mu);
                                     order[s].push_back(round);
                                   }
                                   if (reported.fetch_add(1) + 1 == kStreams * kRounds) all.set_value();
                                 })
                      .ok());
    }
  }
  ASSERT_EQ(all.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  std::lock_guard<std::mutex> lock(mu);
  for (int s = 0; s < kStreams; ++s) {
    ASSERT_EQ(order[s].size(), static_cast<size_t>(kRounds)) << "stream " << s;
    int out_of_order = 0;
    for (int i = 0; i < kRounds; ++i) out_of_order += order[s][i] != i;
    EXPECT_EQ(out_of_order, 0) << "stream " << s << " reported " << out_of_order << " completions out of order";
  }
  for (void* b : buffers) gpu.Free(b);
}

TEST(CudaDevice, DeferredAndFlushedChecksFailTheirCompletion) {
  TANDEM_SKIP_WITHOUT_GPU();
  Device& gpu = *Gpu();
  auto stream = gpu.CreateStream();
  ASSERT_TRUE(stream.ok());
  device::CudaStream* cuda = device::AsCudaStream(**stream);
  ASSERT_NE(cuda, nullptr);
  EXPECT_NE(cuda->native(), nullptr);
  const int owner = 0;
  cuda->DeferCheck(&owner, [] { return absl::InvalidArgumentError("deferred check failed"); });
  EXPECT_TRUE(cuda->HasDeferredChecks(&owner));
  absl::Status s = WaitForCompletion(gpu, **stream);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_FALSE(cuda->HasDeferredChecks(&owner));
  EXPECT_TRUE(WaitForCompletion(gpu, **stream).ok());

  cuda->DeferCheck(&owner, [] { return absl::DataLossError("flushed check failed"); });
  ASSERT_TRUE(cuda->FlushDeferredChecks().ok());
  EXPECT_FALSE(cuda->HasDeferredChecks(&owner));
  s = WaitForCompletion(gpu, **stream);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(gpu.Synchronize(**stream).ok());

  cuda->DeferCheck(&owner, [] { return absl::AbortedError("checked by Synchronize"); });
  EXPECT_EQ(gpu.Synchronize(**stream).code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(gpu.Synchronize(**stream).ok());
}

TEST(CudaDevice, CpuStreamIsNotACudaStream) {
  auto cpu = device::CreateCpuDevice({});
  ASSERT_TRUE(cpu.ok());
  auto stream = (*cpu)->CreateStream();
  ASSERT_TRUE(stream.ok());
  EXPECT_EQ(device::AsCudaStream(**stream), nullptr);
}

}  // namespace
}  // namespace tandem::gpu_test
