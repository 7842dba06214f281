// The CPU kernels of the fused LSTM layer (lstm, lstm_backward) in bfloat16
// and float16 against a float64 LSTM (sequence_test_util.h's ReferenceLstm:
// its state kept in float64 from the same 16-bit inputs; its gradients by
// backpropagation through time, written here), on fresh random data every
// run (the seed is printed; TANDEM_TEST_SEED replays one), for both
// layers of the reference language model scaled down (layer 0: I = the
// embedding width; layer 1: I = H, fed layer 0's 16-bit output), a single
// step, and the reference sequence length (T = 35). Outputs are poisoned (0xFF bytes: NaN) before each run,
// and NaN never passes. The float64 reference is itself checked against the
// float32 kernel (whose gradients recurrent_kernels_test checks against
// finite differences), so that a slip in it cannot hide one in the kernel.
//
// Tolerances (normwise relative, ||out - ref|| / ||ref||): every stored
// tensor is rounded to 16 bits (relative u = 2^-8 for bfloat16, 2^-11 for
// float16), and the kernel carries its rounded state from step to step (h
// through y, c through saved, and in the backward dh and dc), so the error
// of a step's state is its own rounding plus the previous step's error
// carried through the gates; the forget gate (< 1) damps what is carried.
// Measured over a few thousand random layers of these shapes the forward
// stayed within 1.4u and the backward (which also reads the forward's
// rounded gates) within 4.7u, grad_b's sums (which cancel) coming nearest;
// the bounds are 3u and 10u.
// The bit-for-bit checks (h_n, c_n, grad_b, grad_x) state where the kernel
// rounds: the last step's state is y's and saved's, and the gradients are
// made of the rounded grad_gates, as the CUDA kernels' products read them.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "kernels/cpu/half_test_util.h"
#include "kernels/cpu/run_op_test_util.h"
#include "kernels/cpu/sequence_test_util.h"
#include "kernels/half.h"

