// Kernels of 16-bit float tensors, part 3: the pointwise math of the
// optimizer step that the other 16-bit kernels lack (sqrt, clamp,
// maximum/minimum, addcmul/addcdiv), the comparisons and where.self.
//
// Values widen to float32, the op computes as its float32 kernel does
// (activation_kernels.cu: same expressions, so the same contractions into
// fused multiply-adds), and the result is rounded once when stored. Each
// output element is written by the thread that read its operands, so out
// may be an operand (in place). When every tensor operand is contiguous and
// 16-byte aligned, a thread moves 16-byte packs (eight 16-bit elements).
#include <type_traits>

#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/half_launch.h"

namespace tandem::cuda {
namespace {

constexpr int Arity(HalfMathOp op) {
  switch (op) {
    case HalfMathOp::kSqrt:
    case HalfMathOp::kClamp:
      return 1;
    case HalfMathOp::kMaximum:
    case HalfMathOp::kMinimum:
      return 2;
    default:
      return 3;
  }
}

template <HalfMathOp kOp>
__device__ __forceinline__ float Apply(float a, float b, float c, const HalfMathParams& p) {
  if constexpr (kOp == HalfMathOp::kSqrt) {
    return __fsqrt_rn(a);
  } else if constexpr (kOp == HalfMathOp::kClamp) {
    if (a != a) return a;
    if (p.has_lo && a < p.lo) a = p.lo;
    if (p.has_hi && a > p.hi) a = p.hi;
    return a;
  } else if constexpr (kOp == HalfMathOp::kMaximum) {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
  } else if constexpr (kOp == HalfMathOp::kMinimum) {
    if (a != a) return a;
    if (b != b) return b;
    return a < b ? a : b;
  } else if constexpr (kOp == HalfMathOp::kAddcmul) {
    return a + p.value * b * c;
  } else {
    return a + p.value * b / c;
  }
}

// A scalar operand as a value of H: its own bits when it is of H's dtype,
// else its value rounded to H.
template <typename H>
__device__ __forceinline__ H ScalarAs(const BinaryOperand& operand) {
  constexpr DType kDType = std::is_same_v<H, __nv_bfloat16> ? DType::kBFloat16 : DType::kFloat16;
  if (operand.scalar_dtype == kDType) return *static_cast<const H*>(operand.data);
  return Narrow<H>(LoadAsFloat(operand.data, operand.scalar_dtype));
}

template <typename H>
__device__ __forceinline__ H Read(const BinaryOperand& operand, H scalar, int64_t i) {
  if (operand.scalar) return scalar;
  const H* p = static_cast<const H*>(operand.data);
  return p[operand.layout.rank == 0 ? i : StridedOffset(operand.layout, i)];
}

struct Operands {
  BinaryOperand o[3];
};

// kVector: every tensor operand contiguous, every pointer 16-byte aligned;
// packs of Vec16<H> first, then the last n % 8 elements one at a time.
template <typename H, HalfMathOp kOp, bool kVector>
__global__ void HalfMathKernel(int64_t n, Operands operands, HalfMathParams params, H* out) {
  constexpr int kArity = Arity(kOp);
  H scalars[3] = {};
#pragma unroll
  for (int k = 0; k < kArity; ++k) {
    if (operands.o[k].scalar) scalars[k] = ScalarAs<H>(operands.o[k]);
  }
  int64_t begin = 0;
  if constexpr (kVector) {
    using V = Vec16<H>;
    constexpr int kWidth = V::kCount;
    const int64_t packs = n / kWidth;
    for (int64_t v = GlobalThread(); v < packs; v += GlobalStride()) {
      V in[3];
#pragma unroll
      for (int k = 0; k < kArity; ++k) {
        if (!operands.o[k].scalar) in[k] = static_cast<const V*>(operands.o[k].data)[v];
      }
      V result;
#pragma unroll
      for (int e = 0; e < kWidth; ++e) {
        float x[3] = {0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < kArity; ++k) x[k] = Widen(operands.o[k].scalar ? scalars[k] : in[k].v[e]);
        result.v[e] = Narrow<H>(Apply<kOp>(x[0], x[1], x[2], params));
      }
      reinterpret_cast<V*>(out)[v] = result;
    }
    begin = packs * kWidth;
  }
  for (int64_t i = begin + GlobalThread(); i < n; i += GlobalStride()) {
    float x[3] = {0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < kArity; ++k) x[k] = Widen(Read<H>(operands.o[k], scalars[k], i));
    out[i] = Narrow<H>(Apply<kOp>(x[0], x[1], x[2], params));
  }
}

template <HalfMathOp kOp>
cudaError_t RunMath(DType dtype, int64_t n, const BinaryOperand* operands, const HalfMathParams& params, void* out,
                    cudaStream_t stream) {
  constexpr int kArity = Arity(kOp);
  Operands ops;
  bool vector = Aligned16(out);
  for (int k = 0; k < kArity; ++k) {
    ops.o[k] = operands[k];
    vector = vector && (ops.o[k].scalar || (ops.o[k].layout.rank == 0 && Aligned16(ops.o[k].data)));
  }
  const bool launched = DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    H* o = static_cast<H*>(out);
    if (vector) {
      HalfMathKernel<H, kOp, true><<<Blocks(n / Vec16<H>::kCount + 1), kThreads, 0, stream>>>(n, ops, params, o);
    } else {
      HalfMathKernel<H, kOp, false><<<Blocks(n), kThreads, 0, stream>>>(n, ops, params, o);
    }
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

// ---- comparisons and where ----

template <CompareOp kOp>
__device__ __forceinline__ bool Compare(float a, float b) {
  if constexpr (kOp == CompareOp::kEq) {
    return a == b;
  } else if constexpr (kOp == CompareOp::kNe) {
    return a != b;
  } else if constexpr (kOp == CompareOp::kLt) {
    return a < b;
  } else if constexpr (kOp == CompareOp::kLe) {
    return a <= b;
  } else if constexpr (kOp == CompareOp::kGt) {
    return a > b;
  } else {
    return a >= b;
  }
}

template <typename H, CompareOp kOp>
__global__ void HalfCompareKernel(int64_t n, BinaryOperand a, BinaryOperand b, bool* out) {
  const H sa = a.scalar ? ScalarAs<H>(a) : H{};
  const H sb = b.scalar ? ScalarAs<H>(b) : H{};
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    out[i] = Compare<kOp>(Widen(Read<H>(a, sa, i)), Widen(Read<H>(b, sb, i)));
  }
}

template <typename H, CompareOp kOp>
__global__ void HalfCompareScalarKernel(int64_t n, const H* x, float other, bool* out) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) out[i] = Compare<kOp>(Widen(x[i]), other);
}

