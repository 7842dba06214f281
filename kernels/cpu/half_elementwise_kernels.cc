// The 16-bit paths of the comparisons, where.self and clamp in the reference
// CPU kernels (half_kernels.h): which operands and numbers are rounded to the
// 16-bit type before the float32 kernel runs on widened copies. The
// arithmetic of the optimizer step (sqrt, maximum, minimum, addcmul,
// addcdiv) needs no more than WithHalf / WithHalfBinary.
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "kernels/cpu/half_kernels.h"

namespace tandem::cpu {

DType ComparisonDType(const TensorType& a, const TensorType& b) {
  if (a.dtype == b.dtype) return a.dtype;
  if (a.rank() == 0 && b.rank() != 0) return b.dtype;
  if (b.rank() == 0 && a.rank() != 0) return a.dtype;
  if (IsFloating(a.dtype) != IsFloating(b.dtype)) return IsFloating(a.dtype) ? a.dtype : b.dtype;
  return DTypeSize(a.dtype) >= DTypeSize(b.dtype) ? a.dtype : b.dtype;
}

absl::Status RunWidenedOperands(const KernelArgs& args, CpuKernelFn kernel, DType compute, int first_operand) {
  if (!IsHalf(compute)) return RunWidened(args, kernel);
  // A rank-0 operand of another dtype becomes a rank-0 tensor of `compute`
  // holding its rounded value, which RunWidened then widens exactly.
  KernelArgs rounded = args;
  std::vector<uint16_t> bits(args.inputs.size());
  for (size_t k = static_cast<size_t>(first_operand); k < args.inputs.size(); ++k) {
    TensorArg& in = rounded.inputs[k];
    if (in.type.rank() != 0 || in.type.dtype == compute) continue;
    float value = 0.0f;
    switch (in.type.dtype) {
      case DType::kBFloat16:
        value = BFloat16BitsToFloat(*in.as<const uint16_t>());
        break;
      case DType::kFloat16:
        value = Float16BitsToFloat(*in.as<const uint16_t>());
        break;
      default:
        value = LoadScalar<float>(in);
        break;
    }
    bits[k] = compute == DType::kBFloat16 ? FloatToBFloat16Bits(value) : FloatToFloat16Bits(value);
    in.data = &bits[k];
    in.type = TensorType{compute, {}};
  }
  return RunWidened(rounded, kernel);
}

absl::Status RunWidenedRoundingNumbers(const KernelArgs& args, CpuKernelFn kernel,
                                       std::initializer_list<const char*> names) {
  const DType dtype = args.inputs[0].type.dtype;
  if (!IsHalf(dtype)) return RunWidened(args, kernel);
  Node node = *args.node;
  for (const char* name : names) {
    if (!node.attrs.Has(name)) continue;
    ASSIGN_OR_RETURN(double value, node.attrs.GetFloat(name));
    node.attrs.Set(name, RoundToHalf(dtype, value));
  }
  KernelArgs rounded = args;
  rounded.node = &node;
  return RunWidened(rounded, kernel);
}

}  // namespace tandem::cpu
