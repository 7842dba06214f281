// CUDA kernels of the elementwise ops: arithmetic with tensors (broadcast)
// and scalars, unary math, threshold_backward, and the converting copies.
// The arithmetic matches the CPU kernels: math in the tensor's dtype, a
// scalar op's constant formed in that dtype (alpha * other) before use.
// bfloat16 and float16 tensors go to the 16-bit kernels (half_launch.h),
// which compute in float32 with float32 constants (sqrt: LaunchHalfMath).
#include <type_traits>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/strided_layout.h"
#include "kernels/half.h"

namespace tandem::cuda {
namespace {

bool IsNumeric(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kInt64; }

// `value` rounded to `dtype`, in both forms of a ScalarParam.
ScalarParam ParamIn(DType dtype, double value) {
  ScalarParam p;
  switch (dtype) {
    case DType::kFloat32:
    case DType::kBFloat16:
    case DType::kFloat16:
      p.f = static_cast<float>(value);
      break;
    case DType::kInt64:
      p.i = static_cast<int64_t>(value);
      p.f = static_cast<double>(p.i);
      break;
    default:
      p.f = value;
      break;
  }
  return p;
}

// alpha * other formed in `dtype` (float32 for the 16-bit floats), as the
// CPU kernels do.
ScalarParam ProductIn(DType dtype, double alpha, double other) {
  ScalarParam p;
  switch (dtype) {
    case DType::kFloat32:
    case DType::kBFloat16:
    case DType::kFloat16:
      p.f = static_cast<float>(alpha) * static_cast<float>(other);
      break;
    case DType::kInt64:
      p.i = static_cast<int64_t>(alpha) * static_cast<int64_t>(other);
      p.f = static_cast<double>(p.i);
      break;
    default:
      p.f = alpha * other;
      break;
  }
  return p;
}

// A .Scalar op's `other` as the kernels take it: rounded to a 16-bit
// dtype first (PyTorch converts the number to the tensor's dtype), as is
// for the others.
double OtherIn(DType dtype, double other) {
  if (dtype == DType::kBFloat16) return BFloat16(other).ToFloat();
  if (dtype == DType::kFloat16) return Float16(other).ToFloat();
  return other;
}

ScalarParam Negated(ScalarParam p) {
  p.f = -p.f;
  p.i = -p.i;
  return p;
}

HalfPointwiseOp HalfOpOf(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return HalfPointwiseOp::kAdd;
    case BinaryOp::kSub:
      return HalfPointwiseOp::kSub;
    case BinaryOp::kMul:
      return HalfPointwiseOp::kMul;
    case BinaryOp::kDiv:
      return HalfPointwiseOp::kDiv;
    case BinaryOp::kThresholdBackward:
      return HalfPointwiseOp::kThresholdBackward;
  }
  return HalfPointwiseOp::kAdd;
}

// Reads `a` and `b` at the output's indices; single elements and rank-0
// operands of another dtype become scalar operands.
absl::Status RunBinary(const CudaKernelContext& context, const KernelArgs& args, BinaryOp op, ScalarParam param) {
  const TensorArg& out = args.outputs[0];
  const DType dtype = out.type.dtype;
  if (!IsNumeric(dtype) && !IsHalfDType(dtype)) return UnsupportedDType(args, dtype);
  BinaryOperand operands[2];
  std::vector<std::vector<int64_t>> strides;
  std::vector<int> strided;  // indices of the operands read through strides
  for (int k = 0; k < 2; ++k) {
    const TensorArg& in = args.inputs[k];
    operands[k].data = in.data;
    if (in.numel() == 1 || in.type.dtype != dtype) {
      operands[k].scalar = true;
      operands[k].scalar_dtype = in.type.dtype;
    } else {
      strides.push_back(BroadcastStrides(in.type.shape, out.type.shape));
      strided.push_back(k);
    }
  }
  if (!strided.empty()) {
    ASSIGN_OR_RETURN(std::vector<StridedOperand> layouts, CollapseLayouts(out.type.shape, strides));
    for (size_t j = 0; j < strided.size(); ++j) operands[strided[j]].layout = layouts[j];
  }
  if (IsHalfDType(dtype)) {
    return Launched(args,
                    LaunchHalfPointwise(HalfOpOf(op), dtype, out.numel(), operands[0], operands[1],
                                        static_cast<float>(param.f), out.data, context.native),
                    dtype);
  }
  return Launched(args, LaunchBinary(op, dtype, out.numel(), operands[0], operands[1], out.data, param, context.native),
                  dtype);
}

// The 16-bit pointwise op of `op` (sqrt is LaunchHalfMath's).
absl::StatusOr<HalfPointwiseOp> HalfOpOf(const KernelArgs& args, UnaryOp op, DType dtype) {
  switch (op) {
    case UnaryOp::kNeg:
      return HalfPointwiseOp::kNeg;
    case UnaryOp::kRelu:
      return HalfPointwiseOp::kRelu;
    case UnaryOp::kAddConst:
      return HalfPointwiseOp::kAddConst;
    case UnaryOp::kMulConst:
      return HalfPointwiseOp::kMulConst;
    case UnaryOp::kDivConst:
      return HalfPointwiseOp::kDivConst;
    case UnaryOp::kSqrt:
      break;
  }
  return UnsupportedDType(args, dtype);
}

absl::Status RunUnary(const CudaKernelContext& context, const KernelArgs& args, UnaryOp op, ScalarParam param) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  const DType dtype = out.type.dtype;
  if (IsHalfDType(dtype) && op == UnaryOp::kSqrt) {
    BinaryOperand a;
    a.data = in.data;
    return Launched(
        args, LaunchHalfMath(HalfMathOp::kSqrt, dtype, out.numel(), &a, HalfMathParams{}, out.data, context.native),
        dtype);
  }
  if (IsHalfDType(dtype)) {
    ASSIGN_OR_RETURN(HalfPointwiseOp half_op, HalfOpOf(args, op, dtype));
    BinaryOperand a;
    a.data = in.data;
    return Launched(args,
                    LaunchHalfPointwise(half_op, dtype, out.numel(), a, BinaryOperand{}, static_cast<float>(param.f),
                                        out.data, context.native),
                    dtype);
  }
  if (!IsNumeric(dtype)) return UnsupportedDType(args, dtype);
  return Launched(args, LaunchUnary(op, dtype, out.numel(), in.data, StridedOperand{}, out.data, param, context.native),
                  dtype);
}

