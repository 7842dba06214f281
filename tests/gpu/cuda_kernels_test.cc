// Every op's CUDA kernel against the CPU kernel, on fresh random inputs and
// shapes (the seed is printed). Each graph runs twice on the GPU: op by op,
// then as a replay of the captured CUDA graph; outputs are poisoned before
// each run and must match the CPU oracle both times.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/cuda_program_options.h"
#include "kernels/cuda/sequence_launch.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

constexpr double kElementwise32 = 1e-5;
constexpr double kMatmul32 = 1e-4;
// A float32 sum of n random terms differs from the double oracle by about
// eps * sqrt(n) relative to the terms' magnitude, more relative to a result
// that cancels: 2.7e-5 was seen on an H200 for a full sum.
constexpr double kReduction32 = 1e-4;
constexpr double kAny64 = 1e-12;

int64_t Dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(Rng()); }

// Feeds -> CPU oracle; feeds -> GPU (op by op, then graph replay); every
// non-feed value compared. `alias` places outputs on inputs (in-place).
void Check(const GraphMaker& maker, double tolerance32, std::vector<std::pair<int, int>> alias = {},
           std::vector<Bytes> feeds = {}) {
  CompareWithCpuWithin(maker, tolerance32, kAny64, std::move(alias), std::move(feeds));
}

TEST(CudaKernels, MatmulFloat32AndFloat64BothLibraries) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (bool force_cublas : {false, true}) {
    cuda::SetMatmulForceCublasForTesting(force_cublas);
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (int trial = 0; trial < 3; ++trial) {
        const int64_t n = trial == 0 ? 1 : Dim(2, 300), k = Dim(1, 700), m = trial == 1 ? 1 : Dim(2, 300);
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << n << ", " << k << "] @ [" << k << ", " << m
                                          << "] cublas=" << force_cublas);
        GraphMaker g;
        const int a = g.Feed({dtype, {n, k}});
        const int b = g.Feed({dtype, {k, m}});
        g.Add1("mm", {a, b});
        Check(g, kMatmul32);
      }
    }
  }
  cuda::SetMatmulForceCublasForTesting(false);
}

TEST(CudaKernels, AddmmEverySelfShape) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t n = Dim(1, 200), k = Dim(1, 300), m = Dim(2, 200);
  SCOPED_TRACE(::testing::Message() << "[" << n << ", " << k << "] @ [" << k << ", " << m << "]");
  const std::vector<Shape> self_shapes = {{m}, {1, m}, {n, m}, {n, 1}, {}, {1}};
  const std::vector<std::pair<double, double>> beta_alpha = {{1.0, 1.0}, {0.5, 2.0}, {0.0, 1.0}};
  for (bool force_cublas : {false, true}) {
    cuda::SetMatmulForceCublasForTesting(force_cublas);
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (const Shape& self_shape : self_shapes) {
        for (const auto& [beta, alpha] : beta_alpha) {
          SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " self " << ShapeString(self_shape) << " beta "
                                            << beta << " alpha " << alpha << " cublas=" << force_cublas);
          GraphMaker g;
          const int self = g.Feed({dtype, self_shape});
          const int a = g.Feed({dtype, {n, k}});
          const int b = g.Feed({dtype, {k, m}});
          g.Add1("addmm", {self, a, b}, MakeAttrs({{"beta", beta}, {"alpha", alpha}}));
          Check(g, kMatmul32);
        }
      }
    }
  }
  cuda::SetMatmulForceCublasForTesting(false);
}

