// Overflow-checked integer arithmetic, for every size, offset and count that
// is computed from what a client sent (shapes, attributes, slices). A result
// that does not fit is std::nullopt, never a wrapped value: a wrapped byte
// count is how a request reads or writes memory outside its job.
#ifndef TANDEM_BASE_CHECKED_MATH_H_
#define TANDEM_BASE_CHECKED_MATH_H_

#include <cstdint>
#include <optional>

namespace tandem {

inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<int64_t> CheckedSub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> CheckedAddU(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> CheckedMulU(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// ceil(a / b) for a >= 0 and b > 0, without forming a + b - 1.
inline int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace tandem

#endif  // TANDEM_BASE_CHECKED_MATH_H_
