// A kernel fault (an illegal address) leaves the GPU context unusable, and
// the driver then never runs the stream's host callbacks. The device must
// still report every completion, with the error, rather than leave the
// daemon waiting forever; and later work must fail rather than hang. Its own
// test binary: after the fault this process cannot use the GPU again.
#include <chrono>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_program_options.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

TEST(CudaFault, CompletionReportsAContextFault) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker g;
  const int x = g.Feed({DType::kFloat32, {int64_t{1} << 20}});
  g.Add1("relu", {x});
  GpuRun run(g.graph());
  ASSERT_TRUE(run.Upload(g.RandomFeeds(Rng())).ok());
  auto program = cuda::CreateCudaProgram(g.graph(), *Gpu(), {.use_graphs = false});
  ASSERT_TRUE(program.ok());
  std::vector<void*> bogus = run.addresses();
  bogus[x] = reinterpret_cast<void*>(uintptr_t{1} << 46);      // mapped nowhere
  ASSERT_TRUE((*program)->Enqueue(run.stream(), bogus).ok());  // the fault comes later, on the GPU
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = WaitForCompletion(*Gpu(), run.stream());
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("completion after the fault: %.3f s: %s\n", waited, status.ToString().c_str());
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.code(), absl::StatusCode::kDeadlineExceeded) << "the completion never came";
  EXPECT_LT(waited, 10.0);
  // Later work fails instead of hanging.
  absl::Status next = (*program)->Enqueue(run.stream(), run.addresses());
  if (next.ok()) next = WaitForCompletion(*Gpu(), run.stream());
  std::printf("next iteration: %s\n", next.ToString().c_str());
  EXPECT_FALSE(next.ok());
  EXPECT_NE(next.code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace tandem::gpu_test
