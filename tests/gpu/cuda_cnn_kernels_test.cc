// The CNN ops' CUDA kernels (cuDNN convolutions, own pooling and batch-norm
// kernels) against the CPU kernels, on fresh random inputs (the seed is
// printed) at shapes of ResNet-50 and VGG-19 layers at small batch. Each
// graph runs twice on the GPU: op by op (which chooses the cuDNN algorithms
// and sizes the workspace), then as a replay of the captured CUDA graph;
// outputs are poisoned before each run and must match the CPU oracle both
// times. The last test prints timings of ResNet-50 layers at batch 32.
#include <cudnn.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_program_options.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/shared_graphs.h"

namespace tandem::gpu_test {
namespace {

constexpr double kConv32 = 1e-4;
constexpr double kOther32 = 1e-5;
constexpr double kAny64 = 1e-12;

// Feeds -> CPU oracle; feeds -> GPU (op by op, then graph replay); every
// non-feed value compared.
void Check(const GraphMaker& maker, double tolerance32) { CompareWithCpuWithin(maker, tolerance32, kAny64); }

struct ConvSpec {
  std::string name;
  Shape x, w;
  int64_t stride, padding, dilation, groups;
  bool bias;
  std::vector<int64_t> mask = {1, 1, 1};
};

Attrs ConvAttrs(const ConvSpec& c) {
  return MakeAttrs({{"stride", std::vector<int64_t>{c.stride, c.stride}},
                    {"padding", std::vector<int64_t>{c.padding, c.padding}},
                    {"dilation", std::vector<int64_t>{c.dilation, c.dilation}},
                    {"transposed", false},
                    {"output_padding", std::vector<int64_t>{0, 0}},
                    {"groups", c.groups}});
}

// convolution and its backward with a random grad_output.
void AddConv(GraphMaker& g, const ConvSpec& c, DType dtype, bool allow_tf32 = false) {
  const int x = g.Feed({dtype, c.x});
  const int w = g.Feed({dtype, c.w}, Fill::kSmall);
  std::vector<int> inputs = {x, w};
  if (c.bias) inputs.push_back(g.Feed({dtype, {c.w[0]}}));
  Attrs attrs = ConvAttrs(c);
  if (allow_tf32) attrs.Set("allow_tf32", true);
  const int y = g.Add1("convolution", inputs, attrs);
  const int grad = g.Feed(g.type(y));
  attrs.Set("output_mask", c.mask);
  if (c.bias) attrs.Set("bias_sizes", std::vector<int64_t>{c.w[0]});
  g.Add("convolution_backward", {grad, x, w}, attrs);
}

TEST(CudaCnnKernels, CudnnVersion) {
  TANDEM_SKIP_WITHOUT_GPU();
  std::printf("cuDNN: built with %d, running %zu\n", CUDNN_VERSION, cudnnGetVersion());
  EXPECT_GE(cudnnGetVersion(), size_t{90000});
}

TEST(CudaCnnKernels, ConvolutionResNetAndVggLayers) {
  TANDEM_SKIP_WITHOUT_GPU();
  const std::vector<ConvSpec> specs = {
      {"resnet stem 3->64 7x7 s2", {2, 3, 96, 96}, {64, 3, 7, 7}, 2, 3, 1, 1, false, {0, 1, 0}},
      {"resnet 64->64 3x3", {2, 64, 28, 28}, {64, 64, 3, 3}, 1, 1, 1, 1, false},
      {"resnet bottleneck 256->64 1x1", {2, 256, 14, 14}, {64, 256, 1, 1}, 1, 0, 1, 1, false},
      {"resnet bottleneck 64->256 1x1", {2, 64, 14, 14}, {256, 64, 1, 1}, 1, 0, 1, 1, false},
      {"resnet downsample 256->512 1x1 s2", {2, 256, 14, 14}, {512, 256, 1, 1}, 2, 0, 1, 1, false},
      {"resnet 128->128 3x3 s2", {2, 128, 14, 14}, {128, 128, 3, 3}, 2, 1, 1, 1, false},
      {"vgg 3->64 3x3 bias", {2, 3, 32, 32}, {64, 3, 3, 3}, 1, 1, 1, 1, true},
      {"vgg 512->512 3x3 bias", {2, 512, 7, 7}, {512, 512, 3, 3}, 1, 1, 1, 1, true},
      {"grouped dilated 32->48 g4 d2 bias", {3, 32, 13, 11}, {48, 8, 3, 3}, 1, 2, 2, 4, true},
      {"bias only grad", {2, 16, 9, 9}, {24, 16, 3, 3}, 2, 1, 1, 1, true, {0, 0, 1}}};
  for (const ConvSpec& c : specs) {
    SCOPED_TRACE(c.name);
    GraphMaker g;
    AddConv(g, c, DType::kFloat32);
    Check(g, kConv32);
  }
  GraphMaker g64;
  AddConv(g64, {"float64", {2, 8, 10, 10}, {12, 4, 3, 3}, 2, 1, 1, 2, true}, DType::kFloat64);
  Check(g64, kConv32);
}

// allow_tf32 (PyTorch's default for cuDNN convolutions): cuDNN may pick TF32
// tensor-core algorithms, whose inputs keep 10 mantissa bits, so the bound is
// that of TF32 rounding, not of float32 (a wrong result is off by O(1)).
TEST(CudaCnnKernels, ConvolutionWithTf32Allowed) {
  TANDEM_SKIP_WITHOUT_GPU();
  constexpr double kTf32 = 5e-3;
  const std::vector<ConvSpec> specs = {
      {"resnet stem 3->64 7x7 s2", {4, 3, 64, 64}, {64, 3, 7, 7}, 2, 3, 1, 1, false, {0, 1, 0}},
      {"resnet 64->64 3x3", {4, 64, 28, 28}, {64, 64, 3, 3}, 1, 1, 1, 1, false},
      {"resnet bottleneck 256->64 1x1", {4, 256, 14, 14}, {64, 256, 1, 1}, 1, 0, 1, 1, false},
      {"vgg 512->512 3x3 bias", {2, 512, 7, 7}, {512, 512, 3, 3}, 1, 1, 1, 1, true}};
  for (const ConvSpec& c : specs) {
    SCOPED_TRACE(c.name);
    GraphMaker g;
    AddConv(g, c, DType::kFloat32, /*allow_tf32=*/true);
    Check(g, kTf32);
  }
}

// A second stream meeting the same convolutions takes the first stream's
// choices (the algorithm, and a graph-API engine rebuilt on its own handle)
// instead of searching, and computes the same results. bfloat16 ResNet-50
// and VGG-19 layers (at batch 32 their choices were graph-API engines on an
// H200; the count of rebuilt engines is printed, not asserted).
TEST(CudaCnnKernels, AnotherStreamTakesTheChoicesMade) {
  TANDEM_SKIP_WITHOUT_GPU();
  constexpr double kBf16Conv = 4.0 / 256 + 2e-3;  // 4u + 2e-3, cuda_half_cnn_test's bound
  GraphMaker g;
  AddConv(g, {"resnet 64->64 3x3", {4, 64, 28, 28}, {64, 64, 3, 3}, 1, 1, 1, 1, false}, DType::kBFloat16);
  AddConv(g, {"vgg 256->256 3x3 bias", {2, 256, 14, 14}, {256, 256, 3, 3}, 1, 1, 1, 1, true}, DType::kBFloat16);
  Check(g, kBf16Conv);  // a new stream: searches (unless an earlier test met these shapes)
  const cuda::ConvChoiceSharing before = cuda::ConvChoiceSharingForTesting();
  // Each direction's choice is logged ("cuDNN choice taken from another
  // stream", or "cuDNN algorithm chosen" after a search) for the count below.
  const LogLevel level = MinLogLevel();
  SetMinLogLevel(LogLevel::kDebug);
  Check(g, kBf16Conv);  // another new stream: takes every direction's choice
  SetMinLogLevel(level);
  const cuda::ConvChoiceSharing after = cuda::ConvChoiceSharingForTesting();
  // Two convolutions, three directions each: none searched again, every one
  // taken from the other stream. (Until the adoption of a choice without a
  // graph-API engine was counted, the count varied between 3 and 6 with the
  // first stream's engine search.)
  EXPECT_EQ(after.searched - before.searched, 0)
      << "declined for want of workspace " << after.declined - before.declined;
  EXPECT_EQ(after.adopted - before.adopted, 6);
  std::printf("directions adopted from another stream: %lld of 6, %lld with its engine rebuilt\n",
              static_cast<long long>(after.adopted - before.adopted),
              static_cast<long long>(after.with_engine - before.with_engine));
}

// Lane warm-up (Program::WarmStream): a stream warmed for a program takes
// the device's choices for its convolutions then, one node per step (and
// once set up, in one step that does nothing), and its first run there sets
// up nothing (no direction adopted or searched), computing what the CPU
// oracle does.
TEST(CudaCnnKernels, AWarmedStreamSetsUpNothingInItsFirstRun) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker g;
  AddConv(g, {"resnet 128->128 3x3", {2, 128, 14, 14}, {128, 128, 3, 3}, 1, 1, 1, 1, false}, DType::kFloat32);
  AddConv(g, {"stem 3->64 7x7 s2 bias", {2, 3, 48, 48}, {64, 3, 7, 7}, 2, 3, 1, 1, true}, DType::kFloat32);
  Check(g, kConv32);  // the device's choices for these shapes
  const Graph& graph = g.graph();
  GpuRun run(graph);
  absl::StatusOr<std::unique_ptr<Program>> program = cuda::CreateCudaProgram(graph, *Gpu(), {});
  ASSERT_TRUE(program.ok()) << program.status();
  const std::vector<Bytes> feeds = g.RandomFeeds(Rng());
  ASSERT_TRUE(run.Upload(feeds).ok());

