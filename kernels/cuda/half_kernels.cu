// Kernels of 16-bit float tensors, part 1: converting copies, the pointwise
// ops (arithmetic, relu, threshold_backward, gelu and its backward) and
// dropout. Every value is widened to float32, computed on, and rounded once
// when stored. Each output element is written by the thread that read its
// inputs, so out may be an input (in-place, as the planner allows).
#include <type_traits>

#include "ir/ops/dropout_mask.h"
#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/half_launch.h"

namespace tandem::cuda {
namespace {

// ---- converting copies ----

// From -> float32, the way PyTorch converts to a 16-bit float: a float, a
// double or an integer becomes float first.
template <typename From>
__device__ __forceinline__ float AsFloat(From v) {
  if constexpr (kIsHalfType<From>) {
    return Widen(v);
  } else if constexpr (std::is_same_v<From, bool>) {
    return v ? 1.0f : 0.0f;
  } else {
    return static_cast<float>(v);
  }
}

template <typename To, typename From>
__device__ __forceinline__ To ConvertHalf(From v) {
  const float f = AsFloat(v);
  if constexpr (kIsHalfType<To>) {
    return Narrow<To>(f);
  } else if constexpr (std::is_same_v<To, bool>) {
    return f != 0.0f;
  } else {
    return static_cast<To>(f);
  }
}

template <typename To, typename From>
__global__ void HalfConvertKernel(int64_t n, const From* in, StridedOperand layout, To* out) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    out[i] = ConvertHalf<To>(in[layout.rank == 0 ? i : StridedOffset(layout, i)]);
  }
}

template <typename H>
__global__ void HalfFillKernel(int64_t n, float value, H* out) {
  const H v = Narrow<H>(value);
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) out[i] = v;
}

// ---- pointwise ops ----

constexpr float kSqrt1Over2 = 0.70710678118654752440f;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
constexpr float kGeluTanhCoefficient = 0.044715f;

constexpr bool IsBinary(HalfPointwiseOp op) { return op <= HalfPointwiseOp::kGeluTanhBackward; }

