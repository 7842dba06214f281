#include "kernels/cpu/half_kernels.h"

#include <vector>

namespace tandem::cpu {
namespace {

void Widen(const TensorArg& t, float* out) {
  const int64_t n = t.numel();
  const uint16_t* bits = t.as<const uint16_t>();
  if (t.type.dtype == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) out[i] = BFloat16BitsToFloat(bits[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = Float16BitsToFloat(bits[i]);
  }
}

void Narrow(const float* in, const TensorArg& t) {
  const int64_t n = t.numel();
  uint16_t* bits = t.as<uint16_t>();
  if (t.type.dtype == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) bits[i] = FloatToBFloat16Bits(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) bits[i] = FloatToFloat16Bits(in[i]);
  }
}

// A float32 stand-in for a 16-bit tensor; others unchanged.
TensorArg Widened(const TensorArg& t, std::vector<float>& storage) {
  if (!IsHalf(t.type.dtype)) return t;
  // One spare element keeps the address valid for empty tensors.
  storage.assign(static_cast<size_t>(t.numel()) + 1, 0.0f);
  TensorArg wide;
  wide.data = storage.data();
  wide.type = TensorType{DType::kFloat32, t.type.shape};
  return wide;
}

// A rank-0 `t` of any storable dtype rounded to the 16-bit `dtype`, then
// widened: one float32 element in `storage`.
TensorArg RoundedScalar(const TensorArg& t, DType dtype, std::vector<float>& storage) {
  float value = 0.0f;
  switch (t.type.dtype) {
    case DType::kBFloat16:
      value = BFloat16BitsToFloat(*t.as<const uint16_t>());
      break;
    case DType::kFloat16:
      value = Float16BitsToFloat(*t.as<const uint16_t>());
      break;
    default:
      value = LoadScalar<float>(t);
      break;
  }
  value = dtype == DType::kBFloat16 ? BFloat16BitsToFloat(FloatToBFloat16Bits(value))
                                    : Float16BitsToFloat(FloatToFloat16Bits(value));
  storage.assign(1, value);
  TensorArg wide;
  wide.data = storage.data();
  wide.type = TensorType{DType::kFloat32, {}};
  return wide;
}

}  // namespace

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

bool HasHalfTensor(const KernelArgs& args) {
  for (const TensorArg& t : args.inputs) {
    if (IsHalf(t.type.dtype)) return true;
  }
  for (const TensorArg& t : args.outputs) {
    if (IsHalf(t.type.dtype)) return true;
  }
  return false;
}

absl::Status RunWidened(const KernelArgs& args, CpuKernelFn kernel, bool round_scalar_operands) {
  KernelArgs wide;
  wide.node = args.node;
  std::vector<std::vector<float>> in_storage(args.inputs.size());
  std::vector<std::vector<float>> out_storage(args.outputs.size());
  const DType out_dtype = args.outputs.empty() ? DType::kFloat32 : args.outputs[0].type.dtype;
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    const TensorArg& in = args.inputs[i];
    if (round_scalar_operands && IsHalf(out_dtype) && in.type.rank() == 0 && in.type.dtype != out_dtype) {
      wide.inputs.push_back(RoundedScalar(in, out_dtype, in_storage[i]));
      continue;
    }
    wide.inputs.push_back(Widened(in, in_storage[i]));
    if (IsHalf(in.type.dtype)) Widen(in, in_storage[i].data());
  }
  for (size_t i = 0; i < args.outputs.size(); ++i) {
    wide.outputs.push_back(Widened(args.outputs[i], out_storage[i]));
  }
  absl::Status status = kernel(wide);
  if (!status.ok()) return status;
  for (size_t i = 0; i < args.outputs.size(); ++i) {
    if (IsHalf(args.outputs[i].type.dtype)) Narrow(out_storage[i].data(), args.outputs[i]);
  }
  return absl::OkStatus();
}

double FloatElement(const TensorArg& t, int64_t i) {
  switch (t.type.dtype) {
    case DType::kBFloat16:
      return BFloat16BitsToFloat(t.as<const uint16_t>()[i]);
    case DType::kFloat16:
      return Float16BitsToFloat(t.as<const uint16_t>()[i]);
    case DType::kFloat64:
      return t.as<const double>()[i];
    default:
      return t.as<const float>()[i];
  }
}

double RoundToHalf(DType dtype, double value) {
  const float f = static_cast<float>(value);
  return dtype == DType::kBFloat16 ? BFloat16BitsToFloat(FloatToBFloat16Bits(f))
                                   : Float16BitsToFloat(FloatToFloat16Bits(f));
}

absl::Status RunWidenedRoundingOther(const KernelArgs& args, CpuKernelFn kernel) {
  const DType dtype = args.outputs[0].type.dtype;
  if (!IsHalf(dtype)) return RunWidened(args, kernel);
  absl::StatusOr<double> other = args.node->attrs.GetFloat("other");
  if (!other.ok()) return other.status();
  Node node = *args.node;
  node.attrs.Set("other", RoundToHalf(dtype, *other));
  KernelArgs rounded = args;
  rounded.node = &node;
  return RunWidened(rounded, kernel);
}

}  // namespace tandem::cpu
