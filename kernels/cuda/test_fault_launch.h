// Launcher of the `test_fault` op's fault (test_fault.cu).
#ifndef TANDEM_KERNELS_CUDA_TEST_FAULT_LAUNCH_H_
#define TANDEM_KERNELS_CUDA_TEST_FAULT_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

// One thread that reads *trigger on the device and, when it is not 0,
// stores to an address mapped nowhere: a real illegal-address fault, which
// CUDA makes sticky (the context is unusable afterwards).
cudaError_t LaunchTestFault(const int64_t* trigger, cudaStream_t stream);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_TEST_FAULT_LAUNCH_H_
