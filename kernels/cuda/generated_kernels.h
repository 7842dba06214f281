// Generated kernels (codegen/) in the CUDA backend: each is compiled for
// the current device's architecture through the daemon's KernelCache
// (codegen::DefaultKernelCache; registration has usually compiled it
// already, codegen/job_kernels.h), loaded once per process as a CUDA
// library (context-independent: every device of that architecture runs
// it) and launched like any kernel, so that it is captured into the
// iteration's CUDA graph as the others are.
//
// Thread-safe. Libraries stay loaded for the process's life (one per
// distinct kernel and architecture).
#ifndef TANDEM_KERNELS_CUDA_GENERATED_KERNELS_H_
#define TANDEM_KERNELS_CUDA_GENERATED_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codegen/kernel_cache.h"
#include "codegen/pointwise_kernel.h"

namespace tandem::cuda {

// The current device's compile target (architecture and driver).
absl::StatusOr<codegen::CompileTarget> CurrentTarget();

// Entry point `entry` of `kernel` (its name by default; or
// codegen::BatchEntryName) for the current device, compiled if need be and
// loaded. A kernel that failed to compile or load fails again at once (no
// second attempt).
absl::StatusOr<cudaKernel_t> LoadGeneratedKernel(const codegen::GeneratedKernel& kernel, const std::string& entry = "");

// Launches a generated pointwise kernel over `args.n` elements on `stream`
// (a grid-stride loop: at most 8 blocks per SM).
cudaError_t LaunchPointwise(cudaKernel_t kernel, DType dtype, const codegen::PointwiseKernelArgs& args,
                            cudaStream_t stream);

// Launches a batch entry over `segments` (1 to kPointwiseBatchMax alike
// tensors, each with its own pointers and element count; a segment's
// blocks are as LaunchPointwise would give it alone, at most 8 per SM).
cudaError_t LaunchPointwiseBatch(cudaKernel_t batch_entry, DType dtype,
                                 absl::Span<const codegen::PointwiseKernelArgs> segments, cudaStream_t stream);

// Generated kernels launched so far by this process (LaunchPointwise and
// LaunchPointwiseBatch), and the segments the batches held.
int64_t GeneratedKernelLaunchesForTesting();
int64_t GeneratedBatchSegmentsForTesting();

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_GENERATED_KERNELS_H_
