// The CPU kernels of the fused GRU layer (gru, gru_backward) in float32,
// bfloat16 and float16, on fresh random inputs every run (the seed is
// printed; TANDEM_TEST_SEED replays one), none of them zero:
//   - the forward against a GRU written here in float64 from the op's
//     formulas (its state kept in float64, its gates computed by its own
//     loops), and the backward against backpropagation through time of that
//     layer, also in float64, from the kernel's own forward outputs;
//   - the float32 kernel's gradients against central differences of a
//     scalar loss through the float64 layer (the loss weights y and h_n with
//     the backward's incoming gradients); grad_gates_x and grad_gates_h
//     against differences with respect to offsets added to the input and
//     the recurrent pre-activations (gx and gh); this also checks the
//     float64 backpropagation above, which the 16-bit kernels are held to;
//   - in 16 bits, bit for bit, where the kernel rounds: h_n is y's last
//     step, grad_b_ih and grad_b_hh the sums of the stored gate gradients,
//     grad_x their product with w_ih.
// Outputs are poisoned (0xFF bytes: NaN) before each run, and NaN never
// passes.
//
// Tolerances (normwise relative, ||out - ref|| / ||ref||): float32, whose
// kernel stores its state in float32 each step, 1e-6 forward and 1e-5
// backward; 16 bits as for the LSTM (half_recurrent_kernels_test.cc): 3u
// forward, 10u backward (u = 2^-8 bfloat16, 2^-11 float16), the state
// rounded at every step and carried on, damped by the update gate.
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/half_test_util.h"
#include "kernels/cpu/sequence_test_util.h"
#include "kernels/half.h"

namespace tandem {
namespace {

using half_test::Close;
using half_test::Get;
using half_test::HostTensor;
using half_test::MustRun;
using half_test::Set;
using half_test::Values;
using seq_test::CentralDifferences;
using seq_test::Dot;

struct Dims {
  int64_t t, b, i, h;  // steps, batch, input width, hidden width
  std::string ToString() const { return absl::StrCat("T=", t, " B=", b, " I=", i, " H=", h); }
};

// A layer's inputs as doubles, in the op's order: x [T, B, I], h0 [B, H],
// w_ih [3H, I], w_hh [3H, H], b_ih [3H], b_hh [3H].
struct Params {
  std::vector<double> x, h0, w_ih, w_hh, b_ih, b_hh;