// transpose_a / transpose_b (operands stored [k, n] / [m, k], read
// transposed by the library) for mm and for addmm's three ways of adding
// self (bias epilogue, full C, broadcast first), on both libraries.
TEST(CudaKernels, MatmulTransposedOperandsBothLibraries) {
  TANDEM_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<bool, bool>> flags = {{true, false}, {false, true}, {true, true}};
  for (bool force_cublas : {false, true}) {
    cuda::SetMatmulForceCublasForTesting(force_cublas);
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (int trial = 0; trial < 2; ++trial) {
        const int64_t n = trial == 0 ? 1 : Dim(2, 300), k = Dim(1, 700), m = Dim(2, 300);
        for (const auto& [trans_a, trans_b] : flags) {
          SCOPED_TRACE(::testing::Message()
                       << DTypeName(dtype) << " op(a) [" << n << ", " << k << "] @ op(b) [" << k << ", " << m
                       << "] transpose_a=" << trans_a << " transpose_b=" << trans_b << " cublas=" << force_cublas);
          const Shape a_shape = trans_a ? Shape{k, n} : Shape{n, k};
          const Shape b_shape = trans_b ? Shape{m, k} : Shape{k, m};
          {
            GraphMaker g;
            const int a = g.Feed({dtype, a_shape});
            const int b = g.Feed({dtype, b_shape});
            const int out = g.Add1("mm", {a, b}, MakeAttrs({{"transpose_a", trans_a}, {"transpose_b", trans_b}}));
            ASSERT_EQ(g.type(out).shape, (Shape{n, m}));
            Check(g, kMatmul32);
          }
          const std::vector<std::pair<Shape, std::pair<double, double>>> selves = {
              {{m}, {1.0, 1.0}}, {{n, m}, {0.5, 2.0}}, {{n, m}, {1.0, 1.0}}, {{n, 1}, {0.5, 2.0}}};
          for (const auto& [self_shape, beta_alpha] : selves) {
            SCOPED_TRACE(::testing::Message() << "addmm self " << ShapeString(self_shape) << " beta "
                                              << beta_alpha.first << " alpha " << beta_alpha.second);
            GraphMaker g;
            const int self = g.Feed({dtype, self_shape});
            const int a = g.Feed({dtype, a_shape});
            const int b = g.Feed({dtype, b_shape});
            g.Add1("addmm", {self, a, b},
                   MakeAttrs({{"beta", beta_alpha.first},
                              {"alpha", beta_alpha.second},
                              {"transpose_a", trans_a},
                              {"transpose_b", trans_b}}));
            Check(g, kMatmul32);
          }
        }
      }
    }
  }
  cuda::SetMatmulForceCublasForTesting(false);
}

// A training step's two forms side by side: transposes folded into the
// product, and materialized (t) before a plain product; both against the
// CPU oracle, where they agree bit for bit.
TEST(CudaKernels, MatmulTransposedOperandsBesideExplicitTransposes) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const int64_t n = Dim(2, 200), k = Dim(2, 400), m = Dim(2, 200);
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << n << ", " << k << "] @ [" << k << ", " << m
                                      << "]");
    GraphMaker g;
    const int a_t = g.Feed({dtype, {k, n}});
    const int b_t = g.Feed({dtype, {m, k}});
    const int bias = g.Feed({dtype, {m}});
    g.Add1("addmm", {bias, a_t, b_t}, MakeAttrs({{"transpose_a", true}, {"transpose_b", true}}));
    g.Add1("addmm", {bias, g.Add1("t", {a_t}), g.Add1("t", {b_t})});
    Check(g, kMatmul32);
  }
}

TEST(CudaKernels, BinaryOpsWithBroadcasting) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t a = Dim(1, 40), b = Dim(2, 70), c = Dim(2, 90);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{a, b, c}, {a, b, c}}, {{a, b, c}, {c}},       {{a, 1, c}, {b, 1}}, {{b, c}, {}},
      {{}, {b, c}},           {{a, b, c}, {1, b, 1}}, {{1}, {a, b}},       {{b * c + 3}, {b * c + 3}}};
  for (const char* op : {"add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor"}) {
    const bool is_div = std::strcmp(op, "div.Tensor") == 0;
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
      if (is_div && dtype == DType::kInt64) continue;
      for (const auto& [sa, sb] : shapes) {
        SCOPED_TRACE(::testing::Message()
                     << op << " " << DTypeName(dtype) << " " << ShapeString(sa) << " and " << ShapeString(sb));
        GraphMaker g;
        const int x = g.Feed({dtype, sa});
        const int y = g.Feed({dtype, sb}, is_div ? Fill::kNonZero : Fill::kUniform);
        Attrs attrs;
        if (op[0] == 'a' || op[0] == 's') attrs.Set("alpha", dtype == DType::kInt64 ? AttrValue(int64_t{3}) : 0.75);
        g.Add1(op, {x, y}, attrs);
        Check(g, kElementwise32);
      }
    }
  }
}

