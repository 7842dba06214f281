// bfloat16 and float16 in the reference CPU kernels (kernels/cpu only).
//
// An op opts in by registering its float32 kernel through WithHalf<>: a
// node whose tensors include bfloat16 or float16 ones then runs that kernel
// on float32 copies of them and rounds its float32 results to their 16-bit
// dtypes once at the end (half.h: to nearest, ties to even). That is
// PyTorch's own rule for 16-bit floats (every op computes in float32, its
// "opmath" type, and rounds once when it stores), and it makes the float32
// kernel's accumulation (float or double) the 16-bit op's accumulation. Other
// tensors (int64 indices, bool masks, float32 statistics) pass through as
// they are.
//
// Stateless and thread-safe; the float32 copies are allocated per call.
#ifndef TANDEM_KERNELS_CPU_HALF_KERNELS_H_
#define TANDEM_KERNELS_CPU_HALF_KERNELS_H_

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/half.h"

namespace tandem::cpu {

bool IsHalf(DType dtype);

// Whether any input or output of `args` is bfloat16 or float16.
bool HasHalfTensor(const KernelArgs& args);

// Runs `kernel` with every 16-bit float tensor of `args` replaced by a
// float32 copy (outputs: float32 scratch, rounded into the real outputs when
// the kernel succeeds). An output may alias an input. With
// `round_scalar_operands`, a rank-0 input of another dtype than a 16-bit
// output 0 is first rounded to that 16-bit type: PyTorch's binary ops
// convert such an operand to the result's dtype (`bf16_tensor * f32_0dim`
// multiplies by the bfloat16 nearest to the scalar).
absl::Status RunWidened(const KernelArgs& args, CpuKernelFn kernel, bool round_scalar_operands = false);

template <CpuKernelFn kKernel>
absl::Status WithHalf(const KernelArgs& args) {
  if (!HasHalfTensor(args)) return kKernel(args);
  return RunWidened(args, kKernel);
}

// WithHalf for the binary elementwise ops (round_scalar_operands).
template <CpuKernelFn kKernel>
absl::Status WithHalfBinary(const KernelArgs& args) {
  if (!HasHalfTensor(args)) return kKernel(args);
  return RunWidened(args, kKernel, /*round_scalar_operands=*/true);
}

// WithHalf for the .Scalar arithmetic ops: their number attribute `other`
// is first rounded to the 16-bit output type, as PyTorch converts it to the
// tensor's dtype (`alpha` stays a float32 number).
absl::Status RunWidenedRoundingOther(const KernelArgs& args, CpuKernelFn kernel);

template <CpuKernelFn kKernel>
absl::Status WithHalfScalarOther(const KernelArgs& args) {
  if (!HasHalfTensor(args)) return kKernel(args);
  return RunWidenedRoundingOther(args, kKernel);
}

// `value` rounded to the 16-bit `dtype` (through float), as a double.
double RoundToHalf(DType dtype, double value);

// Element `i` of a tensor of any float dtype (float32, float64, bfloat16,
// float16), as a double; exact.
double FloatElement(const TensorArg& t, int64_t i);

// DispatchStorable plus bfloat16 and float16 (the converting copies).
template <typename F>
absl::Status DispatchStorableOrHalf(const KernelArgs& args, DType dtype, F&& f) {
  switch (dtype) {
    case DType::kBFloat16:
      return f(BFloat16{});
    case DType::kFloat16:
      return f(Float16{});
    default:
      return DispatchStorable(args, dtype, f);
  }
}

// `value` converted to To, every pair of storable and 16-bit types allowed:
// a cast, except that bool is "nonzero" and a 16-bit float converts to or
// from anything through float.
template <typename To, typename From>
To ConvertAny(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (kIsHalf<From> && kIsHalf<To>) {
    return To(value);
  } else if constexpr (kIsHalf<From>) {
    return Convert<To>(value.ToFloat());
  } else if constexpr (kIsHalf<To>) {
    if constexpr (std::is_same_v<From, bool>) return To(value ? 1.0f : 0.0f);
    return To(static_cast<float>(value));
  } else {
    return Convert<To>(value);
  }
}

// ---- comparisons, where and number-bounded ops (half_elementwise_kernels.cc) ----

// RunWidened for an op whose operands (the inputs from `first_operand` on)
// are combined in the dtype `compute` by the binary type rule: when
// `compute` is 16-bit, a rank-0 operand of another dtype is first rounded to
// it, as PyTorch converts such an operand to the common dtype. Inputs before
// `first_operand` (where's bool condition) pass as they are.
absl::Status RunWidenedOperands(const KernelArgs& args, CpuKernelFn kernel, DType compute, int first_operand);

// RunWidened with the number attributes `names` that are present (clamp's
// min and max, a .Scalar comparison's other) first rounded to the 16-bit
// dtype of input 0, as PyTorch converts them to the tensor's dtype.
absl::Status RunWidenedRoundingNumbers(const KernelArgs& args, CpuKernelFn kernel,
                                       std::initializer_list<const char*> names);

// The dtype a comparison of `a` and `b` computes in: theirs when equal, else
// the one that is not rank 0 (of two rank-0 operands, the float, then the
// wider one), as the comparison kernels choose it.
DType ComparisonDType(const TensorType& a, const TensorType& b);

// where.self(condition, self, other): self and other in the output's dtype.
template <CpuKernelFn kKernel>
absl::Status WithHalfWhere(const KernelArgs& args) {
  if (!HasHalfTensor(args)) return kKernel(args);
  return RunWidenedOperands(args, kKernel, args.outputs[0].type.dtype, /*first_operand=*/1);
}

// The .Tensor comparisons (bool results): both operands in ComparisonDType.
template <CpuKernelFn kKernel>
absl::Status WithHalfComparison(const KernelArgs& args) {
  if (!HasHalfTensor(args)) return kKernel(args);
  return RunWidenedOperands(args, kKernel, ComparisonDType(args.inputs[0].type, args.inputs[1].type), 0);
}

// The .Scalar comparisons: `other` rounded to the 16-bit tensor's dtype.
template <CpuKernelFn kKernel>
absl::Status WithHalfComparisonScalar(const KernelArgs& args) {
  if (!HasHalfTensor(args)) return kKernel(args);
  return RunWidenedRoundingNumbers(args, kKernel, {"other"});
}

// masked_fill.Scalar: `value` rounded to the 16-bit tensor's dtype.
template <CpuKernelFn kKernel>
absl::Status WithHalfMaskedFillScalar(const KernelArgs& args) {
  if (!HasHalfTensor(args)) return kKernel(args);
  return RunWidenedRoundingNumbers(args, kKernel, {"value"});
}

// masked_fill.Tensor: the rank-0 value (input 2) rounded to the 16-bit
// output dtype when it is of another dtype.
template <CpuKernelFn kKernel>
absl::Status WithHalfMaskedFillTensor(const KernelArgs& args) {
  if (!HasHalfTensor(args)) return kKernel(args);
  return RunWidenedOperands(args, kKernel, args.outputs[0].type.dtype, /*first_operand=*/2);
}

// clamp: `min` and `max` rounded to the 16-bit tensor's dtype.
template <CpuKernelFn kKernel>
absl::Status WithHalfClamp(const KernelArgs& args) {
  if (!HasHalfTensor(args)) return kKernel(args);
  return RunWidenedRoundingNumbers(args, kKernel, {"min", "max"});
}

}  // namespace tandem::cpu

#endif  // TANDEM_KERNELS_CPU_HALF_KERNELS_H_
