// The 16-bit float storage types on the host: BFloat16 (8-bit exponent,
// 7-bit mantissa) and Float16 (IEEE binary16: 5-bit exponent, 10-bit
// mantissa), as plain 2-byte values with conversions to and from float.
//
// Conversions follow PyTorch: a float rounds to nearest, ties to even
// (overflow to infinity, Float16 subnormals rounded the same way, NaN stays
// NaN); a double or an integer goes through float first (so a double can be
// rounded twice, as PyTorch's `.to(torch.bfloat16)` of a float64 tensor
// does); a 16-bit value widens exactly to float and narrows to an integer by
// truncation, as a C++ cast of that float. The results equal the CUDA
// intrinsics __float2bfloat16_rn / __float2half_rn bit for bit except for the
// payload of a NaN.
//
// Header-only, constexpr-free value types; thread-safe.
#ifndef TANDEM_KERNELS_HALF_H_
#define TANDEM_KERNELS_HALF_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace tandem {

namespace half_internal {

inline uint32_t FloatBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  return x;
}

inline float BitsFloat(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

// Rounds away the low `shift` bits of `value` to nearest, ties to even.
inline uint32_t RoundShift(uint32_t value, int shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((uint32_t{1} << shift) - 1);
  const uint32_t half = uint32_t{1} << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1))) ? 1 : 0);
}

}  // namespace half_internal

inline uint16_t FloatToBFloat16Bits(float f) {
  const uint32_t x = half_internal::FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  // Carrying into the exponent is right: the largest finite values round up
  // to infinity.
  return static_cast<uint16_t>(half_internal::RoundShift(x, 16));
}

inline float BFloat16BitsToFloat(uint16_t bits) { return half_internal::BitsFloat(uint32_t{bits} << 16); }

inline uint16_t FloatToFloat16Bits(float f) {
  const uint32_t x = half_internal::FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  const int exponent = static_cast<int>(magnitude >> 23);  // float's biased exponent
  const uint32_t mantissa = magnitude & 0x7fffffu;
  if (exponent == 0xff) return static_cast<uint16_t>(sign | (mantissa != 0 ? 0x7e00u : 0x7c00u));
  // 2^16 and above: beyond 65504 + half an ulp, so infinity.
  if (exponent >= 127 + 16) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exponent >= 127 - 14) {
    // Normal: rebias the exponent (127 -> 15) and round the mantissa to 10
    // bits; a carry out of the mantissa bumps the exponent (up to infinity).
    const uint32_t shifted = (static_cast<uint32_t>(exponent - 112) << 23) | mantissa;
    return static_cast<uint16_t>(sign | half_internal::RoundShift(shifted, 13));
  }
  // Subnormal (or zero): units of 2^-24. The value is (2^23 + mantissa) *
  // 2^(exponent - 150), i.e. that many units shifted right by 126 - exponent.
  if (exponent < 127 - 25) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  const uint32_t significand = mantissa | 0x800000u;
  return static_cast<uint16_t>(sign | half_internal::RoundShift(significand, 126 - exponent));
}

inline float Float16BitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return half_internal::BitsFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return half_internal::BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Subnormal: mantissa * 2^-24, exact in float.
  const float value = static_cast<float>(mantissa) * half_internal::BitsFloat(0x33800000u);  // 2^-24
  return sign != 0 ? -value : value;
}

namespace half_internal {

// The shared arithmetic-type surface of BFloat16 and Float16: explicit
// construction from any arithmetic value and explicit conversion to any
// arithmetic type (through float), so that the CPU kernels' Convert<To>()
// and static_cast work on them.
template <typename Derived, uint16_t (*kFromFloat)(float), float (*kToFloat)(uint16_t)>
struct HalfBase {
  uint16_t bits = 0;

  static Derived FromBits(uint16_t b) {
    Derived d;
    d.bits = b;
    return d;
  }
  float ToFloat() const { return kToFloat(bits); }

  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  explicit operator T() const {
    if constexpr (std::is_same_v<T, bool>) {
      return ToFloat() != 0.0f;
    } else {
      return static_cast<T>(ToFloat());
    }
  }

  friend bool operator==(Derived a, Derived b) { return a.ToFloat() == b.ToFloat(); }
  friend bool operator!=(Derived a, Derived b) { return a.ToFloat() != b.ToFloat(); }

 protected:
  static uint16_t Round(float f) { return kFromFloat(f); }
};

}  // namespace half_internal

struct Float16;

struct BFloat16 : half_internal::HalfBase<BFloat16, FloatToBFloat16Bits, BFloat16BitsToFloat> {
  BFloat16() = default;
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  explicit BFloat16(T value) {
    bits = Round(static_cast<float>(value));
  }
  explicit BFloat16(const Float16& value);
};

struct Float16 : half_internal::HalfBase<Float16, FloatToFloat16Bits, Float16BitsToFloat> {
  Float16() = default;
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  explicit Float16(T value) {
    bits = Round(static_cast<float>(value));
  }
  explicit Float16(const BFloat16& value) { bits = Round(value.ToFloat()); }
};

inline BFloat16::BFloat16(const Float16& value) { bits = Round(value.ToFloat()); }

static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2);
static_assert(std::is_trivially_copyable_v<BFloat16> && std::is_trivially_copyable_v<Float16>);

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

}  // namespace tandem

#endif  // TANDEM_KERNELS_HALF_H_
