// CUDA kernels of the activations and pointwise math (sigmoid, tanh, exp,
// log, rsqrt, gelu, pow, the activation backwards, clamp, maximum/minimum,
// addcmul/addcdiv, lerp) and of native_dropout and its backward. sigmoid,
// tanh, gelu and their backwards, clamp, maximum/minimum, addcmul/addcdiv
// and the dropouts also take bfloat16 and float16 (half_launch.h).
#include <optional>
#include <string>
#include <variant>

#include "base/status_macros.h"
#include "ir/ops/dropout_mask.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/operand_layout.h"
#include "kernels/cuda/sequence_launch.h"
#include "kernels/half.h"

namespace tandem::cuda {
namespace {

// `value` in both forms, the integer one exact when the attribute is one.
ScalarParam NumberAttr(const Attrs& attrs, const char* name, double value) {
  ScalarParam p;
  p.f = value;
  auto as_int = attrs.GetInt(name);
  p.i = as_int.ok() ? *as_int : static_cast<int64_t>(value);
  return p;
}

// The 16-bit op of `op`, for the ops that have one.
std::optional<HalfMathOp> HalfMathOpOf(PointwiseOp op) {
  switch (op) {
    case PointwiseOp::kClamp:
      return HalfMathOp::kClamp;
    case PointwiseOp::kMaximum:
      return HalfMathOp::kMaximum;
    case PointwiseOp::kMinimum:
      return HalfMathOp::kMinimum;
    case PointwiseOp::kAddcmul:
      return HalfMathOp::kAddcmul;
    case PointwiseOp::kAddcdiv:
      return HalfMathOp::kAddcdiv;
    default:
      return std::nullopt;
  }
}

// The 16-bit activation of `op`, for sigmoid, tanh and their backwards.
std::optional<HalfActivationOp> HalfActivationOpOf(PointwiseOp op) {
  switch (op) {
    case PointwiseOp::kSigmoid:
      return HalfActivationOp::kSigmoid;
    case PointwiseOp::kTanh:
      return HalfActivationOp::kTanh;
    case PointwiseOp::kSigmoidBackward:
      return HalfActivationOp::kSigmoidBackward;
    case PointwiseOp::kTanhBackward:
      return HalfActivationOp::kTanhBackward;
    default:
      return std::nullopt;
  }
}

// `value` rounded to the 16-bit `dtype`, as a float.
float RoundedTo(DType dtype, double value) {
  return dtype == DType::kBFloat16 ? BFloat16(value).ToFloat() : Float16(value).ToFloat();
}

// A 16-bit op: `value` (addcmul, addcdiv) stays a float32 number; clamp's
// bounds are rounded to the 16-bit type, as PyTorch converts them.
absl::Status RunHalf(const CudaKernelContext& context, const KernelArgs& args, PointwiseOp op,
                     const PointwiseParams& params, const std::vector<BinaryOperand>& operands) {
  const TensorArg& out = args.outputs[0];
  const DType dtype = out.type.dtype;
  if (const std::optional<HalfActivationOp> activation = HalfActivationOpOf(op)) {
    // The registry gives every input the output's type, so they are read
    // contiguously.
    const void* b = args.inputs.size() > 1 ? args.inputs[1].data : nullptr;
    return Launched(
        args, LaunchHalfActivation(*activation, dtype, out.numel(), args.inputs[0].data, b, out.data, context.native),
        dtype);
  }
  const std::optional<HalfMathOp> half_op = HalfMathOpOf(op);
  if (!half_op.has_value()) return UnsupportedDType(args, dtype);
  HalfMathParams half;
  half.value = static_cast<float>(params.p.f);
  half.has_lo = params.has_lo;
  half.has_hi = params.has_hi;
  if (params.has_lo) half.lo = RoundedTo(dtype, params.lo.f);
  if (params.has_hi) half.hi = RoundedTo(dtype, params.hi.f);
  return Launched(args, LaunchHalfMath(*half_op, dtype, out.numel(), operands.data(), half, out.data, context.native),
                  dtype);
}

absl::Status Run(const CudaKernelContext& context, const KernelArgs& args, PointwiseOp op,
                 const PointwiseParams& params) {
  const TensorArg& out = args.outputs[0];
  const DType dtype = out.type.dtype;
  std::vector<const TensorArg*> inputs;
  for (const TensorArg& in : args.inputs) inputs.push_back(&in);
  ASSIGN_OR_RETURN(std::vector<BinaryOperand> operands,
                   BroadcastOperands(inputs, std::vector<DType>(inputs.size(), dtype), out.type.shape));
  if (IsHalfDType(dtype)) return RunHalf(context, args, op, params, operands);
  return Launched(args,
                  LaunchPointwise(op, dtype, out.numel(), operands.data(), static_cast<int>(operands.size()), out.data,
                                  params, context.native),
                  dtype);
}

template <PointwiseOp kOp>
absl::Status PlainKernel(const CudaKernelContext& context, const KernelArgs& args) {
  return Run(context, args, kOp, PointwiseParams{});
}

// gelu or gelu_backward of 16-bit tensors: the inputs have the output's
// type (the registry's rule), so they are read contiguously.
absl::Status RunHalfGelu(const CudaKernelContext& context, const KernelArgs& args, HalfPointwiseOp op) {
  const TensorArg& out = args.outputs[0];
  BinaryOperand a, b;
  a.data = args.inputs[0].data;
  if (args.inputs.size() > 1) b.data = args.inputs[1].data;
  return Launched(args, LaunchHalfPointwise(op, out.type.dtype, out.numel(), a, b, 0.0f, out.data, context.native),
                  out.type.dtype);
}

// The tanh form of gelu and its backward are separate kernels.
template <PointwiseOp kExact, PointwiseOp kTanh>
absl::Status GeluKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const absl::StatusOr<std::string> approximate = args.node->attrs.GetString("approximate", "none");
  if (!approximate.ok()) return approximate.status();
  const bool tanh_form = *approximate == "tanh";
  if (IsHalfDType(args.outputs[0].type.dtype)) {
    constexpr bool kBackward = kExact == PointwiseOp::kGeluBackward;
    const HalfPointwiseOp op = kBackward
                                   ? (tanh_form ? HalfPointwiseOp::kGeluTanhBackward : HalfPointwiseOp::kGeluBackward)
                                   : (tanh_form ? HalfPointwiseOp::kGeluTanh : HalfPointwiseOp::kGelu);
    return RunHalfGelu(context, args, op);
  }
  return Run(context, args, tanh_form ? kTanh : kExact, PointwiseParams{});
}

// pow.Tensor_Scalar (exponent) and pow.Scalar (self: the base).
template <PointwiseOp kOp>
absl::Status PowKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const char* name = kOp == PointwiseOp::kPowExponent ? "exponent" : "self";
  ASSIGN_OR_RETURN(double value, args.node->attrs.GetFloat(name));
  PointwiseParams params;
  params.p = NumberAttr(args.node->attrs, name, value);
  return Run(context, args, kOp, params);
}

