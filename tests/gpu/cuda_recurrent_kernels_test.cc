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
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "adaptor/cuda/blas.h"
#include "adaptor/cuda/cuda_program_options.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

// Normwise relative error bounds (float32 products against the CPU's
// double sums; the backward's errors go through T steps of the recurrence
// and sums over T*B rows).
constexpr double kForward32 = 2e-5;
constexpr double kBackward32 = 1e-4;
// TF32 rounds products' inputs to a 10-bit mantissa (2^-11 relative).
constexpr double kForwardTf32 = 5e-3;
constexpr double kBackwardTf32 = 2e-2;

struct Dims {
  int64_t t, b, i, h;
};

std::string Describe(const Dims& d) {
  return "T=" + std::to_string(d.t) + " B=" + std::to_string(d.b) + " I=" + std::to_string(d.i) +
         " H=" + std::to_string(d.h);
}

// Runs `maker`'s graph on the CPU and (op by op, then replayed) on the GPU,
// and compares every node output. Prints the replay's time (enqueue to
// completion, for orientation; nothing is asserted about it).
void Check(const GraphMaker& maker, double tolerance) {
  const Graph& graph = maker.graph();
  const std::vector<Bytes> feeds = maker.RandomFeeds(Rng());
  auto ref = RunOnCpu(graph, feeds);
  ASSERT_TRUE(ref.ok()) << ref.status();
  GpuRun run(graph);
  auto program = cuda::CreateCudaProgram(graph, *Gpu(), cuda::CudaProgramOptions{});
  ASSERT_TRUE(program.ok()) << program.status();
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(run.Upload(feeds).ok());
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = run.RunIteration(**program);
    const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
    ASSERT_TRUE(status.ok()) << status;
    if (pass == 1) std::printf("graph replay: %.3f ms\n", elapsed.count());
    auto out = run.Download();
    ASSERT_TRUE(out.ok()) << out.status();
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      for (size_t k = 0; k < graph.nodes[i].outputs.size(); ++k) {
        const int v = graph.nodes[i].outputs[k];
        const TensorType& type = graph.values[v].type;
        EXPECT_TRUE(Matches((*out)[v], (*ref)[v], type, tolerance))
            << graph.nodes[i].Describe(static_cast<int>(i)) << " output " << k << " " << type.ToString()
            << (pass == 0 ? " (op by op)" : " (graph replay)");
      }
    }
  }
  const cuda::CudaProgramStats stats = cuda::GetCudaProgramStats(**program);
  EXPECT_EQ(stats.op_by_op_runs, 1);
  EXPECT_EQ(stats.graph_launches, 1);
  EXPECT_EQ(stats.capture_failures, 0);
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
  struct ForceCublas {
    ForceCublas() { cuda::SetMatmulForceCublasForTesting(true); }
    ~ForceCublas() { cuda::SetMatmulForceCublasForTesting(false); }
  } force;
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
  Check(maker, kBackwardTf32);
  // The forward's y within TF32's bound but not float32's.
  const Graph& graph = maker.graph();
  const std::vector<Bytes> feeds = maker.RandomFeeds(Rng());
  auto ref = RunOnCpu(graph, feeds);
  ASSERT_TRUE(ref.ok()) << ref.status();
  GpuRun run(graph);
  auto program = cuda::CreateCudaProgram(graph, *Gpu(), cuda::CudaProgramOptions{});
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_TRUE(run.Upload(feeds).ok());
  ASSERT_TRUE(run.RunIteration(**program).ok());
  auto out = run.Download();
  ASSERT_TRUE(out.ok()) << out.status();
  const int y = graph.nodes[0].outputs[0];
  const TensorType& type = graph.values[y].type;
  EXPECT_TRUE(Matches((*out)[y], (*ref)[y], type, kForwardTf32));
  EXPECT_FALSE(Matches((*out)[y], (*ref)[y], type, kForward32)) << "allow_tf32 did not change the products";
}

}  // namespace
}  // namespace tandem::gpu_test
