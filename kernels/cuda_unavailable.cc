// The CUDA Program entry point of a build without nvcc.
#include "kernels/cuda_program.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<Program>> CreateCudaProgram(const Graph&, device::Device&) {
  return absl::UnavailableError("this build of Tandem has no CUDA kernels (nvcc was not found)");
}

}  // namespace tandem
