// Reference CPU kernels of the constant makers (zeros, ones, full, their
// *_like forms, fill.Scalar, scalar_tensor). None reads its input's data, so
// fill.Scalar's output may be its input (AliasKind::kInPlace).
#include <string>

#include "base/status_macros.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

absl::Status Fill(const KernelArgs& args, double value) {
  const TensorArg& out = args.outputs[0];
  return DispatchStorableOrHalf(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = ConvertAny<T>(value);
    T* y = out.as<T>();
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) y[i] = v;
    return absl::OkStatus();
  });
}

template <int kValue>
absl::Status ConstantKernel(const KernelArgs& args) {
  return Fill(args, kValue);
}

// Fills with the number attribute `kAttr`.
template <const char* kAttr>
absl::Status FillFromAttrKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(double value, args.node->attrs.GetFloat(kAttr));
  return Fill(args, value);
}

constexpr char kFillValue[] = "fill_value";
constexpr char kValue[] = "value";
constexpr char kS[] = "s";

}  // namespace

void AddFactoryKernels(CpuKernelTable& table) {
  table["zeros"] = ConstantKernel<0>;
  table["zeros_like"] = ConstantKernel<0>;
  table["ones"] = ConstantKernel<1>;
  table["ones_like"] = ConstantKernel<1>;
  table["full"] = FillFromAttrKernel<kFillValue>;
  table["full_like"] = FillFromAttrKernel<kFillValue>;
  table["fill.Scalar"] = FillFromAttrKernel<kValue>;
  table["scalar_tensor"] = FillFromAttrKernel<kS>;
}

}  // namespace tandem::cpu
