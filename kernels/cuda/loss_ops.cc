// CUDA kernels of the loss path: _log_softmax, its backward,
// nll_loss_forward and nll_loss_backward. The nll kernels take int64 or int32
// class labels, check every one on the GPU and report a bad one through the
// error word; they serve the 16-bit floats too (launch.h). bfloat16 and
// float16 log_softmax go to the 16-bit kernels (half_launch.h).
#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"

namespace tandem::cuda {
namespace {

bool IsFloat(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }

IndexOperand Labels(const TensorArg& target) { return IndexOperand{target.data, target.type.dtype}; }

absl::StatusOr<DimSplit> SplitAtDimAttr(const KernelArgs& args, const Shape& shape) {
  ASSIGN_OR_RETURN(int64_t dim, args.node->attrs.GetInt("dim"));
  ASSIGN_OR_RETURN(int d, NormalizeDim(dim, static_cast<int>(shape.size())));
  return SplitAtDim(shape, d);
}

absl::Status LogSoftmaxKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(DimSplit split, SplitAtDimAttr(args, in.type.shape));
  if (IsHalfDType(out.type.dtype)) {
    return Launched(args,
                    LaunchHalfSoftmax(out.type.dtype, true, split.outer, split.size, split.inner, in.data, out.data,
                                      context.native),
                    out.type.dtype);
  }
  if (!IsFloat(out.type.dtype)) return UnsupportedDType(args, out.type.dtype);
  return Launched(
      args, LaunchLogSoftmax(out.type.dtype, split.outer, split.size, split.inner, in.data, out.data, context.native),
      out.type.dtype);
}

absl::Status LogSoftmaxBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& output = args.inputs[1];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(DimSplit split, SplitAtDimAttr(args, grad.type.shape));
  if (IsHalfDType(out.type.dtype)) {
    return Launched(args,
                    LaunchHalfSoftmaxBackward(out.type.dtype, true, split.outer, split.size, split.inner, grad.data,
                                              output.data, out.data, context.native),
                    out.type.dtype);
  }
  if (!IsFloat(out.type.dtype)) return UnsupportedDType(args, out.type.dtype);
  return Launched(args,
                  LaunchLogSoftmaxBackward(out.type.dtype, split.outer, split.size, split.inner, grad.data, output.data,
                                           out.data, context.native),
                  out.type.dtype);
}

absl::StatusOr<NllParams> GetNllParams(const CudaKernelContext& context, const KernelArgs& args, const TensorArg& self,
                                       const TensorArg& target) {
  NllParams params;
  ASSIGN_OR_RETURN(int64_t reduction, args.node->attrs.GetInt("reduction", 1));
  ASSIGN_OR_RETURN(params.ignore_index, args.node->attrs.GetInt("ignore_index", -100));
  params.reduction = static_cast<int>(reduction);
  params.classes = self.type.shape.back();
  params.rows = target.numel();
  params.error = context.error;
  return params;
}

// Inputs: self, target[, weight]. Outputs: output, total_weight.
absl::Status NllLossForwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& target = args.inputs[1];
  const void* weight = args.inputs.size() > 2 ? args.inputs[2].data : nullptr;
  ASSIGN_OR_RETURN(NllParams params, GetNllParams(context, args, self, target));
  if (!IsFloat(self.type.dtype) && !IsHalfDType(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  return Launched(args,
                  LaunchNllLossForward(self.type.dtype, params, self.data, Labels(target), weight, args.outputs[0].data,
                                       args.outputs[1].data, context.native),
                  self.type.dtype);
}

// Inputs: grad_output, self, target, total_weight[, weight].
absl::Status NllLossBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& grad_output = args.inputs[0];
  const TensorArg& self = args.inputs[1];
  const TensorArg& target = args.inputs[2];
  const TensorArg& total_weight = args.inputs[3];
  const void* weight = args.inputs.size() > 4 ? args.inputs[4].data : nullptr;
  ASSIGN_OR_RETURN(NllParams params, GetNllParams(context, args, self, target));
  if (!IsFloat(self.type.dtype) && !IsHalfDType(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  return Launched(args,
                  LaunchNllLossBackward(self.type.dtype, params, grad_output.data, Labels(target), total_weight.data,
                                        weight, args.outputs[0].data, context.native),
                  self.type.dtype);
}

}  // namespace

void AddLossKernels(CudaKernelTable& table) {
  table["_log_softmax"] = LogSoftmaxKernel;
  table["_log_softmax_backward_data"] = LogSoftmaxBackwardKernel;
  table["nll_loss_forward"] = NllLossForwardKernel;
  table["nll_loss_backward"] = NllLossBackwardKernel;
}

}  // namespace tandem::cuda
