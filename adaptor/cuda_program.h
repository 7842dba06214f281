// The CUDA backend of Program (adaptor/cuda/), or its stand-in in builds
// without CUDA (adaptor/cuda_unavailable.cc).
#ifndef TANDEM_ADAPTOR_CUDA_PROGRAM_H_
#define TANDEM_ADAPTOR_CUDA_PROGRAM_H_

#include <memory>

#include "absl/status/statusor.h"
#include "adaptor/program.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<Program>> CreateCudaProgram(const Graph& graph, device::Device& device);

}  // namespace tandem

#endif  // TANDEM_ADAPTOR_CUDA_PROGRAM_H_
