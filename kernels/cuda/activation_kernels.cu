// Pointwise kernels of the activations and the optimizer math: one
// grid-stride kernel per (dtype, op) over up to three operands, each read
// contiguously, through strides (broadcast) or as one converted element.
// When every operand is contiguous (or one element) and every pointer is
// 16-byte aligned, a thread moves 16-byte packs of each operand (four
// float32 elements), four packs per step. Each output element is written by the thread
// that read its operands, so out may be operand 0.
// native_dropout draws its mask from the counter-based hash of
// ir/ops/dropout_mask.h, bit for bit as the CPU kernel does.
#include <cmath>
#include <type_traits>

#include "ir/ops/dropout_mask.h"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/sequence_launch.h"

namespace tandem::cuda {
namespace {

template <typename T>
__host__ __device__ __forceinline__ T ParamAs(ScalarParam p) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(p.i);
  } else {
    return static_cast<T>(p.f);
  }
}

// The constants in T: float math for float32 as the CPU kernels do.
template <typename T>
struct Consts {
  static constexpr T kSqrt1Over2 = T(0.70710678118654752440);
  static constexpr T kSqrt2OverPi = T(0.79788456080286535588);
  static constexpr T kInvSqrt2Pi = T(0.39894228040143267794);
};

template <typename T, PointwiseOp kOp>
struct PointwiseFn {
  T p, lo, hi;
  bool has_lo, has_hi;

  __device__ __forceinline__ T operator()(T a, T b, T c) const {
    using C = Consts<T>;
    if constexpr (kOp == PointwiseOp::kSigmoid) {
      return T(1) / (T(1) + exp(-a));
    } else if constexpr (kOp == PointwiseOp::kTanh) {
      return tanh(a);
    } else if constexpr (kOp == PointwiseOp::kExp) {
      return exp(a);
    } else if constexpr (kOp == PointwiseOp::kLog) {
      return log(a);
    } else if constexpr (kOp == PointwiseOp::kRsqrt) {
      return T(1) / sqrt(a);
    } else if constexpr (kOp == PointwiseOp::kGelu) {
      return T(0.5) * a * (T(1) + erf(a * C::kSqrt1Over2));
    } else if constexpr (kOp == PointwiseOp::kGeluTanh) {
      const T inner = C::kSqrt2OverPi * (a + T(0.044715) * a * a * a);
      return T(0.5) * a * (T(1) + tanh(inner));
    } else if constexpr (kOp == PointwiseOp::kPowExponent) {
      return pow(a, p);
    } else if constexpr (kOp == PointwiseOp::kPowBase) {
      return pow(p, a);
    } else if constexpr (kOp == PointwiseOp::kClamp) {
      if (a != a) return a;
      if (has_lo && a < lo) a = lo;
      if (has_hi && a > hi) a = hi;
      return a;
    } else if constexpr (kOp == PointwiseOp::kSigmoidBackward) {
      return a * (T(1) - b) * b;
    } else if constexpr (kOp == PointwiseOp::kTanhBackward) {
      return a * (T(1) - b * b);
    } else if constexpr (kOp == PointwiseOp::kGeluBackward) {
      const T cdf = T(0.5) * (T(1) + erf(b * C::kSqrt1Over2));
      const T pdf = C::kInvSqrt2Pi * exp(T(-0.5) * b * b);
      return a * (cdf + b * pdf);
    } else if constexpr (kOp == PointwiseOp::kGeluTanhBackward) {
      const T inner = C::kSqrt2OverPi * (b + T(0.044715) * b * b * b);
      const T t = tanh(inner);
      const T d_inner = C::kSqrt2OverPi * (T(1) + T(3) * T(0.044715) * b * b);
      return a * (T(0.5) * (T(1) + t) + T(0.5) * b * (T(1) - t * t) * d_inner);
    } else if constexpr (kOp == PointwiseOp::kMaximum) {
      if (a != a) return a;
      if (b != b) return b;
      return a > b ? a : b;
    } else if constexpr (kOp == PointwiseOp::kMinimum) {
      if (a != a) return a;
      if (b != b) return b;
      return a < b ? a : b;
    } else if constexpr (kOp == PointwiseOp::kLerpScalar) {
      return p < T(0.5) ? a + p * (b - a) : b - (b - a) * (T(1) - p);
    } else if constexpr (kOp == PointwiseOp::kAddcmul) {
      return a + p * b * c;
    } else if constexpr (kOp == PointwiseOp::kAddcdiv) {
      return a + p * b / c;
    } else {  // kLerp
      return c < T(0.5) ? a + c * (b - a) : b - (b - a) * (T(1) - c);
    }
  }
};

struct Operands {
  BinaryOperand o[3];
};