template <BinaryOp kOp>
absl::Status ArithTensorKernel(const CudaKernelContext& context, const KernelArgs& args) {
  double alpha = 1.0;
  if constexpr (kOp == BinaryOp::kAdd || kOp == BinaryOp::kSub) {
    ASSIGN_OR_RETURN(alpha, args.node->attrs.GetFloat("alpha", 1.0));
  }
  return RunBinary(context, args, kOp, ParamIn(args.outputs[0].type.dtype, alpha));
}

absl::Status AddScalarKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(double other, args.node->attrs.GetFloat("other"));
  ASSIGN_OR_RETURN(double alpha, args.node->attrs.GetFloat("alpha", 1.0));
  const DType dtype = args.outputs[0].type.dtype;
  return RunUnary(context, args, UnaryOp::kAddConst, ProductIn(dtype, alpha, OtherIn(dtype, other)));
}

// self - s computed as self + (-s): negation is exact, so the result is the
// same.
absl::Status SubScalarKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(double other, args.node->attrs.GetFloat("other"));
  ASSIGN_OR_RETURN(double alpha, args.node->attrs.GetFloat("alpha", 1.0));
  const DType dtype = args.outputs[0].type.dtype;
  return RunUnary(context, args, UnaryOp::kAddConst, Negated(ProductIn(dtype, alpha, OtherIn(dtype, other))));
}

template <UnaryOp kOp>
absl::Status ScalarOperandKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(double other, args.node->attrs.GetFloat("other"));
  const DType dtype = args.outputs[0].type.dtype;
  return RunUnary(context, args, kOp, ParamIn(dtype, OtherIn(dtype, other)));
}

template <UnaryOp kOp>
absl::Status UnaryKernel(const CudaKernelContext& context, const KernelArgs& args) {
  return RunUnary(context, args, kOp, ScalarParam{});
}

absl::Status ThresholdBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(double threshold, args.node->attrs.GetFloat("threshold"));
  return RunBinary(context, args, BinaryOp::kThresholdBackward, ParamIn(args.outputs[0].type.dtype, threshold));
}

// out = src broadcast to out's shape and converted to out's dtype; reads only
// src (out may be copy's `self`).
absl::Status ConvertingCopy(const CudaKernelContext& context, const KernelArgs& args, const TensorArg& src,
                            const TensorArg& out) {
  if (src.type.dtype == out.type.dtype && src.numel() == out.numel()) {
    return CopyBytes(context, out.data, src.data, out.type.bytes());
  }
  ASSIGN_OR_RETURN(StridedOperand layout, BroadcastLayout(src.type.shape, out.type.shape));
  if (IsHalfDType(src.type.dtype) || IsHalfDType(out.type.dtype)) {
    return Launched(
        args,
        LaunchHalfConvertCopy(out.type.dtype, src.type.dtype, out.numel(), src.data, layout, out.data, context.native),
        src.type.dtype);
  }
  return Launched(
      args, LaunchConvertCopy(out.type.dtype, src.type.dtype, out.numel(), src.data, layout, out.data, context.native),
      src.type.dtype);
}

absl::Status CopyKernel(const CudaKernelContext& context, const KernelArgs& args) {
  return ConvertingCopy(context, args, args.inputs[1], args.outputs[0]);
}

absl::Status ToCopyKernel(const CudaKernelContext& context, const KernelArgs& args) {
  return ConvertingCopy(context, args, args.inputs[0], args.outputs[0]);
}

}  // namespace

void AddElementwiseKernels(CudaKernelTable& table) {
  table["add.Tensor"] = ArithTensorKernel<BinaryOp::kAdd>;
  table["sub.Tensor"] = ArithTensorKernel<BinaryOp::kSub>;
  table["mul.Tensor"] = ArithTensorKernel<BinaryOp::kMul>;
  table["div.Tensor"] = ArithTensorKernel<BinaryOp::kDiv>;
  table["add.Scalar"] = AddScalarKernel;
  table["sub.Scalar"] = SubScalarKernel;
  table["mul.Scalar"] = ScalarOperandKernel<UnaryOp::kMulConst>;
  table["div.Scalar"] = ScalarOperandKernel<UnaryOp::kDivConst>;
  table["neg"] = UnaryKernel<UnaryOp::kNeg>;
  table["relu"] = UnaryKernel<UnaryOp::kRelu>;
  table["sqrt"] = UnaryKernel<UnaryOp::kSqrt>;
  table["threshold_backward"] = ThresholdBackwardKernel;
  table["copy"] = CopyKernel;
  table["_to_copy"] = ToCopyKernel;
}

}  // namespace tandem::cuda
