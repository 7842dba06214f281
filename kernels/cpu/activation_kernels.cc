// Reference CPU kernels of the activations and pointwise math: sigmoid,
// tanh, exp, log, rsqrt, gelu, pow, the activation backwards, clamp,
// maximum/minimum, addcmul/addcdiv, lerp and native_dropout (+ backward).
// Math is done in the tensor's dtype, as PyTorch does; every kernel
// tolerates output == input 0 (AliasKind::kInPlace). sigmoid, tanh, gelu
// and their backwards, clamp, maximum/minimum, addcmul/addcdiv and dropout
// also take bfloat16 and float16 (half_kernels.h: float32 math, one
// rounding per result).
#include <cmath>

#include "base/status_macros.h"
#include "ir/ops/dropout_mask.h"
#include "kernels/cpu/broadcast_map.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

template <typename T>
constexpr T kSqrt1Over2 = T(0.70710678118654752440);
template <typename T>
constexpr T kSqrt2OverPi = T(0.79788456080286535588);
template <typename T>
constexpr T kInvSqrt2Pi = T(0.39894228040143267794);

template <typename T, typename F>
absl::Status Map1(const KernelArgs& args, F&& f) {
  MapBroadcast<T, T, 1>({&args.inputs[0]}, args.outputs[0].type.dtype, args.outputs[0],
                        [&](const std::array<T, 1>& v) { return f(v[0]); });
  return absl::OkStatus();
}

template <typename T, typename F>
absl::Status Map2(const KernelArgs& args, F&& f) {
  MapBroadcast<T, T, 2>({&args.inputs[0], &args.inputs[1]}, args.outputs[0].type.dtype, args.outputs[0],
                        [&](const std::array<T, 2>& v) { return f(v[0], v[1]); });
  return absl::OkStatus();
}

template <typename T, typename F>
absl::Status Map3(const KernelArgs& args, F&& f) {
  MapBroadcast<T, T, 3>({&args.inputs[0], &args.inputs[1], &args.inputs[2]}, args.outputs[0].type.dtype,
                        args.outputs[0], [&](const std::array<T, 3>& v) { return f(v[0], v[1], v[2]); });
  return absl::OkStatus();
}

enum class Unary { kSigmoid, kTanh, kExp, kLog, kRsqrt };

template <Unary kOp>
absl::Status UnaryKernel(const KernelArgs& args) {
  return DispatchFloat(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    return Map1<T>(args, [](T x) {
      if constexpr (kOp == Unary::kSigmoid) return T(1) / (T(1) + std::exp(-x));
      if constexpr (kOp == Unary::kTanh) return std::tanh(x);
      if constexpr (kOp == Unary::kExp) return std::exp(x);
      if constexpr (kOp == Unary::kLog) return std::log(x);
      if constexpr (kOp == Unary::kRsqrt) return T(1) / std::sqrt(x);
    });
  });
}

absl::StatusOr<bool> TanhApproximation(const KernelArgs& args) {
  const absl::StatusOr<std::string> approximate = args.node->attrs.GetString("approximate", "none");
  if (!approximate.ok()) return approximate.status();
  return *approximate == "tanh";
}

absl::Status GeluKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(bool tanh_form, TanhApproximation(args));
  return DispatchFloat(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (tanh_form) {
      return Map1<T>(args, [](T x) {
        const T inner = kSqrt2OverPi<T> * (x + T(0.044715) * x * x * x);
        return T(0.5) * x * (T(1) + std::tanh(inner));
      });
    }
    return Map1<T>(args, [](T x) { return T(0.5) * x * (T(1) + std::erf(x * kSqrt1Over2<T>)); });
  });
}