absl::Status ClampKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const Attrs& attrs = args.node->attrs;
  PointwiseParams params;
  params.has_lo = attrs.Has("min");
  params.has_hi = attrs.Has("max");
  if (params.has_lo) {
    ASSIGN_OR_RETURN(double lo, attrs.GetFloat("min"));
    params.lo = NumberAttr(attrs, "min", lo);
  }
  if (params.has_hi) {
    ASSIGN_OR_RETURN(double hi, attrs.GetFloat("max"));
    params.hi = NumberAttr(attrs, "max", hi);
  }
  return Run(context, args, PointwiseOp::kClamp, params);
}

// addcmul / addcdiv (value) and lerp.Scalar (weight).
template <PointwiseOp kOp>
absl::Status NumberOpKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const char* name = kOp == PointwiseOp::kLerpScalar ? "weight" : "value";
  const std::optional<double> fallback = kOp == PointwiseOp::kLerpScalar ? std::nullopt : std::optional<double>(1.0);
  ASSIGN_OR_RETURN(double value, args.node->attrs.GetFloat(name, fallback));
  PointwiseParams params;
  params.p = NumberAttr(args.node->attrs, name, value);
  return Run(context, args, kOp, params);
}

bool IsFloat(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }

absl::Status NativeDropoutKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const Attrs& attrs = args.node->attrs;
  const TensorArg& x = args.inputs[0];
  const bool half = IsHalfDType(x.type.dtype);
  if (!IsFloat(x.type.dtype) && !half) return UnsupportedDType(args, x.type.dtype);
  ASSIGN_OR_RETURN(double p, attrs.GetFloat("p"));
  DropoutParams params;
  ASSIGN_OR_RETURN(params.train, attrs.GetBool("train", true));
  ASSIGN_OR_RETURN(params.attr_seed, attrs.GetInt("seed", 0));
  params.threshold = params.train ? dropout::Threshold(p) : 0;
  params.scale = params.train ? dropout::Scale(p) : 1.0;
  const int64_t* seed = args.inputs.size() > 1 ? args.inputs[1].as<const int64_t>() : nullptr;
  if (half) {
    // The scale as the CPU kernel rounds it for a float32 computation.
    return Launched(args,
                    LaunchHalfDropout(x.type.dtype, x.numel(), x.data, seed, params.train, params.attr_seed,
                                      params.threshold, static_cast<float>(params.scale), args.outputs[0].data,
                                      args.outputs[1].as<bool>(), context.native),
                    x.type.dtype);
  }
  return Launched(args,
                  LaunchNativeDropout(x.type.dtype, x.numel(), x.data, seed, params, args.outputs[0].data,
                                      args.outputs[1].as<bool>(), context.native),
                  x.type.dtype);
}

