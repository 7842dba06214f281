// Elementwise kernels: binary ops with broadcasting and unary ops.
//
// Two kernels per (dtype, op): a vectorized one (16-byte loads and stores)
// for contiguous operands of the output's size or single-element operands,
// and a general one that reads each operand through its strides. Each output
// element is written by the thread that read its inputs, so out may be an
// input (in-place, as the planner allows for elementwise ops).
#include <cmath>
#include <type_traits>

#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/launch.h"

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

template <typename T, BinaryOp kOp>
struct BinaryFn {
  T p;
  __device__ __forceinline__ T operator()(T a, T b) const {
    if constexpr (kOp == BinaryOp::kAdd) {
      return a + p * b;
    } else if constexpr (kOp == BinaryOp::kSub) {
      return a - p * b;
    } else if constexpr (kOp == BinaryOp::kMul) {
      return a * b;
    } else if constexpr (kOp == BinaryOp::kDiv) {
      return a / b;
    } else {
      return b > p ? a : T(0);  // threshold_backward(grad_output = a, self = b)
    }
  }
};

template <typename T, UnaryOp kOp>
struct UnaryFn {
  T p;
  __device__ __forceinline__ T operator()(T x) const {
    if constexpr (kOp == UnaryOp::kNeg) {
      return -x;
    } else if constexpr (kOp == UnaryOp::kRelu) {
      return x < T(0) ? T(0) : x;  // keeps NaN, as clamp_min does
    } else if constexpr (kOp == UnaryOp::kSqrt) {
      return sqrt(x);
    } else if constexpr (kOp == UnaryOp::kAddConst) {
      return x + p;
    } else if constexpr (kOp == UnaryOp::kMulConst) {
      return x * p;
    } else {
      return x / p;
    }
  }
};

// Vectors each thread keeps in flight per operand: enough independent 16-byte
// loads to cover memory latency.
constexpr int kUnroll = 4;

// Operands are contiguous (data[i]) or single elements (scalar).
template <typename T, typename Fn>
__global__ void BinaryVecKernel(int64_t n, BinaryOperand a, BinaryOperand b, T* out, Fn fn) {
  using V = Vec16<T>;
  constexpr int kCount = V::kCount;
  const T sa = a.scalar ? LoadConverted<T>(a.data, a.scalar_dtype) : T{};
  const T sb = b.scalar ? LoadConverted<T>(b.data, b.scalar_dtype) : T{};
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  const V* va = reinterpret_cast<const V*>(pa);
  const V* vb = reinterpret_cast<const V*>(pb);
  V* vo = reinterpret_cast<V*>(out);
  const int64_t vectors = n / kCount;
  const int64_t stride = GlobalStride();
  int64_t i = GlobalThread();
  for (; i + (kUnroll - 1) * stride < vectors; i += kUnroll * stride) {
    V xa[kUnroll], xb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (!a.scalar) xa[u] = va[i + u * stride];
      if (!b.scalar) xb[u] = vb[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      V r;
#pragma unroll
      for (int k = 0; k < kCount; ++k) r.v[k] = fn(a.scalar ? sa : xa[u].v[k], b.scalar ? sb : xb[u].v[k]);
      vo[i + u * stride] = r;
    }
  }
  for (; i < vectors; i += stride) {
    V xa, xb, r;
    if (!a.scalar) xa = va[i];
    if (!b.scalar) xb = vb[i];
#pragma unroll
    for (int k = 0; k < kCount; ++k) r.v[k] = fn(a.scalar ? sa : xa.v[k], b.scalar ? sb : xb.v[k]);
    vo[i] = r;
  }
  for (int64_t j = vectors * kCount + GlobalThread(); j < n; j += stride) {
    out[j] = fn(a.scalar ? sa : pa[j], b.scalar ? sb : pb[j]);
  }
}

