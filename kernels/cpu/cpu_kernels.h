// Reference CPU kernels: one per registered op, plain loops (float math in
// the tensor's dtype, accumulation in double where PyTorch accumulates in
// wider precision). They are the correctness oracle for the CUDA kernels.
// bfloat16 and float16 tensors, where an op takes them, run the float32
// kernel on widened copies and round once at the end (half_kernels.h).
//
// A CPU kernel runs synchronously on the calling thread (a CPU stream's
// worker) and returns INVALID_ARGUMENT for bad data (out-of-range indices).
#ifndef TANDEM_KERNELS_CPU_CPU_KERNELS_H_
#define TANDEM_KERNELS_CPU_CPU_KERNELS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/kernel.h"

namespace tandem::cpu {

using CpuKernelFn = absl::Status (*)(const KernelArgs& args);

// nullptr when the op has no CPU kernel.
CpuKernelFn FindCpuKernel(absl::string_view op);

}  // namespace tandem::cpu

#endif  // TANDEM_KERNELS_CPU_CPU_KERNELS_H_