namespace tandem {
namespace {

using half_test::Close;
using half_test::Get;
using half_test::HostTensor;
using half_test::Make;
using half_test::MustRun;
using half_test::UnitRoundoff;
using half_test::Values;
using seq_test::ReferenceLstm;
using Dims = seq_test::LstmDims;
using Params = seq_test::LstmParams;
using Forward = seq_test::LstmOutputs;

uint16_t Bits(const HostTensor& t, int64_t i) { return static_cast<const uint16_t*>(t.data())[i]; }

// `value` rounded to the 16-bit `dtype` (through float, as half.h rounds).
uint16_t RoundedBits(DType dtype, double value) {
  return dtype == DType::kBFloat16 ? BFloat16(value).bits : Float16(value).bits;
}

Params ParamsOf(const std::vector<HostTensor>& in) {
  return {Values(in[0]), Values(in[1]), Values(in[2]), Values(in[3]), Values(in[4]), Values(in[5]), Values(in[6])};
}

struct Backward {
  std::vector<double> grad_x, grad_h0, grad_c0, grad_w_ih, grad_w_hh, grad_b, grad_gates;
};

// Backpropagation through time of the float64 layer, from its own forward.
Backward ReferenceBackward(const Dims& d, const Params& p, const Forward& f, const std::vector<double>& grad_y,
                           const std::vector<double>& grad_h_n, const std::vector<double>& grad_c_n) {
  const int64_t H = d.h, G = 4 * d.h, S = 5 * d.h;
  Backward g;
  g.grad_x.assign(d.t * d.b * d.i, 0.0);
  g.grad_w_ih.assign(G * d.i, 0.0);
  g.grad_w_hh.assign(G * H, 0.0);
  g.grad_b.assign(G, 0.0);
  g.grad_gates.assign(d.t * d.b * G, 0.0);
  std::vector<double> dh = grad_h_n, dc = grad_c_n;
  for (int64_t t = d.t - 1; t >= 0; --t) {
    std::vector<double> dh_prev(d.b * H, 0.0), dc_prev(d.b * H, 0.0);
    for (int64_t n = 0; n < d.b; ++n) {
      const int64_t row = t * d.b + n;
      const double* s = &f.saved[row * S];
      for (int64_t k = 0; k < H; ++k) {
        const double i = s[k], fg = s[H + k], cell = s[2 * H + k], o = s[3 * H + k], c = s[4 * H + k];
        const double c_prev = t == 0 ? p.c0[n * H + k] : f.saved[(row - d.b) * S + 4 * H + k];
        const double dh_t = dh[n * H + k] + grad_y[row * H + k];
        const double tanh_c = std::tanh(c);
        const double dc_t = dc[n * H + k] + dh_t * o * (1 - tanh_c * tanh_c);
        double* da = &g.grad_gates[row * G];
        da[k] = dc_t * cell * i * (1 - i);
        da[H + k] = dc_t * c_prev * fg * (1 - fg);
        da[2 * H + k] = dc_t * i * (1 - cell * cell);
        da[3 * H + k] = dh_t * tanh_c * o * (1 - o);
        dc_prev[n * H + k] = dc_t * fg;
      }
      const double* da = &g.grad_gates[row * G];
      for (int64_t r = 0; r < G; ++r) {
        g.grad_b[r] += da[r];
        for (int64_t k = 0; k < d.i; ++k) {
          g.grad_x[row * d.i + k] += da[r] * p.w_ih[r * d.i + k];
          g.grad_w_ih[r * d.i + k] += da[r] * p.x[row * d.i + k];
        }
        for (int64_t k = 0; k < H; ++k) {
          const double h_prev = t == 0 ? p.h0[n * H + k] : f.y[(row - d.b) * H + k];
          dh_prev[n * H + k] += da[r] * p.w_hh[r * H + k];
          g.grad_w_hh[r * H + k] += da[r] * h_prev;
        }
      }
    }
    dh = dh_prev;
    dc = dc_prev;
  }
  g.grad_h0 = dh;
  g.grad_c0 = dc;
  return g;
}

class HalfRecurrentKernelTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  double u() const { return UnitRoundoff(GetParam()); }

  // Values uniform in [-scale, scale), stored as `dtype`.
  HostTensor Random(DType dtype, Shape shape, double scale) {
    return half_test::RandomTensor(rng_, dtype, std::move(shape), -scale, scale);
  }

  // x, h0, c0, w_ih, w_hh, b_ih, b_hh; weights scaled by 1/sqrt(I + H) (as
  // nn.LSTM initializes them, by 1/sqrt(H)) so that the gates do not
  // saturate.
  std::vector<HostTensor> ForwardInputs(DType dtype, const Dims& d) {
    const double w = 1.5 / std::sqrt(static_cast<double>(d.i + d.h));
    return {Random(dtype, {d.t, d.b, d.i}, 1.0), Random(dtype, {d.b, d.h}, 0.8),   Random(dtype, {d.b, d.h}, 1.0),
            Random(dtype, {4 * d.h, d.i}, w),    Random(dtype, {4 * d.h, d.h}, w), Random(dtype, {4 * d.h}, 0.3),
            Random(dtype, {4 * d.h}, 0.3)};
  }

  int64_t Pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }

  // The language model's two layers (I = embedding width, then I = H),
  // scaled down, at random sizes.
  std::pair<Dims, Dims> LanguageModelLayers(int64_t t) {
    const int64_t b = Pick(2, 5), embed = Pick(5, 40), hidden = Pick(4, 32);
    return {{t, b, embed, hidden}, {t, b, hidden, hidden}};
  }