absl::Status NativeDropoutBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  ASSIGN_OR_RETURN(double scale, args.node->attrs.GetFloat("scale"));
  if (IsHalfDType(grad.type.dtype)) {
    return Launched(args,
                    LaunchHalfDropoutBackward(grad.type.dtype, grad.numel(), grad.data, args.inputs[1].as<const bool>(),
                                              static_cast<float>(scale), args.outputs[0].data, context.native),
                    grad.type.dtype);
  }
  if (!IsFloat(grad.type.dtype)) return UnsupportedDType(args, grad.type.dtype);
  return Launched(args,
                  LaunchDropoutBackward(grad.type.dtype, grad.numel(), grad.data, args.inputs[1].as<const bool>(),
                                        scale, args.outputs[0].data, context.native),
                  grad.type.dtype);
}

}  // namespace

void AddActivationKernels(CudaKernelTable& table) {
  table["sigmoid"] = PlainKernel<PointwiseOp::kSigmoid>;
  table["tanh"] = PlainKernel<PointwiseOp::kTanh>;
  table["exp"] = PlainKernel<PointwiseOp::kExp>;
  table["log"] = PlainKernel<PointwiseOp::kLog>;
  table["rsqrt"] = PlainKernel<PointwiseOp::kRsqrt>;
  table["gelu"] = GeluKernel<PointwiseOp::kGelu, PointwiseOp::kGeluTanh>;
  table["gelu_backward"] = GeluKernel<PointwiseOp::kGeluBackward, PointwiseOp::kGeluTanhBackward>;
  table["pow.Tensor_Scalar"] = PowKernel<PointwiseOp::kPowExponent>;
  table["pow.Scalar"] = PowKernel<PointwiseOp::kPowBase>;
  table["sigmoid_backward"] = PlainKernel<PointwiseOp::kSigmoidBackward>;
  table["tanh_backward"] = PlainKernel<PointwiseOp::kTanhBackward>;
  table["clamp"] = ClampKernel;
  table["maximum"] = PlainKernel<PointwiseOp::kMaximum>;
  table["minimum"] = PlainKernel<PointwiseOp::kMinimum>;
  table["addcmul"] = NumberOpKernel<PointwiseOp::kAddcmul>;
  table["addcdiv"] = NumberOpKernel<PointwiseOp::kAddcdiv>;
  table["lerp.Scalar"] = NumberOpKernel<PointwiseOp::kLerpScalar>;
  table["lerp.Tensor"] = PlainKernel<PointwiseOp::kLerp>;
  table["native_dropout"] = NativeDropoutKernel;
  table["native_dropout_backward"] = NativeDropoutBackwardKernel;
}

}  // namespace tandem::cuda
