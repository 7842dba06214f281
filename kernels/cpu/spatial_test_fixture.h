// What the spatial ops' CPU kernel tests share (spatial_kernels_test.cc:
// group norm, resampling, padding; volume_kernels_test.cc: 3-D pooling and
// convolution, batch norm over volumes): a fixture with a seeded generator
// (TANDEM_TEST_SEED replays it), central-difference gradients in float64,
// and the comparison and tolerances.
#ifndef TANDEM_KERNELS_CPU_SPATIAL_TEST_FIXTURE_H_
#define TANDEM_KERNELS_CPU_SPATIAL_TEST_FIXTURE_H_

#include <cmath>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/half_test_util.h"

namespace tandem::spatial_test {

using half_test::Close;
using half_test::Get;
using half_test::HostTensor;
using half_test::MustRun;
using half_test::Set;
using half_test::Values;
using Ints = std::vector<int64_t>;
using Floats = std::vector<double>;

inline constexpr DType kHalfTypes[] = {DType::kBFloat16, DType::kFloat16};

class SpatialKernelTest : public ::testing::Test {
 protected:
  std::mt19937_64& rng() { return rng_; }

  HostTensor Random(DType dtype, Shape shape, double lo = -1.0, double hi = 1.0) {
    return half_test::RandomTensor(rng_, dtype, std::move(shape), lo, hi);
  }

  std::vector<double> RandomWeights(int64_t n) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<double> w(static_cast<size_t>(n));
    for (double& v : w) v = u(rng_);
    return w;
  }

  // The gradient of sum(forward(inputs) * weights) with respect to input
  // `which`, by central differences (float64 inputs).
  static std::vector<double> NumericGradient(const std::function<HostTensor(const std::vector<HostTensor>&)>& forward,
                                             std::vector<HostTensor> inputs, int which,
                                             const std::vector<double>& weights, double h = 1e-6) {
    auto loss = [&](const std::vector<HostTensor>& in) {
      const HostTensor out = forward(in);
      double sum = 0.0;
      for (int64_t i = 0; i < out.numel(); ++i) sum += Get(out, i) * weights[i];
      return sum;
    };
    std::vector<double> grad(static_cast<size_t>(inputs[which].numel()));
    for (int64_t i = 0; i < inputs[which].numel(); ++i) {
      const double v = Get(inputs[which], i);
      Set(inputs[which], i, v + h);
      const double up = loss(inputs);
      Set(inputs[which], i, v - h);
      const double down = loss(inputs);
      Set(inputs[which], i, v);
      grad[i] = (up - down) / (2 * h);
    }
    return grad;
  }

  // `weights` as a float64 tensor of `shape`.
  static HostTensor AsTensor(const std::vector<double>& weights, const Shape& shape) {
    return half_test::Make(DType::kFloat64, shape, weights);
  }

 private:
  std::mt19937_64 rng_{half_test::TestSeed("spatial_kernels_test")};
};

// Elementwise |a - b| <= tol * (|b| + 1); NaN never passes.
inline ::testing::AssertionResult Near(const std::vector<double>& actual, const std::vector<double>& expected,
                                       double tol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!(std::abs(actual[i] - expected[i]) <= tol * (std::abs(expected[i]) + 1.0))) {
      return ::testing::AssertionFailure() << "element " << i << " is " << actual[i] << ", expected " << expected[i];
    }
  }
  return ::testing::AssertionSuccess();
}

inline double Tolerance(DType dtype) { return dtype == DType::kFloat32 ? 2e-6 : 1e-12; }
inline constexpr double kGradTolerance = 1e-6;  // central differences with h = 1e-6 in float64

}  // namespace tandem::spatial_test

#endif  // TANDEM_KERNELS_CPU_SPATIAL_TEST_FIXTURE_H_
