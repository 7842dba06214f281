// The CUDA kernel of `test_fault` (ir/ops/test_ops.cc): a copy of x, then
// the launch that faults the context when trigger is not 0 (test_fault.cu).
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/test_fault_launch.h"

namespace tandem::cuda {
namespace {

absl::Status TestFaultKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& x = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  if (absl::Status s = CopyBytes(context, out.data, x.data, out.type.bytes()); !s.ok()) return s;
  return Launched(args, LaunchTestFault(args.inputs[1].as<const int64_t>(), context.native), x.type.dtype);
}

}  // namespace

void AddTestKernels(CudaKernelTable& table) { table["test_fault"] = TestFaultKernel; }

}  // namespace tandem::cuda
