// What one element of a pointwise math op (ir/ops/math_table.h) computes,
// shared by the CPU kernels and the CUDA kernels so that both backends run
// the same formula: ApplyMath<kOp>(x, y, params) in the compute type A
// (float for float32 and the 16-bit floats, double for float64, int64_t for
// the integers and bool; MathComputeOf in ir/ops/math_ops.h picks it). The
// results follow PyTorch's kernels: round is half to even, sign(NaN) is 0,
// remainder takes the divisor's sign, floor division is Python's. Integer
// division, fmod and remainder by zero give 0 (PyTorch raises on the CPU and
// leaves the GPU's result undefined); INT64_MIN / -1 wraps.
//
// Header-only; compiled as host code by the CPU backend and as host and
// device code by nvcc. Stateless.
#ifndef TANDEM_KERNELS_MATH_FUNCTIONS_H_
#define TANDEM_KERNELS_MATH_FUNCTIONS_H_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ir/ops/math_table.h"

#if defined(__CUDACC__)
#define TANDEM_MATH_HD __host__ __device__ __forceinline__
#else
#define TANDEM_MATH_HD inline
#endif

namespace tandem::math {

// float and double forms of the C math functions by one name (the CUDA
// device library and the host's libm both provide fn and fnf).
#define TANDEM_MATH_UNARY(Name, fn)                         \
  TANDEM_MATH_HD float Name(float x) { return ::fn##f(x); } \
  TANDEM_MATH_HD double Name(double x) { return ::fn(x); }
TANDEM_MATH_UNARY(Fabs, fabs)
TANDEM_MATH_UNARY(Acos, acos)
TANDEM_MATH_UNARY(Acosh, acosh)
TANDEM_MATH_UNARY(Asin, asin)
TANDEM_MATH_UNARY(Asinh, asinh)
TANDEM_MATH_UNARY(Atan, atan)
TANDEM_MATH_UNARY(Atanh, atanh)
TANDEM_MATH_UNARY(Ceil, ceil)
TANDEM_MATH_UNARY(Cos, cos)
TANDEM_MATH_UNARY(Cosh, cosh)
TANDEM_MATH_UNARY(Erf, erf)
TANDEM_MATH_UNARY(Exp, exp)
TANDEM_MATH_UNARY(Expm1, expm1)
TANDEM_MATH_UNARY(Floor, floor)
TANDEM_MATH_UNARY(Log10, log10)
TANDEM_MATH_UNARY(Log1p, log1p)
TANDEM_MATH_UNARY(Log2, log2)
TANDEM_MATH_UNARY(Rint, rint)
TANDEM_MATH_UNARY(Sin, sin)
TANDEM_MATH_UNARY(Sinh, sinh)
TANDEM_MATH_UNARY(Tan, tan)
TANDEM_MATH_UNARY(Trunc, trunc)
#undef TANDEM_MATH_UNARY

#define TANDEM_MATH_BINARY(Name, fn)                                    \
  TANDEM_MATH_HD float Name(float x, float y) { return ::fn##f(x, y); } \
  TANDEM_MATH_HD double Name(double x, double y) { return ::fn(x, y); }
TANDEM_MATH_BINARY(Atan2, atan2)
TANDEM_MATH_BINARY(CopySign, copysign)
TANDEM_MATH_BINARY(Fmod, fmod)
TANDEM_MATH_BINARY(Pow, pow)
#undef TANDEM_MATH_BINARY

template <typename A>
TANDEM_MATH_HD bool IsNan(A x) {
  return x != x;
}

// Infinite: not NaN, and x - x is NaN only for infinities.
template <typename A>
TANDEM_MATH_HD bool IsInf(A x) {
  return x == x && !((x - x) == (x - x));
}

// Python's floor division of floats, as PyTorch computes it (from fmod, so
// that a // b and a % b agree), with division by zero giving a / b.
template <typename A>
TANDEM_MATH_HD A DivFloorFloat(A a, A b) {
  if (b == A(0)) return a / b;
  const A mod = Fmod(a, b);
  A div = (a - mod) / b;
  if (mod != A(0) && ((b < A(0)) != (mod < A(0)))) div -= A(1);
  if (div == A(0)) return CopySign(A(0), a / b);
  A floor_div = Floor(div);
  if (div - floor_div > A(0.5)) floor_div += A(1);
  return floor_div;
}

// -x without signed overflow (INT64_MIN stays INT64_MIN).
TANDEM_MATH_HD int64_t WrappingNeg(int64_t x) { return static_cast<int64_t>(0ull - static_cast<uint64_t>(x)); }

TANDEM_MATH_HD int64_t IntPow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp & 1) ? -1 : 1;
    return 0;
  }
  uint64_t result = 1;
  uint64_t b = static_cast<uint64_t>(base);
  while (exp > 0) {
    if (exp & 1) result *= b;
    b *= b;
    exp >>= 1;
  }
  return static_cast<int64_t>(result);
}

