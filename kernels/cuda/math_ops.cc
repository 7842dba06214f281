// CUDA kernels of the pointwise math family (ir/ops/math_table.h): the
// host side, which resolves a node's MathOp and numbers (MathCallOf), lays
// out its operands at the output's broadcast indices, and launches
// math_kernels.cu. Every dtype the registry accepts has a kernel: operands
// are read in their own dtype and computed in MathComputeOf's type.
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/math_ops.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/math_launch.h"
#include "kernels/cuda/strided_layout.h"
#include "kernels/half.h"

namespace tandem::cuda {
namespace {

absl::Status RunMathNode(const MathOpInfo& info, const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  const DType dtype = out.type.dtype;
  ASSIGN_OR_RETURN(MathCall call, MathCallOf(info, args.node->attrs, dtype));
  MathLaunch launch;
  launch.op = call.op;
  launch.params = call.params;
  // A `.Scalar` op's number rounded to a 16-bit result's type first, as the
  // elementwise kernels take it.
  if (dtype == DType::kBFloat16) launch.params.other_f = BFloat16(call.params.other_f).ToFloat();
  if (dtype == DType::kFloat16) launch.params.other_f = Float16(call.params.other_f).ToFloat();
  launch.out_dtype = dtype;
  launch.n = out.numel();
  launch.out = out.data;
  const TensorArg& x = args.inputs[0];
  launch.x.data = x.data;
  launch.x.dtype = x.type.dtype;
  launch.has_y = args.inputs.size() > 1;
  std::vector<std::vector<int64_t>> strides = {BroadcastStrides(x.type.shape, out.type.shape)};
  if (launch.has_y) {
    const TensorArg& y = args.inputs[1];
    launch.y.data = y.data;
    launch.y.dtype = y.type.dtype;
    strides.push_back(BroadcastStrides(y.type.shape, out.type.shape));
  }
  launch.compute = MathComputeOf(info.kind, dtype, x.type.dtype, launch.has_y ? launch.y.dtype : x.type.dtype);
  ASSIGN_OR_RETURN(std::vector<StridedOperand> layouts, CollapseLayouts(out.type.shape, strides));
  launch.x.layout = layouts[0];
  if (launch.has_y) launch.y.layout = layouts[1];
  return Launched(args, LaunchMath(launch, context.native), dtype);
}

// One kernel function per table entry (the kernel table holds plain
// function pointers).
template <size_t kIndex>
absl::Status MathKernel(const CudaKernelContext& context, const KernelArgs& args) {
  return RunMathNode(kMathOps[kIndex], context, args);
}

template <size_t... kIndex>
void AddAll(CudaKernelTable& table, std::index_sequence<kIndex...>) {
  ((table[kMathOps[kIndex].name] = MathKernel<kIndex>), ...);
}

}  // namespace

void AddMathKernels(CudaKernelTable& table) {
  AddAll(table, std::make_index_sequence<sizeof(kMathOps) / sizeof(kMathOps[0])>());
}

}  // namespace tandem::cuda
