// The CUDA Program: graph capture and replay against op-by-op runs and the
// CPU oracle on a training step of a small MLP, re-capture when addresses
// change, and bad class labels failing their iteration (INVALID_ARGUMENT
// naming the node and value) while the stream keeps working.
#include <cstring>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/cpu_device.h"
#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_program_options.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

constexpr double kStepTolerance = 1e-4;  // float32 chains through matmuls

// One SGD step of an MLP (`widths` = input, hidden..., classes; ReLU
// between layers) with log-softmax + NLL loss.
struct Mlp {
  GraphMaker g;
  int x, labels;
  int loss;
  int64_t classes;

  Mlp(int64_t batch, std::vector<int64_t> widths) : classes(widths.back()) {
    const DType f = DType::kFloat32;
    const size_t layers = widths.size() - 1;
    x = g.Feed({f, {batch, widths[0]}});
    labels = g.Feed({DType::kInt64, {batch}}, Fill::kLabels, classes);
    std::vector<int> w(layers), b(layers), acts = {x};
    for (size_t l = 0; l < layers; ++l) {
      w[l] = g.Feed({f, {widths[l], widths[l + 1]}});
      b[l] = g.Feed({f, {widths[l + 1]}});
    }
    int logits = -1;
    for (size_t l = 0; l < layers; ++l) {
      const int z = g.Add1("addmm", {b[l], acts[l], w[l]});
      if (l + 1 < layers) {
        acts.push_back(g.Add1("relu", {z}));
      } else {
        logits = z;
      }
    }
    const Attrs dim1 = MakeAttrs({{"dim", int64_t{1}}});
    const int lsm = g.Add1("_log_softmax", {logits}, dim1);
    const std::vector<int> nll = g.Add("nll_loss_forward", {lsm, labels}, MakeAttrs({{"reduction", int64_t{1}}}));
    loss = nll[0];
    const int grad_loss = g.Add1("ones_like", {loss});
    const int g_lsm =
        g.Add1("nll_loss_backward", {grad_loss, lsm, labels, nll[1]}, MakeAttrs({{"reduction", int64_t{1}}}));
    int grad = g.Add1("_log_softmax_backward_data", {g_lsm, lsm}, MakeAttrs({{"dim", int64_t{1}}, {"input_dtype", f}}));
    const Attrs lr = MakeAttrs({{"alpha", 0.05}});
    for (size_t l = layers; l-- > 0;) {
      const int g_w = g.Add1("mm", {g.Add1("t", {acts[l]}), grad});
      const int g_b = g.Add1("sum.dim_IntList", {grad}, MakeAttrs({{"dim", std::vector<int64_t>{0}}}));
      if (l > 0) {
        const int g_act = g.Add1("mm", {grad, g.Add1("t", {w[l]})});
        grad = g.Add1("threshold_backward", {g_act, acts[l]}, MakeAttrs({{"threshold", 0.0}}));
      }
      g.Add1("sub.Tensor", {w[l], g_w}, lr);
      g.Add1("sub.Tensor", {b[l], g_b}, lr);
    }
  }

  void SetLabel(std::vector<Bytes>& feeds, int64_t row, int64_t value) const {
    std::memcpy(feeds[labels].data() + row * sizeof(int64_t), &value, sizeof(value));
  }
};

// Every node output of `out` against `ref`.
void ExpectOutputsMatch(const Graph& graph, const std::vector<Bytes>& out, const std::vector<Bytes>& ref,
                        double tolerance, const std::string& what) {
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (int v : graph.nodes[i].outputs) {
      EXPECT_TRUE(Matches(out[v], ref[v], graph.values[v].type, tolerance))
          << what << ": " << graph.nodes[i].Describe(static_cast<int>(i));
    }
  }
}

// Runs on the CPU machines too: every registered op has a CUDA kernel.
TEST(CudaProgram, EveryRegisteredOpHasACudaKernel) {
  for (const std::string& op : OpRegistry::Global().Names()) {
    EXPECT_NE(cuda::FindCudaKernel(op), nullptr) << op;
    EXPECT_NE(cpu::FindCpuKernel(op), nullptr) << op;
  }
}