template <CompareOp kOp>
cudaError_t RunCompare(DType dtype, int64_t n, const BinaryOperand& a, const BinaryOperand& b, bool* out,
                       cudaStream_t stream) {
  const bool launched = DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    HalfCompareKernel<H, kOp><<<Blocks(n), kThreads, 0, stream>>>(n, a, b, out);
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

template <CompareOp kOp>
cudaError_t RunCompareScalar(DType dtype, int64_t n, const void* x, float other, bool* out, cudaStream_t stream) {
  const bool launched = DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    HalfCompareScalarKernel<H, kOp><<<Blocks(n), kThreads, 0, stream>>>(n, static_cast<const H*>(x), other, out);
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

template <typename H>
__global__ void HalfWhereKernel(int64_t n, BinaryOperand cond, BinaryOperand a, BinaryOperand b, H* out) {
  const bool sc = cond.scalar ? *static_cast<const bool*>(cond.data) : false;
  const H sa = a.scalar ? ScalarAs<H>(a) : H{};
  const H sb = b.scalar ? ScalarAs<H>(b) : H{};
  const bool* c = static_cast<const bool*>(cond.data);
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    const bool take_a = cond.scalar ? sc : c[cond.layout.rank == 0 ? i : StridedOffset(cond.layout, i)];
    out[i] = take_a ? Read<H>(a, sa, i) : Read<H>(b, sb, i);
  }
}

}  // namespace

cudaError_t LaunchHalfMath(HalfMathOp op, DType dtype, int64_t n, const BinaryOperand* operands,
                           const HalfMathParams& params, void* out, cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  switch (op) {
    case HalfMathOp::kSqrt:
      return RunMath<HalfMathOp::kSqrt>(dtype, n, operands, params, out, stream);
    case HalfMathOp::kClamp:
      return RunMath<HalfMathOp::kClamp>(dtype, n, operands, params, out, stream);
    case HalfMathOp::kMaximum:
      return RunMath<HalfMathOp::kMaximum>(dtype, n, operands, params, out, stream);
    case HalfMathOp::kMinimum:
      return RunMath<HalfMathOp::kMinimum>(dtype, n, operands, params, out, stream);
    case HalfMathOp::kAddcmul:
      return RunMath<HalfMathOp::kAddcmul>(dtype, n, operands, params, out, stream);
    case HalfMathOp::kAddcdiv:
      return RunMath<HalfMathOp::kAddcdiv>(dtype, n, operands, params, out, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchHalfCompare(CompareOp op, DType dtype, int64_t n, const BinaryOperand& a, const BinaryOperand& b,
                              bool* out, cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  switch (op) {
    case CompareOp::kEq:
      return RunCompare<CompareOp::kEq>(dtype, n, a, b, out, stream);
    case CompareOp::kNe:
      return RunCompare<CompareOp::kNe>(dtype, n, a, b, out, stream);
    case CompareOp::kLt:
      return RunCompare<CompareOp::kLt>(dtype, n, a, b, out, stream);
    case CompareOp::kLe:
      return RunCompare<CompareOp::kLe>(dtype, n, a, b, out, stream);
    case CompareOp::kGt:
      return RunCompare<CompareOp::kGt>(dtype, n, a, b, out, stream);
    case CompareOp::kGe:
      return RunCompare<CompareOp::kGe>(dtype, n, a, b, out, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchHalfCompareScalar(CompareOp op, DType dtype, int64_t n, const void* x, float other, bool* out,
                                    cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  switch (op) {
    case CompareOp::kEq:
      return RunCompareScalar<CompareOp::kEq>(dtype, n, x, other, out, stream);
    case CompareOp::kNe:
      return RunCompareScalar<CompareOp::kNe>(dtype, n, x, other, out, stream);
    case CompareOp::kLt:
      return RunCompareScalar<CompareOp::kLt>(dtype, n, x, other, out, stream);
    case CompareOp::kLe:
      return RunCompareScalar<CompareOp::kLe>(dtype, n, x, other, out, stream);
    case CompareOp::kGt:
      return RunCompareScalar<CompareOp::kGt>(dtype, n, x, other, out, stream);
    case CompareOp::kGe:
      return RunCompareScalar<CompareOp::kGe>(dtype, n, x, other, out, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchHalfWhere(DType dtype, int64_t n, const BinaryOperand& cond, const BinaryOperand& a,
                            const BinaryOperand& b, void* out, cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const bool launched = DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    HalfWhereKernel<H><<<Blocks(n), kThreads, 0, stream>>>(n, cond, a, b, static_cast<H*>(out));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