// One element of op kOp in compute type A. y is unused by unary ops.
// Predicates and logical ops return 1 or 0.
template <MathOp kOp, typename A>
TANDEM_MATH_HD A ApplyMath(A x, A y, const MathParams& p) {
  constexpr bool kInt = std::is_integral_v<A>;
  const A a = static_cast<A>(p.a);
  const A b = static_cast<A>(p.b);
  const A c = static_cast<A>(p.c);
  (void)y;
  (void)a;
  (void)b;
  (void)c;
  if constexpr (kOp == MathOp::kAbs) {
    if constexpr (kInt) {
      return x < 0 ? WrappingNeg(x) : x;
    } else {
      return Fabs(x);
    }
  } else if constexpr (kOp == MathOp::kSign) {
    return static_cast<A>((A(0) < x) - (x < A(0)));
  } else if constexpr (kOp == MathOp::kCeil || kOp == MathOp::kFloor || kOp == MathOp::kRound ||
                       kOp == MathOp::kTrunc) {
    if constexpr (kInt) {
      return x;
    } else if constexpr (kOp == MathOp::kCeil) {
      return Ceil(x);
    } else if constexpr (kOp == MathOp::kFloor) {
      return Floor(x);
    } else if constexpr (kOp == MathOp::kRound) {
      return Rint(x);
    } else {
      return Trunc(x);
    }
  } else if constexpr (kOp == MathOp::kIsNan) {
    if constexpr (kInt) {
      return 0;
    } else {
      return IsNan(x) ? A(1) : A(0);
    }
  } else if constexpr (kOp == MathOp::kIsInf) {
    if constexpr (kInt) {
      return 0;
    } else {
      return IsInf(x) ? A(1) : A(0);
    }
  } else if constexpr (kOp == MathOp::kBitwiseNot || kOp == MathOp::kBitwiseAnd || kOp == MathOp::kBitwiseOr ||
                       kOp == MathOp::kBitwiseXor) {
    if constexpr (!kInt) {
      return A(0);  // not reached: the registry takes integers and bool only
    } else if constexpr (kOp == MathOp::kBitwiseNot) {
      return p.bool_out ? static_cast<A>(x == 0) : ~x;
    } else if constexpr (kOp == MathOp::kBitwiseAnd) {
      return x & y;
    } else if constexpr (kOp == MathOp::kBitwiseOr) {
      return x | y;
    } else {
      return x ^ y;
    }
  } else if constexpr (kOp == MathOp::kLogicalAnd) {
    return (x != A(0)) && (y != A(0)) ? A(1) : A(0);
  } else if constexpr (kOp == MathOp::kLogicalOr) {
    return (x != A(0)) || (y != A(0)) ? A(1) : A(0);
  } else if constexpr (kOp == MathOp::kLogicalXor) {
    return (x != A(0)) != (y != A(0)) ? A(1) : A(0);
  } else if constexpr (kOp == MathOp::kFmod || kOp == MathOp::kRemainder || kOp == MathOp::kDivTrunc ||
                       kOp == MathOp::kDivFloor) {
    if constexpr (kInt) {
      if (y == 0) return 0;
      if (y == -1) return (kOp == MathOp::kDivTrunc || kOp == MathOp::kDivFloor) ? WrappingNeg(x) : 0;
      const A q = x / y;
      const A r = x % y;
      const bool signs_differ = r != 0 && ((r < 0) != (y < 0));
      if constexpr (kOp == MathOp::kFmod) {
        return r;
      } else if constexpr (kOp == MathOp::kRemainder) {
        return signs_differ ? r + y : r;
      } else if constexpr (kOp == MathOp::kDivTrunc) {
        return q;
      } else {
        return signs_differ ? q - 1 : q;
      }
    } else if constexpr (kOp == MathOp::kFmod) {
      return Fmod(x, y);
    } else if constexpr (kOp == MathOp::kRemainder) {
      A mod = Fmod(x, y);
      if (mod != A(0) && ((y < A(0)) != (mod < A(0)))) mod += y;
      return mod;
    } else if constexpr (kOp == MathOp::kDivTrunc) {
      return Trunc(x / y);
    } else {
      return DivFloorFloat(x, y);
    }
  } else if constexpr (kOp == MathOp::kPow) {
    if constexpr (kInt) {
      return IntPow(x, y);
    } else {
      return Pow(x, y);
    }
  } else if constexpr (kInt) {
    // The remaining ops take floats only (an integer operand computes in
    // float32); not reached with integers.
    return A(0);
  } else if constexpr (kOp == MathOp::kAcos) {
    return Acos(x);
  } else if constexpr (kOp == MathOp::kAcosh) {
    return Acosh(x);
  } else if constexpr (kOp == MathOp::kAsin) {
    return Asin(x);
  } else if constexpr (kOp == MathOp::kAsinh) {
    return Asinh(x);
  } else if constexpr (kOp == MathOp::kAtan) {
    return Atan(x);
  } else if constexpr (kOp == MathOp::kAtanh) {
    return Atanh(x);
  } else if constexpr (kOp == MathOp::kCos) {
    return Cos(x);
  } else if constexpr (kOp == MathOp::kCosh) {
    return Cosh(x);
  } else if constexpr (kOp == MathOp::kErf) {
    return Erf(x);
  } else if constexpr (kOp == MathOp::kExpm1) {
    return Expm1(x);
  } else if constexpr (kOp == MathOp::kLog10) {
    return Log10(x);
  } else if constexpr (kOp == MathOp::kLog1p) {
    return Log1p(x);
  } else if constexpr (kOp == MathOp::kLog2) {
    return Log2(x);
  } else if constexpr (kOp == MathOp::kReciprocal) {
    return A(1) / x;
  } else if constexpr (kOp == MathOp::kSin) {
    return Sin(x);
  } else if constexpr (kOp == MathOp::kSinh) {
    return Sinh(x);
  } else if constexpr (kOp == MathOp::kTan) {
    return Tan(x);
  } else if constexpr (kOp == MathOp::kAtan2) {
    return Atan2(x, y);
  } else if constexpr (kOp == MathOp::kDivTrue) {
    return x / y;
  } else if constexpr (kOp == MathOp::kHardtanh) {
    // NaN passes through, as PyTorch's clamp.
    return x < a ? a : (x > b ? b : x);
  } else if constexpr (kOp == MathOp::kLeakyRelu) {
    return x > A(0) ? x : x * a;
  } else if constexpr (kOp == MathOp::kElu) {
    return x <= A(0) ? Expm1(x * c) * (a * b) : x * b;
  } else if constexpr (kOp == MathOp::kHardtanhBackward) {
    return (y <= a || y >= b) ? A(0) : x;
  } else if constexpr (kOp == MathOp::kLeakyReluBackward) {
    return y > A(0) ? x : x * a;
  } else if constexpr (kOp == MathOp::kEluBackward) {
    if (y > A(0)) return x * b;
    return p.is_result ? x * c * (y + a * b) : x * c * (a * b) * Exp(y * c);
  } else {
    static_assert(kOp == MathOp::kCount, "an op of the table has no formula");
    return A(0);
  }
}