  const cuda::ConvChoiceSharing before = cuda::ConvChoiceSharingForTesting();
  int steps = 0;
  for (int node = 0; node >= 0; ++steps) {
    absl::StatusOr<int> next = (*program)->WarmStream(run.stream(), node);
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_TRUE(*next == -1 || *next > node) << *next;
    node = *next;
  }
  const cuda::ConvChoiceSharing warmed = cuda::ConvChoiceSharingForTesting();
  EXPECT_EQ(steps, 4) << "one per node: two convolutions and their backwards";
  EXPECT_EQ((*program)->Counters().warmed_nodes, 4);
  // Three directions per convolution, each taken (or declined for want of
  // workspace, to be searched at the first run).
  EXPECT_EQ((warmed.adopted - before.adopted) + (warmed.declined - before.declined), 6);
  EXPECT_EQ(warmed.searched, before.searched);
  // Warmed again: one step that sets up nothing.
  EXPECT_EQ((*program)->WarmStream(run.stream(), 0).value_or(0), -1);
  EXPECT_EQ((*program)->Counters().warmed_nodes, 4);

  ASSERT_TRUE(run.RunIteration(**program).ok());
  const cuda::ConvChoiceSharing ran = cuda::ConvChoiceSharingForTesting();
  EXPECT_EQ(ran.adopted, warmed.adopted);
  if (warmed.declined == before.declined) {
    EXPECT_EQ(ran.searched, warmed.searched);
  }
  absl::StatusOr<std::vector<Bytes>> gpu = run.Download();
  absl::StatusOr<std::vector<Bytes>> cpu = RunOnCpu(graph, feeds);
  ASSERT_TRUE(gpu.ok() && cpu.ok());
  int compared = 0;
  for (const Node& node : graph.nodes) {
    for (int v : node.outputs) {
      if (graph.values[v].type.numel() == 0) continue;
      EXPECT_TRUE(Matches((*gpu)[v], (*cpu)[v], graph.values[v].type, kConv32)) << node.op << " value " << v;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 8);  // each convolution's output and three gradients

  // Past the last node: nothing to do; before the first: an error.
  EXPECT_EQ((*program)->WarmStream(run.stream(), static_cast<int>(graph.nodes.size())).value_or(0), -1);
  EXPECT_TRUE(absl::IsInvalidArgument((*program)->WarmStream(run.stream(), -1).status()));
}

// Runs `graph` on one stream with `program`, marked shared or not
// (device::Stream::device_shared), and compares every output with the CPU
// oracle's on the same random feeds.
class SharedOrQuietRuns {
 public:
  SharedOrQuietRuns(const GraphMaker& g, const cuda::CudaProgramOptions& options)
      : graph_(g.graph()), run_(graph_), feeds_(g.RandomFeeds(Rng())) {
    program_ = cuda::CreateCudaProgram(graph_, *Gpu(), options);
    cpu_ = RunOnCpu(graph_, feeds_);
  }