// Same, one element per step, without alignment requirements.
template <typename T, typename Fn>
__global__ void BinaryFlatKernel(int64_t n, BinaryOperand a, BinaryOperand b, T* out, Fn fn) {
  const T sa = a.scalar ? LoadConverted<T>(a.data, a.scalar_dtype) : T{};
  const T sb = b.scalar ? LoadConverted<T>(b.data, b.scalar_dtype) : T{};
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    out[i] = fn(a.scalar ? sa : pa[i], b.scalar ? sb : pb[i]);
  }
}

template <typename T, typename Fn>
__global__ void BinaryStridedKernel(int64_t n, BinaryOperand a, BinaryOperand b, T* out, Fn fn) {
  const T sa = a.scalar ? LoadConverted<T>(a.data, a.scalar_dtype) : T{};
  const T sb = b.scalar ? LoadConverted<T>(b.data, b.scalar_dtype) : T{};
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    const T x = a.scalar ? sa : pa[a.layout.rank == 0 ? i : StridedOffset(a.layout, i)];
    const T y = b.scalar ? sb : pb[b.layout.rank == 0 ? i : StridedOffset(b.layout, i)];
    out[i] = fn(x, y);
  }
}

bool Contiguous(const BinaryOperand& operand) { return operand.scalar || operand.layout.rank == 0; }

template <typename T, BinaryOp kOp>
cudaError_t RunBinary(int64_t n, const BinaryOperand& a, const BinaryOperand& b, void* out, ScalarParam param,
                      cudaStream_t stream) {
  const BinaryFn<T, kOp> fn{ParamAs<T>(param)};
  T* o = static_cast<T*>(out);
  if (Contiguous(a) && Contiguous(b)) {
    const bool aligned = Aligned16(out) && (a.scalar || Aligned16(a.data)) && (b.scalar || Aligned16(b.data));
    if (aligned) {
      BinaryVecKernel<T><<<Blocks(n / Vec16<T>::kCount + 1), kThreads, 0, stream>>>(n, a, b, o, fn);
    } else {
      BinaryFlatKernel<T><<<Blocks(n), kThreads, 0, stream>>>(n, a, b, o, fn);
    }
  } else {
    BinaryStridedKernel<T><<<Blocks(n), kThreads, 0, stream>>>(n, a, b, o, fn);
  }
  return LaunchError();
}

template <BinaryOp kOp>
cudaError_t DispatchBinary(DType dtype, int64_t n, const BinaryOperand& a, const BinaryOperand& b, void* out,
                           ScalarParam param, cudaStream_t stream) {
  constexpr bool kFloatOnly = kOp == BinaryOp::kDiv || kOp == BinaryOp::kThresholdBackward;
  switch (dtype) {
    case DType::kFloat32:
      return RunBinary<float, kOp>(n, a, b, out, param, stream);
    case DType::kFloat64:
      return RunBinary<double, kOp>(n, a, b, out, param, stream);
    case DType::kInt64:
      if constexpr (!kFloatOnly) return RunBinary<int64_t, kOp>(n, a, b, out, param, stream);
      return cudaErrorInvalidValue;
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename T, typename Fn>
__global__ void UnaryVecKernel(int64_t n, const T* in, T* out, Fn fn) {
  using V = Vec16<T>;
  constexpr int kCount = V::kCount;
  const V* vin = reinterpret_cast<const V*>(in);
  V* vout = reinterpret_cast<V*>(out);
  const int64_t vectors = n / kCount;
  const int64_t stride = GlobalStride();
  int64_t i = GlobalThread();
  for (; i + (kUnroll - 1) * stride < vectors; i += kUnroll * stride) {
    V x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) x[u] = vin[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int k = 0; k < kCount; ++k) x[u].v[k] = fn(x[u].v[k]);
      vout[i + u * stride] = x[u];
    }
  }
  for (; i < vectors; i += stride) {
    V x = vin[i];
#pragma unroll
    for (int k = 0; k < kCount; ++k) x.v[k] = fn(x.v[k]);
    vout[i] = x;
  }
  for (int64_t j = vectors * kCount + GlobalThread(); j < n; j += stride) out[j] = fn(in[j]);
}