TEST(CudaProgram, RefusesANonCudaDevice) {
  auto cpu = device::CreateCpuDevice({});
  ASSERT_TRUE(cpu.ok());
  Mlp mlp(4, {3, 5, 2});
  auto program = cuda::CreateCudaProgram(mlp.g.graph(), **cpu, {});
  EXPECT_EQ(program.status().code(), absl::StatusCode::kInvalidArgument) << program.status();
}

TEST(CudaProgram, GraphReplayMatchesOpByOpAndCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  Mlp mlp(64, {784, 256, 128, 10});
  const Graph& graph = mlp.g.graph();
  auto graphed = cuda::CreateCudaProgram(graph, *Gpu(), {.use_graphs = true});
  auto eager = cuda::CreateCudaProgram(graph, *Gpu(), {.use_graphs = false});
  ASSERT_TRUE(graphed.ok()) << graphed.status();
  ASSERT_TRUE(eager.ok()) << eager.status();
  GpuRun graphed_run(graph);
  GpuRun eager_run(graph);
  for (int iteration = 0; iteration < 4; ++iteration) {
    SCOPED_TRACE(::testing::Message() << "iteration " << iteration);
    const std::vector<Bytes> feeds = mlp.g.RandomFeeds(Rng());
    auto ref = RunOnCpu(graph, feeds);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_TRUE(graphed_run.Upload(feeds).ok());
    ASSERT_TRUE(eager_run.Upload(feeds).ok());
    absl::Status s = graphed_run.RunIteration(**graphed);
    ASSERT_TRUE(s.ok()) << s;
    s = eager_run.RunIteration(**eager);
    ASSERT_TRUE(s.ok()) << s;
    auto graphed_out = graphed_run.Download();
    auto eager_out = eager_run.Download();
    ASSERT_TRUE(graphed_out.ok() && eager_out.ok());
    ExpectOutputsMatch(graph, *graphed_out, *ref, kStepTolerance, "graphed vs CPU");
    ExpectOutputsMatch(graph, *eager_out, *ref, kStepTolerance, "op by op vs CPU");
    int identical = 0, values = 0;
    for (const Node& node : graph.nodes) {
      for (int v : node.outputs) {
        ++values;
        identical += SameBytes((*graphed_out)[v], (*eager_out)[v]) ? 1 : 0;
      }
    }
    std::printf("iteration %d: %d of %d outputs bitwise equal between graph replay and op by op\n", iteration,
                identical, values);
    ExpectOutputsMatch(graph, *graphed_out, *eager_out, 1e-6, "graphed vs op by op");
  }
  const cuda::CudaProgramStats stats = cuda::GetCudaProgramStats(**graphed);
  EXPECT_EQ(stats.op_by_op_runs, 1);
  EXPECT_EQ(stats.graph_launches, 3);
  EXPECT_EQ(stats.captures, 1);
  EXPECT_EQ(stats.capture_failures, 0);
  const cuda::CudaProgramStats eager_stats = cuda::GetCudaProgramStats(**eager);
  EXPECT_EQ(eager_stats.op_by_op_runs, 4);
  EXPECT_EQ(eager_stats.graph_launches, 0);
}

// The node profile runs op by op, gives the CPU's results, and times every
// iteration but the first.
TEST(CudaProgram, ProfiledRunsMatchCpuAndAreTimed) {
  TANDEM_SKIP_WITHOUT_GPU();
  Mlp mlp(64, {784, 256, 10});
  const Graph& graph = mlp.g.graph();
  auto program = cuda::CreateCudaProgram(graph, *Gpu(), {.profile_nodes = true, .profile_report_every = 2});
  ASSERT_TRUE(program.ok()) << program.status();
  GpuRun run(graph);
  for (int iteration = 0; iteration < 4; ++iteration) {
    SCOPED_TRACE(::testing::Message() << "iteration " << iteration);
    const std::vector<Bytes> feeds = mlp.g.RandomFeeds(Rng());
    auto ref = RunOnCpu(graph, feeds);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_TRUE(run.Upload(feeds).ok());
    absl::Status s = run.RunIteration(**program);
    ASSERT_TRUE(s.ok()) << s;
    auto out = run.Download();
    ASSERT_TRUE(out.ok());
    ExpectOutputsMatch(graph, *out, *ref, kStepTolerance, "profiled vs CPU");
  }
  const cuda::CudaProgramStats stats = cuda::GetCudaProgramStats(**program);
  EXPECT_EQ(stats.op_by_op_runs, 4);
  EXPECT_EQ(stats.graph_launches, 0);
  EXPECT_EQ(stats.profiled_iterations, 3);
  EXPECT_GT(stats.profiled_seconds, 0.0);
  EXPECT_LT(stats.profiled_seconds, 1.0);  // 3 iterations of a small MLP
}