template <HalfPointwiseOp kOp>
__device__ __forceinline__ float Apply(float a, float b, float p) {
  using Op = HalfPointwiseOp;
  // a ± p * b is one fused multiply-add, pinned (nvcc would contract the
  // sum but leave the difference to ptxas), as fused_kernels.cu computes it.
  if constexpr (kOp == Op::kAdd) {
    return __fmaf_rn(p, b, a);
  } else if constexpr (kOp == Op::kSub) {
    return __fmaf_rn(-p, b, a);
  } else if constexpr (kOp == Op::kMul) {
    return a * b;
  } else if constexpr (kOp == Op::kDiv) {
    return a / b;
  } else if constexpr (kOp == Op::kThresholdBackward) {
    return b > p ? a : 0.0f;
  } else if constexpr (kOp == Op::kGeluBackward) {
    const float cdf = 0.5f * (1.0f + erff(b * kSqrt1Over2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * b * b);
    return a * (cdf + b * pdf);
  } else if constexpr (kOp == Op::kGeluTanhBackward) {
    const float inner = kSqrt2OverPi * (b + kGeluTanhCoefficient * b * b * b);
    const float t = tanhf(inner);
    const float d_inner = kSqrt2OverPi * (1.0f + 3.0f * kGeluTanhCoefficient * b * b);
    return a * (0.5f * (1.0f + t) + 0.5f * b * (1.0f - t * t) * d_inner);
  } else if constexpr (kOp == Op::kNeg) {
    return -a;
  } else if constexpr (kOp == Op::kRelu) {
    return a < 0.0f ? 0.0f : a;
  } else if constexpr (kOp == Op::kAddConst) {
    return a + p;
  } else if constexpr (kOp == Op::kMulConst) {
    return a * p;
  } else if constexpr (kOp == Op::kDivConst) {
    return a / p;
  } else if constexpr (kOp == Op::kGelu) {
    return 0.5f * a * (1.0f + erff(a * kSqrt1Over2));
  } else {
    const float inner = kSqrt2OverPi * (a + kGeluTanhCoefficient * a * a * a);
    return 0.5f * a * (1.0f + tanhf(inner));
  }
}

// A scalar operand's value, rounded to H first (PyTorch converts a rank-0
// operand of another dtype to the result's dtype; a 16-bit one is unchanged).
template <typename H>
__device__ __forceinline__ float ScalarOf(const BinaryOperand& operand) {
  return operand.scalar ? Widen(Narrow<H>(LoadAsFloat(operand.data, operand.scalar_dtype))) : 0.0f;
}

// Operands contiguous (or scalar), all vectors 16-byte aligned: 8 elements
// per load and store. The body of the two kernels below.
template <typename H, HalfPointwiseOp kOp>
__device__ __forceinline__ void HalfPointwiseVec(int64_t n, const BinaryOperand& a, const BinaryOperand& b, float p,
                                                 H* out) {
  using V = Vec16<H>;
  constexpr int kCount = V::kCount;
  constexpr bool kBinary = IsBinary(kOp);
  const float sa = ScalarOf<H>(a);
  const float sb = kBinary ? ScalarOf<H>(b) : 0.0f;
  const H* pa = static_cast<const H*>(a.data);
  const H* pb = static_cast<const H*>(b.data);
  const int64_t vectors = n / kCount;
  for (int64_t v = GlobalThread(); v < vectors; v += GlobalStride()) {
    V xa, xb, r;
    if (!a.scalar) xa = reinterpret_cast<const V*>(pa)[v];
    if (kBinary && !b.scalar) xb = reinterpret_cast<const V*>(pb)[v];
#pragma unroll
    for (int k = 0; k < kCount; ++k) {
      const float x = a.scalar ? sa : Widen(xa.v[k]);
      const float y = kBinary ? (b.scalar ? sb : Widen(xb.v[k])) : 0.0f;
      r.v[k] = Narrow<H>(Apply<kOp>(x, y, p));
    }
    reinterpret_cast<V*>(out)[v] = r;
  }
  for (int64_t i = vectors * kCount + GlobalThread(); i < n; i += GlobalStride()) {
    const float x = a.scalar ? sa : Widen(pa[i]);
    const float y = kBinary ? (b.scalar ? sb : Widen(pb[i])) : 0.0f;
    out[i] = Narrow<H>(Apply<kOp>(x, y, p));
  }
}

template <typename H, HalfPointwiseOp kOp>
__global__ void HalfPointwiseVecKernel(int64_t n, BinaryOperand a, BinaryOperand b, float p, H* out) {
  HalfPointwiseVec<H, kOp>(n, a, b, p, out);
}

// gelu and its tanh form ask for 8 blocks of kThreads per multiprocessor:
// they fit 32 registers without spilling (40 unbounded: 6 blocks, 75%
// occupancy; ncu on an H200, bfloat16 [4096, 2048]: 64% of issue slots
// used, 14.4 us cold). Not the other ops: bfloat16 add, sub and mul spill
// 8-30 bytes at 32 (`nvcc -Xptxas -v`), and any launch bound, even
// (1024, 0), changed their register use, so they keep the kernel above.
constexpr bool BoundedPointwise(HalfPointwiseOp op) {
  return op == HalfPointwiseOp::kGelu || op == HalfPointwiseOp::kGeluTanh;
}

template <typename H, HalfPointwiseOp kOp>
__global__ void __launch_bounds__(kThreads, 8)
    HalfPointwiseVecBoundedKernel(int64_t n, BinaryOperand a, BinaryOperand b, float p, H* out) {
  HalfPointwiseVec<H, kOp>(n, a, b, p, out);
}

template <typename H, HalfPointwiseOp kOp>
__global__ void HalfPointwiseStridedKernel(int64_t n, BinaryOperand a, BinaryOperand b, float p, H* out) {
  constexpr bool kBinary = IsBinary(kOp);
  const float sa = ScalarOf<H>(a);
  const float sb = kBinary ? ScalarOf<H>(b) : 0.0f;
  const H* pa = static_cast<const H*>(a.data);
  const H* pb = static_cast<const H*>(b.data);
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    const float x = a.scalar ? sa : Widen(pa[a.layout.rank == 0 ? i : StridedOffset(a.layout, i)]);
    float y = 0.0f;
    if constexpr (kBinary) y = b.scalar ? sb : Widen(pb[b.layout.rank == 0 ? i : StridedOffset(b.layout, i)]);
    out[i] = Narrow<H>(Apply<kOp>(x, y, p));
  }
}

