// CUDA kernels of _softmax, _safe_softmax, _softmax_backward_data,
// native_layer_norm and native_layer_norm_backward (normalization_kernels.cu;
// bfloat16 and float16 through half_launch.h).
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/sequence_launch.h"

namespace tandem::cuda {
namespace {

bool IsFloat(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }

absl::StatusOr<DimSplit> SplitAtDimAttr(const KernelArgs& args, const Shape& shape) {
  ASSIGN_OR_RETURN(int64_t dim, args.node->attrs.GetInt("dim"));
  ASSIGN_OR_RETURN(int d, NormalizeDim(dim, static_cast<int>(shape.size())));
  return SplitAtDim(shape, d);
}

// _softmax and _safe_softmax (zero_if_all_neg_inf: a slice of all -inf
// gives zeros, not NaN).
absl::Status Softmax(const CudaKernelContext& context, const KernelArgs& args, bool zero_if_all_neg_inf) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(DimSplit split, SplitAtDimAttr(args, in.type.shape));
  if (IsHalfDType(out.type.dtype)) {
    return Launched(args,
                    zero_if_all_neg_inf ? LaunchHalfSafeSoftmax(out.type.dtype, split.outer, split.size, split.inner,
                                                                in.data, out.data, context.native)
                                        : LaunchHalfSoftmax(out.type.dtype, false, split.outer, split.size, split.inner,
                                                            in.data, out.data, context.native),
                    out.type.dtype);
  }
  if (!IsFloat(out.type.dtype)) return UnsupportedDType(args, out.type.dtype);
  return Launched(args,
                  LaunchSoftmax(out.type.dtype, split.outer, split.size, split.inner, zero_if_all_neg_inf, in.data,
                                out.data, context.native),
                  out.type.dtype);
}

absl::Status SoftmaxKernel(const CudaKernelContext& context, const KernelArgs& args) {
  return Softmax(context, args, false);
}

absl::Status SafeSoftmaxKernel(const CudaKernelContext& context, const KernelArgs& args) {
  return Softmax(context, args, true);
}

absl::Status SoftmaxBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(DimSplit split, SplitAtDimAttr(args, grad.type.shape));
  if (IsHalfDType(out.type.dtype)) {
    return Launched(args,
                    LaunchHalfSoftmaxBackward(out.type.dtype, false, split.outer, split.size, split.inner, grad.data,
                                              args.inputs[1].data, out.data, context.native),
                    out.type.dtype);
  }
  if (!IsFloat(out.type.dtype)) return UnsupportedDType(args, out.type.dtype);
  return Launched(args,
                  LaunchSoftmaxBackward(out.type.dtype, split.outer, split.size, split.inner, grad.data,
                                        args.inputs[1].data, out.data, context.native),
                  out.type.dtype);
}

absl::StatusOr<std::pair<int64_t, int64_t>> Rows(const KernelArgs& args, const TensorArg& input) {
  ASSIGN_OR_RETURN(std::vector<int64_t> normalized, args.node->attrs.GetInts("normalized_shape"));
  int64_t cols = 1;
  for (int64_t d : normalized) cols *= d;
  return std::make_pair(cols == 0 ? int64_t{0} : input.numel() / cols, cols);
}

absl::Status LayerNormKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& x = args.inputs[0];
  ASSIGN_OR_RETURN(double eps, args.node->attrs.GetFloat("eps"));
  ASSIGN_OR_RETURN(auto dims, Rows(args, x));
  const void* weight = args.inputs.size() > 1 ? args.inputs[1].data : nullptr;
  const void* bias = args.inputs.size() > 2 ? args.inputs[2].data : nullptr;
  if (IsHalfDType(x.type.dtype)) {  // mean and rstd are float32 (the registry's rule)
    return Launched(
        args,
        LaunchHalfLayerNorm(x.type.dtype, dims.first, dims.second, eps, x.data, weight, bias, args.outputs[0].data,
                            args.outputs[1].as<float>(), args.outputs[2].as<float>(), context.native),
        x.type.dtype);
  }
  if (!IsFloat(x.type.dtype)) return UnsupportedDType(args, x.type.dtype);
  return Launched(args,
                  LaunchLayerNorm(x.type.dtype, dims.first, dims.second, eps, x.data, weight, bias,
                                  args.outputs[0].data, args.outputs[1].data, args.outputs[2].data, context.native),
                  x.type.dtype);
}

absl::Status LayerNormBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& x = args.inputs[1];
  ASSIGN_OR_RETURN(auto dims, Rows(args, x));
  const void* weight = args.inputs.size() > 4 ? args.inputs[4].data : nullptr;
  if (IsHalfDType(x.type.dtype)) {
    return Launched(
        args,
        LaunchHalfLayerNormBackward(x.type.dtype, dims.first, dims.second, args.inputs[0].data, x.data,
                                    args.inputs[2].as<const float>(), args.inputs[3].as<const float>(), weight,
                                    args.outputs[0].data, args.outputs[1].data, args.outputs[2].data, context.native),
        x.type.dtype);
  }
  if (!IsFloat(x.type.dtype)) return UnsupportedDType(args, x.type.dtype);
  return Launched(args,
                  LaunchLayerNormBackward(x.type.dtype, dims.first, dims.second, args.inputs[0].data, x.data,
                                          args.inputs[2].data, args.inputs[3].data, weight, args.outputs[0].data,
                                          args.outputs[1].data, args.outputs[2].data, context.native),
                  x.type.dtype);
}

}  // namespace

void AddNormalizationKernels(CudaKernelTable& table) {
  table["_softmax"] = SoftmaxKernel;
  table["_safe_softmax"] = SafeSoftmaxKernel;
  table["_softmax_backward_data"] = SoftmaxBackwardKernel;
  table["native_layer_norm"] = LayerNormKernel;
  table["native_layer_norm_backward"] = LayerNormBackwardKernel;
}

}  // namespace tandem::cuda
