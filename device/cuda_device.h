// The CUDA backend of the device interface: one device (one primary context)
// per visible GPU.
//
// Built from device/cuda/ when nvcc is found; otherwise
// device/cuda_unavailable.cc provides these entry points and they report
// that the build has no CUDA. Either way the daemon links the same symbols,
// so no code branches on the preprocessor.
#ifndef TANDEM_DEVICE_CUDA_DEVICE_H_
#define TANDEM_DEVICE_CUDA_DEVICE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "device/device.h"

namespace tandem::device {

struct CudaDeviceOptions {
  std::vector<int> ordinals;  // GPUs to open; empty: every visible GPU
};

// Number of usable GPUs; 0 where there is no driver, no GPU, or no CUDA in
// the build (never an error: the daemon then falls back to the CPU). The
// first call sets CUDA_DEVICE_MAX_CONNECTIONS to 32 where the environment
// does not set it, before the process's first CUDA call: independent lane
// streams then get hardware queues of their own (cuda/cuda_device.cc).
int CudaDeviceCount();

absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateCudaDevices(const CudaDeviceOptions& options);

}  // namespace tandem::device

#endif  // TANDEM_DEVICE_CUDA_DEVICE_H_
