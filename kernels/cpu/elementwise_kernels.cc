// Reference CPU kernels of the elementwise ops. Math is done in the tensor's
// dtype, as PyTorch does. Every kernel tolerates output == input 0 (the
// planner may alias them, AliasKind::kInPlace): each output element is
// written after the input elements it depends on are read, and a rank-0 or
// single-element operand is loaded once before the loop.
#include <cmath>
#include <cstring>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

// out = op(a, b) with broadcasting; a and b are of dtype T unless rank-0
// (then converted, as the registry's type rule allows).
template <typename T, typename Op>
void BinaryLoop(const TensorArg& a, const TensorArg& b, const TensorArg& out, Op op) {
  T* o = out.as<T>();
  const int64_t n = out.numel();
  const bool a_scalar = a.numel() == 1 || a.type.dtype != out.type.dtype;
  const bool b_scalar = b.numel() == 1 || b.type.dtype != out.type.dtype;
  if (a_scalar && b_scalar) {
    const T value = op(LoadScalar<T>(a), LoadScalar<T>(b));
    for (int64_t i = 0; i < n; ++i) o[i] = value;
    return;
  }
  if (b_scalar && a.numel() == n) {
    const T sb = LoadScalar<T>(b);
    const T* pa = a.as<const T>();
    for (int64_t i = 0; i < n; ++i) o[i] = op(pa[i], sb);
    return;
  }
  if (a_scalar && b.numel() == n) {
    const T sa = LoadScalar<T>(a);
    const T* pb = b.as<const T>();
    for (int64_t i = 0; i < n; ++i) o[i] = op(sa, pb[i]);
    return;
  }
  if (a.numel() == n && b.numel() == n) {
    const T* pa = a.as<const T>();
    const T* pb = b.as<const T>();
    for (int64_t i = 0; i < n; ++i) o[i] = op(pa[i], pb[i]);
    return;
  }
  // General broadcast. A scalar operand of another dtype was handled above,
  // so both are of dtype T here.
  const T* pa = a.as<const T>();
  const T* pb = b.as<const T>();
  const Shape& shape = out.type.shape;
  ForEachIndex<2>(shape, {BroadcastStrides(a.type.shape, shape), BroadcastStrides(b.type.shape, shape)},
                  [&](int64_t i, const std::array<int64_t, 2>& off) { o[i] = op(pa[off[0]], pb[off[1]]); });
}

enum class Arith { kAdd, kSub, kMul, kDiv };

template <Arith kOp>
absl::Status ArithTensorKernel(const KernelArgs& args) {
  double alpha = 1.0;
  if constexpr (kOp == Arith::kAdd || kOp == Arith::kSub) {
    ASSIGN_OR_RETURN(alpha, args.node->attrs.GetFloat("alpha", 1.0));
  }
  const DType dtype = args.outputs[0].type.dtype;
  return DispatchNumeric(args, dtype, [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    const T a = Convert<T>(alpha);
    const TensorArg& x = args.inputs[0];
    const TensorArg& y = args.inputs[1];
    const TensorArg& out = args.outputs[0];
    if constexpr (kOp == Arith::kAdd) {
      if (alpha == 1.0) {
        BinaryLoop<T>(x, y, out, [](T p, T q) { return p + q; });
      } else {
        BinaryLoop<T>(x, y, out, [a](T p, T q) { return p + a * q; });
      }
    } else if constexpr (kOp == Arith::kSub) {
      if (alpha == 1.0) {
        BinaryLoop<T>(x, y, out, [](T p, T q) { return p - q; });
      } else {
        BinaryLoop<T>(x, y, out, [a](T p, T q) { return p - a * q; });
      }
    } else if constexpr (kOp == Arith::kMul) {
      BinaryLoop<T>(x, y, out, [](T p, T q) { return p * q; });
    } else {
      if constexpr (std::is_integral_v<T>) return UnsupportedDType(args, dtype);
      BinaryLoop<T>(x, y, out, [](T p, T q) { return p / q; });
    }
    return absl::OkStatus();
  });
}

template <typename T, typename Op>
void UnaryLoop(const TensorArg& in, const TensorArg& out, Op op) {
  const T* x = in.as<const T>();
  T* y = out.as<T>();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) y[i] = op(x[i]);
}

// add.Scalar etc.: self (op) alpha * other, with other and alpha in T.
template <Arith kOp>
absl::Status ArithScalarKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(double other, args.node->attrs.GetFloat("other"));
  double alpha = 1.0;
  if constexpr (kOp == Arith::kAdd || kOp == Arith::kSub) {
    ASSIGN_OR_RETURN(alpha, args.node->attrs.GetFloat("alpha", 1.0));
  }
  const DType dtype = args.outputs[0].type.dtype;
  return DispatchNumeric(args, dtype, [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    const T s = Convert<T>(alpha) * Convert<T>(other);
    const T v = Convert<T>(other);
    const TensorArg& in = args.inputs[0];
    const TensorArg& out = args.outputs[0];
    if constexpr (kOp == Arith::kAdd) {
      UnaryLoop<T>(in, out, [s](T p) { return p + s; });
    } else if constexpr (kOp == Arith::kSub) {
      UnaryLoop<T>(in, out, [s](T p) { return p - s; });
    } else if constexpr (kOp == Arith::kMul) {
      UnaryLoop<T>(in, out, [v](T p) { return p * v; });
    } else {
      if constexpr (std::is_integral_v<T>) return UnsupportedDType(args, dtype);
      UnaryLoop<T>(in, out, [v](T p) { return p / v; });
    }
    return absl::OkStatus();
  });
}

