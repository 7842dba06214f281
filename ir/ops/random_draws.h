// The numbers of the random ops (bernoulli.p, rand, randn), drawn with
// native_dropout's counter-based hash (dropout_mask.h): element i of a node
// with key k (dropout::Key of its seed attribute and seed tensor) is a
// function of Mix(k, i) alone, so every backend draws the same numbers and a
// run is reproducible from its seeds.
//
// - bernoulli: 1 where the element's 24-bit uniform is below
//   dropout::Threshold(p) (exactly the elements a dropout of the same key
//   and p drops).
// - uniform: the top `bits` bits of Mix(k, i) times 2^-bits, in [0, 1) and
//   exact in the result's dtype (bits = 24 for float32, 53 for float64, 8
//   for bfloat16, 11 for float16), so rounding never reaches 1.
// - normal: Box-Muller in double over two 53-bit uniforms, Mix(k, 2i) and
//   Mix(k, 2i + 1); the backends' log and cos may differ in the last bits.
//
// Header-only, usable from host code and CUDA device code; stateless.
#ifndef TANDEM_IR_OPS_RANDOM_DRAWS_H_
#define TANDEM_IR_OPS_RANDOM_DRAWS_H_

#include <math.h>

#include <cstdint>

#include "ir/ops/dropout_mask.h"

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TANDEM_HOST_DEVICE inline
#endif

namespace tandem::random {

TANDEM_HOST_DEVICE bool Bernoulli(uint64_t key, int64_t index, uint32_t threshold) {
  return !dropout::Keep(key, index, threshold);
}

// A uniform in [0, 1) with `bits` (1 to 53) significant bits.
TANDEM_HOST_DEVICE double Uniform(uint64_t key, int64_t index, int bits) {
  const uint64_t top = dropout::Mix(key, static_cast<uint64_t>(index)) >> (64 - bits);
  return static_cast<double>(top) * ldexp(1.0, -bits);
}

TANDEM_HOST_DEVICE double Normal(uint64_t key, int64_t index) {
  const uint64_t a = dropout::Mix(key, 2 * static_cast<uint64_t>(index)) >> 11;
  const uint64_t b = dropout::Mix(key, 2 * static_cast<uint64_t>(index) + 1) >> 11;
  const double u1 = (static_cast<double>(a) + 1.0) * 0x1p-53;  // (0, 1]: log(u1) is finite
  const double u2 = static_cast<double>(b) * 0x1p-53;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925286766559 * u2);
}

}  // namespace tandem::random

#undef TANDEM_HOST_DEVICE

#endif  // TANDEM_IR_OPS_RANDOM_DRAWS_H_
