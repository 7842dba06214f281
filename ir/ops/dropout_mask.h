// The random mask of native_dropout, as a counter-based hash: element i of a
// dropout with key k is kept iff the top 24 bits of Mix(k, i) are at least
// the threshold of p. Every backend computes the same mask bit for bit (the
// CPU oracle and the CUDA kernels agree exactly), and a run is reproducible
// from its seed. It cannot match PyTorch's generator (Philox on CUDA,
// mt19937 on the CPU): a dropout step equals PyTorch's only in distribution.
//
// Header-only, usable from host code and CUDA device code; stateless.
#ifndef TANDEM_IR_OPS_DROPOUT_MASK_H_
#define TANDEM_IR_OPS_DROPOUT_MASK_H_

#include <cstdint>

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TANDEM_HOST_DEVICE inline
#endif

namespace tandem::dropout {

inline constexpr uint32_t kUniformBits = 24;

// SplitMix64's finalizer over the key and the element index.
TANDEM_HOST_DEVICE uint64_t Mix(uint64_t key, uint64_t index) {
  uint64_t z = key + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One key per node and iteration: the node's `seed` attribute mixed with the
// optional per-iteration seed tensor.
TANDEM_HOST_DEVICE uint64_t Key(int64_t attr_seed, int64_t tensor_seed) {
  return Mix(static_cast<uint64_t>(attr_seed), static_cast<uint64_t>(tensor_seed));
}

// Elements whose 24-bit uniform is below this are dropped: round(p * 2^24),
// so p = 0 keeps all and p = 1 drops all.
inline uint32_t Threshold(double p) {
  const double scaled = p * static_cast<double>(1u << kUniformBits) + 0.5;
  if (scaled <= 0.0) return 0;
  if (scaled >= static_cast<double>(1u << kUniformBits)) return 1u << kUniformBits;
  return static_cast<uint32_t>(scaled);
}

TANDEM_HOST_DEVICE bool Keep(uint64_t key, int64_t index, uint32_t threshold) {
  return static_cast<uint32_t>(Mix(key, static_cast<uint64_t>(index)) >> (64 - kUniformBits)) >= threshold;
}

// The factor kept elements are multiplied by: 1 / (1 - p), 0 for p = 1.
inline double Scale(double p) { return p < 1.0 ? 1.0 / (1.0 - p) : 0.0; }

}  // namespace tandem::dropout

#undef TANDEM_HOST_DEVICE

#endif  // TANDEM_IR_OPS_DROPOUT_MASK_H_
