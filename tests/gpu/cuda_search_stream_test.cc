// Algorithm searches below the lanes (kernels/cuda/search_stream.h): the
// search stream has the device's lowest priority, which no stream the
// device makes has, and its work is ordered with the lane's on both sides.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "device/cuda/cuda_stream.h"
#include "gtest/gtest.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/search_stream.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

cudaStream_t Native(device::Stream& stream) { return static_cast<device::CudaStream&>(stream).native(); }

TEST(SearchStream, RunsBelowEveryStreamTheDeviceMakes) {
  TANDEM_SKIP_WITHOUT_GPU();
  device::Device& gpu = *Gpu();
  int least = 0, greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  ASSERT_LT(greatest, least) << "a Hopper GPU has stream priorities";
  EXPECT_EQ(gpu.info().stream_priority_levels, least - greatest - 1);
  auto lane = gpu.CreateStream();
  ASSERT_TRUE(lane.ok()) << lane.status();
  cuda::SearchStream search;
  auto on = search.Enter(0, Native(**lane));
  ASSERT_TRUE(on.ok()) << on.status();
  ASSERT_NE(*on, Native(**lane));
  ASSERT_TRUE(search.Leave(Native(**lane)).ok());
  int search_priority = 0;
  ASSERT_EQ(cudaStreamGetPriority(*on, &search_priority), cudaSuccess);
  EXPECT_EQ(search_priority, least);
  // Every level the device gives, the default included, is above it.
  for (int level = 0; level <= gpu.info().stream_priority_levels + 1; ++level) {
    auto stream = gpu.CreateStreamWithPriority(level);
    ASSERT_TRUE(stream.ok()) << stream.status();
    int priority = 0;
    ASSERT_EQ(cudaStreamGetPriority(Native(**stream), &priority), cudaSuccess);
    EXPECT_LT(priority, least) << "level " << level;
    EXPECT_GE(priority, greatest) << "level " << level;
  }
}

// The lane writes 1s after a delay; the search, after a delay of its own,
// copies them out; the lane then writes 2s. Without the wait on entering,
// the copy reads the buffer before the 1s; without the wait on leaving,
// the 2s land before the copy.
TEST(SearchStream, KeepsTheLanesOrder) {
  TANDEM_SKIP_WITHOUT_GPU();
  device::Device& gpu = *Gpu();
  auto lane_stream = gpu.CreateStream();
  ASSERT_TRUE(lane_stream.ok()) << lane_stream.status();
  const cudaStream_t lane = Native(**lane_stream);
  constexpr size_t kBytes = size_t{1} << 20;
  void* buffer = nullptr;
  void* out = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buffer, 0, kBytes, lane), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(out, 0, kBytes, lane), cudaSuccess);
  cuda::SearchStream search;
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(cuda::LaunchDelay(20000, lane), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(buffer, 1, kBytes, lane), cudaSuccess);
    {
      const cuda::SearchScope scope(search, 0, lane);
      ASSERT_NE(scope.stream(), lane);
      ASSERT_EQ(cuda::LaunchDelay(20000, scope.stream()), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(out, buffer, kBytes, cudaMemcpyDeviceToDevice, scope.stream()), cudaSuccess);
    }
    ASSERT_EQ(cudaMemsetAsync(buffer, 2, kBytes, lane), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(lane), cudaSuccess);
    std::vector<uint8_t> copied(kBytes), left(kBytes);
    ASSERT_EQ(cudaMemcpy(copied.data(), out, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(left.data(), buffer, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(copied.front(), 1) << "round " << round;
    EXPECT_EQ(copied.back(), 1) << "round " << round;
    EXPECT_EQ(left.front(), 2) << "round " << round;
    ASSERT_EQ(cudaMemset(out, 0, kBytes), cudaSuccess);
  }
  cudaFree(buffer);
  cudaFree(out);
}

}  // namespace
}  // namespace tandem::gpu_test