absl::Status NegKernel(const KernelArgs& args) {
  return DispatchNumeric(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    UnaryLoop<T>(args.inputs[0], args.outputs[0], [](T p) { return -p; });
    return absl::OkStatus();
  });
}

// max(x, 0) that keeps NaN, as PyTorch's clamp_min.
absl::Status ReluKernel(const KernelArgs& args) {
  return DispatchNumeric(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    UnaryLoop<T>(args.inputs[0], args.outputs[0], [](T p) { return p < T(0) ? T(0) : p; });
    return absl::OkStatus();
  });
}

absl::Status SqrtKernel(const KernelArgs& args) {
  return DispatchFloat(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    UnaryLoop<T>(args.inputs[0], args.outputs[0], [](T p) { return std::sqrt(p); });
    return absl::OkStatus();
  });
}

// grad_output where self > threshold, else 0.
absl::Status ThresholdBackwardKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(double threshold, args.node->attrs.GetFloat("threshold"));
  return DispatchFloat(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T th = static_cast<T>(threshold);
    BinaryLoop<T>(args.inputs[0], args.inputs[1], args.outputs[0],
                  [th](T grad, T self) { return self > th ? grad : T(0); });
    return absl::OkStatus();
  });
}

// out (shape `out`, dtype To) = src broadcast and converted (16-bit floats
// as half.h rounds). Reads only src.
absl::Status ConvertingCopy(const KernelArgs& args, const TensorArg& src, const TensorArg& out) {
  return DispatchStorableOrHalf(args, out.type.dtype, [&](auto to_tag) {
    using To = decltype(to_tag);
    return DispatchStorableOrHalf(args, src.type.dtype, [&](auto from_tag) {
      using From = decltype(from_tag);
      To* o = out.as<To>();
      const From* s = src.as<const From>();
      const int64_t n = out.numel();
      if constexpr (std::is_same_v<To, From>) {
        if (src.numel() == n) {
          if (o != s) std::memmove(o, s, static_cast<size_t>(n) * sizeof(To));
          return absl::OkStatus();
        }
      }
      if (src.numel() == n) {
        for (int64_t i = 0; i < n; ++i) o[i] = ConvertAny<To>(s[i]);
      } else {
        const Shape& shape = out.type.shape;
        ForEachIndex<1>(shape, {BroadcastStrides(src.type.shape, shape)},
                        [&](int64_t i, const std::array<int64_t, 1>& off) { o[i] = ConvertAny<To>(s[off[0]]); });
      }
      return absl::OkStatus();
    });
  });
}

absl::Status CopyKernel(const KernelArgs& args) { return ConvertingCopy(args, args.inputs[1], args.outputs[0]); }

absl::Status ToCopyKernel(const KernelArgs& args) { return ConvertingCopy(args, args.inputs[0], args.outputs[0]); }

}  // namespace

void AddElementwiseKernels(CpuKernelTable& table) {
  // 16-bit floats run the float32 kernels (half_kernels.h); sqrt takes none.
  table["add.Tensor"] = WithHalfBinary<ArithTensorKernel<Arith::kAdd>>;
  table["sub.Tensor"] = WithHalfBinary<ArithTensorKernel<Arith::kSub>>;
  table["mul.Tensor"] = WithHalfBinary<ArithTensorKernel<Arith::kMul>>;
  table["div.Tensor"] = WithHalfBinary<ArithTensorKernel<Arith::kDiv>>;
  table["add.Scalar"] = WithHalfScalarOther<ArithScalarKernel<Arith::kAdd>>;
  table["sub.Scalar"] = WithHalfScalarOther<ArithScalarKernel<Arith::kSub>>;
  table["mul.Scalar"] = WithHalfScalarOther<ArithScalarKernel<Arith::kMul>>;
  table["div.Scalar"] = WithHalfScalarOther<ArithScalarKernel<Arith::kDiv>>;
  table["neg"] = WithHalf<NegKernel>;
  table["relu"] = WithHalf<ReluKernel>;
  table["sqrt"] = WithHalf<SqrtKernel>;
  table["threshold_backward"] = WithHalf<ThresholdBackwardKernel>;
  table["copy"] = CopyKernel;
  table["_to_copy"] = ToCopyKernel;
}

}  // namespace tandem::cpu