absl::Status GeluBackwardKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(bool tanh_form, TanhApproximation(args));
  return DispatchFloat(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (tanh_form) {
      return Map2<T>(args, [](T g, T x) {
        const T inner = kSqrt2OverPi<T> * (x + T(0.044715) * x * x * x);
        const T t = std::tanh(inner);
        const T d_inner = kSqrt2OverPi<T> * (T(1) + T(3) * T(0.044715) * x * x);
        return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * d_inner);
      });
    }
    return Map2<T>(args, [](T g, T x) {
      const T cdf = T(0.5) * (T(1) + std::erf(x * kSqrt1Over2<T>));
      const T pdf = kInvSqrt2Pi<T> * std::exp(T(-0.5) * x * x);
      return g * (cdf + x * pdf);
    });
  });
}

absl::Status PowTensorScalarKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(double exponent, args.node->attrs.GetFloat("exponent"));
  return DispatchFloat(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T e = static_cast<T>(exponent);
    return Map1<T>(args, [e](T x) { return std::pow(x, e); });
  });
}

absl::Status PowScalarKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(double base, args.node->attrs.GetFloat("self"));
  return DispatchFloat(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T b = static_cast<T>(base);
    return Map1<T>(args, [b](T x) { return std::pow(b, x); });
  });
}

// sigmoid_backward(grad, y) = grad * (1 - y) * y; tanh_backward = grad *
// (1 - y * y), in PyTorch's order of operations.
template <bool kSigmoid>
absl::Status ActivationBackwardKernel(const KernelArgs& args) {
  return DispatchFloat(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kSigmoid) return Map2<T>(args, [](T g, T y) { return g * (T(1) - y) * y; });
    return Map2<T>(args, [](T g, T y) { return g * (T(1) - y * y); });
  });
}

// min/max as numbers; NaN stays NaN; min > max gives max everywhere.
absl::Status ClampKernel(const KernelArgs& args) {
  const Attrs& attrs = args.node->attrs;
  const bool has_min = attrs.Has("min"), has_max = attrs.Has("max");
  double lo = 0, hi = 0;
  if (has_min) {
    ASSIGN_OR_RETURN(lo, attrs.GetFloat("min"));
  }
  if (has_max) {
    ASSIGN_OR_RETURN(hi, attrs.GetFloat("max"));
  }
  return DispatchNumeric(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    T tlo, thi;
    if constexpr (std::is_integral_v<T>) {
      ASSIGN_OR_RETURN(int64_t ilo, has_min ? attrs.GetInt("min") : absl::StatusOr<int64_t>(0));
      ASSIGN_OR_RETURN(int64_t ihi, has_max ? attrs.GetInt("max") : absl::StatusOr<int64_t>(0));
      tlo = static_cast<T>(ilo);
      thi = static_cast<T>(ihi);
    } else {
      tlo = static_cast<T>(lo);
      thi = static_cast<T>(hi);
    }
    return Map1<T>(args, [=](T x) {
      if (x != x) return x;
      if (has_min && x < tlo) x = tlo;
      if (has_max && x > thi) x = thi;
      return x;
    });
  });
}

template <bool kMax>
absl::Status MaxMinKernel(const KernelArgs& args) {
  return DispatchNumeric(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    return Map2<T>(args, [](T a, T b) {
      if (a != a) return a;
      if (b != b) return b;
      return kMax ? (a > b ? a : b) : (a < b ? a : b);
    });
  });
}

// self + value * t1 (* or /) t2.
template <bool kDiv>
absl::Status AddcKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(double value, args.node->attrs.GetFloat("value", 1.0));
  return DispatchNumeric(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kDiv && std::is_integral_v<T>) {
      return UnsupportedDType(args, args.outputs[0].type.dtype);
    } else {
      const T v = Convert<T>(value);
      return Map3<T>(args, [v](T s, T a, T b) { return kDiv ? s + v * a / b : s + v * a * b; });
    }
  });
}

// PyTorch's two-sided form: exact at both ends of the weight range.
template <typename T>
T Lerp(T self, T end, T weight) {
  return weight < T(0.5) ? self + weight * (end - self) : end - (end - self) * (T(1) - weight);
}

