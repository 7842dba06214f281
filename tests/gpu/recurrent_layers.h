// What the GPU tests of the fused recurrent layers (cuda_recurrent_kernels_test,
// cuda_half_recurrent_test, cuda_gru_test) share: a layer's dims and their
// description, random dims, the 16-bit unit roundoff, the float32 and TF32
// bounds of a layer against the CPU kernels, and the check that two sets of
// outputs came out bit for bit the same. Header-only, test-only.
#ifndef TANDEM_TESTS_GPU_RECURRENT_LAYERS_H_
#define TANDEM_TESTS_GPU_RECURRENT_LAYERS_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ir/dtype.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {

// Normwise relative error bounds of a float32 layer (float32 products
// against the CPU's double sums; the backward's errors go through T steps of
// the recurrence and sums over T*B rows).
inline constexpr double kForward32 = 2e-5;
inline constexpr double kBackward32 = 1e-4;
// TF32 rounds products' inputs to a 10-bit mantissa (2^-11 relative).
inline constexpr double kForwardTf32 = 5e-3;
inline constexpr double kBackwardTf32 = 2e-2;

// u: 2^-8 for bfloat16, 2^-11 for float16.
inline double UnitRoundoff(DType dtype) {
  return dtype == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}

// A dim uniform in [lo, hi], from the run's seeded generator.
inline int64_t Dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(Rng()); }

// Steps, batch, input and hidden width.
struct Dims {
  int64_t t, b, i, h;
};

inline std::string Describe(const Dims& d) {
  return "T=" + std::to_string(d.t) + " B=" + std::to_string(d.b) + " I=" + std::to_string(d.i) +
         " H=" + std::to_string(d.h);
}

// The GPU's bytes of every value a CompareWithCpu check saw, by (value,
// replay).
using GpuBytes = std::map<std::pair<int, bool>, Bytes>;

// Output a[k] and output b[k] bit for bit the same, op by op and replayed
// (allow_tf32 on a 16-bit layer against the same layer without it).
inline void ExpectSameOutputs(const GpuBytes& gpu, const std::vector<int>& a, const std::vector<int>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (bool replay : {false, true}) {
    for (size_t k = 0; k < a.size(); ++k) {
      const auto first = gpu.find({a[k], replay});
      const auto second = gpu.find({b[k], replay});
      ASSERT_TRUE(first != gpu.end() && second != gpu.end()) << "output " << k << " not compared";
      EXPECT_TRUE(SameBytes(first->second, second->second)) << "output " << k << (replay ? " (replayed)" : "");
    }
  }
}

}  // namespace tandem::gpu_test

#endif  // TANDEM_TESTS_GPU_RECURRENT_LAYERS_H_