  absl::Status status() const { return !program_.ok() ? program_.status() : cpu_.status(); }
  ProgramCounters Counters() const { return (*program_)->Counters(); }

  void Run(bool shared) {
    run_.stream().set_device_shared(shared);
    ASSERT_TRUE(run_.Upload(feeds_).ok());
    ASSERT_TRUE(run_.RunIteration(**program_).ok());
    absl::StatusOr<std::vector<Bytes>> gpu = run_.Download();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    int compared = 0;
    for (const Node& node : graph_.nodes) {
      for (int v : node.outputs) {
        EXPECT_TRUE(Matches((*gpu)[v], (*cpu_)[v], graph_.values[v].type, kConv32)) << node.op << " value " << v;
        ++compared;
      }
    }
    EXPECT_EQ(compared, 4);  // the output and three gradients
  }

 private:
  const Graph& graph_;
  GpuRun run_;
  std::vector<Bytes> feeds_;
  absl::StatusOr<std::unique_ptr<Program>> program_;
  absl::StatusOr<std::vector<Bytes>> cpu_;
};

// While other jobs have work on the device a new convolution takes the
// heuristics' choice and searches nothing, and keeps it while the device
// stays shared; the stream's next run of it with the device quiet searches
// (provisional choices are not offered to other streams, so nothing could be
// taken instead). Every run op by op.
TEST(CudaCnnKernels, ASharedDeviceChoosesWithoutSearchingUntilItIsQuiet) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker g;
  AddConv(g, {"5x5 24->40, met by no other test", {3, 24, 17, 17}, {40, 24, 5, 5}, 1, 2, 1, 1, true}, DType::kFloat32);
  SharedOrQuietRuns runs(g, {.use_graphs = false});
  ASSERT_TRUE(runs.status().ok()) << runs.status();

