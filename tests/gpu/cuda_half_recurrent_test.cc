// The LSTM's 16-bit CUDA kernels against the CPU kernels (the oracle), in
// bfloat16 and float16, on fresh random inputs (the seed is printed): the
// fused layer (lstm, lstm_backward; half_recurrent_kernels.cu's steps and
// cuBLASLt's 16-bit products) on small layers with odd dims, through classic
// cuBLAS too, and on the reference language model's two layers scaled to
// H = 256 (T = 35, B = 32; layer 1 reads layer 0's output, and layer 0's
// backward reads layer 1's grad_x); and the per-step cell math a PyTorch
// capture emits instead (mm/addmm, split, sigmoid, tanh, mul, add, stack,
// cat and their backwards), in place too; allow_tf32 changes no bit of the
// 16-bit layer. Each graph runs op by op and then as a replayed CUDA graph
// (everything here is capturable); outputs are poisoned (0xFF bytes: NaN)
// before each run and NaN never passes.
//
// Tolerances (normwise relative, ||gpu - cpu|| / ||cpu||; u = 2^-8 for
// bfloat16, 2^-11 for float16): both backends round the same quantities to
// 16 bits at the same points (kernels/cpu/recurrent_kernels.cc), the CPU
// from double and the GPU from float32 sums, so they differ where a
// rounding lands one ulp apart: 2u + 1e-3 for an op, as cuda_half_ops_test
// allows. The fused layer carries its rounded state from step to step, so
// such a difference travels on through the recurrence (damped by the forget
// gate); the backward also reads the forward's saved gates and sums T*B
// rows of products for the weight gradients: 3u + 1e-3 for the forward's
// outputs, 6u + 1e-3 for the backward's.
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/recurrent_layers.h"
#include "tests/gpu/shared_graphs.h"

namespace tandem::gpu_test {
namespace {

class CudaHalfRecurrent : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  double u() const { return UnitRoundoff(GetParam()); }
  double OpTolerance() const { return 2 * u() + 1e-3; }
  double ForwardTolerance() const { return 3 * u() + 1e-3; }
  double BackwardTolerance() const { return 6 * u() + 1e-3; }

  // Every node output compared with the CPU's: 16-bit values within the
  // tolerance of the node's op (`tolerance_of`), others exactly.
  void Check(const GraphMaker& maker, const std::function<double(const std::string& op)>& tolerance_of,
             std::vector<std::pair<int, int>> alias = {}) {
    CompareWithCpu(
        maker,
        [&](const OutputPair& o) {
          EXPECT_EQ(o.type().dtype, dtype()) << o.Where();
          const std::string& op = maker.graph().nodes[o.node].op;
          EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), tolerance_of(op))) << o.Where();
        },
        std::move(alias), /*feeds=*/{}, /*expect_capture=*/true);
  }

  double FusedTolerance(const std::string& op) const { return op == "lstm" ? ForwardTolerance() : BackwardTolerance(); }

  // The forward's inputs; `weights` fills w_ih and w_hh (small for wide
  // layers, so that the gates do not saturate). `x` replaces the x feed
  // when given (a layer above another).
  std::vector<int> ForwardInputs(GraphMaker& g, const Dims& d, Fill weights, int x = -1) {
    const DType t = dtype();
    return {x >= 0 ? x : g.Feed({t, {d.t, d.b, d.i}}),
            g.Feed({t, {d.b, d.h}}),
            g.Feed({t, {d.b, d.h}}),
            g.Feed({t, {4 * d.h, d.i}}, weights),
            g.Feed({t, {4 * d.h, d.h}}, weights),
            g.Feed({t, {4 * d.h}}),
            g.Feed({t, {4 * d.h}})};
  }

  // lstm_backward of the layer whose forward read `in` and gave `out`;
  // `grad_y` is fed when negative. Returns the backward's outputs.
  std::vector<int> Backward(GraphMaker& g, const Dims& d, const std::vector<int>& in, const std::vector<int>& out,
                            int grad_y = -1, const Attrs& attrs = {}) {
    const DType t = dtype();
    if (grad_y < 0) grad_y = g.Feed({t, {d.t, d.b, d.h}});
    const int grad_h_n = g.Feed({t, {d.b, d.h}}, Fill::kNonZero);
    const int grad_c_n = g.Feed({t, {d.b, d.h}}, Fill::kNonZero);
    return g.Add("lstm_backward", {grad_y, grad_h_n, grad_c_n, in[0], in[1], in[2], in[3], in[4], out[0], out[3]},
                 attrs);
  }

  GraphMaker ForwardAndBackward(const Dims& d, Fill weights) {
    GraphMaker g;
    const std::vector<int> in = ForwardInputs(g, d, weights);
    Backward(g, d, in, g.Add("lstm", in));
    return g;
  }
};

