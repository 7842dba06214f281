// Helpers of the CPU tests of the LSTM, transformer and Adam/AdamW op
// families (sequence_kernels_test.cc, sequence_attention_test.cc,
// recurrent_kernels_test.cc, half_recurrent_kernels_test.cc): host
// tensors, running one op through its CPU kernel with poisoned outputs,
// element comparisons, index arithmetic of their own, central finite
// differences, and a float64 LSTM layer to check the lstm kernels against. Header-only, test-only; not thread-safe (one
// test at a time).
#ifndef TANDEM_KERNELS_CPU_SEQUENCE_TEST_UTIL_H_
#define TANDEM_KERNELS_CPU_SEQUENCE_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "ir/make_attrs.h"
#include "ir/op_registry.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/run_op_test_util.h"

namespace tandem::seq_test {

struct Tensor {
  TensorType type;
  std::vector<uint64_t> storage;

  Tensor() = default;
  explicit Tensor(TensorType t) : type(std::move(t)), storage(type.bytes() / 8 + 1) {}
  void* data() { return storage.data(); }
  const void* data() const { return storage.data(); }
  int64_t numel() const { return type.numel(); }

  double Get(int64_t i) const {
    switch (type.dtype) {
      case DType::kFloat32:
        return static_cast<const float*>(data())[i];
      case DType::kFloat64:
        return static_cast<const double*>(data())[i];
      case DType::kInt64:
        return static_cast<double>(static_cast<const int64_t*>(data())[i]);
      case DType::kInt32:
        return static_cast<const int32_t*>(data())[i];
      case DType::kBool:
        return static_cast<const bool*>(data())[i] ? 1.0 : 0.0;
      default:
        ADD_FAILURE() << "dtype not handled by the test";
        return 0;
    }
  }
  void Set(int64_t i, double v) {
    switch (type.dtype) {
      case DType::kFloat32:
        static_cast<float*>(data())[i] = static_cast<float>(v);
        break;
      case DType::kFloat64:
        static_cast<double*>(data())[i] = v;
        break;
      case DType::kInt64:
        static_cast<int64_t*>(data())[i] = static_cast<int64_t>(v);
        break;
      case DType::kInt32:
        static_cast<int32_t*>(data())[i] = static_cast<int32_t>(v);
        break;
      case DType::kBool:
        static_cast<bool*>(data())[i] = v != 0;
        break;
      default:
        ADD_FAILURE() << "dtype not handled by the test";
    }
  }
  std::vector<double> Values() const {
    std::vector<double> v(numel());
    for (int64_t i = 0; i < numel(); ++i) v[i] = Get(i);
    return v;
  }
};

inline Tensor Make(DType dtype, Shape shape, const std::vector<double>& values) {
  Tensor t({dtype, std::move(shape)});
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (int64_t i = 0; i < t.numel() && i < static_cast<int64_t>(values.size()); ++i) t.Set(i, values[i]);
  return t;
}

// Runs `op` through FindCpuKernel with outputs of the inferred types,
// poisoned first (0xA5 bytes: a NaN-free pattern no kernel writes by
// chance). With `in_place`, output 0 takes input 0's buffer.
inline absl::StatusOr<std::vector<Tensor>> RunOp(const std::string& op, const Attrs& attrs, std::vector<Tensor> inputs,
                                                 bool in_place = false) {
  return cpu::RunCpuOp(op, attrs, inputs, 0xA5, in_place);
}

inline std::vector<Tensor> MustRun(const std::string& op, const Attrs& attrs, std::vector<Tensor> inputs,
                                   bool in_place = false) {
  auto result = RunOp(op, attrs, std::move(inputs), in_place);
  EXPECT_TRUE(result.ok()) << op << ": " << result.status();
  if (!result.ok()) return {};
  return *std::move(result);
}

// |actual - expected| <= rtol * (|expected| + 1), rtol by dtype (integers
// and bools exactly); NaN matches NaN only.
inline void ExpectClose(const Tensor& actual, const std::vector<double>& expected, const std::string& what,
                        double f32_rtol = 2e-6, double f64_rtol = 1e-12) {
  ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size())) << what;
  const double rtol = actual.type.dtype == DType::kFloat32   ? f32_rtol
                      : actual.type.dtype == DType::kFloat64 ? f64_rtol
                                                             : 0.0;
  int failures = 0;
  for (int64_t i = 0; i < actual.numel() && failures < 5; ++i) {
    const double a = actual.Get(i), e = expected[i];
    if (std::isnan(e) && std::isnan(a)) continue;
    if (!(std::abs(a - e) <= rtol * (std::abs(e) + 1.0))) {
      ADD_FAILURE() << what << " " << actual.type.ToString() << ": element " << i << " is " << a << ", expected " << e;
      ++failures;
    }
  }
}