  const cuda::ConvChoiceSharing before = cuda::ConvChoiceSharingForTesting();
  runs.Run(/*shared=*/true);
  const cuda::ConvChoiceSharing shared = cuda::ConvChoiceSharingForTesting();
  EXPECT_EQ(shared.provisional - before.provisional, 3) << "three directions, by the heuristics";
  EXPECT_EQ(shared.searched, before.searched);
  runs.Run(/*shared=*/true);
  const cuda::ConvChoiceSharing still = cuda::ConvChoiceSharingForTesting();
  EXPECT_EQ(still.provisional, shared.provisional);
  EXPECT_EQ(still.searched, shared.searched);
  EXPECT_EQ(still.refined, shared.refined);

  runs.Run(/*shared=*/false);
  const cuda::ConvChoiceSharing quiet = cuda::ConvChoiceSharingForTesting();
  EXPECT_EQ(quiet.refined - still.refined, 3);
  EXPECT_EQ(quiet.searched - still.searched, 3);
  EXPECT_EQ(quiet.adopted, still.adopted);
  runs.Run(/*shared=*/false);
  const cuda::ConvChoiceSharing after = cuda::ConvChoiceSharingForTesting();
  EXPECT_EQ(after.refined, quiet.refined) << "a measured choice stays";
  EXPECT_EQ(after.searched, quiet.searched);
}

// With graphs: the iteration captured while the device was shared holds
// the heuristics' choices and replays while it stays shared; its first
// iteration with the device quiet runs op by op again (searching them) and
// is captured again; later ones replay that graph.
TEST(CudaCnnKernels, AGraphCapturedWhileSharedIsCapturedAgainWhenQuiet) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker g;
  AddConv(g, {"3x3 20->36 s2, met by no other test", {3, 20, 19, 19}, {36, 20, 3, 3}, 2, 1, 1, 1, false},
          DType::kFloat32);
  SharedOrQuietRuns runs(g, {});
  ASSERT_TRUE(runs.status().ok()) << runs.status();

  const cuda::ConvChoiceSharing before = cuda::ConvChoiceSharingForTesting();
  runs.Run(/*shared=*/true);  // op by op, captured
  runs.Run(/*shared=*/true);  // replayed
  ProgramCounters c = runs.Counters();
  EXPECT_EQ(c.op_by_op_runs, 1);
  EXPECT_EQ(c.graph_launches, 1);
  EXPECT_EQ(cuda::ConvChoiceSharingForTesting().provisional - before.provisional, 3);

  runs.Run(/*shared=*/false);  // op by op: measured, captured again
  c = runs.Counters();
  EXPECT_EQ(c.op_by_op_runs, 2);
  EXPECT_EQ(c.captures, 2);
  const cuda::ConvChoiceSharing quiet = cuda::ConvChoiceSharingForTesting();
  EXPECT_EQ(quiet.refined - before.refined, 3);
  EXPECT_EQ(quiet.searched - before.searched, 3);

