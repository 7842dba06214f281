// CUDA kernels of native_group_norm and native_group_norm_backward
// (group_norm_kernels.cu): float32, float64, bfloat16 and float16, the
// statistics in the input's dtype; geometry from ir/ops/spatial_rules.h.
#include "base/status_macros.h"
#include "ir/ops/spatial_rules.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/spatial_launch.h"

namespace tandem::cuda {
namespace {

bool HasKernelFor(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kBFloat16 || dtype == DType::kFloat16;
}

absl::StatusOr<GroupNormLaunchParams> ParamsOf(const KernelArgs& args, const Shape& input) {
  ASSIGN_OR_RETURN(GroupNormGeometry g, ParseGroupNorm(args.node->attrs, input));
  GroupNormLaunchParams p;
  p.n = g.n;
  p.c = g.c;
  p.hxw = g.hxw;
  p.groups = g.groups;
  return p;
}

// Inputs: input, weight (optional), bias (optional). Outputs: out, mean,
// rstd.
absl::Status GroupNormKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& x = args.inputs[0];
  if (!HasKernelFor(x.type.dtype)) return UnsupportedDType(args, x.type.dtype);
  ASSIGN_OR_RETURN(GroupNormLaunchParams p, ParamsOf(args, x.type.shape));
  ASSIGN_OR_RETURN(p.eps, args.node->attrs.GetFloat("eps"));
  const void* weight = args.inputs.size() > 1 ? args.inputs[1].data : nullptr;
  const void* bias = args.inputs.size() > 2 ? args.inputs[2].data : nullptr;
  return Launched(args,
                  LaunchGroupNorm(x.type.dtype, p, x.data, weight, bias, args.outputs[0].data, args.outputs[1].data,
                                  args.outputs[2].data, context.native),
                  x.type.dtype);
}

// Inputs: grad_out, input, mean, rstd, weight (optional). Outputs:
// grad_input, grad_weight, grad_bias; those of 0 elements (output_mask
// false) are not computed.
absl::Status GroupNormBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& x = args.inputs[1];
  if (!HasKernelFor(x.type.dtype)) return UnsupportedDType(args, x.type.dtype);
  ASSIGN_OR_RETURN(GroupNormLaunchParams p, ParamsOf(args, x.type.shape));
  const void* weight = args.inputs.size() > 4 ? args.inputs[4].data : nullptr;
  auto out = [&](int i) { return args.outputs[i].numel() > 0 ? args.outputs[i].data : nullptr; };
  return Launched(args,
                  LaunchGroupNormBackward(x.type.dtype, p, args.inputs[0].data, x.data, args.inputs[2].data,
                                          args.inputs[3].data, weight, out(0), out(1), out(2), context.native),
                  x.type.dtype);
}

}  // namespace

void AddGroupNormKernels(CudaKernelTable& table) {
  table["native_group_norm"] = GroupNormKernel;
  table["native_group_norm_backward"] = GroupNormBackwardKernel;
}

}  // namespace tandem::cuda