// Sizes where every thread of the vectorized kernels loops over several
// groups of vectors, with an odd tail.
TEST(CudaKernels, LargeElementwise) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const int64_t n = (int64_t{1} << 24) + Dim(1, 1000);
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " n " << n);
    GraphMaker g;
    const int x = g.Feed({dtype, {n}});
    const int y = g.Feed({dtype, {n}}, Fill::kPositive);
    const int s = g.Feed({DType::kInt64, {}}, Fill::kNonZero);
    g.Add1("add.Tensor", {x, y}, MakeAttrs({{"alpha", 0.5}}));
    g.Add1("mul.Tensor", {x, s});
    g.Add1("div.Tensor", {s, y});
    g.Add1("relu", {x});
    g.Add1("sqrt", {y});
    g.Add1("mul.Scalar", {x}, MakeAttrs({{"other", 3.0}}));
    Check(g, kElementwise32);
  }
}

TEST(CudaKernels, RankZeroOperandOfAnotherDtype) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (const char* op : {"add.Tensor", "mul.Tensor", "div.Tensor"}) {
    for (DType other : {DType::kInt64, DType::kFloat64, DType::kBool}) {
      SCOPED_TRACE(::testing::Message() << op << " float32 with rank-0 " << DTypeName(other));
      GraphMaker g;
      const int x = g.Feed({DType::kFloat32, {Dim(1, 50), Dim(1, 50)}});
      const int s = g.Feed({other, {}}, other == DType::kBool ? Fill::kUniform : Fill::kNonZero);
      g.Add1(op, {x, s});
      std::vector<Bytes> feeds = g.RandomFeeds(Rng());
      if (other == DType::kBool) feeds[s][0] = 1;  // a divisor must not be false (0)
      Check(g, kElementwise32, {}, feeds);
    }
  }
}

TEST(CudaKernels, ScalarAndUnaryOps) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Shape shape = {Dim(1, 30), Dim(1, 300)};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    const bool integer = dtype == DType::kInt64;
    const AttrValue other = integer ? AttrValue(int64_t{-7}) : AttrValue(1.7);
    const AttrValue alpha = integer ? AttrValue(int64_t{2}) : AttrValue(-0.3);
    std::vector<std::pair<std::string, Attrs>> ops = {{"add.Scalar", MakeAttrs({{"other", other}, {"alpha", alpha}})},
                                                      {"sub.Scalar", MakeAttrs({{"other", other}, {"alpha", alpha}})},
                                                      {"mul.Scalar", MakeAttrs({{"other", other}})},
                                                      {"neg", {}},
                                                      {"relu", {}}};
    if (!integer) {
      ops.push_back({"div.Scalar", MakeAttrs({{"other", other}})});
      ops.push_back({"sqrt", {}});
    }
    for (const auto& [op, attrs] : ops) {
      SCOPED_TRACE(::testing::Message() << op << " " << DTypeName(dtype) << " " << ShapeString(shape));
      GraphMaker g;
      const int x = g.Feed({dtype, shape}, op == "sqrt" ? Fill::kPositive : Fill::kUniform);
      g.Add1(op, {x}, attrs);
      Check(g, kElementwise32);
    }
  }
}