  runs.Run(/*shared=*/false);  // replayed
  runs.Run(/*shared=*/true);   // replayed: its choices are measured ones
  c = runs.Counters();
  EXPECT_EQ(c.op_by_op_runs, 2);
  EXPECT_EQ(c.graph_launches, 3);
  EXPECT_EQ(cuda::ConvChoiceSharingForTesting().provisional, quiet.provisional);
}

Attrs PoolAttrs(int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  return MakeAttrs({{"kernel_size", std::vector<int64_t>{k, k}},
                    {"stride", std::vector<int64_t>{s, s}},
                    {"padding", std::vector<int64_t>{p, p}},
                    {"ceil_mode", ceil_mode}});
}

TEST(CudaCnnKernels, PoolingForwardAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  struct MaxCase {
    std::string name;
    Shape x;
    int64_t k, s, p, d;
    bool ceil_mode;
  };
  const std::vector<MaxCase> max_cases = {{"resnet 3x3 s2 p1", {4, 64, 56, 56}, 3, 2, 1, 1, false},
                                          {"vgg 2x2 s2", {4, 128, 28, 28}, 2, 2, 0, 1, false},
                                          {"ceil, dilated, odd", {3, 5, 17, 13}, 3, 2, 1, 2, true}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const MaxCase& c : max_cases) {
      SCOPED_TRACE(::testing::Message() << c.name << " " << DTypeName(dtype));
      GraphMaker g;
      Attrs attrs = PoolAttrs(c.k, c.s, c.p, c.ceil_mode);
      attrs.Set("dilation", std::vector<int64_t>{c.d, c.d});
      const int x = g.Feed({dtype, c.x});
      const std::vector<int> out = g.Add("max_pool2d_with_indices", {x}, attrs);
      const int grad = g.Feed(g.type(out[0]));
      g.Add1("max_pool2d_with_indices_backward", {grad, x, out[1]}, attrs);
      Check(g, kOther32);
    }
    for (bool include_pad : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "avg_pool2d include_pad " << include_pad << " " << DTypeName(dtype));
      GraphMaker g;
      Attrs attrs = PoolAttrs(3, 2, 1, true);
      attrs.Set("count_include_pad", include_pad);
      const int x = g.Feed({dtype, {3, 16, 15, 14}});
      const int y = g.Add1("avg_pool2d", {x}, attrs);
      g.Add1("avg_pool2d_backward", {g.Feed(g.type(y)), x}, attrs);
      Check(g, kOther32);
    }
    struct AdaptiveCase {
      Shape x;
      int64_t oh, ow;
    };
    for (const AdaptiveCase& c : std::vector<AdaptiveCase>{{{4, 2048, 7, 7}, 1, 1}, {{2, 512, 13, 11}, 7, 7}}) {
      SCOPED_TRACE(::testing::Message() << "adaptive " << ShapeString(c.x) << " " << DTypeName(dtype));
      GraphMaker g;
      const int x = g.Feed({dtype, c.x});
      const int y = g.Add1("_adaptive_avg_pool2d", {x}, MakeAttrs({{"output_size", std::vector<int64_t>{c.oh, c.ow}}}));
      g.Add1("_adaptive_avg_pool2d_backward", {g.Feed(g.type(y)), x});
      Check(g, kOther32);
    }
  }
}