  // lstm in `dtype` against the float64 reference; returns its outputs.
  std::vector<HostTensor> CheckForward(const Dims& d, const std::vector<HostTensor>& in) {
    SCOPED_TRACE(d.ToString());
    const std::vector<HostTensor> out = MustRun("lstm", {}, in);
    if (out.size() != 4) {
      ADD_FAILURE() << "lstm gave " << out.size() << " outputs";
      return out;
    }
    for (const HostTensor& t : out) EXPECT_EQ(t.type.dtype, dtype());
    const Forward ref = ReferenceLstm(d, ParamsOf(in));
    const double tolerance = 3 * u();
    EXPECT_TRUE(Close(Values(out[0]), ref.y, tolerance)) << "y";
    EXPECT_TRUE(Close(Values(out[1]), ref.h_n, tolerance)) << "h_n";
    EXPECT_TRUE(Close(Values(out[2]), ref.c_n, tolerance)) << "c_n";
    EXPECT_TRUE(Close(Values(out[3]), ref.saved, tolerance)) << "saved";
    // h_n and c_n are the last step's stored state, bit for bit.
    const int64_t last = (d.t - 1) * d.b;
    for (int64_t e = 0; e < d.b * d.h; ++e) {
      const int64_t n = e / d.h, k = e % d.h;
      EXPECT_EQ(Bits(out[1], e), Bits(out[0], last * d.h + e)) << "h_n " << e;
      EXPECT_EQ(Bits(out[2], e), Bits(out[3], (last + n) * 5 * d.h + 4 * d.h + k)) << "c_n " << e;
    }
    return out;
  }

  // lstm_backward in `dtype` (over the kernel's own forward outputs) against
  // the float64 reference's gradients, with random incoming gradients.
  void CheckBackward(const Dims& d, const std::vector<HostTensor>& in, const std::vector<HostTensor>& fwd) {
    SCOPED_TRACE(d.ToString());
    ASSERT_EQ(fwd.size(), 4u);
    const HostTensor grad_y = Random(dtype(), {d.t, d.b, d.h}, 1.0);
    const HostTensor grad_h_n = Random(dtype(), {d.b, d.h}, 1.0);
    const HostTensor grad_c_n = Random(dtype(), {d.b, d.h}, 1.0);
    const std::vector<HostTensor> grads =
        MustRun("lstm_backward", {}, {grad_y, grad_h_n, grad_c_n, in[0], in[1], in[2], in[3], in[4], fwd[0], fwd[3]});
    ASSERT_EQ(grads.size(), 7u);
    for (const HostTensor& t : grads) EXPECT_EQ(t.type.dtype, dtype());
    const Params p = ParamsOf(in);
    const Backward ref =
        ReferenceBackward(d, p, ReferenceLstm(d, p), Values(grad_y), Values(grad_h_n), Values(grad_c_n));
    const double tolerance = 10 * u();
    const std::vector<double>* expected[] = {&ref.grad_x,    &ref.grad_h0, &ref.grad_c0,   &ref.grad_w_ih,
                                             &ref.grad_w_hh, &ref.grad_b,  &ref.grad_gates};
    const char* const names[] = {"grad_x", "grad_h0", "grad_c0", "grad_w_ih", "grad_w_hh", "grad_b", "grad_gates"};
    for (int k = 0; k < 7; ++k) EXPECT_TRUE(Close(Values(grads[k]), *expected[k], tolerance)) << names[k];

    // The gradients are made of the stored (rounded) grad_gates: grad_b is
    // their column sums and grad_x their product with w_ih, each summed in
    // double in the kernel's order and rounded once.
    const int64_t rows = d.t * d.b, G = 4 * d.h;
    const HostTensor& gates = grads[6];
    for (int64_t r = 0; r < G; ++r) {
      double sum = 0;
      for (int64_t t = d.t - 1; t >= 0; --t) {
        for (int64_t n = 0; n < d.b; ++n) sum += Get(gates, (t * d.b + n) * G + r);
      }
      EXPECT_EQ(Bits(grads[5], r), RoundedBits(dtype(), sum)) << "grad_b " << r;
    }
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t k = 0; k < d.i; ++k) {
        double sum = 0;
        for (int64_t r = 0; r < G; ++r) sum += Get(gates, row * G + r) * p.w_ih[r * d.i + k];
        EXPECT_EQ(Bits(grads[0], row * d.i + k), RoundedBits(dtype(), sum)) << "grad_x " << row << ", " << k;
      }
    }
  }

  std::mt19937_64 rng_{half_test::TestSeed("half_recurrent_kernels_test")};
};