absl::Status LerpScalarKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(double weight, args.node->attrs.GetFloat("weight"));
  return DispatchFloat(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T w = static_cast<T>(weight);
    return Map2<T>(args, [w](T s, T e) { return Lerp(s, e, w); });
  });
}

absl::Status LerpTensorKernel(const KernelArgs& args) {
  return DispatchFloat(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    return Map3<T>(args, [](T s, T e, T w) { return Lerp(s, e, w); });
  });
}

// Outputs: output = input * mask * (1 / (1 - p)), mask (bool). train=false
// passes the input through with an all-true mask.
absl::Status NativeDropoutKernel(const KernelArgs& args) {
  const Attrs& attrs = args.node->attrs;
  ASSIGN_OR_RETURN(double p, attrs.GetFloat("p"));
  ASSIGN_OR_RETURN(bool train, attrs.GetBool("train", true));
  ASSIGN_OR_RETURN(int64_t attr_seed, attrs.GetInt("seed", 0));
  const int64_t tensor_seed = args.inputs.size() > 1 ? *args.inputs[1].as<const int64_t>() : 0;
  const uint64_t key = dropout::Key(attr_seed, tensor_seed);
  const uint32_t threshold = train ? dropout::Threshold(p) : 0;
  const double scale = train ? dropout::Scale(p) : 1.0;
  return DispatchFloat(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = args.inputs[0].as<const T>();
    T* y = args.outputs[0].as<T>();
    bool* mask = args.outputs[1].as<bool>();
    const T s = static_cast<T>(scale);
    for (int64_t i = 0; i < args.outputs[0].numel(); ++i) {
      const bool keep = dropout::Keep(key, i, threshold);
      mask[i] = keep;
      y[i] = train ? x[i] * static_cast<T>(keep) * s : x[i];
    }
    return absl::OkStatus();
  });
}

absl::Status NativeDropoutBackwardKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(double scale, args.node->attrs.GetFloat("scale"));
  return DispatchFloat(args, args.outputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = args.inputs[0].as<const T>();
    const bool* mask = args.inputs[1].as<const bool>();
    T* out = args.outputs[0].as<T>();
    const T s = static_cast<T>(scale);
    for (int64_t i = 0; i < args.outputs[0].numel(); ++i) out[i] = g[i] * static_cast<T>(mask[i]) * s;
    return absl::OkStatus();
  });
}

}  // namespace

void AddActivationKernels(CpuKernelTable& table) {
  table["sigmoid"] = WithHalf<UnaryKernel<Unary::kSigmoid>>;
  table["tanh"] = WithHalf<UnaryKernel<Unary::kTanh>>;
  table["exp"] = UnaryKernel<Unary::kExp>;
  table["log"] = UnaryKernel<Unary::kLog>;
  table["rsqrt"] = UnaryKernel<Unary::kRsqrt>;
  table["gelu"] = WithHalf<GeluKernel>;
  table["gelu_backward"] = WithHalf<GeluBackwardKernel>;
  table["pow.Tensor_Scalar"] = PowTensorScalarKernel;
  table["pow.Scalar"] = PowScalarKernel;
  table["sigmoid_backward"] = WithHalf<ActivationBackwardKernel<true>>;
  table["tanh_backward"] = WithHalf<ActivationBackwardKernel<false>>;
  table["clamp"] = WithHalfClamp<ClampKernel>;
  table["maximum"] = WithHalfBinary<MaxMinKernel<true>>;
  table["minimum"] = WithHalfBinary<MaxMinKernel<false>>;
  table["addcmul"] = WithHalfBinary<AddcKernel<false>>;
  table["addcdiv"] = WithHalfBinary<AddcKernel<true>>;
  table["lerp.Scalar"] = LerpScalarKernel;
  table["lerp.Tensor"] = LerpTensorKernel;
  table["native_dropout"] = WithHalf<NativeDropoutKernel>;
  table["native_dropout_backward"] = WithHalf<NativeDropoutBackwardKernel>;
}

}  // namespace tandem::cpu