// NCHW shapes run the chunked kernels; [M, C] shapes (inner 1: BatchNorm1d,
// and the channels-last layout's [N*H*W, C]) the column kernels, with 16-byte
// units (C a multiple of 4, or of 2 for float64) and single elements (C = 3),
// one tile or many per row, one chunk or many, one row per thread or many.
TEST(CudaCnnKernels, BatchNormTrainingEvalAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  // {131072, 64} and {400000, 3}: several rows per thread in the column
  // kernels' statistics and gradient sums.
  const std::vector<Shape> shapes = {{4, 64, 28, 28}, {8, 2048, 7, 7}, {16, 96}, {3, 5, 1000}, {2048, 64}, {3136, 256},
                                     {100, 2048},     {5000, 24},      {7, 3},   {131072, 64}, {400000, 3}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& shape : shapes) {
      for (bool training : {true, false}) {
        SCOPED_TRACE(::testing::Message() << ShapeString(shape) << " " << DTypeName(dtype) << " training " << training);
        const Shape c = {shape[1]};
        GraphMaker g;
        const int x = g.Feed({dtype, shape});
        const int w = g.Feed({dtype, c});
        const int b = g.Feed({dtype, c});
        const int rm = g.Feed({dtype, c});
        const int rv = g.Feed({dtype, c}, Fill::kPositive);
        const Attrs attrs = MakeAttrs({{"training", training}, {"momentum", 0.1}, {"eps", 1e-5}});
        const std::vector<int> f = g.Add("_native_batch_norm_legit_functional", {x, w, b, rm, rv}, attrs);
        g.Add("native_batch_norm", {x, w, b, rm, rv}, attrs);
        const int grad = g.Feed({dtype, shape});
        g.Add("native_batch_norm_backward", {grad, x, w, rm, rv, f[1], f[2]},
              MakeAttrs({{"train", training}, {"eps", 1e-5}}));
        // grad_input alone: in eval mode no gradient sums at all.
        g.Add("native_batch_norm_backward", {grad, x, w, rm, rv, f[1], f[2]},
              MakeAttrs({{"train", training}, {"eps", 1e-5}, {"output_mask", std::vector<int64_t>{1, 0, 0}}}));
        if (training) {
          g.Add("native_batch_norm_backward", {grad, x, w, f[1], f[2]},
                MakeAttrs({{"train", true}, {"eps", 1e-5}, {"output_mask", std::vector<int64_t>{0, 1, 1}}}));
          g.Add("native_batch_norm", {x, w, b}, attrs);
        }
        Check(g, kOther32);
      }
    }
  }
}

// A ResNet basic block and stem in small, forward and backward, as one
// graph: many cuDNN calls and own kernels captured and replayed together.
TEST(CudaCnnKernels, ResNetBlockStepCapturesAndReplays) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker g;
  AddResNetBlockStep(g, DType::kFloat32);
  Check(g, kConv32);
}

