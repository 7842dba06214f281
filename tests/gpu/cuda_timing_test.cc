// Timings of the CUDA backend on the GPU machine, printed for docs/gpu.md,
// with checks that keep them honest: a training step of fcn5 (784-4096x4-10
// MLP, batch 256, SGD) op by op and as a graph replay (whose results must
// agree), a large float32 matrix product (sampled against float64 dot
// products on the host) and a large elementwise add (sampled exactly).
// Times come from device events around many iterations after a warm-up.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_program_options.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/time_runs.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

// Seconds per iteration of `program` over `run`'s buffers: `iterations`
// enqueued back to back, each followed by OnComplete as the daemon's
// executor does, timed by events on the stream.
double SecondsPerIteration(Program& program, GpuRun& run, int iterations) {
  device::Device& gpu = *Gpu();
  auto start = gpu.CreateEvent();
  auto end = gpu.CreateEvent();
  EXPECT_TRUE(start.ok() && end.ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(run.RunIteration(program).ok());  // warm-up (and capture)
  EXPECT_TRUE(gpu.RecordEvent(run.stream(), **start).ok());
  std::atomic<int> failures{0};
  for (int i = 0; i < iterations; ++i) {
    EXPECT_TRUE(program.Enqueue(run.stream(), run.addresses()).ok());
    EXPECT_TRUE(gpu.OnComplete(run.stream(),
                               [&failures](absl::Status s) {
                                 if (!s.ok()) ++failures;
                               })
                    .ok());
  }
  EXPECT_TRUE(gpu.RecordEvent(run.stream(), **end).ok());
  EXPECT_TRUE(WaitForCompletion(gpu, run.stream()).ok());
  EXPECT_EQ(failures.load(), 0);
  auto seconds = gpu.ElapsedSeconds(**start, **end);
  EXPECT_TRUE(seconds.ok()) << seconds.status();
  return seconds.ok() ? *seconds / iterations : 0.0;
}

// fcn5's step, built as in cuda_program_test's Mlp (kept separate: the
// timing needs only the graph and its loss).
struct Fcn5 {
  GraphMaker g;
  int loss = -1;
  Fcn5() {
    const int64_t batch = 256;
    const std::vector<int64_t> widths = {784, 4096, 4096, 4096, 4096, 10};
    const DType f = DType::kFloat32;
    const size_t layers = widths.size() - 1;
    const int x = g.Feed({f, {batch, widths[0]}});
    const int labels = g.Feed({DType::kInt64, {batch}}, Fill::kLabels, widths.back());
    std::vector<int> w(layers), b(layers), acts = {x};
    for (size_t l = 0; l < layers; ++l) {
      w[l] = g.Feed({f, {widths[l], widths[l + 1]}}, Fill::kSmall);
      b[l] = g.Feed({f, {widths[l + 1]}}, Fill::kSmall);
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
    const int lsm = g.Add1("_log_softmax", {logits}, MakeAttrs({{"dim", int64_t{1}}}));
    const std::vector<int> nll = g.Add("nll_loss_forward", {lsm, labels}, {});
    loss = nll[0];
    const int g_lsm = g.Add1("nll_loss_backward", {g.Add1("ones_like", {loss}), lsm, labels, nll[1]}, {});
    int grad = g.Add1("_log_softmax_backward_data", {g_lsm, lsm}, MakeAttrs({{"dim", int64_t{1}}, {"input_dtype", f}}));
    for (size_t l = layers; l-- > 0;) {
      const int g_w = g.Add1("mm", {g.Add1("t", {acts[l]}), grad});
      const int g_b = g.Add1("sum.dim_IntList", {grad}, MakeAttrs({{"dim", std::vector<int64_t>{0}}}));
      if (l > 0) {
        const int g_act = g.Add1("mm", {grad, g.Add1("t", {w[l]})});
        grad = g.Add1("threshold_backward", {g_act, acts[l]}, MakeAttrs({{"threshold", 0.0}}));
      }
      g.Add1("sub.Tensor", {w[l], g_w}, MakeAttrs({{"alpha", 0.01}}));
      g.Add1("sub.Tensor", {b[l], g_b}, MakeAttrs({{"alpha", 0.01}}));
    }
  }
};

// TimeRuns (the algorithm and engine searches' timer) times a run's device
// time, not the host's enqueueing of it: a run whose host side takes 2 ms
// before it enqueues a tiny kernel measures far under 2 ms behind a delay
// longer than that, and at least 2 ms without one (what the searches
// measured before the delay).
TEST(CudaTiming, TimedRunsExcludeTheHostsEnqueueing) {
  TANDEM_SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  int* word = nullptr;
  ASSERT_EQ(cudaMalloc(&word, sizeof(int)), cudaSuccess);
  const auto slow_host_run = [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return cuda::LaunchFill(DType::kInt32, 1, 7.0, word, stream) == cudaSuccess;
  };
  const float behind_delay = cuda::TimeRuns(stream, slow_host_run, -1.0f, /*delay_us=*/20000);
  const float without_delay = cuda::TimeRuns(stream, slow_host_run, -1.0f, /*delay_us=*/0);
  std::printf("tiny kernel after 2 ms of host work: %.4f ms timed behind a delay, %.4f ms without\n", behind_delay,
              without_delay);
  EXPECT_GT(behind_delay, 0.0f);
  EXPECT_LT(behind_delay, 0.5f);
  EXPECT_GE(without_delay, 1.9f);
  // The delay kernel itself keeps the stream busy for about its time.
  const float delay_ms = cuda::TimeRuns(stream, [&] { return cuda::LaunchDelay(1000, stream) == cudaSuccess; });
  EXPECT_GT(delay_ms, 0.95f);
  EXPECT_LT(delay_ms, 5.0f);
  int value = 0;
  ASSERT_EQ(cudaMemcpy(&value, word, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(value, 7);
  cudaFree(word);
  cudaStreamDestroy(stream);
}

TEST(CudaTiming, Fcn5StepOpByOpAndGraphReplay) {
  TANDEM_SKIP_WITHOUT_GPU();
  Fcn5 fcn5;
  const Graph& graph = fcn5.g.graph();
  const std::vector<Bytes> feeds = fcn5.g.RandomFeeds(Rng());
  GpuRun run(graph);
  ASSERT_TRUE(run.Upload(feeds).ok());
  auto eager = cuda::CreateCudaProgram(graph, *Gpu(), {.use_graphs = false});
  auto graphed = cuda::CreateCudaProgram(graph, *Gpu(), {.use_graphs = true});
  ASSERT_TRUE(eager.ok() && graphed.ok());
  const int kIterations = 30;
  const double eager_s = SecondsPerIteration(**eager, run, kIterations);
  auto eager_out = run.Download();
  const double graphed_s = SecondsPerIteration(**graphed, run, kIterations);
  auto graphed_out = run.Download();
  ASSERT_TRUE(eager_out.ok() && graphed_out.ok());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (int v : graph.nodes[i].outputs) {
      EXPECT_TRUE(Matches((*graphed_out)[v], (*eager_out)[v], graph.values[v].type, 1e-6))
          << graph.nodes[i].Describe(static_cast<int>(i));
    }
  }
  float loss;
  std::memcpy(&loss, (*graphed_out)[fcn5.loss].data(), sizeof(loss));
  EXPECT_TRUE(std::isfinite(loss));
  // 2 * batch * sum(in * out) per matmul pass; forward, and two backward
  // products per layer except the first layer's input gradient.
  const double flops = 2.0 * 256 * (784.0 * 4096 * 2 + 4096.0 * 4096 * 3 * 3 + 4096.0 * 10 * 3);
  std::printf("fcn5 b256 step (%zu nodes): op by op %.3f ms, graph replay %.3f ms (%.1f TFLOP/s), loss %.4f\n",
              graph.nodes.size(), eager_s * 1e3, graphed_s * 1e3, flops / graphed_s / 1e12, loss);
  const cuda::CudaProgramStats stats = cuda::GetCudaProgramStats(**graphed);
  EXPECT_EQ(stats.graph_launches, kIterations + 2);
}

TEST(CudaTiming, LargeMatmulAndElementwise) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t n = 4096;
  GraphMaker g;
  const int a = g.Feed({DType::kFloat32, {n, n}});
  const int b = g.Feed({DType::kFloat32, {n, n}});
  const int c = g.Add1("mm", {a, b});
  const std::vector<Bytes> feeds = g.RandomFeeds(Rng());
  GpuRun run(g.graph());
  ASSERT_TRUE(run.Upload(feeds).ok());
  auto program = cuda::CreateCudaProgram(g.graph(), *Gpu(), {});
  ASSERT_TRUE(program.ok());
  const double mm_s = SecondsPerIteration(**program, run, 20);
  auto out = run.Download();
  ASSERT_TRUE(out.ok());
  const float* pa = reinterpret_cast<const float*>(feeds[a].data());
  const float* pb = reinterpret_cast<const float*>(feeds[b].data());
  const float* pc = reinterpret_cast<const float*>((*out)[c].data());
  double diff = 0, norm = 0;
  for (int s = 0; s < 256; ++s) {
    const int64_t i = std::uniform_int_distribution<int64_t>(0, n - 1)(Rng());
    const int64_t j = std::uniform_int_distribution<int64_t>(0, n - 1)(Rng());
    double ref = 0;
    for (int64_t k = 0; k < n; ++k) ref += static_cast<double>(pa[i * n + k]) * pb[k * n + j];
    diff += (pc[i * n + j] - ref) * (pc[i * n + j] - ref);
    norm += ref * ref;
  }
  const double rel = std::sqrt(diff / norm);
  EXPECT_LT(rel, 1e-5) << "sampled relative error of the float32 product";
  std::printf("mm float32 %lldx%lldx%lld: %.3f ms, %.1f TFLOP/s, sampled relative error %.2e (no TF32)\n",
              static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(n), mm_s * 1e3,
              2.0 * n * n * n / mm_s / 1e12, rel);

  const int64_t count = int64_t{1} << 26;
  GraphMaker e;
  const int x = e.Feed({DType::kFloat32, {count}});
  const int y = e.Feed({DType::kFloat32, {count}});
  const int z = e.Add1("add.Tensor", {x, y});
  const std::vector<Bytes> efeeds = e.RandomFeeds(Rng());
  GpuRun erun(e.graph());
  ASSERT_TRUE(erun.Upload(efeeds).ok());
  auto eprogram = cuda::CreateCudaProgram(e.graph(), *Gpu(), {});
  ASSERT_TRUE(eprogram.ok());
  const double add_s = SecondsPerIteration(**eprogram, erun, 50);
  auto eout = erun.Download();
  ASSERT_TRUE(eout.ok());
  const float* px = reinterpret_cast<const float*>(efeeds[x].data());
  const float* py = reinterpret_cast<const float*>(efeeds[y].data());
  const float* pz = reinterpret_cast<const float*>((*eout)[z].data());
  for (int s = 0; s < 1000; ++s) {
    const int64_t i = std::uniform_int_distribution<int64_t>(0, count - 1)(Rng());
    ASSERT_EQ(pz[i], px[i] + py[i]) << "element " << i;
  }
  std::printf("add.Tensor float32 of %lld elements: %.3f ms, %.0f GB/s (read 2, write 1)\n",
              static_cast<long long>(count), add_s * 1e3, 3.0 * count * 4 / add_s / 1e9);
}

}  // namespace
}  // namespace tandem::gpu_test
