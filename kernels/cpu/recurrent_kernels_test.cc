// The reference CPU kernels of lstm and lstm_backward: the forward against a
// step-by-step LSTM written here in double (its state kept in double, its
// gates computed by its own loops), the backward against central finite
// differences of a scalar loss through that double LSTM. The loss weights
// every output (y, h_n and c_n) with random nonzero weights, which are the
// backward's incoming gradients; grad_gates is checked against differences
// with respect to an offset added to every gate pre-activation. Shapes are
// small and random (T=3..5, B=2..3, I=3..5, H=2..4) from a fixed seed, plus a
// single-step layer; no input is zero; outputs are poisoned before each run.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/sequence_test_util.h"

namespace tandem::seq_test {
namespace {

using Dims = LstmDims;
using Params = LstmParams;
using Outputs = LstmOutputs;

class RecurrentKernelTest : public SequenceKernelTest {
 protected:
  // Uniform in [-scale, scale) and never within scale/20 of zero.
  Tensor NonZero(Shape shape, double scale) {
    Tensor t = Random(DType::kFloat32, std::move(shape), -scale, scale);
    for (int64_t k = 0; k < t.numel(); ++k) {
      const double v = t.Get(k);
      if (std::abs(v) < scale / 20) t.Set(k, v < 0 ? v - scale / 20 : v + scale / 20);
    }
    return t;
  }

  std::vector<Dims> Shapes() {
    std::vector<Dims> shapes;
    auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); };
    for (int k = 0; k < 5; ++k) shapes.push_back({pick(3, 5), pick(2, 3), pick(3, 5), pick(2, 4)});
    shapes.push_back({1, 2, 3, 2});  // one step: the first step is also the last
    return shapes;
  }

  // x, h0, c0, w_ih, w_hh, b_ih, b_hh with magnitudes that keep the gates
  // away from saturation.
  std::vector<Tensor> ForwardInputs(const Dims& d) {
    return {NonZero({d.t, d.b, d.i}, 1.0), NonZero({d.b, d.h}, 0.8),     NonZero({d.b, d.h}, 1.0),
            NonZero({4 * d.h, d.i}, 0.6),  NonZero({4 * d.h, d.h}, 0.6), NonZero({4 * d.h}, 0.3),
            NonZero({4 * d.h}, 0.3)};
  }
};

Params ParamsOf(const std::vector<Tensor>& in) {
  return {in[0].Values(), in[1].Values(), in[2].Values(), in[3].Values(),
          in[4].Values(), in[5].Values(), in[6].Values()};
}

std::vector<double>* Member(Params& p, int which) {
  std::vector<double>* members[] = {&p.x, &p.h0, &p.c0, &p.w_ih, &p.w_hh, &p.b_ih, &p.b_hh};
  return members[which];
}

TEST_F(RecurrentKernelTest, ForwardMatchesAStepByStepDoubleLstm) {
  for (const Dims& d : Shapes()) {
    SCOPED_TRACE(d.ToString());
    const std::vector<Tensor> in = ForwardInputs(d);
    const Outputs expected = ReferenceLstm(d, ParamsOf(in));
    const std::vector<Tensor> out = MustRun("lstm", {}, in);
    ASSERT_EQ(out.size(), 4u);
    // The kernel rounds its state to float32 at every step; the reference
    // keeps double.
    ExpectClose(out[0], expected.y, "y", 1e-6);
    ExpectClose(out[1], expected.h_n, "h_n", 1e-6);
    ExpectClose(out[2], expected.c_n, "c_n", 1e-6);
    ExpectClose(out[3], expected.saved, "saved", 1e-6);
    // h_n and c_n are the last step's state, bit for bit.
    const int64_t last = (d.t - 1) * d.b;
    for (int64_t e = 0; e < d.b * d.h; ++e) {
      EXPECT_EQ(out[1].Get(e), out[0].Get(last * d.h + e)) << "h_n " << e;
      const int64_t n = e / d.h, k = e % d.h;
      EXPECT_EQ(out[2].Get(e), out[3].Get((last + n) * 5 * d.h + 4 * d.h + k)) << "c_n " << e;
    }
  }
}

// The forward's outputs depend on every input: a changed element of each
// changes y somewhere (guards against an input that is read nowhere, which
// the comparison above would miss only if the reference made the same slip).
TEST_F(RecurrentKernelTest, ForwardReadsEveryInput) {
  const Dims d{3, 2, 3, 2};
  const std::vector<Tensor> in = ForwardInputs(d);
  const std::vector<double> base = MustRun("lstm", {}, in)[0].Values();
  for (int which = 0; which < 7; ++which) {
    std::vector<Tensor> changed = in;
    changed[which].Set(changed[which].numel() - 1, changed[which].Get(changed[which].numel() - 1) + 0.25);
    EXPECT_NE(MustRun("lstm", {}, changed)[0].Values(), base) << "input " << which;
  }
}

TEST_F(RecurrentKernelTest, BackwardMatchesFiniteDifferencesOfAScalarLoss) {
  const char* const kNames[] = {"x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"};
  for (const Dims& d : Shapes()) {
    SCOPED_TRACE(d.ToString());
    const std::vector<Tensor> in = ForwardInputs(d);
    const std::vector<Tensor> fwd = MustRun("lstm", {}, in);
    ASSERT_EQ(fwd.size(), 4u);
    // loss = sum(grad_y * y) + sum(grad_h_n * h_n) + sum(grad_c_n * c_n).
    const Tensor grad_y = NonZero({d.t, d.b, d.h}, 1.0);
    const Tensor grad_h_n = NonZero({d.b, d.h}, 1.0);
    const Tensor grad_c_n = NonZero({d.b, d.h}, 1.0);
    const std::vector<double> wy = grad_y.Values(), wh = grad_h_n.Values(), wc = grad_c_n.Values();
    auto loss_of = [&](const Outputs& o) { return Dot(wy, o.y) + Dot(wh, o.h_n) + Dot(wc, o.c_n); };

    const std::vector<Tensor> grads =
        MustRun("lstm_backward", {}, {grad_y, grad_h_n, grad_c_n, in[0], in[1], in[2], in[3], in[4], fwd[0], fwd[3]});
    ASSERT_EQ(grads.size(), 7u);
    // Output k of the backward is the gradient of forward input which[k];
    // grad_b is the gradient of both biases.
    const std::pair<int, int> checks[] = {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {5, 6}};
    const Params params = ParamsOf(in);
    for (const auto& [output, input] : checks) {
      Params start = params;
      const std::vector<double> numeric =
          CentralDifferences(*Member(start, input), [&, input = input](const std::vector<double>& v) {
            Params p = params;
            *Member(p, input) = v;
            return loss_of(ReferenceLstm(d, p));
          });
      ExpectClose(grads[output], numeric, absl::StrCat("gradient of ", kNames[input]), 4e-6);
    }
    const std::vector<double> numeric_gates = CentralDifferences(
        std::vector<double>(d.t * d.b * 4 * d.h, 0.0),
        [&](const std::vector<double>& offset) { return loss_of(ReferenceLstm(d, params, offset)); });
    ExpectClose(grads[6], numeric_gates, "grad_gates", 4e-6);
  }
}

}  // namespace
}  // namespace tandem::seq_test
