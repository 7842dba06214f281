#include "kernels/program.h"

#include "kernels/cpu/cpu_program.h"
#include "kernels/cuda_program.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<Program>> CreateProgram(const Graph& graph, device::Device& device) {
  switch (device.info().backend) {
    case device::Backend::kCpu:
      return cpu::CreateCpuProgram(graph);
    case device::Backend::kCuda:
      return CreateCudaProgram(graph, device);
  }
  return absl::InternalError("unknown device backend");
}

}  // namespace tandem