  std::vector<double>& operator[](int k) {
    std::vector<double>* members[] = {&x, &h0, &w_ih, &w_hh, &b_ih, &b_hh};
    return *members[k];
  }
};
const char* const kInputNames[] = {"x", "h0", "w_ih", "w_hh", "b_ih", "b_hh"};

// As the gru op's outputs: y [T, B, H], h_n [B, H], saved [T, B, 4H]
// (r, z, n, hn).
struct Forward {
  std::vector<double> y, h_n, saved;
};

struct Backward {
  std::vector<double> grad_x, grad_h0, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh, grad_gates_x, grad_gates_h;
};

double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// One GRU layer in float64, gate order r, z, n. `offset_x` and `offset_h`
// [T, B, 3H] (may be empty) are added to gx and gh: the derivatives of a
// loss with respect to them are grad_gates_x and grad_gates_h.
Forward ReferenceGru(const Dims& d, const Params& p, const std::vector<double>& offset_x = {},
                     const std::vector<double>& offset_h = {}) {
  const int64_t H = d.h, G = 3 * d.h;
  Forward out;
  out.y.assign(d.t * d.b * H, 0.0);
  out.saved.assign(d.t * d.b * 4 * H, 0.0);
  std::vector<double> h = p.h0;
  for (int64_t t = 0; t < d.t; ++t) {
    std::vector<double> h_next(d.b * H);
    for (int64_t n = 0; n < d.b; ++n) {
      const int64_t row = t * d.b + n;
      std::vector<double> gx(G), gh(G);
      for (int64_t g = 0; g < G; ++g) {
        gx[g] = p.b_ih[g] + (offset_x.empty() ? 0.0 : offset_x[row * G + g]);
        gh[g] = p.b_hh[g] + (offset_h.empty() ? 0.0 : offset_h[row * G + g]);
        for (int64_t k = 0; k < d.i; ++k) gx[g] += p.w_ih[g * d.i + k] * p.x[row * d.i + k];
        for (int64_t k = 0; k < H; ++k) gh[g] += p.w_hh[g * H + k] * h[n * H + k];
      }
      for (int64_t k = 0; k < H; ++k) {
        const double reset = Sigmoid(gx[k] + gh[k]);
        const double update = Sigmoid(gx[H + k] + gh[H + k]);
        const double hidden_new = gh[2 * H + k];
        const double candidate = std::tanh(gx[2 * H + k] + reset * hidden_new);
        h_next[n * H + k] = (1 - update) * candidate + update * h[n * H + k];
        double* s = &out.saved[row * 4 * H];
        s[k] = reset;
        s[H + k] = update;
        s[2 * H + k] = candidate;
        s[3 * H + k] = hidden_new;
        out.y[row * H + k] = h_next[n * H + k];
      }
    }
    h = h_next;
  }
  out.h_n = h;
  return out;
}

// Backpropagation through time of the float64 layer, from its own forward.
Backward ReferenceGruBackward(const Dims& d, const Params& p, const Forward& f, const std::vector<double>& grad_y,
                              const std::vector<double>& grad_h_n) {
  const int64_t H = d.h, G = 3 * d.h;
  Backward g;
  g.grad_x.assign(d.t * d.b * d.i, 0.0);
  g.grad_w_ih.assign(G * d.i, 0.0);
  g.grad_w_hh.assign(G * H, 0.0);
  g.grad_b_ih.assign(G, 0.0);
  g.grad_b_hh.assign(G, 0.0);
  g.grad_gates_x.assign(d.t * d.b * G, 0.0);
  g.grad_gates_h.assign(d.t * d.b * G, 0.0);
  std::vector<double> dh = grad_h_n;
  for (int64_t t = d.t - 1; t >= 0; --t) {
    std::vector<double> dh_prev(d.b * H, 0.0);
    for (int64_t n = 0; n < d.b; ++n) {
      const int64_t row = t * d.b + n;
      const double* s = &f.saved[row * 4 * H];
      const double* h_prev = t == 0 ? &p.h0[n * H] : &f.y[(row - d.b) * H];
      double* dx_gates = &g.grad_gates_x[row * G];
      double* dh_gates = &g.grad_gates_h[row * G];
      for (int64_t k = 0; k < H; ++k) {
        const double r = s[k], z = s[H + k], cand = s[2 * H + k], hn = s[3 * H + k];
        const double dh_t = dh[n * H + k] + grad_y[row * H + k];
        const double d_cand = dh_t * (1 - z);
        const double d_update = dh_t * (h_prev[k] - cand);
        const double da_n = d_cand * (1 - cand * cand);
        dx_gates[k] = dh_gates[k] = (da_n * hn) * r * (1 - r);
        dx_gates[H + k] = dh_gates[H + k] = d_update * z * (1 - z);
        dx_gates[2 * H + k] = da_n;
        dh_gates[2 * H + k] = da_n * r;
        dh_prev[n * H + k] = dh_t * z;
      }
      for (int64_t r = 0; r < G; ++r) {
        g.grad_b_ih[r] += dx_gates[r];
        g.grad_b_hh[r] += dh_gates[r];
        for (int64_t k = 0; k < d.i; ++k) {
          g.grad_x[row * d.i + k] += dx_gates[r] * p.w_ih[r * d.i + k];
          g.grad_w_ih[r * d.i + k] += dx_gates[r] * p.x[row * d.i + k];
        }
        for (int64_t k = 0; k < H; ++k) {
          dh_prev[n * H + k] += dh_gates[r] * p.w_hh[r * H + k];
          g.grad_w_hh[r * H + k] += dh_gates[r] * h_prev[k];
        }
      }
    }
    dh = dh_prev;
  }
  g.grad_h0 = dh;
  return g;
}

uint16_t Bits(const HostTensor& t, int64_t i) { return static_cast<const uint16_t*>(t.data())[i]; }

// `value` rounded to the 16-bit `dtype` (through float, as half.h rounds).
uint16_t RoundedBits(DType dtype, double value) {
  return dtype == DType::kBFloat16 ? BFloat16(value).bits : Float16(value).bits;
}

Params ParamsOf(const std::vector<HostTensor>& in) {
  return {Values(in[0]), Values(in[1]), Values(in[2]), Values(in[3]), Values(in[4]), Values(in[5])};
}

// |out - expected| <= rtol * (|expected| + 1) elementwise (NaN fails).
::testing::AssertionResult ElementwiseClose(const HostTensor& out, const std::vector<double>& expected, double rtol) {
  if (out.numel() != static_cast<int64_t>(expected.size())) {
    return ::testing::AssertionFailure() << "size " << out.numel() << " vs " << expected.size();
  }
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double a = Get(out, i), e = expected[i];
    if (!(std::abs(a - e) <= rtol * (std::abs(e) + 1.0))) {
      return ::testing::AssertionFailure() << "element " << i << " is " << a << ", expected " << e;
    }
  }
  return ::testing::AssertionSuccess();
}

class GruKernelTest : public ::testing::Test {
 protected:
  // Uniform in [-scale, scale) and never within scale/20 of zero, stored as
  // `dtype`.
  HostTensor NonZero(DType dtype, Shape shape, double scale) {
    HostTensor t({dtype, std::move(shape)});
    std::uniform_real_distribution<double> u(-scale, scale);
    for (int64_t k = 0; k < t.numel(); ++k) {
      const double v = u(rng_);
      Set(t, k, std::abs(v) >= scale / 20 ? v : (v < 0 ? v - scale / 20 : v + scale / 20));
    }
    return t;
  }

