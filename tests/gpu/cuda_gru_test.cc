// The CUDA kernels of the fused GRU layer (gru, gru_backward) against the CPU
// kernels (the oracle), in float32, bfloat16 and float16, on fresh random
// inputs (the seed is printed): small layers with odd dims (rows of saved
// and of the gate gradients not 16-byte aligned, H = 1, a single step),
// through classic cuBLAS too (its strided and accumulating outputs take
// another path), and the reference language model's two layers scaled to
// H = 256 (T = 35, B = 32; layer 1 reads layer 0's output, and layer 0's
// backward reads layer 1's grad_x). In float32 also the reference layer
// (T=35, B=64, I=H=1024) forward, and forward and backward with allow_tf32,
// against TF32 bounds, where the forward must miss the float32 bound (the
// attribute takes effect); in 16 bits allow_tf32 changes no bit. Each graph
// runs op by op and then as a replayed CUDA graph (the ops must be
// capturable); outputs are poisoned (0xFF bytes: NaN) before each run and a
// NaN never passes.
//
// Tolerances (normwise relative, ||gpu - cpu|| / ||cpu||): float32 as for
// the LSTM (cuda_recurrent_kernels_test.cc: float32 products against the
// CPU's double sums, through T steps of the recurrence and sums over T*B
// rows); 16 bits as for the LSTM (cuda_half_recurrent_test.cc: both
// backends round the same quantities at the same points, so they differ
// where a rounding lands one ulp apart, carried on through the recurrence):
// 3u + 1e-3 forward, 6u + 1e-3 backward (u = 2^-8 bfloat16, 2^-11 float16).
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/recurrent_layers.h"
#include "tests/gpu/shared_graphs.h"

namespace tandem::gpu_test {
namespace {

class CudaGru : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  bool half() const { return GetParam() != DType::kFloat32; }
  double u() const { return UnitRoundoff(GetParam()); }
  double Tolerance(const std::string& op) const {
    const bool forward = op == "gru";
    if (!half()) return forward ? kForward32 : kBackward32;
    return (forward ? 3 : 6) * u() + 1e-3;
  }

  // Every node output compared with the CPU's, within its op's tolerance,
  // in the layer's dtype.
  void Check(const GraphMaker& maker) {
    CompareWithCpu(maker, [&](const OutputPair& o) {
      EXPECT_EQ(o.type().dtype, dtype()) << o.Where();
      EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), Tolerance(maker.graph().nodes[o.node].op))) << o.Where();
    });
  }

  // The forward's inputs; `weights` fills w_ih and w_hh (small for wide
  // layers, so that the gates do not saturate). `x` replaces the x feed
  // when given (a layer above another).
  std::vector<int> ForwardInputs(GraphMaker& g, const Dims& d, Fill weights, int x = -1) {
    const DType t = dtype();
    return {x >= 0 ? x : g.Feed({t, {d.t, d.b, d.i}}), g.Feed({t, {d.b, d.h}}), g.Feed({t, {3 * d.h, d.i}}, weights),
            g.Feed({t, {3 * d.h, d.h}}, weights),      g.Feed({t, {3 * d.h}}),  g.Feed({t, {3 * d.h}})};
  }

  // gru_backward of the layer whose forward read `in` and gave `out`, with
  // a nonzero grad_h_n; `grad_y` is fed when negative. Returns its outputs.
  // grad_y and grad_h_n: new feeds where not given (-1).
  std::vector<int> Backward(GraphMaker& g, const Dims& d, const std::vector<int>& in, const std::vector<int>& out,
                            int grad_y = -1, const Attrs& attrs = {}, int grad_h_n = -1) {
    const DType t = dtype();
    if (grad_y < 0) grad_y = g.Feed({t, {d.t, d.b, d.h}});
    if (grad_h_n < 0) grad_h_n = g.Feed({t, {d.b, d.h}}, Fill::kNonZero);
    return g.Add("gru_backward", {grad_y, grad_h_n, in[0], in[1], in[2], in[3], out[0], out[2]}, attrs);
  }

  GraphMaker ForwardAndBackward(const Dims& d, Fill weights, const Attrs& attrs = {}) {
    GraphMaker g;
    const std::vector<int> in = ForwardInputs(g, d, weights);
    Backward(g, d, in, g.Add("gru", in, attrs), -1, attrs);
    return g;
  }
};