TEST_P(CudaHalfRecurrent, SmallLayersWithOddDims) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Dims random{Dim(2, 9), Dim(1, 9), Dim(1, 40), Dim(1, 40)};
  for (const Dims& d : {Dims{4, 3, 7, 13}, Dims{1, 2, 5, 3}, Dims{6, 5, 2, 1}, random}) {
    SCOPED_TRACE(Describe(d));
    Check(ForwardAndBackward(d, Fill::kUniform), [&](const std::string& op) { return FusedTolerance(op); });
  }
}

// The same through classic cuBLAS (the fallback when cuBLASLt has no
// algorithm), whose strided and accumulating 16-bit outputs take another
// path.
TEST_P(CudaHalfRecurrent, SmallLayerThroughClassicCublas) {
  TANDEM_SKIP_WITHOUT_GPU();
  ScopedForceCublas force;
  const Dims d{5, 4, 9, 6};
  SCOPED_TRACE(Describe(d));
  Check(ForwardAndBackward(d, Fill::kUniform), [&](const std::string& op) { return FusedTolerance(op); });
}

// The reference language model's two layers scaled down (embedding 128 ->
// H 256 -> H 256; T = 35, B = 32), chained as in its training step.
TEST_P(CudaHalfRecurrent, LanguageModelLayersChained) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Dims layer0{35, 32, 128, 256}, layer1{35, 32, 256, 256};
  GraphMaker g;
  const std::vector<int> in0 = ForwardInputs(g, layer0, Fill::kSmall);
  const std::vector<int> out0 = g.Add("lstm", in0);
  const std::vector<int> in1 = ForwardInputs(g, layer1, Fill::kSmall, /*x=*/out0[0]);
  const std::vector<int> out1 = g.Add("lstm", in1);
  const std::vector<int> grads1 = Backward(g, layer1, in1, out1);
  Backward(g, layer0, in0, out0, /*grad_y=*/grads1[0]);
  Check(g, [&](const std::string& op) { return FusedTolerance(op); });
}

// allow_tf32 (which the PyTorch adaptor copies from
// torch.backends.cudnn.allow_tf32, on by default) changes no bit in 16 bits:
// the products already take 16-bit operands and accumulate in float32.
TEST_P(CudaHalfRecurrent, AllowTf32ChangesNoBit) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Dims d{8, 16, 96, 64};
  const DType t = dtype();
  GraphMaker g;
  const std::vector<int> in = ForwardInputs(g, d, Fill::kSmall);
  const int grad_y = g.Feed({t, {d.t, d.b, d.h}});
  const int grad_h_n = g.Feed({t, {d.b, d.h}}, Fill::kNonZero);
  const int grad_c_n = g.Feed({t, {d.b, d.h}}, Fill::kNonZero);
  std::vector<int> outputs[2];  // each node's outputs: without, with allow_tf32
  for (int k = 0; k < 2; ++k) {
    const Attrs attrs = MakeAttrs({{"allow_tf32", k == 1}});
    const std::vector<int> fwd = g.Add("lstm", in, attrs);
    const std::vector<int> bwd =
        g.Add("lstm_backward", {grad_y, grad_h_n, grad_c_n, in[0], in[1], in[2], in[3], in[4], fwd[0], fwd[3]}, attrs);
    outputs[k] = fwd;
    outputs[k].insert(outputs[k].end(), bwd.begin(), bwd.end());
  }
  GpuBytes gpu;
  CompareWithCpu(g, [&](const OutputPair& o) {
    EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), FusedTolerance(g.graph().nodes[o.node].op))) << o.Where();
    gpu[{o.value, o.replay}] = *o.gpu;
  });
  ASSERT_EQ(outputs[0].size(), 11u);
  ExpectSameOutputs(gpu, outputs[0], outputs[1]);
}