TEST(CudaKernels, ThresholdBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    GraphMaker g;
    const Shape shape = {Dim(1, 64), Dim(1, 513)};
    const int grad = g.Feed({dtype, shape});
    const int self = g.Feed({dtype, shape});
    g.Add1("threshold_backward", {grad, self}, MakeAttrs({{"threshold", 0.1}}));
    Check(g, kElementwise32);
  }
}

// The planner may place an elementwise op's output on its input 0.
TEST(CudaKernels, InPlaceOutputs) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Shape shape = {Dim(2, 64), Dim(2, 257)};
  {
    GraphMaker g;
    const int x = g.Feed({DType::kFloat32, shape});
    const int y = g.Feed({DType::kFloat32, {shape[1]}});
    const int out = g.Add1("add.Tensor", {x, y}, MakeAttrs({{"alpha", 2.0}}));
    Check(g, kElementwise32, {{out, x}});
  }
  {
    GraphMaker g;
    const int x = g.Feed({DType::kFloat32, shape});
    const int out = g.Add1("relu", {x});
    Check(g, kElementwise32, {{out, x}});
  }
  {
    GraphMaker g;
    const int grad = g.Feed({DType::kFloat32, shape});
    const int logits = g.Feed({DType::kFloat32, shape});
    const int lsm = g.Add1("_log_softmax", {logits}, MakeAttrs({{"dim", int64_t{1}}}));
    const int out = g.Add1("_log_softmax_backward_data", {grad, lsm},
                           MakeAttrs({{"dim", int64_t{1}}, {"input_dtype", DType::kFloat32}}));
    Check(g, kElementwise32, {{out, grad}});
  }
  {
    GraphMaker g;
    const int self = g.Feed({DType::kFloat32, shape});
    const int src = g.Feed({DType::kInt64, {shape[1]}});
    const int out = g.Add1("copy", {self, src});
    Check(g, kElementwise32, {{out, self}});
  }
}

TEST(CudaKernels, Reductions) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Shape shape = {Dim(1, 9), Dim(1, 40), Dim(1, 70)};
  const std::vector<std::vector<int64_t>> dim_sets = {{0}, {1}, {2}, {-1}, {0, 2}, {0, 1}, {1, 2}, {}, {0, 1, 2}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    for (const auto& dims : dim_sets) {
      for (bool keepdim : {false, true}) {
        for (const char* op : {"sum.dim_IntList", "mean.dim"}) {
          const bool mean = op[0] == 'm';
          if (mean && dtype == DType::kInt64) continue;
          SCOPED_TRACE(::testing::Message() << op << " " << DTypeName(dtype) << " " << ShapeString(shape) << " dims "
                                            << ::testing::PrintToString(dims) << " keepdim " << keepdim);
          GraphMaker g;
          const int x = g.Feed({dtype, shape});
          g.Add1(op, {x}, MakeAttrs({{"dim", dims}, {"keepdim", keepdim}}));
          Check(g, kReduction32);
        }
      }
    }
  }
  // Long rows (the block-per-row kernel), tall columns, a plain total, and a
  // float32 sum into float64 (the dtype attribute).
  {
    GraphMaker g;
    const int x = g.Feed({DType::kFloat32, {Dim(1, 20), Dim(1025, 9000)}});
    g.Add1("sum.dim_IntList", {x}, MakeAttrs({{"dim", std::vector<int64_t>{1}}}));
    g.Add1("mean.dim", {x}, MakeAttrs({{"dim", std::vector<int64_t>{1}}, {"keepdim", true}}));
    g.Add1("sum", {x});
    g.Add1("sum.dim_IntList", {x}, MakeAttrs({{"dim", std::vector<int64_t>{0}}, {"dtype", DType::kFloat64}}));
    Check(g, kReduction32);
  }
  {
    GraphMaker g;
    const int x = g.Feed({DType::kFloat32, {Dim(1000, 5000), Dim(1, 12)}});
    g.Add1("sum.dim_IntList", {x}, MakeAttrs({{"dim", std::vector<int64_t>{0}}}));
    g.Add1("sum", {x});
    Check(g, kReduction32);
  }
  // Scattered reduced dims with many elements per output (the block-per-output
  // kernel): per-channel statistics of [N, C, H, W], with rows wider and
  // narrower than a block, and a strided innermost reduced run.
  for (const Shape& nchw : {Shape{Dim(8, 9), Dim(1, 40), Dim(17, 40), Dim(17, 40)},
                            Shape{Dim(600, 700), Dim(1, 6), Dim(2, 7), Dim(2, 7)}}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(nchw));
      GraphMaker g;
      const int x = g.Feed({dtype, nchw});
      g.Add1("mean.dim", {x}, MakeAttrs({{"dim", std::vector<int64_t>{0, 2, 3}}}));
      g.Add1("sum.dim_IntList", {x}, MakeAttrs({{"dim", std::vector<int64_t>{0, 2, 3}}, {"keepdim", true}}));
      g.Add1("sum.dim_IntList", {x}, MakeAttrs({{"dim", std::vector<int64_t>{0, 1, 3}}}));
      Check(g, kReduction32);
    }
  }
}