TEST_P(CudaGru, SmallLayersWithOddDims) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Dims random{Dim(2, 9), Dim(1, 9), Dim(1, 40), Dim(1, 40)};
  for (const Dims& d : {Dims{4, 3, 7, 13}, Dims{1, 2, 5, 3}, Dims{6, 5, 2, 1}, random}) {
    SCOPED_TRACE(Describe(d));
    Check(ForwardAndBackward(d, Fill::kUniform));
  }
}

TEST_P(CudaGru, SmallLayerThroughClassicCublas) {
  TANDEM_SKIP_WITHOUT_GPU();
  ScopedForceCublas force;
  const Dims d{5, 4, 9, 6};
  SCOPED_TRACE(Describe(d));
  Check(ForwardAndBackward(d, Fill::kUniform));
}

// The reference language model's two layers scaled down (embedding 128 ->
// H 256 -> H 256; T = 35, B = 32), chained as in its training step.
TEST_P(CudaGru, LanguageModelLayersChained) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Dims layer0{35, 32, 128, 256}, layer1{35, 32, 256, 256};
  GraphMaker g;
  const std::vector<int> in0 = ForwardInputs(g, layer0, Fill::kSmall);
  const std::vector<int> out0 = g.Add("gru", in0);
  const std::vector<int> in1 = ForwardInputs(g, layer1, Fill::kSmall, /*x=*/out0[0]);
  const std::vector<int> out1 = g.Add("gru", in1);
  const std::vector<int> grads1 = Backward(g, layer1, in1, out1);
  Backward(g, layer0, in0, out0, /*grad_y=*/grads1[0]);
  Check(g);
}

// allow_tf32 in float32: the reference layer within TF32's bounds, its
// forward outside float32's (the attribute takes effect); in 16 bits no bit
// changes (the products already take 16-bit operands and accumulate in
// float32).
TEST_P(CudaGru, AllowTf32) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Dims d = half() ? Dims{8, 16, 96, 64} : Dims{35, 64, 1024, 1024};
  SCOPED_TRACE(Describe(d));
  GraphMaker g;
  const std::vector<int> in = ForwardInputs(g, d, Fill::kSmall);
  const int grad_y = g.Feed({dtype(), {d.t, d.b, d.h}});
  const int grad_h_n = g.Feed({dtype(), {d.b, d.h}}, Fill::kNonZero);  // one for both backward nodes
  std::vector<int> outputs[2];                                         // each node's outputs: without, with allow_tf32
  for (int k = half() ? 0 : 1; k < 2; ++k) {
    const Attrs attrs = MakeAttrs({{"allow_tf32", k == 1}});
    const std::vector<int> fwd = g.Add("gru", in, attrs);
    const std::vector<int> bwd = Backward(g, d, in, fwd, grad_y, attrs, grad_h_n);
    outputs[k] = fwd;
    outputs[k].insert(outputs[k].end(), bwd.begin(), bwd.end());
  }
  GpuBytes gpu;
  CompareWithCpu(g, [&](const OutputPair& o) {
    const bool forward = g.graph().nodes[o.node].op == "gru";
    const double bound = half() ? Tolerance(g.graph().nodes[o.node].op) : (forward ? kForwardTf32 : kBackwardTf32);
    EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), bound)) << o.Where();
    if (!half() && o.value == outputs[1][0]) {
      EXPECT_FALSE(Matches(*o.gpu, *o.ref, o.type(), kForward32)) << o.Where() << ": allow_tf32 changed nothing";
    }
    gpu[{o.value, o.replay}] = *o.gpu;
  });
  if (!half()) return;
  ASSERT_EQ(outputs[0].size(), 11u);
  ExpectSameOutputs(gpu, outputs[0], outputs[1]);
}

// The reference layer's forward in plain float32.
TEST(CudaGruFloat32, ReferenceLayerForward) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Dims d{35, 64, 1024, 1024};
  SCOPED_TRACE(Describe(d));
  const DType f32 = DType::kFloat32;
  GraphMaker g;
  g.Add("gru", {g.Feed({f32, {d.t, d.b, d.i}}), g.Feed({f32, {d.b, d.h}}), g.Feed({f32, {3 * d.h, d.i}}, Fill::kSmall),
                g.Feed({f32, {3 * d.h, d.h}}, Fill::kSmall), g.Feed({f32, {3 * d.h}}), g.Feed({f32, {3 * d.h}})});
  CompareWithCpuWithin(g, kForward32, kForward32);
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaGru, ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tandem::gpu_test