TEST(CudaProgram, ChangedAddressesRunOpByOpAndRecapture) {
  TANDEM_SKIP_WITHOUT_GPU();
  Mlp mlp(32, {100, 64, 7});
  const Graph& graph = mlp.g.graph();
  auto program = cuda::CreateCudaProgram(graph, *Gpu(), {});
  ASSERT_TRUE(program.ok()) << program.status();
  GpuRun run(graph);
  for (int iteration = 0; iteration < 4; ++iteration) {
    SCOPED_TRACE(::testing::Message() << "iteration " << iteration);
    // Before iteration 2, move the loss and an intermediate elsewhere.
    if (iteration == 2) {
      run.Reallocate(mlp.loss);
      run.Reallocate(mlp.loss + 2);
    }
    const std::vector<Bytes> feeds = mlp.g.RandomFeeds(Rng());
    auto ref = RunOnCpu(graph, feeds);
    ASSERT_TRUE(ref.ok());
    ASSERT_TRUE(run.Upload(feeds).ok());
    absl::Status s = run.RunIteration(**program);
    ASSERT_TRUE(s.ok()) << s;
    auto out = run.Download();
    ASSERT_TRUE(out.ok());
    ExpectOutputsMatch(graph, *out, *ref, kStepTolerance, "GPU vs CPU");
  }
  const cuda::CudaProgramStats stats = cuda::GetCudaProgramStats(**program);
  EXPECT_EQ(stats.op_by_op_runs, 2);
  EXPECT_EQ(stats.graph_launches, 2);
  EXPECT_EQ(stats.captures, 2);
}

// A Program keeps its graphs on at most kept_lane_graphs streams: running
// on streams A, B, C, A, C with 2 kept, C's capture releases A's graph (the
// least recently used), A comes back op by op and captures (releasing B's),
// and C replays. Every iteration matches the CPU.
TEST(CudaProgram, KeepsGraphsOnlyOfTheMostRecentStreams) {
  TANDEM_SKIP_WITHOUT_GPU();
  Mlp mlp(16, {48, 32, 5});
  const Graph& graph = mlp.g.graph();
  auto program = cuda::CreateCudaProgram(graph, *Gpu(), {.kept_lane_graphs = 2});
  ASSERT_TRUE(program.ok()) << program.status();
  GpuRun a(graph), b(graph), c(graph);
  GpuRun* order[] = {&a, &b, &c, &a, &c};
  for (size_t i = 0; i < std::size(order); ++i) {
    SCOPED_TRACE(::testing::Message() << "iteration " << i);
    const std::vector<Bytes> feeds = mlp.g.RandomFeeds(Rng());
    auto ref = RunOnCpu(graph, feeds);
    ASSERT_TRUE(ref.ok());
    ASSERT_TRUE(order[i]->Upload(feeds).ok());
    absl::Status s = order[i]->RunIteration(**program);
    ASSERT_TRUE(s.ok()) << s;
    auto out = order[i]->Download();
    ASSERT_TRUE(out.ok());
    ExpectOutputsMatch(graph, *out, *ref, kStepTolerance, "GPU vs CPU");
  }
  const cuda::CudaProgramStats stats = cuda::GetCudaProgramStats(**program);
  EXPECT_EQ(stats.op_by_op_runs, 4);
  EXPECT_EQ(stats.captures, 4);
  EXPECT_EQ(stats.graph_launches, 1);
  EXPECT_EQ(stats.lane_graph_releases, 2);
  EXPECT_EQ(stats.capture_failures, 0);
}

