// CPU kernels of the pointwise math family (ir/ops/math_table.h): one
// engine for every op, which reads each operand in its own dtype at the
// output's broadcast indices, computes ApplyMath (kernels/math_functions.h,
// the formulas the CUDA kernels share) in the compute type MathComputeOf
// picks, and stores the result in the output's dtype (a 16-bit result
// rounded once). An in-place output (AliasKind::kInPlace, unary ops only)
// is safe: element i is read before it is written.
#include <array>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/math_ops.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/math_functions.h"

namespace tandem::cpu {
namespace {

// Element `offset` of `t`, whatever its dtype, as A.
template <typename A>
A LoadAs(const TensorArg& t, int64_t offset) {
  switch (t.type.dtype) {
    case DType::kFloat32:
      return Convert<A>(t.as<const float>()[offset]);
    case DType::kFloat64:
      return Convert<A>(t.as<const double>()[offset]);
    case DType::kInt64:
      return Convert<A>(t.as<const int64_t>()[offset]);
    case DType::kInt32:
      return Convert<A>(t.as<const int32_t>()[offset]);
    case DType::kBool:
      return Convert<A>(t.as<const bool>()[offset]);
    case DType::kBFloat16:
      return Convert<A>(t.as<const BFloat16>()[offset].ToFloat());
    case DType::kFloat16:
      return Convert<A>(t.as<const Float16>()[offset].ToFloat());
  }
  return A{};
}

// Writes `value` as element i of `out` (bool: nonzero; 16-bit: rounded to
// nearest even from float32).
template <typename A>
void StoreAs(const TensorArg& out, int64_t i, A value) {
  switch (out.type.dtype) {
    case DType::kFloat32:
      out.as<float>()[i] = Convert<float>(value);
      return;
    case DType::kFloat64:
      out.as<double>()[i] = Convert<double>(value);
      return;
    case DType::kInt64:
      out.as<int64_t>()[i] = Convert<int64_t>(value);
      return;
    case DType::kInt32:
      out.as<int32_t>()[i] = Convert<int32_t>(value);
      return;
    case DType::kBool:
      out.as<bool>()[i] = value != A(0);
      return;
    case DType::kBFloat16:
      out.as<BFloat16>()[i] = BFloat16(Convert<float>(value));
      return;
    case DType::kFloat16:
      out.as<Float16>()[i] = Float16(Convert<float>(value));
      return;
  }
}

// The `.Scalar` form's other in compute type A: exact for integers; for a
// 16-bit result rounded to that type first, as the elementwise kernels
// take a `.Scalar` op's number.
template <typename A>
A OtherAs(const MathParams& p, DType out) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<A>(p.other_i);
  } else {
    if (out == DType::kBFloat16) return static_cast<A>(BFloat16(p.other_f).ToFloat());
    if (out == DType::kFloat16) return static_cast<A>(Float16(p.other_f).ToFloat());
    return static_cast<A>(p.other_f);
  }
}

template <MathOp kOp, typename A>
void RunMath(const TensorArg& x, const TensorArg* y, const TensorArg& out, const MathParams& p) {
  const int64_t n = out.numel();
  const A y_const = OtherAs<A>(p, out.type.dtype);
  const bool contiguous = x.numel() == n && (y == nullptr || y->numel() == n);
  if (contiguous) {
    for (int64_t i = 0; i < n; ++i) {
      const A yi = y == nullptr ? y_const : LoadAs<A>(*y, i);
      StoreAs<A>(out, i, math::ApplyMath<kOp, A>(LoadAs<A>(x, i), yi, p));
    }
    return;
  }
  const Shape& shape = out.type.shape;
  std::array<std::vector<int64_t>, 2> strides = {
      BroadcastStrides(x.type.shape, shape),
      y == nullptr ? std::vector<int64_t>(shape.size(), 0) : BroadcastStrides(y->type.shape, shape)};
  ForEachIndex<2>(shape, strides, [&](int64_t i, const std::array<int64_t, 2>& off) {
    const A yi = y == nullptr ? y_const : LoadAs<A>(*y, off[1]);
    StoreAs<A>(out, i, math::ApplyMath<kOp, A>(LoadAs<A>(x, off[0]), yi, p));
  });
}

absl::Status RunMathNode(const MathOpInfo& info, const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(MathCall call, MathCallOf(info, args.node->attrs, out.type.dtype));
  const TensorArg& x = args.inputs[0];
  const TensorArg* y = args.inputs.size() > 1 ? &args.inputs[1] : nullptr;
  const MathCompute compute =
      MathComputeOf(info.kind, out.type.dtype, x.type.dtype, y != nullptr ? y->type.dtype : x.type.dtype);
  math::DispatchMathOp(call.op, [&](auto op) {
    constexpr MathOp kOp = decltype(op)::value;
    switch (compute) {
      case MathCompute::kFloat32:
        RunMath<kOp, float>(x, y, out, call.params);
        break;
      case MathCompute::kFloat64:
        RunMath<kOp, double>(x, y, out, call.params);
        break;
      case MathCompute::kInt64:
        RunMath<kOp, int64_t>(x, y, out, call.params);
        break;
    }
  });
  return absl::OkStatus();
}

// One kernel function per table entry (the kernel table holds plain
// function pointers).
template <size_t kIndex>
absl::Status MathKernel(const KernelArgs& args) {
  return RunMathNode(kMathOps[kIndex], args);
}

template <size_t... kIndex>
void AddAll(CpuKernelTable& table, std::index_sequence<kIndex...>) {
  ((table[kMathOps[kIndex].name] = MathKernel<kIndex>), ...);
}

}  // namespace

void AddMathKernels(CpuKernelTable& table) {
  AddAll(table, std::make_index_sequence<sizeof(kMathOps) / sizeof(kMathOps[0])>());
}

}  // namespace tandem::cpu
