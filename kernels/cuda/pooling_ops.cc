// CUDA kernels of 2-D pooling (pooling_kernels.cu): max_pool2d_with_indices,
// avg_pool2d, _adaptive_avg_pool2d (and adaptive_avg_pool2d) and their
// backwards. Geometry from cnn_rules.h, as on the CPU. float32, float64,
// bfloat16 and float16 (16-bit in float32 arithmetic); indices int64.
#include "base/status_macros.h"
#include "ir/ops/cnn_rules.h"
#include "kernels/cuda/cnn_launch.h"
#include "kernels/cuda/kernel_util.h"

namespace tandem::cuda {
namespace {

// float32, float64 and the 16-bit floats.
bool HasKernelFor(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kBFloat16 || dtype == DType::kFloat16;
}

absl::StatusOr<PoolLaunchParams> ParamsOf(const KernelArgs& args, const Shape& self, PoolKind kind) {
  ASSIGN_OR_RETURN(Pool2dParams params, ParsePool2dParams(args.node->attrs, kind));
  ASSIGN_OR_RETURN(Pool2dGeometry g, Pool2dShape(params, self));
  PoolLaunchParams p;
  p.planes = g.planes;
  p.h = g.h;
  p.w = g.w;
  p.oh = g.oh;
  p.ow = g.ow;
  for (int d = 0; d < 2; ++d) {
    p.kernel[d] = params.kernel[d];
    p.stride[d] = params.stride[d];
    p.padding[d] = params.padding[d];
    p.dilation[d] = params.dilation[d];
  }
  p.count_include_pad = params.count_include_pad;
  p.divisor_override = params.divisor_override;
  p.channels = params.channels_last ? self[3] : 0;
  return p;
}

// Planes and sizes of an adaptive pooling from self's and the output's shapes.
PoolLaunchParams AdaptiveParams(const Shape& self, const Shape& out) {
  PoolLaunchParams p;
  const size_t r = self.size();
  p.h = self[r - 2];
  p.w = self[r - 1];
  p.oh = out[r - 2];
  p.ow = out[r - 1];
  p.planes = NumElements(self) / (p.h * p.w);
  return p;
}

absl::Status MaxPoolKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  if (!HasKernelFor(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  ASSIGN_OR_RETURN(PoolLaunchParams p, ParamsOf(args, self.type.shape, PoolKind::kMax));
  return Launched(args,
                  LaunchMaxPool2d(self.type.dtype, p, self.data, args.outputs[0].data, args.outputs[1].as<int64_t>(),
                                  context.native),
                  self.type.dtype);
}

// Inputs: grad_output, self, indices.
absl::Status MaxPoolBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[1];
  if (!HasKernelFor(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  ASSIGN_OR_RETURN(PoolLaunchParams p, ParamsOf(args, self.type.shape, PoolKind::kMax));
  return Launched(args,
                  LaunchMaxPool2dBackward(self.type.dtype, p, args.inputs[0].data, args.inputs[2].as<const int64_t>(),
                                          args.outputs[0].data, context.native),
                  self.type.dtype);
}

absl::Status AvgPoolKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  if (!HasKernelFor(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  ASSIGN_OR_RETURN(PoolLaunchParams p, ParamsOf(args, self.type.shape, PoolKind::kAvg));
  return Launched(args, LaunchAvgPool2d(self.type.dtype, p, self.data, args.outputs[0].data, context.native),
                  self.type.dtype);
}

// Inputs: grad_output, self.
absl::Status AvgPoolBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[1];
  if (!HasKernelFor(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  ASSIGN_OR_RETURN(PoolLaunchParams p, ParamsOf(args, self.type.shape, PoolKind::kAvg));
  return Launched(
      args, LaunchAvgPool2dBackward(self.type.dtype, p, args.inputs[0].data, args.outputs[0].data, context.native),
      self.type.dtype);
}

absl::Status AdaptiveAvgPoolKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  if (!HasKernelFor(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  const PoolLaunchParams p = AdaptiveParams(self.type.shape, args.outputs[0].type.shape);
  return Launched(args, LaunchAdaptiveAvgPool2d(self.type.dtype, p, self.data, args.outputs[0].data, context.native),
                  self.type.dtype);
}

// Inputs: grad_output, self.
absl::Status AdaptiveAvgPoolBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& self = args.inputs[1];
  if (!HasKernelFor(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  const PoolLaunchParams p = AdaptiveParams(self.type.shape, grad.type.shape);
  return Launched(args,
                  LaunchAdaptiveAvgPool2dBackward(self.type.dtype, p, grad.data, args.outputs[0].data, context.native),
                  self.type.dtype);
}

}  // namespace

void AddPoolingKernels(CudaKernelTable& table) {
  table["max_pool2d_with_indices"] = MaxPoolKernel;
  table["max_pool2d_with_indices_backward"] = MaxPoolBackwardKernel;
  table["avg_pool2d"] = AvgPoolKernel;
  table["avg_pool2d_backward"] = AvgPoolBackwardKernel;
  table["_adaptive_avg_pool2d"] = AdaptiveAvgPoolKernel;
  table["_adaptive_avg_pool2d_backward"] = AdaptiveAvgPoolBackwardKernel;
}

}  // namespace tandem::cuda
