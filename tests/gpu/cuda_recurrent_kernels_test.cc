// The CUDA kernels of the fused LSTM layer (lstm, lstm_backward) against the
// CPU kernels, on fresh random inputs (the seed is printed): a small layer
// with odd dims (rows of saved not 16-byte aligned), a single-step layer, a
// medium layer forward and backward, and the forward of the reference
// language model's layer (T=35, B=64, I=H=1024). Each graph runs op by op
// and then as a replayed CUDA graph (the op must be capturable); outputs are
// poisoned (NaN bytes) before each run, and a NaN never passes. The float32
// products must not use TF32 by default: its 10-bit mantissa would miss
// these bounds by an order of magnitude. With the node attribute
// allow_tf32 (PyTorch's default for its cuDNN LSTM) the reference layer is
// checked against TF32 bounds, and its forward must miss the float32 bound
// (the attribute takes effect).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_program_options.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/recurrent_layers.h"
#include "tests/gpu/shared_graphs.h"

namespace tandem::gpu_test {
namespace {

// Runs `maker`'s graph on the CPU and (op by op, then replayed) on the GPU,
// and compares every node output.
void Check(const GraphMaker& maker, double tolerance) {
  CompareWithCpu(maker,
                 [&](const OutputPair& o) { EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), tolerance)) << o.Where(); });
}

// The forward's inputs; `weights` fills w_ih and w_hh (small for wide
// layers, so that the gates do not saturate).
std::vector<int> ForwardFeeds(GraphMaker& g, const Dims& d, Fill weights) {
  const DType f32 = DType::kFloat32;
  return {g.Feed({f32, {d.t, d.b, d.i}}),
          g.Feed({f32, {d.b, d.h}}),
          g.Feed({f32, {d.b, d.h}}),
          g.Feed({f32, {4 * d.h, d.i}}, weights),
          g.Feed({f32, {4 * d.h, d.h}}, weights),
          g.Feed({f32, {4 * d.h}}),
          g.Feed({f32, {4 * d.h}})};
}

// lstm, then lstm_backward over its outputs with random incoming gradients
// (nonzero grad_h_n and grad_c_n).
GraphMaker ForwardAndBackward(const Dims& d, Fill weights, const Attrs& attrs = {}) {
  GraphMaker g;
  const std::vector<int> in = ForwardFeeds(g, d, weights);
  const std::vector<int> out = g.Add("lstm", in, attrs);
  const DType f32 = DType::kFloat32;
  const int grad_y = g.Feed({f32, {d.t, d.b, d.h}});
  const int grad_h_n = g.Feed({f32, {d.b, d.h}}, Fill::kNonZero);
  const int grad_c_n = g.Feed({f32, {d.b, d.h}}, Fill::kNonZero);
  g.Add("lstm_backward", {grad_y, grad_h_n, grad_c_n, in[0], in[1], in[2], in[3], in[4], out[0], out[3]}, attrs);
  return g;
}

TEST(CudaRecurrentKernels, SmallLayersWithOddDims) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (const Dims& d : {Dims{4, 3, 7, 13}, Dims{1, 2, 5, 3}, Dims{6, 5, 2, 1}}) {
    SCOPED_TRACE(Describe(d));
    Check(ForwardAndBackward(d, Fill::kUniform), kBackward32);
  }
}

// The same through classic cuBLAS (the fallback when cuBLASLt has no
// algorithm), whose strided output path differs.
TEST(CudaRecurrentKernels, SmallLayerThroughClassicCublas) {
  TANDEM_SKIP_WITHOUT_GPU();
  ScopedForceCublas force;
  const Dims d{5, 4, 9, 6};
  SCOPED_TRACE(Describe(d));
  Check(ForwardAndBackward(d, Fill::kUniform), kBackward32);
}

TEST(CudaRecurrentKernels, MediumLayerForwardAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Dims d{12, 16, 192, 256};
  SCOPED_TRACE(Describe(d));
  Check(ForwardAndBackward(d, Fill::kSmall), kBackward32);
}

TEST(CudaRecurrentKernels, ReferenceLayerForward) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Dims d{35, 64, 1024, 1024};
  SCOPED_TRACE(Describe(d));
  GraphMaker g;
  g.Add("lstm", ForwardFeeds(g, d, Fill::kSmall));
  Check(g, kForward32);
}

TEST(CudaRecurrentKernels, ReferenceLayerWithTf32) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Dims d{35, 64, 1024, 1024};
  SCOPED_TRACE(Describe(d));
  const GraphMaker maker = ForwardAndBackward(d, Fill::kSmall, MakeAttrs({{"allow_tf32", true}}));
  const int y = maker.graph().nodes[0].outputs[0];
  CompareWithCpu(maker, [&](const OutputPair& o) {
    EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), kBackwardTf32)) << o.Where();
    if (o.value == y) {
      // The forward's y within TF32's bound but not float32's.
      EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), kForwardTf32)) << o.Where();
      EXPECT_FALSE(Matches(*o.gpu, *o.ref, o.type(), kForward32)) << o.Where() << ": allow_tf32 changed nothing";
    }
  });
}

}  // namespace
}  // namespace tandem::gpu_test
