// The CUDA entry points of a build without nvcc.
#include "device/cuda_device.h"

namespace tandem::device {

int CudaDeviceCount() { return 0; }

absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateCudaDevices(const CudaDeviceOptions&) {
  return absl::UnavailableError("this build of Tandem has no CUDA backend (nvcc was not found)");
}

}  // namespace tandem::device