  int64_t Pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }

  // x, h0, w_ih, w_hh, b_ih, b_hh; weights scaled by 1/sqrt(I + H) (as
  // nn.GRU initializes them, by 1/sqrt(H)) so that the gates do not
  // saturate.
  std::vector<HostTensor> ForwardInputs(DType dtype, const Dims& d) {
    const double w = 1.5 / std::sqrt(static_cast<double>(d.i + d.h));
    return {NonZero(dtype, {d.t, d.b, d.i}, 1.0), NonZero(dtype, {d.b, d.h}, 0.8), NonZero(dtype, {3 * d.h, d.i}, w),
            NonZero(dtype, {3 * d.h, d.h}, w),    NonZero(dtype, {3 * d.h}, 0.3),  NonZero(dtype, {3 * d.h}, 0.3)};
  }

  // gru_backward's inputs: the incoming gradients (grad_y, grad_h_n), the
  // forward's inputs and outputs.
  static std::vector<HostTensor> BackwardInputs(const HostTensor& grad_y, const HostTensor& grad_h_n,
                                                const std::vector<HostTensor>& in, const std::vector<HostTensor>& fwd) {
    return {grad_y, grad_h_n, in[0], in[1], in[2], in[3], fwd[0], fwd[2]};
  }

  std::mt19937_64 rng_{half_test::TestSeed("gru_kernels_test")};
};

