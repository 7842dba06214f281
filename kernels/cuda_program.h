// The CUDA backend of Program (kernels/cuda/), or its stand-in in builds
// without CUDA (kernels/cuda_unavailable.cc).
#ifndef TANDEM_KERNELS_CUDA_PROGRAM_H_
#define TANDEM_KERNELS_CUDA_PROGRAM_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/program.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<Program>> CreateCudaProgram(const Graph& graph, device::Device& device);

}  // namespace tandem

#endif  // TANDEM_KERNELS_CUDA_PROGRAM_H_