// A bad label fails its iteration; the next iteration on the same stream
// runs and is right. Both with graphs (the bad iteration is a replay from
// the third one on) and op by op.
TEST(CudaProgram, BadLabelFailsOnlyItsIteration) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (bool use_graphs : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "use_graphs " << use_graphs);
    Mlp mlp(48, {30, 20, 10});
    const Graph& graph = mlp.g.graph();
    auto program = cuda::CreateCudaProgram(graph, *Gpu(), {.use_graphs = use_graphs});
    ASSERT_TRUE(program.ok()) << program.status();
    GpuRun run(graph);
    const std::vector<int64_t> bad_values = {17, -5, 10, 1 << 30};
    for (size_t round = 0; round < bad_values.size(); ++round) {
      const int64_t bad = bad_values[round];
      SCOPED_TRACE(::testing::Message() << "bad label " << bad);
      std::vector<Bytes> feeds = mlp.g.RandomFeeds(Rng());
      mlp.SetLabel(feeds, 7, bad);
      ASSERT_TRUE(run.Upload(feeds).ok());
      absl::Status s = run.RunIteration(**program);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_NE(s.message().find("nll_loss_forward"), absl::string_view::npos) << s;
      EXPECT_NE(s.message().find(absl::StrCat("target value ", bad, " ")), absl::string_view::npos) << s;

      const std::vector<Bytes> good = mlp.g.RandomFeeds(Rng());
      auto ref = RunOnCpu(graph, good);
      ASSERT_TRUE(ref.ok());
      ASSERT_TRUE(run.Upload(good).ok());
      s = run.RunIteration(**program);
      EXPECT_TRUE(s.ok()) << s;
      auto out = run.Download();
      ASSERT_TRUE(out.ok());
      ExpectOutputsMatch(graph, *out, *ref, kStepTolerance, "good iteration after a bad one");
    }
  }
}

// Two iterations enqueued before any completion: the first one's error is
// not lost (its check is flushed into the stream), and Synchronize reports
// errors as OnComplete does.
TEST(CudaProgram, ErrorsSurviveBackToBackIterations) {
  TANDEM_SKIP_WITHOUT_GPU();
  Mlp mlp(16, {8, 8, 4});
  const Graph& graph = mlp.g.graph();
  auto program = cuda::CreateCudaProgram(graph, *Gpu(), {});
  ASSERT_TRUE(program.ok()) << program.status();
  GpuRun run(graph);
  std::vector<Bytes> feeds = mlp.g.RandomFeeds(Rng());
  ASSERT_TRUE(run.Upload(feeds).ok());
  ASSERT_TRUE(run.RunIteration(**program).ok());  // op by op + capture

  // Bad labels, then good ones copied in stream order, with no completion
  // in between.
  mlp.SetLabel(feeds, 3, 99);
  ASSERT_TRUE(run.Upload(feeds).ok());
  ASSERT_TRUE((*program)->Enqueue(run.stream(), run.addresses()).ok());
  std::vector<Bytes> good = feeds;
  mlp.SetLabel(good, 3, 1);
  const int labels = mlp.labels;
  ASSERT_TRUE(
      Gpu()->CopyToDevice(run.stream(), run.addresses()[labels], good[labels].data(), good[labels].size()).ok());
  ASSERT_TRUE((*program)->Enqueue(run.stream(), run.addresses()).ok());
  absl::Status s = WaitForCompletion(*Gpu(), run.stream());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("target value 99 "), absl::string_view::npos) << s;
  s = WaitForCompletion(*Gpu(), run.stream());
  EXPECT_TRUE(s.ok()) << s;

  ASSERT_TRUE(run.Upload(feeds).ok());  // bad labels again
  ASSERT_TRUE((*program)->Enqueue(run.stream(), run.addresses()).ok());
  s = Gpu()->Synchronize(run.stream());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  ASSERT_TRUE(run.Upload(good).ok());
  ASSERT_TRUE((*program)->Enqueue(run.stream(), run.addresses()).ok());
  EXPECT_TRUE(Gpu()->Synchronize(run.stream()).ok());
}

}  // namespace
}  // namespace tandem::gpu_test