// Small layers of random dims, a single step, and (in 16 bits) the
// reference sequence length: forward and backward against the float64
// layer.
class GruDTypeTest : public GruKernelTest, public ::testing::WithParamInterface<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  bool half() const { return dtype() != DType::kFloat32; }
  double ForwardTolerance() const { return half() ? 3 * half_test::UnitRoundoff(dtype()) : 1e-6; }
  double BackwardTolerance() const { return half() ? 10 * half_test::UnitRoundoff(dtype()) : 1e-5; }

  std::vector<Dims> Shapes() {
    std::vector<Dims> shapes;
    for (int k = 0; k < 3; ++k) shapes.push_back({Pick(2, 6), Pick(1, 4), Pick(1, 9), Pick(1, 7)});
    shapes.push_back({Pick(2, 8), Pick(2, 5), Pick(5, 40), Pick(4, 32)});
    shapes.push_back({1, Pick(1, 4), Pick(1, 9), Pick(1, 7)});  // one step: the first is also the last
    return shapes;
  }

  // gru on `in` against the float64 layer; returns its outputs.
  std::vector<HostTensor> CheckForward(const Dims& d, const std::vector<HostTensor>& in) {
    SCOPED_TRACE(d.ToString());
    const std::vector<HostTensor> out = MustRun("gru", {}, in);
    if (out.size() != 3) {
      ADD_FAILURE() << "gru gave " << out.size() << " outputs";
      return out;
    }
    for (const HostTensor& t : out) EXPECT_EQ(t.type.dtype, dtype());
    const Forward ref = ReferenceGru(d, ParamsOf(in));
    EXPECT_TRUE(Close(out[0], ref.y, ForwardTolerance())) << "y";
    EXPECT_TRUE(Close(out[1], ref.h_n, ForwardTolerance())) << "h_n";
    EXPECT_TRUE(Close(out[2], ref.saved, ForwardTolerance())) << "saved";
    // h_n is the last step's stored state, bit for bit.
    const int64_t last = (d.t - 1) * d.b * d.h;
    for (int64_t e = 0; e < d.b * d.h; ++e) EXPECT_EQ(Get(out[1], e), Get(out[0], last + e)) << "h_n " << e;
    return out;
  }

  // gru_backward over the kernel's own forward outputs, with random
  // incoming gradients, against the float64 layer's gradients.
  void CheckBackward(const Dims& d, const std::vector<HostTensor>& in, const std::vector<HostTensor>& fwd) {
    SCOPED_TRACE(d.ToString());
    ASSERT_EQ(fwd.size(), 3u);
    const HostTensor grad_y = NonZero(dtype(), {d.t, d.b, d.h}, 1.0);
    const HostTensor grad_h_n = NonZero(dtype(), {d.b, d.h}, 1.0);
    const std::vector<HostTensor> grads = MustRun("gru_backward", {}, BackwardInputs(grad_y, grad_h_n, in, fwd));
    ASSERT_EQ(grads.size(), 8u);
    for (const HostTensor& t : grads) EXPECT_EQ(t.type.dtype, dtype());
    const Params p = ParamsOf(in);
    const Backward ref = ReferenceGruBackward(d, p, ReferenceGru(d, p), Values(grad_y), Values(grad_h_n));
    const std::vector<double>* expected[] = {&ref.grad_x,    &ref.grad_h0,   &ref.grad_w_ih,    &ref.grad_w_hh,
                                             &ref.grad_b_ih, &ref.grad_b_hh, &ref.grad_gates_x, &ref.grad_gates_h};
    const char* const names[] = {"grad_x",    "grad_h0",   "grad_w_ih",    "grad_w_hh",
                                 "grad_b_ih", "grad_b_hh", "grad_gates_x", "grad_gates_h"};
    for (int k = 0; k < 8; ++k) EXPECT_TRUE(Close(grads[k], *expected[k], BackwardTolerance())) << names[k];
    if (half()) CheckRoundingPoints(d, p, grads);
  }

  // The 16-bit gradients are made of the stored (rounded) gate gradients:
  // grad_b_ih and grad_b_hh are their column sums and grad_x their product
  // with w_ih, each summed in double and rounded once.
  void CheckRoundingPoints(const Dims& d, const Params& p, const std::vector<HostTensor>& grads) {
    const int64_t rows = d.t * d.b, G = 3 * d.h;
    for (int side = 0; side < 2; ++side) {
      const HostTensor& gates = grads[6 + side];
      for (int64_t j = 0; j < G; ++j) {
        double sum = 0;
        for (int64_t row = rows - 1; row >= 0; --row) sum += Get(gates, row * G + j);
        EXPECT_EQ(Bits(grads[4 + side], j), RoundedBits(dtype(), sum)) << (side ? "grad_b_hh " : "grad_b_ih ") << j;
      }
    }
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t k = 0; k < d.i; ++k) {
        double sum = 0;
        for (int64_t j = 0; j < G; ++j) sum += Get(grads[6], row * G + j) * p.w_ih[j * d.i + k];
        EXPECT_EQ(Bits(grads[0], row * d.i + k), RoundedBits(dtype(), sum)) << "grad_x " << row << ", " << k;
      }
    }
  }
};

TEST_P(GruDTypeTest, ForwardAndBackwardMatchAFloat64Gru) {
  for (const Dims& d : Shapes()) {
    const std::vector<HostTensor> in = ForwardInputs(dtype(), d);
    CheckBackward(d, in, CheckForward(d, in));
  }
}