inline std::vector<int64_t> Unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return index;
}

inline int64_t Ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + index[d];
  return i;
}

// The element of a tensor of shape `in` read at `index` of the broadcast
// shape (aligned at the last dim; size-1 dims repeat).
inline int64_t Source(const std::vector<int64_t>& index, const Shape& in) {
  std::vector<int64_t> own(in.size());
  const size_t lead = index.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) own[d] = in[d] == 1 ? 0 : index[lead + d];
  return Ravel(own, in);
}

class SequenceKernelTest : public ::testing::Test {
 protected:
  // Floats uniform in [lo, hi).
  Tensor Random(DType dtype, Shape shape, double lo = -1.0, double hi = 1.0) {
    Tensor t({dtype, std::move(shape)});
    std::uniform_real_distribution<double> u(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) t.Set(i, u(rng_));
    return t;
  }
  Tensor RandomIndices(Shape shape, int64_t lo, int64_t hi) {
    Tensor t({DType::kInt64, std::move(shape)});
    std::uniform_int_distribution<int64_t> u(lo, hi - 1);
    for (int64_t i = 0; i < t.numel(); ++i) t.Set(i, static_cast<double>(u(rng_)));
    return t;
  }
  Tensor RandomBool(Shape shape) {
    Tensor t({DType::kBool, std::move(shape)});
    std::bernoulli_distribution b(0.5);
    for (int64_t i = 0; i < t.numel(); ++i) t.Set(i, b(rng_));
    return t;
  }

  std::mt19937_64 rng_{20261129};
};

// ---- finite differences ----

// d/dx of sum(weights * f(x)), by central differences in float64, for input
// `which` of `inputs` (all float64).
inline std::vector<double> NumericGradient(const std::function<std::vector<double>(const std::vector<Tensor>&)>& f,
                                           std::vector<Tensor> inputs, size_t which,
                                           const std::vector<double>& weights) {
  const double h = 1e-6;
  std::vector<double> grad(inputs[which].numel());
  for (int64_t i = 0; i < inputs[which].numel(); ++i) {
    const double x = inputs[which].Get(i);
    inputs[which].Set(i, x + h);
    const std::vector<double> up = f(inputs);
    inputs[which].Set(i, x - h);
    const std::vector<double> down = f(inputs);
    inputs[which].Set(i, x);
    double sum = 0.0;
    for (size_t j = 0; j < up.size(); ++j) sum += weights[j] * (up[j] - down[j]);
    grad[i] = sum / (2 * h);
  }
  return grad;
}

// sum_k a[k] * b[k]: a loss weighting `b` by `a`.
inline double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t k = 0; k < a.size(); ++k) s += a[k] * b[k];
  return s;
}

// d/dv of loss(v) for every element of v, by central differences in
// float64.
inline std::vector<double> CentralDifferences(std::vector<double> v,
                                              const std::function<double(const std::vector<double>&)>& loss) {
  const double step = 1e-6;
  std::vector<double> grad(v.size());
  for (size_t k = 0; k < v.size(); ++k) {
    const double keep = v[k];
    v[k] = keep + step;
    const double up = loss(v);
    v[k] = keep - step;
    const double down = loss(v);
    v[k] = keep;
    grad[k] = (up - down) / (2 * step);
  }
  return grad;
}