// Seconds per replayed iteration of a graph (after an op-by-op run and a
// capture), by device events around `iterations` back-to-back replays.
double SecondsPerIteration(const GraphMaker& maker, int iterations) {
  device::Device& gpu = *Gpu();
  GpuRun run(maker.graph());
  EXPECT_TRUE(run.Upload(maker.RandomFeeds(Rng())).ok());
  auto program = cuda::CreateCudaProgram(maker.graph(), gpu, cuda::CudaProgramOptions{});
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok()) return 0.0;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(run.RunIteration(**program).ok());
  auto start = gpu.CreateEvent();
  auto end = gpu.CreateEvent();
  EXPECT_TRUE(start.ok() && end.ok());
  EXPECT_TRUE(gpu.RecordEvent(run.stream(), **start).ok());
  std::atomic<int> failures{0};
  for (int i = 0; i < iterations; ++i) {
    EXPECT_TRUE((*program)->Enqueue(run.stream(), run.addresses()).ok());
    EXPECT_TRUE(gpu.OnComplete(run.stream(),
                               [&failures](absl::Status st) {
                                 if (!st.ok()) ++failures;
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

TEST(CudaCnnKernels, TimingsOfResNet50LayersAtBatch32) {
  TANDEM_SKIP_WITHOUT_GPU();
  const DType f = DType::kFloat32;
  const std::vector<ConvSpec> convs = {
      {"stem 3->64 7x7 s2 @224 (grad_weight only)", {32, 3, 224, 224}, {64, 3, 7, 7}, 2, 3, 1, 1, false, {0, 1, 0}},
      {"64->64 3x3 @56", {32, 64, 56, 56}, {64, 64, 3, 3}, 1, 1, 1, 1, false},
      {"256->64 1x1 @56", {32, 256, 56, 56}, {64, 256, 1, 1}, 1, 0, 1, 1, false},
      {"512->512 3x3 @7", {32, 512, 7, 7}, {512, 512, 3, 3}, 1, 1, 1, 1, false}};
  for (const ConvSpec& c : convs) {
    GraphMaker g;
    AddConv(g, c, f);
    const double t = SecondsPerIteration(g, 20);
    const int64_t oh = (c.x[2] + 2 * c.padding - c.dilation * (c.w[2] - 1) - 1) / c.stride + 1;
    const int64_t ow = (c.x[3] + 2 * c.padding - c.dilation * (c.w[3] - 1) - 1) / c.stride + 1;
    const double flops = 2.0 * static_cast<double>(c.x[0] * c.w[0] * oh * ow * c.w[1] * c.w[2] * c.w[3]);
    const int directions = static_cast<int>(c.mask[0] + c.mask[1]) + 1;  // forward + the wanted gradients
    std::printf("conv %s fwd+bwd: %.3f ms (%.1f TFLOP/s)\n", c.name.c_str(), t * 1e3, flops * directions / t / 1e12);
    EXPECT_GT(t, 0.0);
  }
  {
    GraphMaker g;
    const Shape shape = {32, 64, 112, 112};
    const int x = g.Feed({f, shape});
    const int w = g.Feed({f, {64}});
    const int b = g.Feed({f, {64}});
    const int rm = g.Feed({f, {64}});
    const int rv = g.Feed({f, {64}}, Fill::kPositive);
    const std::vector<int> out = g.Add("_native_batch_norm_legit_functional", {x, w, b, rm, rv},
                                       MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}}));
    g.Add("native_batch_norm_backward", {g.Feed({f, shape}), x, w, rm, rv, out[1], out[2]},
          MakeAttrs({{"train", true}, {"eps", 1e-5}}));
    const double t = SecondsPerIteration(g, 20);
    const double bytes = 4.0 * NumElements(shape) * (3 + 1 + 3 + 1);  // fwd: 3 reads + write; bwd: 3 reads + write
    std::printf("batch norm [32, 64, 112, 112] fwd+bwd: %.3f ms (%.0f GB/s effective)\n", t * 1e3, bytes / t / 1e9);
    EXPECT_GT(t, 0.0);
  }
  {
    GraphMaker g;
    const int x = g.Feed({f, {32, 64, 112, 112}});
    const Attrs pool = MakeAttrs({{"kernel_size", std::vector<int64_t>{3, 3}},
                                  {"stride", std::vector<int64_t>{2, 2}},
                                  {"padding", std::vector<int64_t>{1, 1}}});
    const std::vector<int> out = g.Add("max_pool2d_with_indices", {x}, pool);
    g.Add1("max_pool2d_with_indices_backward", {g.Feed(g.type(out[0])), x, out[1]}, pool);
    const double t = SecondsPerIteration(g, 20);
    std::printf("max pool 3x3 s2 [32, 64, 112, 112] fwd+bwd: %.3f ms\n", t * 1e3);
    EXPECT_GT(t, 0.0);
  }
}

// Batch norm's training forward and backward on one activation in two
// layouts: channels-last, as the column kernels see it ([N*H*W, C]), and
// NCHW (the chunked kernels). Printed, not asserted: the time per replayed
// iteration and the effective bandwidth (the forward reads x twice and
// writes out, the backward reads dy and x twice and writes grad_input).
TEST(CudaCnnKernels, TimingsOfBatchNormChannelsLastAndNchw) {
  TANDEM_SKIP_WITHOUT_GPU();
  const DType f = DType::kFloat32;
  struct Layout {
    const char* name;
    Shape shape;
  };
  for (const Layout& layout : {Layout{"[32*56*56, 64] (channels-last)", {32 * 56 * 56, 64}},
                               Layout{"[32, 64, 56, 56] (NCHW)", {32, 64, 56, 56}}}) {
    GraphMaker g;
    const Shape c = {64};
    const int x = g.Feed({f, layout.shape});
    const int w = g.Feed({f, c});
    const int b = g.Feed({f, c});
    const int rm = g.Feed({f, c});
    const int rv = g.Feed({f, c}, Fill::kPositive);
    const std::vector<int> out = g.Add("_native_batch_norm_legit_functional", {x, w, b, rm, rv},
                                       MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}}));
    g.Add("native_batch_norm_backward", {g.Feed({f, layout.shape}), x, w, rm, rv, out[1], out[2]},
          MakeAttrs({{"train", true}, {"eps", 1e-5}}));
    const double t = SecondsPerIteration(g, 20);
    const double bytes = 4.0 * NumElements(layout.shape) * (3 + 5);
    std::printf("batch norm %s fwd+bwd: %.3f ms (%.0f GB/s effective)\n", layout.name, t * 1e3, bytes / t / 1e9);
    EXPECT_GT(t, 0.0);
  }
}

}  // namespace
}  // namespace tandem::gpu_test