// The cluster reductions: per-channel sums of [N, C, H, W] over N, H and W
// with spatial sizes that are and are not whole 16-byte units (a cluster of
// 1 to 8 blocks per channel), column sums over the rows of tall and short
// matrices and of a middle dim, and long rows (a row is one channel), in
// every dtype they take.
TEST(CudaKernels, ClusterReductions) {
  TANDEM_SKIP_WITHOUT_GPU();
  const std::vector<Shape> nchw = {
      {32, 8, 9, 9}, {8, 16, 28, 28}, {Dim(20, 40), 64, 56, 56}, {3, 5, 33, 31}, {Dim(1, 3), 3, 224, 224}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    for (const Shape& shape : nchw) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape));
      GraphMaker g;
      const int x = g.Feed({dtype, shape});
      if (dtype != DType::kInt64) g.Add1("mean.dim", {x}, MakeAttrs({{"dim", std::vector<int64_t>{0, 2, 3}}}));
      g.Add1("sum.dim_IntList", {x}, MakeAttrs({{"dim", std::vector<int64_t>{0, 2, 3}}, {"keepdim", true}}));
      Check(g, kReduction32);
    }
  }
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {{{Dim(3000, 5000), Dim(100, 700)}, {0}},
                                                                     {{4096, 2048}, {0}},
                                                                     {{Dim(2, 7), 4100}, {0}},
                                                                     {{Dim(2, 5), Dim(200, 900), Dim(33, 70)}, {1}},
                                                                     {{Dim(1, 3), Dim(100000, 300000)}, {1}},
                                                                     {{Dim(100, 400), 1000}, {0, 1}}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    for (const auto& [shape, dims] : cases) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape) << " dims "
                                        << ::testing::PrintToString(dims));
      GraphMaker g;
      const int x = g.Feed({dtype, shape});
      g.Add1("sum.dim_IntList", {x}, MakeAttrs({{"dim", dims}}));
      if (dtype != DType::kInt64) g.Add1("mean.dim", {x}, MakeAttrs({{"dim", dims}, {"keepdim", true}}));
      Check(g, kReduction32);
    }
  }
}

