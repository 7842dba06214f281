// Helpers of the CPU kernel tests of the bfloat16 / float16 ops: a fresh
// random seed per test process (printed; TANDEM_TEST_SEED replays one),
// element access to a TestTensor of any dtype (16-bit values widened
// exactly, stored through half.h's rounding), random 16-bit tensors,
// running one op on NaN-poisoned outputs, and the normwise comparison of a
// result with a float64 reference under 16-bit unit roundoff. Header-only,
// test-only; not thread-safe (one test at a time).
#ifndef TANDEM_KERNELS_CPU_HALF_TEST_UTIL_H_
#define TANDEM_KERNELS_CPU_HALF_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "ir/attrs.h"
#include "ir/dtype.h"
#include "ir/make_attrs.h"
#include "kernels/cpu/run_op_test_util.h"
#include "kernels/half.h"

namespace tandem::half_test {

using HostTensor = cpu::TestTensor;

// The process's seed: TANDEM_TEST_SEED when set, else a fresh random one;
// printed (with `test_name`) on first use so that a failing run can be
// replayed.
inline uint64_t TestSeed(const char* test_name) {
  static const uint64_t seed = [test_name] {
    uint64_t s = 0;
    if (const char* env = std::getenv("TANDEM_TEST_SEED")) {
      s = static_cast<uint64_t>(std::strtoull(env, nullptr, 10));
    } else {
      std::random_device device;
      s = (uint64_t{device()} << 32) ^ device();
    }
    std::printf("%s seed %llu (TANDEM_TEST_SEED replays it)\n", test_name, static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

// Element `i` as a double (16-bit floats widened exactly; bool: 0 or 1).
inline double Get(const HostTensor& t, int64_t i) {
  const void* p = t.data();
  switch (t.type.dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DType::kFloat64:
      return static_cast<const double*>(p)[i];
    case DType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::kInt32:
      return static_cast<const int32_t*>(p)[i];
    case DType::kBool:
      return static_cast<const bool*>(p)[i] ? 1.0 : 0.0;
    case DType::kBFloat16:
      return BFloat16BitsToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kFloat16:
      return Float16BitsToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  ADD_FAILURE() << "unexpected dtype " << DTypeName(t.type.dtype);
  return 0;
}

// Stores `v` as element `i` (16-bit: rounded through float, as half.h does).
inline void Set(HostTensor& t, int64_t i, double v) {
  void* p = t.data();
  switch (t.type.dtype) {
    case DType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case DType::kFloat64:
      static_cast<double*>(p)[i] = v;
      return;
    case DType::kInt64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      return;
    case DType::kInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      return;
    case DType::kBool:
      static_cast<bool*>(p)[i] = v != 0;
      return;
    case DType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = BFloat16(v).bits;
      return;
    case DType::kFloat16:
      static_cast<uint16_t*>(p)[i] = Float16(v).bits;
      return;
  }
  ADD_FAILURE() << "unexpected dtype " << DTypeName(t.type.dtype);
}

inline std::vector<double> Values(const HostTensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = Get(t, static_cast<int64_t>(i));
  return v;
}

// `values` stored as `dtype` (16-bit: rounded as half.h does).
inline HostTensor Make(DType dtype, Shape shape, const std::vector<double>& values) {
  HostTensor t({dtype, std::move(shape)});
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (int64_t i = 0; i < t.numel() && i < static_cast<int64_t>(values.size()); ++i) Set(t, i, values[i]);
  return t;
}

// Values uniform in [lo, hi), stored as `dtype` (so that a float64
// reference sees exactly the kernel's inputs).
inline HostTensor RandomTensor(std::mt19937_64& rng, DType dtype, Shape shape, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(NumElements(shape)));
  for (double& x : v) x = dist(rng);
  return Make(dtype, std::move(shape), v);
}

// Runs `op`'s CPU kernel on outputs of the registry's types, poisoned first
// (0xFF bytes: NaN in every float type); fails the test on an error. With
// `in_place`, output 0 takes input 0's buffer.
inline std::vector<HostTensor> MustRun(const std::string& op, const Attrs& attrs, std::vector<HostTensor> inputs,
                                       bool in_place = false) {
  auto out = cpu::RunCpuOp(op, attrs, inputs, 0xFF, in_place);
  EXPECT_TRUE(out.ok()) << op << ": " << out.status();
  return out.ok() ? std::move(*out) : std::vector<HostTensor>{};
}

// u: 2^-8 for bfloat16, 2^-11 for float16.
inline double UnitRoundoff(DType dtype) {
  return dtype == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}

// The normwise bound of a 16-bit result made of sums of `sum_length` terms
// in float32 and one final rounding: 2u + 4 k 2^-24.
inline double Tolerance(DType dtype, int64_t sum_length) {
  return 2 * UnitRoundoff(dtype) + 4.0 * static_cast<double>(sum_length) * std::ldexp(1.0, -24);
}

// ||out - ref|| / ||ref|| within `tolerance`; a NaN in `out` fails (and so
// does an element a kernel left poisoned).
inline ::testing::AssertionResult Close(const std::vector<double>& out, const std::vector<double>& ref,
                                        double tolerance) {
  if (out.size() != ref.size()) return ::testing::AssertionFailure() << "size " << out.size() << " vs " << ref.size();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) return ::testing::AssertionFailure() << "element " << i << " is NaN";
    diff += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  const double error = std::sqrt(diff / (norm > 0 ? norm : 1.0));
  if (error <= tolerance) return ::testing::AssertionSuccess() << "relative error " << error;
  return ::testing::AssertionFailure() << "relative error " << error << " > " << tolerance;
}

inline ::testing::AssertionResult Close(const HostTensor& out, const std::vector<double>& ref, double tolerance) {
  return Close(Values(out), ref, tolerance);
}

}  // namespace tandem::half_test

#endif  // TANDEM_KERNELS_CPU_HALF_TEST_UTIL_H_