template <typename T>
__device__ __forceinline__ T Read(const BinaryOperand& operand, T scalar, int64_t i) {
  if (operand.scalar) return scalar;
  const T* p = static_cast<const T*>(operand.data);
  return p[operand.layout.rank == 0 ? i : StridedOffset(operand.layout, i)];
}

// Packs each thread keeps in flight per operand in the packed loop: enough
// independent 16-byte loads to cover memory latency.
constexpr int kPointwiseUnroll = 4;

// kVector: every operand is contiguous or one scalar element, and every
// pointer 16-byte aligned; the elements move as 16-byte packs (four float32,
// two float64 or int64), kPointwiseUnroll packs per thread and step, then
// one pack per step, then the last n % pack elements one at a time.
template <typename T, int kArity, bool kVector, typename Fn>
__global__ void PointwiseKernel(int64_t n, Operands operands, T* out, Fn fn) {
  T scalars[3] = {T{}, T{}, T{}};
#pragma unroll
  for (int k = 0; k < kArity; ++k) {
    if (operands.o[k].scalar) scalars[k] = LoadConverted<T>(operands.o[k].data, operands.o[k].scalar_dtype);
  }
  const int64_t stride = GlobalStride();
  int64_t begin = 0;
  if constexpr (kVector) {
    using V = Vec16<T>;
    constexpr int kWidth = V::kCount;
    const int64_t packs = n / kWidth;
    auto load = [&](V(&in)[3], int64_t i) {
#pragma unroll
      for (int k = 0; k < kArity; ++k) {
        if (!operands.o[k].scalar) in[k] = static_cast<const V*>(operands.o[k].data)[i];
      }
    };
    auto apply = [&](const V(&in)[3]) {
      V result;
#pragma unroll
      for (int e = 0; e < kWidth; ++e) {
        const T a = operands.o[0].scalar ? scalars[0] : in[0].v[e];
        const T b = kArity > 1 ? (operands.o[1].scalar ? scalars[1] : in[1].v[e]) : T{};
        const T c = kArity > 2 ? (operands.o[2].scalar ? scalars[2] : in[2].v[e]) : T{};
        result.v[e] = fn(a, b, c);
      }
      return result;
    };
    V* packed_out = reinterpret_cast<V*>(out);
    int64_t i = GlobalThread();
    // Every pack of a step is read before any is written (out may be an
    // operand, and each pack is written only by the thread that read it).
    for (; i + (kPointwiseUnroll - 1) * stride < packs; i += kPointwiseUnroll * stride) {
      V in[kPointwiseUnroll][3];
#pragma unroll
      for (int u = 0; u < kPointwiseUnroll; ++u) load(in[u], i + u * stride);
#pragma unroll
      for (int u = 0; u < kPointwiseUnroll; ++u) packed_out[i + u * stride] = apply(in[u]);
    }
    for (; i < packs; i += stride) {
      V in[3];
      load(in, i);
      packed_out[i] = apply(in);
    }
    begin = packs * kWidth;
  }
  for (int64_t i = begin + GlobalThread(); i < n; i += stride) {
    const T a = Read<T>(operands.o[0], scalars[0], i);
    const T b = kArity > 1 ? Read<T>(operands.o[1], scalars[1], i) : T{};
    const T c = kArity > 2 ? Read<T>(operands.o[2], scalars[2], i) : T{};
    out[i] = fn(a, b, c);
  }
}

constexpr int Arity(PointwiseOp op) {
  switch (op) {
    case PointwiseOp::kSigmoid:
    case PointwiseOp::kTanh:
    case PointwiseOp::kExp:
    case PointwiseOp::kLog:
    case PointwiseOp::kRsqrt:
    case PointwiseOp::kGelu:
    case PointwiseOp::kGeluTanh:
    case PointwiseOp::kPowExponent:
    case PointwiseOp::kPowBase:
    case PointwiseOp::kClamp:
      return 1;
    case PointwiseOp::kAddcmul:
    case PointwiseOp::kAddcdiv:
    case PointwiseOp::kLerp:
      return 3;
    default:
      return 2;
  }
}

constexpr bool AllowsInt64(PointwiseOp op) {
  return op == PointwiseOp::kClamp || op == PointwiseOp::kMaximum || op == PointwiseOp::kMinimum ||
         op == PointwiseOp::kAddcmul;
}