// No reduction depends on timing: two runs of one graph (op by op, then a
// graph replay) give the same bits, on inputs large enough that every
// reduction spreads over several blocks.
TEST(CudaKernels, ReductionsRepeatBitForBit) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker g;
  const int image = g.Feed({DType::kFloat32, {32, 64, 56, 56}});
  g.Add1("mean.dim", {image}, MakeAttrs({{"dim", std::vector<int64_t>{0, 2, 3}}}));
  const int matrix = g.Feed({DType::kFloat32, {4096, 2048}});
  g.Add1("sum.dim_IntList", {matrix}, MakeAttrs({{"dim", std::vector<int64_t>{0}}}));
  g.Add1("sum", {matrix});
  const Graph& graph = g.graph();
  auto program = cuda::CreateCudaProgram(graph, *Gpu(), cuda::CudaProgramOptions{});
  ASSERT_TRUE(program.ok()) << program.status();
  GpuRun run(graph);
  const std::vector<Bytes> feeds = g.RandomFeeds(Rng());
  std::vector<std::vector<Bytes>> outs;
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(run.Upload(feeds).ok());
    const absl::Status status = run.RunIteration(**program);
    ASSERT_TRUE(status.ok()) << status;
    auto out = run.Download();
    ASSERT_TRUE(out.ok()) << out.status();
    outs.push_back(*std::move(out));
  }
  EXPECT_EQ(cuda::GetCudaProgramStats(**program).graph_launches, 1);
  auto ref = RunOnCpu(graph, feeds);
  ASSERT_TRUE(ref.ok()) << ref.status();
  for (const Node& node : graph.nodes) {
    for (int v : node.outputs) {
      EXPECT_TRUE(SameBytes(outs[0][v], outs[1][v])) << node.op;
      EXPECT_TRUE(Matches(outs[0][v], (*ref)[v], graph.values[v].type, kReduction32)) << node.op;
    }
  }
}

TEST(CudaKernels, ShapeOps) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t a = Dim(1, 6), b = Dim(1, 50), c = Dim(1, 70), d = Dim(1, 5);
  for (DType dtype : {DType::kFloat32, DType::kInt64, DType::kBool, DType::kFloat64}) {
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << a << ", " << b << ", " << c << ", " << d << "]");
    GraphMaker g;
    const int m = g.Feed({dtype, {b, c}});
    const int x = g.Feed({dtype, {a, b, c, d}});
    const int col = g.Feed({dtype, {b, 1}});
    g.Add1("t", {m});
    g.Add1("t_copy", {m});
    g.Add1("transpose.int", {x}, MakeAttrs({{"dim0", int64_t{1}}, {"dim1", int64_t{2}}}));
    g.Add1("transpose.int", {x}, MakeAttrs({{"dim0", int64_t{-1}}, {"dim1", int64_t{0}}}));
    g.Add1("transpose_copy.int", {x}, MakeAttrs({{"dim0", int64_t{2}}, {"dim1", int64_t{3}}}));
    g.Add1("permute", {x}, MakeAttrs({{"dims", std::vector<int64_t>{2, 0, 3, 1}}}));
    g.Add1("permute_copy", {x}, MakeAttrs({{"dims", std::vector<int64_t>{0, 1, 3, 2}}}));
    g.Add1("view", {x}, MakeAttrs({{"size", std::vector<int64_t>{a * b, -1}}}));
    g.Add1("reshape", {x}, MakeAttrs({{"size", std::vector<int64_t>{-1}}}));
    g.Add1("_unsafe_view", {m}, MakeAttrs({{"size", std::vector<int64_t>{c, b}}}));
    const int u = g.Add1("unsqueeze", {m}, MakeAttrs({{"dim", int64_t{1}}}));
    g.Add1("squeeze.dim", {u}, MakeAttrs({{"dim", int64_t{1}}}));
    g.Add1("expand", {col}, MakeAttrs({{"size", std::vector<int64_t>{a, -1, c}}}));
    g.Add1("expand_copy", {m}, MakeAttrs({{"size", std::vector<int64_t>{d, b, c}}}));
    for (const char* op : {"clone", "alias", "detach", "contiguous"}) g.Add1(op, {x});
    Check(g, kElementwise32);
  }
}

TEST(CudaKernels, LargeTransposeAndViewsInPlace) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker g;
  const int m = g.Feed({DType::kFloat32, {Dim(500, 1500), Dim(500, 1500)}});
  g.Add1("t", {m});
  Check(g, kElementwise32);
  GraphMaker views;
  const int x = views.Feed({DType::kFloat32, {Dim(2, 40), Dim(2, 40)}});
  const int v = views.Add1("view", {x}, MakeAttrs({{"size", std::vector<int64_t>{-1}}}));
  Check(views, kElementwise32, {{v, x}});
}