TEST_P(HalfRecurrentKernelTest, LanguageModelLayersForwardAndBackward) {
  for (int trial = 0; trial < 3; ++trial) {
    const auto [layer0, layer1] = LanguageModelLayers(Pick(2, 8));
    const std::vector<HostTensor> in0 = ForwardInputs(dtype(), layer0);
    const std::vector<HostTensor> out0 = CheckForward(layer0, in0);
    ASSERT_EQ(out0.size(), 4u);
    CheckBackward(layer0, in0, out0);
    // Layer 1 reads layer 0's 16-bit output.
    std::vector<HostTensor> in1 = ForwardInputs(dtype(), layer1);
    in1[0] = out0[0];
    CheckBackward(layer1, in1, CheckForward(layer1, in1));
  }
}

TEST_P(HalfRecurrentKernelTest, OneStep) {
  const Dims d{1, 3, 6, 5};
  const std::vector<HostTensor> in = ForwardInputs(dtype(), d);
  CheckBackward(d, in, CheckForward(d, in));
}

// The reference model's sequence length: 35 steps of carried, rounded state.
TEST_P(HalfRecurrentKernelTest, ReferenceSequenceLength) {
  const Dims d{35, 4, 24, 20};
  const std::vector<HostTensor> in = ForwardInputs(dtype(), d);
  CheckBackward(d, in, CheckForward(d, in));
}

// The float64 reference against the float32 kernel on the same inputs: its
// forward within float32's rounding, its gradients likewise (the float32
// kernel's gradients are checked against finite differences elsewhere).
TEST_P(HalfRecurrentKernelTest, ReferenceAgreesWithTheFloat32Kernel) {
  const Dims d{5, 3, 7, 6};
  const std::vector<HostTensor> in = ForwardInputs(dtype(), d);
  std::vector<HostTensor> in32;
  for (const HostTensor& t : in) in32.push_back(Make(DType::kFloat32, t.type.shape, Values(t)));
  const std::vector<HostTensor> fwd = MustRun("lstm", {}, in32);
  ASSERT_EQ(fwd.size(), 4u);
  const Params p = ParamsOf(in32);
  const Forward ref = ReferenceLstm(d, p);
  EXPECT_TRUE(Close(Values(fwd[0]), ref.y, 1e-6)) << "y";
  EXPECT_TRUE(Close(Values(fwd[3]), ref.saved, 1e-6)) << "saved";
  const HostTensor grad_y = Random(DType::kFloat32, {d.t, d.b, d.h}, 1.0);
  const HostTensor grad_h_n = Random(DType::kFloat32, {d.b, d.h}, 1.0);
  const HostTensor grad_c_n = Random(DType::kFloat32, {d.b, d.h}, 1.0);
  const std::vector<HostTensor> grads = MustRun(
      "lstm_backward", {}, {grad_y, grad_h_n, grad_c_n, in32[0], in32[1], in32[2], in32[3], in32[4], fwd[0], fwd[3]});
  ASSERT_EQ(grads.size(), 7u);
  const Backward g = ReferenceBackward(d, p, ref, Values(grad_y), Values(grad_h_n), Values(grad_c_n));
  const std::vector<double>* expected[] = {&g.grad_x,    &g.grad_h0, &g.grad_c0,   &g.grad_w_ih,
                                           &g.grad_w_hh, &g.grad_b,  &g.grad_gates};
  for (int k = 0; k < 7; ++k) EXPECT_TRUE(Close(Values(grads[k]), *expected[k], 1e-5)) << "gradient output " << k;
}

INSTANTIATE_TEST_SUITE_P(SixteenBit, HalfRecurrentKernelTest, ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tandem