// The cell math of one LSTM step as a PyTorch capture lowers it: the gate
// products, split into four, the activations, the cell update, h and c
// stacked, and the backward through the activations, with the gate
// gradients concatenated for the products.
TEST_P(CudaHalfRecurrent, CellMathOfOneStep) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t b = Dim(1, 64), i = Dim(1, 300), h = Dim(1, 300);
  SCOPED_TRACE(::testing::Message() << "B=" << b << " I=" << i << " H=" << h);
  const DType t = dtype();
  GraphMaker g;
  const int x = g.Feed({t, {b, i}});
  const int h_prev = g.Feed({t, {b, h}});
  const int c_prev = g.Feed({t, {b, h}});
  const int w_ih = g.Feed({t, {4 * h, i}}, Fill::kSmall);
  const int w_hh = g.Feed({t, {4 * h, h}}, Fill::kSmall);
  const int b_ih = g.Feed({t, {4 * h}});
  const Attrs tb = MakeAttrs({{"transpose_b", true}});
  const int gates = g.Add1("add.Tensor", {g.Add1("addmm", {b_ih, x, w_ih}, tb), g.Add1("mm", {h_prev, w_hh}, tb)});
  const std::vector<int> parts =
      g.Add("unsafe_split.Tensor", {gates}, MakeAttrs({{"split_size", h}, {"dim", int64_t{1}}}));
  ASSERT_EQ(parts.size(), 4u);
  const int in_gate = g.Add1("sigmoid", {parts[0]});
  const int forget = g.Add1("sigmoid", {parts[1]});
  const int cell = g.Add1("tanh", {parts[2]});
  const int out_gate = g.Add1("sigmoid", {parts[3]});
  const int c = g.Add1("add.Tensor", {g.Add1("mul.Tensor", {forget, c_prev}), g.Add1("mul.Tensor", {in_gate, cell})});
  const int tanh_c = g.Add1("tanh", {c});
  const int h_next = g.Add1("mul.Tensor", {out_gate, tanh_c});
  g.Add1("stack", {h_next, c}, MakeAttrs({{"dim", int64_t{0}}}));
  // Backward from grad_h and grad_c.
  const int grad_h = g.Feed({t, {b, h}});
  const int grad_c_in = g.Feed({t, {b, h}});
  const int d_tanh_c = g.Add1("tanh_backward", {g.Add1("mul.Tensor", {grad_h, out_gate}), tanh_c});
  const int grad_c = g.Add1("add.Tensor", {grad_c_in, d_tanh_c});
  const int d_in = g.Add1("sigmoid_backward", {g.Add1("mul.Tensor", {grad_c, cell}), in_gate});
  const int d_forget = g.Add1("sigmoid_backward", {g.Add1("mul.Tensor", {grad_c, c_prev}), forget});
  const int d_cell = g.Add1("tanh_backward", {g.Add1("mul.Tensor", {grad_c, in_gate}), cell});
  const int d_out = g.Add1("sigmoid_backward", {g.Add1("mul.Tensor", {grad_h, tanh_c}), out_gate});
  const int d_gates = g.Add1("cat", {d_in, d_forget, d_cell, d_out}, MakeAttrs({{"dim", int64_t{1}}}));
  g.Add1("mm", {d_gates, w_hh});
  g.Add1("mm", {d_gates, x}, MakeAttrs({{"transpose_a", true}}));
  g.Add1("sum.dim_IntList", {d_gates}, MakeAttrs({{"dim", std::vector<int64_t>{0}}}));
  Check(g, [&](const std::string&) { return OpTolerance(); });
}

// sigmoid, tanh and their backwards alone, over random sizes (the
// vectorless grid-stride kernels), and with the output on the input (the
// planner's in-place placement).
TEST_P(CudaHalfRecurrent, ActivationsAndInPlace) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Shape shape = {Dim(1, 64), Dim(1, 4 * 257)};
  const DType t = dtype();
  {
    GraphMaker g;
    const int x = g.Feed({t, shape});
    const int grad = g.Feed({t, shape});
    g.Add1("sigmoid_backward", {grad, g.Add1("sigmoid", {x})});
    g.Add1("tanh_backward", {grad, g.Add1("tanh", {x})});
    Check(g, [&](const std::string&) { return OpTolerance(); });
  }
  for (const char* op : {"sigmoid", "tanh"}) {
    SCOPED_TRACE(op);
    GraphMaker g;
    const int x = g.Feed({t, shape});
    const int out = g.Add1(op, {x});
    Check(g, [&](const std::string&) { return OpTolerance(); }, {{out, x}});
  }
  for (const char* op : {"sigmoid_backward", "tanh_backward"}) {
    SCOPED_TRACE(op);
    GraphMaker g;
    const int grad = g.Feed({t, shape});
    const int y = g.Feed({t, shape});
    const int out = g.Add1(op, {grad, y});
    Check(g, [&](const std::string&) { return OpTolerance(); }, {{out, grad}});
  }
}

INSTANTIATE_TEST_SUITE_P(SixteenBit, CudaHalfRecurrent, ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tandem::gpu_test