TEST(CudaKernels, ConvertingCopies) {
  TANDEM_SKIP_WITHOUT_GPU();
  const std::vector<DType> types = {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kBool};
  const int64_t b = Dim(1, 40), c = Dim(1, 60);
  for (DType from : types) {
    for (DType to : types) {
      SCOPED_TRACE(::testing::Message() << DTypeName(from) << " -> " << DTypeName(to));
      GraphMaker g;
      const int x = g.Feed({from, {b, c}});
      const int self = g.Feed({to, {Dim(1, 4), b, c}});
      const int row = g.Feed({from, {c}});
      g.Add1("_to_copy", {x}, MakeAttrs({{"dtype", to}}));
      g.Add1("copy", {self, x});
      g.Add1("copy", {self, row});
      Check(g, kElementwise32);
    }
  }
}

TEST(CudaKernels, Factories) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kBool}) {
    SCOPED_TRACE(DTypeName(dtype));
    const std::vector<int64_t> size = {Dim(1, 30), Dim(1, 77)};
    GraphMaker g;
    const int like = g.Feed({dtype, {Dim(1, 9), Dim(1, 130)}});
    g.Add1("zeros", {}, MakeAttrs({{"size", size}, {"dtype", dtype}}));
    g.Add1("ones", {}, MakeAttrs({{"size", size}, {"dtype", dtype}}));
    g.Add1("full", {}, MakeAttrs({{"size", size}, {"fill_value", -3.0}, {"dtype", dtype}}));
    g.Add1("zeros_like", {like});
    g.Add1("ones_like", {like});
    g.Add1("full_like", {like}, MakeAttrs({{"fill_value", 2.0}}));
    g.Add1("fill.Scalar", {like}, MakeAttrs({{"value", 5.0}}));
    g.Add1("scalar_tensor", {}, MakeAttrs({{"s", 4.0}, {"dtype", dtype}}));
    Check(g, kElementwise32);
  }
}

TEST(CudaKernels, LogSoftmaxAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  // 4 * Dim(1, 16) columns: whole 16-byte packs, some rows of at most 16
  // packs (half a warp per row, an odd row count leaving a half idle).
  const std::vector<std::pair<Shape, int64_t>> cases = {{{Dim(1, 300), Dim(2, 40)}, 1},
                                                        {{Dim(1, 20), Dim(1025, 5000)}, 1},
                                                        {{Dim(2, 50), Dim(2, 30)}, 0},
                                                        {{Dim(1, 5), Dim(2, 9), Dim(2, 20)}, 1},
                                                        {{Dim(2, 100)}, 0},
                                                        {{2 * Dim(1, 150) + 1, 4 * Dim(1, 16)}, 1}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const auto& [shape, dim] : cases) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape) << " dim " << dim);
      GraphMaker g;
      const int x = g.Feed({dtype, shape});
      const int grad = g.Feed({dtype, shape});
      const int out = g.Add1("_log_softmax", {x}, MakeAttrs({{"dim", dim}, {"half_to_float", false}}));
      g.Add1("_log_softmax_backward_data", {grad, out}, MakeAttrs({{"dim", dim}, {"input_dtype", dtype}}));
      Check(g, kElementwise32);
    }
  }
}