// Calls f(std::integral_constant<MathOp, op>{}) for the runtime `op`: how a
// backend turns a node's MathOp into its template instantiation.
// Host code only.
template <typename F>
inline void DispatchMathOp(MathOp op, F&& f) {
#define TANDEM_MATH_CASE(kOp)                         \
  case MathOp::kOp:                                   \
    f(std::integral_constant<MathOp, MathOp::kOp>{}); \
    return;
  switch (op) {
    TANDEM_MATH_CASE(kAbs)
    TANDEM_MATH_CASE(kAcos)
    TANDEM_MATH_CASE(kAcosh)
    TANDEM_MATH_CASE(kAsin)
    TANDEM_MATH_CASE(kAsinh)
    TANDEM_MATH_CASE(kAtan)
    TANDEM_MATH_CASE(kAtanh)
    TANDEM_MATH_CASE(kCeil)
    TANDEM_MATH_CASE(kCos)
    TANDEM_MATH_CASE(kCosh)
    TANDEM_MATH_CASE(kErf)
    TANDEM_MATH_CASE(kExpm1)
    TANDEM_MATH_CASE(kFloor)
    TANDEM_MATH_CASE(kLog10)
    TANDEM_MATH_CASE(kLog1p)
    TANDEM_MATH_CASE(kLog2)
    TANDEM_MATH_CASE(kReciprocal)
    TANDEM_MATH_CASE(kRound)
    TANDEM_MATH_CASE(kSign)
    TANDEM_MATH_CASE(kSin)
    TANDEM_MATH_CASE(kSinh)
    TANDEM_MATH_CASE(kTan)
    TANDEM_MATH_CASE(kTrunc)
    TANDEM_MATH_CASE(kIsNan)
    TANDEM_MATH_CASE(kIsInf)
    TANDEM_MATH_CASE(kHardtanh)
    TANDEM_MATH_CASE(kLeakyRelu)
    TANDEM_MATH_CASE(kElu)
    TANDEM_MATH_CASE(kBitwiseNot)
    TANDEM_MATH_CASE(kBitwiseAnd)
    TANDEM_MATH_CASE(kBitwiseOr)
    TANDEM_MATH_CASE(kBitwiseXor)
    TANDEM_MATH_CASE(kLogicalAnd)
    TANDEM_MATH_CASE(kLogicalOr)
    TANDEM_MATH_CASE(kLogicalXor)
    TANDEM_MATH_CASE(kAtan2)
    TANDEM_MATH_CASE(kFmod)
    TANDEM_MATH_CASE(kRemainder)
    TANDEM_MATH_CASE(kPow)
    TANDEM_MATH_CASE(kDivTrue)
    TANDEM_MATH_CASE(kDivTrunc)
    TANDEM_MATH_CASE(kDivFloor)
    TANDEM_MATH_CASE(kHardtanhBackward)
    TANDEM_MATH_CASE(kLeakyReluBackward)
    TANDEM_MATH_CASE(kEluBackward)
    case MathOp::kCount:
      return;
  }
#undef TANDEM_MATH_CASE
}

}  // namespace tandem::math

#endif  // TANDEM_KERNELS_MATH_FUNCTIONS_H_