template <typename T, PointwiseOp kOp>
cudaError_t Run(int64_t n, const BinaryOperand* operands, void* out, const PointwiseParams& params,
                cudaStream_t stream) {
  constexpr int kArity = Arity(kOp);
  Operands ops;
  for (int k = 0; k < kArity; ++k) ops.o[k] = operands[k];
  const PointwiseFn<T, kOp> fn{ParamAs<T>(params.p), ParamAs<T>(params.lo), ParamAs<T>(params.hi), params.has_lo,
                               params.has_hi};
  bool vector = Aligned16(out);
  for (int k = 0; k < kArity; ++k) {
    vector = vector && (ops.o[k].scalar || (ops.o[k].layout.rank == 0 && Aligned16(ops.o[k].data)));
  }
  if (vector) {
    // A thread per kPointwiseUnroll packs (one packed step each), within
    // Blocks' cap.
    const int64_t steps = n / (Vec16<T>::kCount * kPointwiseUnroll) + 1;
    PointwiseKernel<T, kArity, true><<<Blocks(steps), kThreads, 0, stream>>>(n, ops, static_cast<T*>(out), fn);
  } else {
    PointwiseKernel<T, kArity, false><<<Blocks(n), kThreads, 0, stream>>>(n, ops, static_cast<T*>(out), fn);
  }
  return LaunchError();
}

template <PointwiseOp kOp>
cudaError_t Dispatch(DType dtype, int64_t n, const BinaryOperand* operands, void* out, const PointwiseParams& params,
                     cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat32:
      return Run<float, kOp>(n, operands, out, params, stream);
    case DType::kFloat64:
      return Run<double, kOp>(n, operands, out, params, stream);
    case DType::kInt64:
      if constexpr (AllowsInt64(kOp)) return Run<int64_t, kOp>(n, operands, out, params, stream);
      return cudaErrorInvalidValue;
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename T>
__global__ void DropoutKernel(int64_t n, const T* x, const int64_t* seed, DropoutParams params, T* out, bool* mask) {
  const uint64_t key = dropout::Key(params.attr_seed, seed != nullptr ? *seed : 0);
  const T scale = static_cast<T>(params.scale);
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    const bool keep = dropout::Keep(key, i, params.threshold);
    mask[i] = keep;
    out[i] = params.train ? x[i] * static_cast<T>(keep) * scale : x[i];
  }
}

template <typename T>
__global__ void DropoutBackwardKernel(int64_t n, const T* grad, const bool* mask, T scale, T* out) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) out[i] = grad[i] * static_cast<T>(mask[i]) * scale;
}

template <typename F>
bool DispatchFloat(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      f(float{});
      return true;
    case DType::kFloat64:
      f(double{});
      return true;
    default:
      return false;
  }
}

}  // namespace

cudaError_t LaunchPointwise(PointwiseOp op, DType dtype, int64_t n, const BinaryOperand* operands, int arity, void* out,
                            const PointwiseParams& params, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  (void)arity;  // each op knows its own arity
  switch (op) {
#define TANDEM_POINTWISE_CASE(name) \
  case PointwiseOp::name:           \
    return Dispatch<PointwiseOp::name>(dtype, n, operands, out, params, stream);
    TANDEM_POINTWISE_CASE(kSigmoid)
    TANDEM_POINTWISE_CASE(kTanh)
    TANDEM_POINTWISE_CASE(kExp)
    TANDEM_POINTWISE_CASE(kLog)
    TANDEM_POINTWISE_CASE(kRsqrt)
    TANDEM_POINTWISE_CASE(kGelu)
    TANDEM_POINTWISE_CASE(kGeluTanh)
    TANDEM_POINTWISE_CASE(kPowExponent)
    TANDEM_POINTWISE_CASE(kPowBase)
    TANDEM_POINTWISE_CASE(kClamp)
    TANDEM_POINTWISE_CASE(kSigmoidBackward)
    TANDEM_POINTWISE_CASE(kTanhBackward)
    TANDEM_POINTWISE_CASE(kGeluBackward)
    TANDEM_POINTWISE_CASE(kGeluTanhBackward)
    TANDEM_POINTWISE_CASE(kMaximum)
    TANDEM_POINTWISE_CASE(kMinimum)
    TANDEM_POINTWISE_CASE(kLerpScalar)
    TANDEM_POINTWISE_CASE(kAddcmul)
    TANDEM_POINTWISE_CASE(kAddcdiv)
    TANDEM_POINTWISE_CASE(kLerp)
#undef TANDEM_POINTWISE_CASE
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchNativeDropout(DType dtype, int64_t n, const void* x, const int64_t* seed, const DropoutParams& params,
                                void* out, bool* mask, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    DropoutKernel<T>
        <<<Blocks(n), kThreads, 0, stream>>>(n, static_cast<const T*>(x), seed, params, static_cast<T*>(out), mask);
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchDropoutBackward(DType dtype, int64_t n, const void* grad, const bool* mask, double scale,
                                  void* grad_in, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool launched = DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    DropoutBackwardKernel<T><<<Blocks(n), kThreads, 0, stream>>>(n, static_cast<const T*>(grad), mask,
                                                                 static_cast<T>(scale), static_cast<T*>(grad_in));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