// The row-tile kernels (softmax, log_softmax, layer norm, forward and
// backward) index a launch in 32 bits, and their launchers split a tensor
// into launches of at most 2^30 elements. With the limit lowered to a few
// rows (an odd count, so a warp's second row is missing in every launch),
// each tensor takes many launches, whose row offsets must line up.
TEST(CudaKernels, RowTilesInSeveralLaunches) {
  TANDEM_SKIP_WITHOUT_GPU();
  struct RestoreLimit {
    ~RestoreLimit() { cuda::SetTileLaunchElementsForTesting(0); }
  } restore;  // also when an assertion below ends the test
  // Half a warp per row, a warp (1 and 8 packs per thread), a block per row.
  const std::vector<int64_t> widths = {4 * Dim(1, 16), 128, 4 * Dim(200, 256), 4 * Dim(300, 1024)};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const int64_t cols : widths) {
      const int64_t rows = 2 * Dim(20, 80) + 1;
      const int64_t rows_per_launch = 2 * Dim(0, 3) + 1;
      cuda::SetTileLaunchElementsForTesting(rows_per_launch * cols + Dim(0, cols - 1));
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << rows << ", " << cols << "], " << rows_per_launch
                                        << " rows per launch");
      GraphMaker g;
      const int x = g.Feed({dtype, {rows, cols}});
      const int grad = g.Feed({dtype, {rows, cols}});
      const int w = g.Feed({dtype, {cols}}, Fill::kPositive);
      const int b = g.Feed({dtype, {cols}});
      const Attrs dim = MakeAttrs({{"dim", int64_t{1}}, {"half_to_float", false}});
      const Attrs backward = MakeAttrs({{"dim", int64_t{1}}, {"input_dtype", dtype}});
      const int sm = g.Add1("_softmax", {x}, dim);
      const int lsm = g.Add1("_log_softmax", {x}, dim);
      g.Add1("_softmax_backward_data", {grad, sm}, backward);
      g.Add1("_log_softmax_backward_data", {grad, lsm}, backward);
      const std::vector<int> ln = g.Add("native_layer_norm", {x, w, b},
                                        MakeAttrs({{"normalized_shape", std::vector<int64_t>{cols}}, {"eps", 1e-5}}));
      ASSERT_EQ(ln.size(), 3u);
      g.Add("native_layer_norm_backward", {grad, x, ln[1], ln[2], w, b},
            MakeAttrs(
                {{"normalized_shape", std::vector<int64_t>{cols}}, {"output_mask", std::vector<int64_t>{1, 1, 1}}}));
      Check(g, kReduction32);
    }
  }
}

TEST(CudaKernels, NllLossEveryReduction) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t reduction : {0, 1, 2}) {
      for (bool weighted : {false, true}) {
        for (bool one_row : {false, true}) {
          SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " reduction " << reduction << " weighted "
                                            << weighted << " one_row " << one_row);
          const int64_t n = Dim(1, 700), c = Dim(2, 40);
          const int64_t ignore = 3;
          GraphMaker g;
          // Of one sign, as log-probabilities are: with either sign the mean
          // of up to 700 terms cancels, and its float32 sum missed the double
          // oracle by 1.1e-5 relative at one seed (over this bound).
          const int self = g.Feed(one_row ? TensorType{dtype, {c}} : TensorType{dtype, {n, c}}, Fill::kPositive);
          const int target =
              g.Feed(one_row ? TensorType{DType::kInt64, {}} : TensorType{DType::kInt64, {n}}, Fill::kLabels, c);
          std::vector<int> inputs = {self, target};
          if (weighted) inputs.push_back(g.Feed({dtype, {c}}, Fill::kPositive));
          const Attrs attrs = MakeAttrs({{"reduction", reduction}, {"ignore_index", ignore}});
          const std::vector<int> fwd = g.Add("nll_loss_forward", inputs, attrs);
          const int grad = g.Feed(g.type(fwd[0]));
          std::vector<int> bwd_inputs = {grad, self, target, fwd[1]};
          if (weighted) bwd_inputs.push_back(inputs[2]);
          g.Add1("nll_loss_backward", bwd_inputs, attrs);
          // Label 0 first: a mean over only ignored labels is 0 / 0 = NaN.
          std::vector<Bytes> feeds = g.RandomFeeds(Rng());
          std::memset(feeds[target].data(), 0, sizeof(int64_t));
          Check(g, kElementwise32, {}, feeds);
        }
      }
    }
  }
}

}  // namespace
}  // namespace tandem::gpu_test