bool VectorReady(const BinaryOperand& operand, bool used) {
  return !used || operand.scalar || (operand.layout.rank == 0 && Aligned16(operand.data));
}

template <HalfPointwiseOp kOp>
cudaError_t RunPointwise(DType dtype, int64_t n, const BinaryOperand& a, const BinaryOperand& b, float p, void* out,
                         cudaStream_t stream) {
  const bool vector = Aligned16(out) && VectorReady(a, true) && VectorReady(b, IsBinary(kOp));
  const bool launched = DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    H* o = static_cast<H*>(out);
    if (vector) {
      const int64_t blocks = Blocks(n / Vec16<H>::kCount + 1);
      if constexpr (BoundedPointwise(kOp)) {
        HalfPointwiseVecBoundedKernel<H, kOp><<<blocks, kThreads, 0, stream>>>(n, a, b, p, o);
      } else {
        HalfPointwiseVecKernel<H, kOp><<<blocks, kThreads, 0, stream>>>(n, a, b, p, o);
      }
    } else {
      HalfPointwiseStridedKernel<H, kOp><<<Blocks(n), kThreads, 0, stream>>>(n, a, b, p, o);
    }
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

// ---- dropout ----

template <typename H>
__global__ void HalfDropoutKernel(int64_t n, const H* x, const int64_t* seed, bool train, int64_t attr_seed,
                                  uint32_t threshold, float scale, H* out, bool* mask) {
  const uint64_t key = dropout::Key(attr_seed, seed != nullptr ? *seed : 0);
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    const bool keep = dropout::Keep(key, i, threshold);
    const float v = Widen(x[i]);
    mask[i] = keep;
    out[i] = Narrow<H>(train ? v * (keep ? 1.0f : 0.0f) * scale : v);
  }
}

template <typename H>
__global__ void HalfDropoutBackwardKernel(int64_t n, const H* grad, const bool* mask, float scale, H* out) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    out[i] = Narrow<H>(Widen(grad[i]) * (mask[i] ? 1.0f : 0.0f) * scale);
  }
}

}  // namespace