// A second layer reads the first one's output (in 16 bits: rounded), as in
// a two-layer model.
TEST_P(GruDTypeTest, StackedLayers) {
  const int64_t t = Pick(2, 8), b = Pick(2, 5), hidden = Pick(4, 32);
  const Dims layer0{t, b, Pick(5, 40), hidden}, layer1{t, b, hidden, hidden};
  const std::vector<HostTensor> in0 = ForwardInputs(dtype(), layer0);
  const std::vector<HostTensor> out0 = CheckForward(layer0, in0);
  ASSERT_EQ(out0.size(), 3u);
  std::vector<HostTensor> in1 = ForwardInputs(dtype(), layer1);
  in1[0] = out0[0];
  CheckBackward(layer1, in1, CheckForward(layer1, in1));
}

// The reference model's sequence length: 35 steps of carried, rounded state.
TEST_P(GruDTypeTest, ReferenceSequenceLength) {
  const Dims d{35, 4, 24, 20};
  const std::vector<HostTensor> in = ForwardInputs(dtype(), d);
  CheckBackward(d, in, CheckForward(d, in));
}

// Every input reaches y: a changed element of each changes it (guards
// against an input read nowhere, which a reference with the same slip
// would miss).
TEST_P(GruDTypeTest, ForwardReadsEveryInput) {
  const Dims d{3, 2, 3, 2};
  const std::vector<HostTensor> in = ForwardInputs(dtype(), d);
  const std::vector<HostTensor> base = MustRun("gru", {}, in);
  ASSERT_EQ(base.size(), 3u);
  for (int which = 0; which < 6; ++which) {
    std::vector<HostTensor> changed = in;
    const int64_t last = changed[which].numel() - 1;
    Set(changed[which], last, Get(changed[which], last) + 0.25);
    EXPECT_NE(Values(MustRun("gru", {}, changed)[0]), Values(base[0])) << kInputNames[which];
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, GruDTypeTest, ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// The float32 kernel's gradients against central differences of
// loss = sum(grad_y * y) + sum(grad_h_n * h_n) through the float64 layer.
TEST_F(GruKernelTest, BackwardMatchesFiniteDifferencesOfAScalarLoss) {
  std::vector<Dims> shapes;
  for (int k = 0; k < 4; ++k) shapes.push_back({Pick(2, 5), Pick(1, 3), Pick(1, 5), Pick(1, 4)});
  shapes.push_back({1, 2, 3, 2});
  for (const Dims& d : shapes) {
    SCOPED_TRACE(d.ToString());
    const std::vector<HostTensor> in = ForwardInputs(DType::kFloat32, d);
    const std::vector<HostTensor> fwd = MustRun("gru", {}, in);
    ASSERT_EQ(fwd.size(), 3u);
    const HostTensor grad_y = NonZero(DType::kFloat32, {d.t, d.b, d.h}, 1.0);
    const HostTensor grad_h_n = NonZero(DType::kFloat32, {d.b, d.h}, 1.0);
    const std::vector<double> wy = Values(grad_y), wh = Values(grad_h_n);
    auto loss_of = [&](const Forward& o) { return Dot(wy, o.y) + Dot(wh, o.h_n); };
    const std::vector<HostTensor> grads = MustRun("gru_backward", {}, BackwardInputs(grad_y, grad_h_n, in, fwd));
    ASSERT_EQ(grads.size(), 8u);
    // Backward output k is the gradient of forward input k.
    const Params params = ParamsOf(in);
    for (int input = 0; input < 6; ++input) {
      Params start = params;
      const std::vector<double> numeric = CentralDifferences(start[input], [&](const std::vector<double>& v) {
        Params p = params;
        p[input] = v;
        return loss_of(ReferenceGru(d, p));
      });
      EXPECT_TRUE(ElementwiseClose(grads[input], numeric, 4e-6)) << "gradient of " << kInputNames[input];
    }
    const std::vector<double> zeros(d.t * d.b * 3 * d.h, 0.0);
    const std::vector<double> numeric_x = CentralDifferences(
        zeros, [&](const std::vector<double>& offset) { return loss_of(ReferenceGru(d, params, offset, {})); });
    EXPECT_TRUE(ElementwiseClose(grads[6], numeric_x, 4e-6)) << "grad_gates_x";
    const std::vector<double> numeric_h = CentralDifferences(
        zeros, [&](const std::vector<double>& offset) { return loss_of(ReferenceGru(d, params, {}, offset)); });
    EXPECT_TRUE(ElementwiseClose(grads[7], numeric_h, 4e-6)) << "grad_gates_h";
  }
}

}  // namespace
}  // namespace tandem
