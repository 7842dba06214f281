// The fault of the `test_fault` op (ir/ops/test_ops.cc).
#include <cstdint>

#include "kernels/cuda/test_fault_launch.h"

namespace tandem::cuda {
namespace {

// 2^46: beyond any allocation of a 49-bit virtual address space's user
// half that CUDA hands out, and mapped by nothing.
constexpr uintptr_t kNowhere = uintptr_t{1} << 46;

__global__ void FaultIfTriggered(const int64_t* trigger) {
  if (*trigger != 0) *reinterpret_cast<volatile int*>(kNowhere) = 1;
}

}  // namespace

cudaError_t LaunchTestFault(const int64_t* trigger, cudaStream_t stream) {
  FaultIfTriggered<<<1, 1, 0, stream>>>(trigger);
  return cudaGetLastError();
}

}  // namespace tandem::cuda