template <typename T, typename Fn>
__global__ void UnaryStridedKernel(int64_t n, const T* in, StridedOperand layout, T* out, Fn fn) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    out[i] = fn(layout.rank == 0 ? in[i] : in[StridedOffset(layout, i)]);
  }
}

template <typename T, UnaryOp kOp>
cudaError_t RunUnary(int64_t n, const void* in, const StridedOperand& layout, void* out, ScalarParam param,
                     cudaStream_t stream) {
  const UnaryFn<T, kOp> fn{ParamAs<T>(param)};
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  if (layout.rank == 0 && Aligned16(in) && Aligned16(out)) {
    UnaryVecKernel<T><<<Blocks(n / Vec16<T>::kCount + 1), kThreads, 0, stream>>>(n, x, y, fn);
  } else {
    UnaryStridedKernel<T><<<Blocks(n), kThreads, 0, stream>>>(n, x, layout, y, fn);
  }
  return LaunchError();
}

template <UnaryOp kOp>
cudaError_t DispatchUnary(DType dtype, int64_t n, const void* in, const StridedOperand& layout, void* out,
                          ScalarParam param, cudaStream_t stream) {
  constexpr bool kFloatOnly = kOp == UnaryOp::kSqrt || kOp == UnaryOp::kDivConst;
  switch (dtype) {
    case DType::kFloat32:
      return RunUnary<float, kOp>(n, in, layout, out, param, stream);
    case DType::kFloat64:
      return RunUnary<double, kOp>(n, in, layout, out, param, stream);
    case DType::kInt64:
      if constexpr (!kFloatOnly) return RunUnary<int64_t, kOp>(n, in, layout, out, param, stream);
      return cudaErrorInvalidValue;
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t LaunchBinary(BinaryOp op, DType dtype, int64_t n, const BinaryOperand& a, const BinaryOperand& b, void* out,
                         ScalarParam param, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (op) {
    case BinaryOp::kAdd:
      return DispatchBinary<BinaryOp::kAdd>(dtype, n, a, b, out, param, stream);
    case BinaryOp::kSub:
      return DispatchBinary<BinaryOp::kSub>(dtype, n, a, b, out, param, stream);
    case BinaryOp::kMul:
      return DispatchBinary<BinaryOp::kMul>(dtype, n, a, b, out, param, stream);
    case BinaryOp::kDiv:
      return DispatchBinary<BinaryOp::kDiv>(dtype, n, a, b, out, param, stream);
    case BinaryOp::kThresholdBackward:
      return DispatchBinary<BinaryOp::kThresholdBackward>(dtype, n, a, b, out, param, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchUnary(UnaryOp op, DType dtype, int64_t n, const void* in, const StridedOperand& in_layout, void* out,
                        ScalarParam param, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (op) {
    case UnaryOp::kNeg:
      return DispatchUnary<UnaryOp::kNeg>(dtype, n, in, in_layout, out, param, stream);
    case UnaryOp::kRelu:
      return DispatchUnary<UnaryOp::kRelu>(dtype, n, in, in_layout, out, param, stream);
    case UnaryOp::kSqrt:
      return DispatchUnary<UnaryOp::kSqrt>(dtype, n, in, in_layout, out, param, stream);
    case UnaryOp::kAddConst:
      return DispatchUnary<UnaryOp::kAddConst>(dtype, n, in, in_layout, out, param, stream);
    case UnaryOp::kMulConst:
      return DispatchUnary<UnaryOp::kMulConst>(dtype, n, in, in_layout, out, param, stream);
    case UnaryOp::kDivConst:
      return DispatchUnary<UnaryOp::kDivConst>(dtype, n, in, in_layout, out, param, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
