// var (Welford's running mean and squared deviations per thread, combined
// pairwise by Chan's formula) and linalg_vector_norm (sums of |x|^p, or
// NaN-propagating maxima and minima of |x|) over generic_reduce.cuh's
// skeleton. Float32 and 16-bit inputs accumulate in float32, float64 (or a
// float64 result) in float64.
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cuda/generic_reduce.cuh"
#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/reduce_launch.h"

namespace tandem::cuda {
namespace {

__device__ __forceinline__ float Sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double Sqrt(double v) { return sqrt(v); }
__device__ __forceinline__ float Pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double Pow(double a, double b) { return pow(a, b); }
__device__ __forceinline__ float Abs(float v) { return fabsf(v); }
__device__ __forceinline__ double Abs(double v) { return fabs(v); }

template <typename A>
struct WelfordAcc {
  A mean;
  A m2;  // sum of squared deviations from mean
  int64_t n;
};

template <typename T>
struct VarOp {
  using In = T;
  using A = ReduceAccOf<T>;
  using Acc = WelfordAcc<A>;
  double correction;
  T* out;

  __device__ __forceinline__ Acc Identity() const { return Acc{A(0), A(0), 0}; }
  __device__ __forceinline__ void Add(Acc& acc, In x, int64_t) const {
    const A v = WidenTo<A>(x);
    ++acc.n;
    const A delta = v - acc.mean;
    acc.mean += delta / static_cast<A>(acc.n);
    acc.m2 += delta * (v - acc.mean);
  }
  __device__ __forceinline__ Acc Combine(const Acc& a, const Acc& b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const A delta = b.mean - a.mean;
    const A b_share = static_cast<A>(b.n) / static_cast<A>(n);
    return Acc{a.mean + delta * b_share, a.m2 + b.m2 + delta * delta * static_cast<A>(a.n) * b_share, n};
  }
  __device__ __forceinline__ void Store(int64_t j, const Acc& acc, int64_t count) const {
    // max(0, N - correction): 0 gives inf, or NaN for 0 / 0, as in PyTorch.
    const double divisor = fmax(0.0, static_cast<double>(count) - correction);
    out[j] = RoundTo<T>(acc.m2 / static_cast<A>(divisor));
  }
};

template <typename In_, typename Out>
struct VectorNormOpOf {
  using In = In_;
  using Acc = ReduceAccOf<In_, Out>;
  VectorNormOp kind;
  Acc p;
  Acc inverse_p;
  Out* out;

  __device__ __forceinline__ Acc Identity() const {
    return kind == VectorNormOp::kMinAbs ? std::numeric_limits<Acc>::infinity() : Acc(0);
  }
  __device__ __forceinline__ Acc Combine(const Acc& a, const Acc& b) const {
    switch (kind) {
      case VectorNormOp::kMaxAbs:
        if (IsNanValue(a)) return a;
        return (IsNanValue(b) || b > a) ? b : a;
      case VectorNormOp::kMinAbs:
        if (IsNanValue(a)) return a;
        return (IsNanValue(b) || b < a) ? b : a;
      default:
        return a + b;
    }
  }
  __device__ __forceinline__ void Add(Acc& acc, In x, int64_t) const {
    const Acc a = Abs(WidenTo<Acc>(x));
    switch (kind) {
      case VectorNormOp::kSumSquares:
        acc += a * a;
        return;
      case VectorNormOp::kSumAbs:
        acc += a;
        return;
      case VectorNormOp::kCountNonZero:
        acc += a != Acc(0) ? Acc(1) : Acc(0);
        return;  // NaN counts
      case VectorNormOp::kSumPow:
        acc += Pow(a, p);
        return;
      default:
        acc = Combine(acc, a);
        return;
    }
  }
  __device__ __forceinline__ void Store(int64_t j, const Acc& acc, int64_t) const {
    Acc v = acc;
    if (kind == VectorNormOp::kSumSquares) v = Sqrt(v);
    if (kind == VectorNormOp::kSumPow) v = Pow(v, inverse_p);
    out[j] = RoundTo<Out>(v);
  }
};

}  // namespace

cudaError_t LaunchVar(DType dtype, const ReduceLayout& layout, double correction, const void* in, void* out,
                      cudaStream_t stream) {
  cudaError_t error = cudaErrorInvalidValue;
  DispatchReduceType</*kInts=*/false>(dtype, [&](auto tag) {
    using T = decltype(tag);
    error = LaunchGenericReduce(VarOp<T>{correction, static_cast<T*>(out)}, layout, static_cast<const T*>(in), stream);
  });
  return error;
}

cudaError_t LaunchVectorNorm(VectorNormOp op, double p, DType out_dtype, DType in_dtype, const ReduceLayout& layout,
                             const void* in, void* out, cudaStream_t stream) {
  cudaError_t error = cudaErrorInvalidValue;
  DispatchConversion</*kInts=*/false>(out_dtype, in_dtype, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    using Acc = ReduceAccOf<In, Out>;
    const VectorNormOpOf<In, Out> norm{op, static_cast<Acc>(p), static_cast<Acc>(1.0 / p), static_cast<Out*>(out)};
    error = LaunchGenericReduce(norm, layout, static_cast<const In*>(in), stream);
  });
  return error;
}

}  // namespace tandem::cuda