cudaError_t LaunchHalfConvertCopy(DType out_dtype, DType in_dtype, int64_t n, const void* in,
                                  const StridedOperand& in_layout, void* out, cudaStream_t stream) {
  if (!IsHalfDType(out_dtype) && !IsHalfDType(in_dtype)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  bool launched = false;
  DispatchStorableOrHalf(out_dtype, [&](auto to_tag) {
    using To = decltype(to_tag);
    launched = DispatchStorableOrHalf(in_dtype, [&](auto from_tag) {
      using From = decltype(from_tag);
      HalfConvertKernel<To, From>
          <<<Blocks(n), kThreads, 0, stream>>>(n, static_cast<const From*>(in), in_layout, static_cast<To*>(out));
    });
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchHalfFill(DType dtype, int64_t n, float value, void* out, cudaStream_t stream) {
  if (n == 0) return IsHalfDType(dtype) ? cudaSuccess : cudaErrorInvalidValue;
  const bool launched = DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    HalfFillKernel<H><<<Blocks(n), kThreads, 0, stream>>>(n, value, static_cast<H*>(out));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

namespace {

// out[r, p] += bias[r % channels] for rows r of `plane_units` units (a unit:
// one element, or kVector of them in 16 bytes): widened, summed in float32,
// rounded once, as add.Tensor of 16-bit tensors.
template <typename H, bool kVector>
__global__ void HalfChannelBiasKernel(int64_t units, int64_t plane_units, int64_t channels, const H* bias, H* out) {
  for (int64_t u = GlobalThread(); u < units; u += GlobalStride()) {
    const float b = Widen(bias[(u / plane_units) % channels]);
    if constexpr (kVector) {
      Vec16<H>* p = reinterpret_cast<Vec16<H>*>(out) + u;
      Vec16<H> v = *p;
#pragma unroll
      for (int e = 0; e < Vec16<H>::kCount; ++e) v.v[e] = Narrow<H>(Widen(v.v[e]) + b);
      *p = v;
    } else {
      out[u] = Narrow<H>(Widen(out[u]) + b);
    }
  }
}

}  // namespace

cudaError_t LaunchHalfChannelBias(DType dtype, int64_t rows, int64_t channels, int64_t plane, const void* bias,
                                  void* out, cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  if (rows * plane == 0) return cudaSuccess;
  DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    constexpr int kWidth = Vec16<H>::kCount;
    const H* b = static_cast<const H*>(bias);
    H* y = static_cast<H*>(out);
    if (plane % kWidth == 0 && Aligned16(out)) {
      const int64_t units = rows * plane / kWidth;
      HalfChannelBiasKernel<H, true><<<Blocks(units), kThreads, 0, stream>>>(units, plane / kWidth, channels, b, y);
    } else {
      HalfChannelBiasKernel<H, false>
          <<<Blocks(rows * plane), kThreads, 0, stream>>>(rows * plane, plane, channels, b, y);
    }
  });
  return LaunchError();
}

cudaError_t LaunchHalfPointwise(HalfPointwiseOp op, DType dtype, int64_t n, const BinaryOperand& a,
                                const BinaryOperand& b, float param, void* out, cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  using Op = HalfPointwiseOp;
  switch (op) {
#define TANDEM_HALF_OP(name) \
  case Op::name:             \
    return RunPointwise<Op::name>(dtype, n, a, b, param, out, stream);
    TANDEM_HALF_OP(kAdd)
    TANDEM_HALF_OP(kSub)
    TANDEM_HALF_OP(kMul)
    TANDEM_HALF_OP(kDiv)
    TANDEM_HALF_OP(kThresholdBackward)
    TANDEM_HALF_OP(kGeluBackward)
    TANDEM_HALF_OP(kGeluTanhBackward)
    TANDEM_HALF_OP(kNeg)
    TANDEM_HALF_OP(kRelu)
    TANDEM_HALF_OP(kAddConst)
    TANDEM_HALF_OP(kMulConst)
    TANDEM_HALF_OP(kDivConst)
    TANDEM_HALF_OP(kGelu)
    TANDEM_HALF_OP(kGeluTanh)
#undef TANDEM_HALF_OP
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchHalfDropout(DType dtype, int64_t n, const void* x, const int64_t* seed, bool train, int64_t attr_seed,
                              uint32_t threshold, float scale, void* out, bool* mask, cudaStream_t stream) {
  if (n == 0) return IsHalfDType(dtype) ? cudaSuccess : cudaErrorInvalidValue;
  const bool launched = DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    HalfDropoutKernel<H><<<Blocks(n), kThreads, 0, stream>>>(n, static_cast<const H*>(x), seed, train, attr_seed,
                                                             threshold, scale, static_cast<H*>(out), mask);
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchHalfDropoutBackward(DType dtype, int64_t n, const void* grad, const bool* mask, float scale,
                                      void* out, cudaStream_t stream) {
  if (n == 0) return IsHalfDType(dtype) ? cudaSuccess : cudaErrorInvalidValue;
  const bool launched = DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    HalfDropoutBackwardKernel<H>
        <<<Blocks(n), kThreads, 0, stream>>>(n, static_cast<const H*>(grad), mask, scale, static_cast<H*>(out));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
