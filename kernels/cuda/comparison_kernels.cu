// Kernels of the comparisons (bool results), where, masked_fill,
// logical_not and any: grid-stride loops, operands read contiguously,
// through broadcast strides, or as one converted element. masked_fill,
// logical_not and any also take bfloat16 and float16 (the comparisons' and
// where's 16-bit kernels are in half_elementwise_kernels.cu).
#include <type_traits>

#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/sequence_launch.h"

namespace tandem::cuda {
namespace {

template <typename T>
__device__ __forceinline__ bool Compare(CompareOp op, T a, T b) {
  switch (op) {
    case CompareOp::kEq:
      return a == b;
    case CompareOp::kNe:
      return a != b;
    case CompareOp::kLt:
      return a < b;
    case CompareOp::kLe:
      return a <= b;
    case CompareOp::kGt:
      return a > b;
    case CompareOp::kGe:
      return a >= b;
  }
  return false;
}

template <typename T>
__device__ __forceinline__ T Read(const BinaryOperand& operand, T scalar, int64_t i) {
  if (operand.scalar) return scalar;
  const T* p = static_cast<const T*>(operand.data);
  return p[operand.layout.rank == 0 ? i : StridedOffset(operand.layout, i)];
}

template <typename T>
__device__ __forceinline__ T ScalarOf(const BinaryOperand& operand) {
  return operand.scalar ? LoadConverted<T>(operand.data, operand.scalar_dtype) : T{};
}

template <typename T>
__global__ void CompareKernel(CompareOp op, int64_t n, BinaryOperand a, BinaryOperand b, bool* out) {
  const T sa = ScalarOf<T>(a), sb = ScalarOf<T>(b);
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) out[i] = Compare(op, Read(a, sa, i), Read(b, sb, i));
}

// C: the type the comparison is made in.
template <typename T, typename C>
__global__ void CompareScalarKernel(CompareOp op, int64_t n, const T* x, C other, bool* out) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) out[i] = Compare(op, static_cast<C>(x[i]), other);
}

template <typename T>
__global__ void WhereKernel(int64_t n, BinaryOperand cond, BinaryOperand a, BinaryOperand b, T* out) {
  const bool sc = ScalarOf<bool>(cond);
  const T sa = ScalarOf<T>(a), sb = ScalarOf<T>(b);
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    out[i] = Read(cond, sc, i) ? Read(a, sa, i) : Read(b, sb, i);
  }
}

template <typename T>
__global__ void MaskedFillKernel(int64_t n, const T* x, BinaryOperand mask, const void* value, DType value_dtype,
                                 T number, T* out) {
  const T v = value != nullptr ? LoadConverted<T>(value, value_dtype) : number;
  const bool sm = ScalarOf<bool>(mask);
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) out[i] = Read(mask, sm, i) ? v : x[i];
}

// A 16-bit float fills with `value` (a rank-0 tensor of any dtype, or the
// number already converted to float32), rounded to H once: bit for bit the
// CPU's widened fill.
template <typename H>
__global__ void HalfMaskedFillKernel(int64_t n, const H* x, BinaryOperand mask, const void* value, DType value_dtype,
                                     float number, H* out) {
  const H v = Narrow<H>(value != nullptr ? LoadAsFloat(value, value_dtype) : number);
  const bool sm = ScalarOf<bool>(mask);
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) out[i] = Read(mask, sm, i) ? v : x[i];
}

// Truth of one element: nonzero (NaN is nonzero, -0 is zero).
template <typename T>
__device__ __forceinline__ bool Nonzero(T v) {
  if constexpr (kIsHalfType<T>) {
    return Widen(v) != 0.0f;
  } else {
    return v != T(0);
  }
}

template <typename T>
__global__ void LogicalNotKernel(int64_t n, const T* x, bool* out) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) out[i] = !Nonzero(x[i]);
}

