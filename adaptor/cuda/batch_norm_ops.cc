// CUDA kernels of batch normalization (batch_norm_kernels.cu):
// native_batch_norm, _native_batch_norm_legit_functional and
// native_batch_norm_backward, one launch each. Input lists as in the
// registry (adaptor/ops/batch_norm_ops.cc).
#include "adaptor/cuda/cnn_launch.h"
#include "adaptor/cuda/kernel_util.h"
#include "adaptor/ops/cnn_rules.h"
#include "base/status_macros.h"

namespace tandem::cuda {
namespace {

bool IsFloat(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }

BatchNormLaunchParams SplitOf(const Shape& input) {
  const ChannelSplit s = SplitChannels(input);
  BatchNormLaunchParams p;
  p.outer = s.outer;
  p.channels = s.channels;
  p.inner = s.inner;
  return p;
}

// Inputs: input, weight, bias[, running_mean, running_var]. Outputs: out,
// save_mean, save_invstd[, new_running_mean, new_running_var].
absl::Status BatchNormForwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& input = args.inputs[0];
  if (!IsFloat(input.type.dtype)) return UnsupportedDType(args, input.type.dtype);
  BatchNormLaunchParams p = SplitOf(input.type.shape);
  ASSIGN_OR_RETURN(p.training, args.node->attrs.GetBool("training"));
  ASSIGN_OR_RETURN(p.momentum, args.node->attrs.GetFloat("momentum"));
  ASSIGN_OR_RETURN(p.eps, args.node->attrs.GetFloat("eps"));
  BatchNormForwardOperands op;
  op.x = input.data;
  op.weight = args.inputs[1].data;
  op.bias = args.inputs[2].data;
  if (args.inputs.size() == 5) {
    op.running_mean = args.inputs[3].data;
    op.running_var = args.inputs[4].data;
  }
  op.out = args.outputs[0].data;
  if (p.training) {
    op.save_mean = args.outputs[1].data;
    op.save_invstd = args.outputs[2].data;
  }
  if (args.outputs.size() == 5) {
    op.new_running_mean = args.outputs[3].data;
    op.new_running_var = args.outputs[4].data;
  }
  return Launched(args, LaunchBatchNormForward(input.type.dtype, p, op, context.native), input.type.dtype);
}

// Inputs: grad_out, input, weight[, running_mean, running_var], save_mean,
// save_invstd. Outputs of 0 elements (output_mask) are not computed.
absl::Status BatchNormBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& input = args.inputs[1];
  if (!IsFloat(input.type.dtype)) return UnsupportedDType(args, input.type.dtype);
  BatchNormLaunchParams p = SplitOf(input.type.shape);
  ASSIGN_OR_RETURN(p.training, args.node->attrs.GetBool("train"));
  ASSIGN_OR_RETURN(p.eps, args.node->attrs.GetFloat("eps"));
  const bool has_running = args.inputs.size() == 7;
  BatchNormBackwardOperands op;
  op.grad_output = args.inputs[0].data;
  op.x = input.data;
  op.weight = args.inputs[2].data;
  if (p.training) {
    op.mean = args.inputs[has_running ? 5 : 3].data;
    op.invstd = args.inputs[has_running ? 6 : 4].data;
  } else {
    op.mean = args.inputs[3].data;
    op.invstd = args.inputs[4].data;
  }
  auto out = [&](int i) { return args.outputs[i].numel() > 0 ? args.outputs[i].data : nullptr; };
  op.grad_input = out(0);
  op.grad_weight = out(1);
  op.grad_bias = out(2);
  if (op.grad_input == nullptr && op.grad_weight == nullptr && op.grad_bias == nullptr) return absl::OkStatus();
  return Launched(args, LaunchBatchNormBackward(input.type.dtype, p, op, context.native), input.type.dtype);
}

}  // namespace

void AddBatchNormKernels(CudaKernelTable& table) {
  table["native_batch_norm"] = BatchNormForwardKernel;
  table["_native_batch_norm_legit_functional"] = BatchNormForwardKernel;
  table["native_batch_norm_backward"] = BatchNormBackwardKernel;
}

}  // namespace tandem::cuda