inline void ExpectGradient(const Tensor& analytic, const std::vector<double>& numeric, const std::string& what) {
  ExpectClose(analytic, numeric, what, 0.0, 1e-6);
}

// Output `index` of `op` as doubles.
inline std::function<std::vector<double>(const std::vector<Tensor>&)> Forward(const std::string& op, const Attrs& attrs,
                                                                              int index = 0) {
  return [=](const std::vector<Tensor>& inputs) {
    std::vector<Tensor> out = MustRun(op, attrs, inputs);
    return out.empty() ? std::vector<double>{} : out[index].Values();
  };
}

// ---- a float64 LSTM layer ----

struct LstmDims {
  int64_t t, b, i, h;  // steps, batch, input width, hidden width
  std::string ToString() const { return absl::StrCat("T=", t, " B=", b, " I=", i, " H=", h); }
};

// A layer's inputs as doubles: x [T, B, I], h0 and c0 [B, H], w_ih [4H, I],
// w_hh [4H, H], b_ih and b_hh [4H].
struct LstmParams {
  std::vector<double> x, h0, c0, w_ih, w_hh, b_ih, b_hh;
};

// As the lstm op's outputs: y [T, B, H], h_n and c_n [B, H], saved
// [T, B, 5H] (the gates i, f, g, o after their activations, then c).
struct LstmOutputs {
  std::vector<double> y, h_n, c_n, saved;
};

// One LSTM layer in double, gate order i, f, g, o. `offset` [T, B, 4H] (may
// be empty) is added to the gate pre-activations: the derivative of a loss
// with respect to it is the gradient of the pre-activations.
inline LstmOutputs ReferenceLstm(const LstmDims& d, const LstmParams& p, const std::vector<double>& offset = {}) {
  const int64_t H = d.h, G = 4 * d.h;
  LstmOutputs out;
  out.y.assign(d.t * d.b * H, 0.0);
  out.saved.assign(d.t * d.b * 5 * H, 0.0);
  std::vector<double> h = p.h0, c = p.c0;
  auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  for (int64_t t = 0; t < d.t; ++t) {
    std::vector<double> h_next(d.b * H), c_next(d.b * H);
    for (int64_t n = 0; n < d.b; ++n) {
      std::vector<double> gate(G);
      for (int64_t r = 0; r < G; ++r) {
        double v = p.b_ih[r] + p.b_hh[r];
        for (int64_t k = 0; k < d.i; ++k) v += p.w_ih[r * d.i + k] * p.x[(t * d.b + n) * d.i + k];
        for (int64_t k = 0; k < H; ++k) v += p.w_hh[r * H + k] * h[n * H + k];
        if (!offset.empty()) v += offset[(t * d.b + n) * G + r];
        gate[r] = v;
      }
      for (int64_t k = 0; k < H; ++k) {
        const double in = sigmoid(gate[k]);
        const double forget = sigmoid(gate[H + k]);
        const double cell = std::tanh(gate[2 * H + k]);
        const double output = sigmoid(gate[3 * H + k]);
        c_next[n * H + k] = forget * c[n * H + k] + in * cell;
        h_next[n * H + k] = output * std::tanh(c_next[n * H + k]);
        double* s = &out.saved[(t * d.b + n) * 5 * H];
        s[k] = in;
        s[H + k] = forget;
        s[2 * H + k] = cell;
        s[3 * H + k] = output;
        s[4 * H + k] = c_next[n * H + k];
        out.y[(t * d.b + n) * H + k] = h_next[n * H + k];
      }
    }
    h = h_next;
    c = c_next;
  }
  out.h_n = h;
  out.c_n = c;
  return out;
}

}  // namespace tandem::seq_test

#endif  // TANDEM_KERNELS_CPU_SEQUENCE_TEST_UTIL_H_