// A thread per output: the reduced elements are read in order; loads of
// neighbouring outputs are adjacent when the reduced dim is not innermost.
template <typename T>
__global__ void AnyMiddleKernel(int64_t outer, int64_t size, int64_t inner, const T* x, bool* out) {
  for (int64_t p = GlobalThread(); p < outer * inner; p += GlobalStride()) {
    const int64_t base = (p / inner) * size * inner + p % inner;
    bool any = false;
    for (int64_t d = 0; d < size && !any; ++d) any = Nonzero(x[base + d * inner]);
    out[p] = any;
  }
}

template <typename T>
__global__ void AnyGeneralKernel(int64_t out_n, StridedOperand kept, StridedOperand reduced, const T* x, bool* out) {
  int64_t reduced_n = 1;
  for (int d = 0; d < reduced.rank; ++d) reduced_n *= reduced.sizes[d];
  for (int64_t p = GlobalThread(); p < out_n; p += GlobalStride()) {
    const int64_t base = StridedOffset(kept, p);
    bool any = false;
    for (int64_t r = 0; r < reduced_n && !any; ++r) any = Nonzero(x[base + StridedOffset(reduced, r)]);
    out[p] = any;
  }
}

}  // namespace

cudaError_t LaunchCompare(CompareOp op, DType dtype, int64_t n, const BinaryOperand& a, const BinaryOperand& b,
                          bool* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool launched = DispatchStorable(dtype, [&](auto tag) {
    using T = decltype(tag);
    CompareKernel<T><<<Blocks(n), kThreads, 0, stream>>>(op, n, a, b, out);
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchCompareScalar(CompareOp op, DType dtype, int64_t n, const void* x, ScalarParam other, bool int_number,
                                bool* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool launched = DispatchStorable(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x);
    if constexpr (std::is_floating_point_v<T>) {
      CompareScalarKernel<T, T><<<Blocks(n), kThreads, 0, stream>>>(op, n, p, static_cast<T>(other.f), out);
    } else if (int_number) {
      CompareScalarKernel<T, int64_t><<<Blocks(n), kThreads, 0, stream>>>(op, n, p, other.i, out);
    } else {
      CompareScalarKernel<T, float><<<Blocks(n), kThreads, 0, stream>>>(op, n, p, static_cast<float>(other.f), out);
    }
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchWhere(DType dtype, int64_t n, const BinaryOperand& cond, const BinaryOperand& a,
                        const BinaryOperand& b, void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool launched = DispatchStorable(dtype, [&](auto tag) {
    using T = decltype(tag);
    WhereKernel<T><<<Blocks(n), kThreads, 0, stream>>>(n, cond, a, b, static_cast<T*>(out));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchMaskedFill(DType dtype, int64_t n, const void* x, const BinaryOperand& mask, const void* value,
                             DType value_dtype, double number, void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool half = DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    HalfMaskedFillKernel<H><<<Blocks(n), kThreads, 0, stream>>>(n, static_cast<const H*>(x), mask, value, value_dtype,
                                                                static_cast<float>(number), static_cast<H*>(out));
  });
  if (half) return LaunchError();
  const bool launched = DispatchStorable(dtype, [&](auto tag) {
    using T = decltype(tag);
    MaskedFillKernel<T><<<Blocks(n), kThreads, 0, stream>>>(n, static_cast<const T*>(x), mask, value, value_dtype,
                                                            Convert<T>(number), static_cast<T*>(out));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchLogicalNot(DType dtype, int64_t n, const void* x, bool* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool launched = DispatchStorableOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    LogicalNotKernel<T><<<Blocks(n), kThreads, 0, stream>>>(n, static_cast<const T*>(x), out);
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAny(DType dtype, int64_t outer, int64_t size, int64_t inner, const StridedOperand& kept,
                      const StridedOperand& reduced, int64_t out_n, const void* x, bool* out, cudaStream_t stream) {
  if (out_n == 0) return cudaSuccess;
  const bool launched = DispatchStorableOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x);
    if (reduced.rank > 0) {
      AnyGeneralKernel<T><<<Blocks(out_n), kThreads, 0, stream>>>(out_n, kept, reduced, p, out);
    } else {
      AnyMiddleKernel<T><<<Blocks(outer * inner), kThreads, 0, stream>>>(outer, size, inner, p, out);
    }
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
