// int32 index tensors in the CUDA kernels: every op that takes indices
// (embedding and its backward, nll_loss_forward / nll_loss_backward, gather,
// scatter.value / scatter.src, index_select, index_put with int32 and int64
// index tensors mixed) against the CPU kernel, on fresh random inputs and
// shapes (the seed is printed), in float32, float64 and, where the op takes
// them, bfloat16 and float16. Each graph runs op by op and then as a replayed
// CUDA graph; outputs are poisoned before each run and a NaN never passes.
// A bad int32 index fails its iteration through the error word with
// INVALID_ARGUMENT naming the node and the value, in the very words of the
// same bad int64 index, and the next iteration runs and is right.
//
// Tolerances: float32 sums over a few thousand terms (embedding gradients
// with atomics, nll's block sum) within 1e-4, float64 within 1e-12; 16-bit
// outputs within 2u + 1e-3 (u = 2^-8 for bfloat16, 2^-11 for float16: both
// backends round the same float32 value, which may differ in its last bits
// with the summation order), as the 16-bit op tests allow. Indices, and
// everything that only moves bytes, match exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_program_options.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

constexpr double kFloat32Tolerance = 1e-4;
constexpr double kFloat64Tolerance = 1e-12;

int64_t Dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(Rng()); }

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

double HalfTolerance(DType dtype) {
  return 2 * (dtype == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11)) + 1e-3;
}

// Every output of the graph against the CPU oracle: 16-bit floats within
// HalfTolerance, float32 and float64 within theirs, the rest exactly.
void Check(const GraphMaker& maker, std::vector<Bytes> feeds = {}) {
  CompareWithCpu(
      maker,
      [](const OutputPair& o) {
        const DType dtype = o.type().dtype;
        const double tolerance = IsHalf(dtype)              ? HalfTolerance(dtype)
                                 : dtype == DType::kFloat64 ? kFloat64Tolerance
                                                            : kFloat32Tolerance;
        EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), tolerance)) << o.Where();
      },
      /*alias=*/{}, std::move(feeds));
}

// Element i of an int64 or int32 feed.
int64_t GetIndex(const Bytes& feed, DType dtype, int64_t i) {
  if (dtype == DType::kInt32) return reinterpret_cast<const int32_t*>(feed.data())[i];
  return reinterpret_cast<const int64_t*>(feed.data())[i];
}
void SetIndex(Bytes& feed, DType dtype, int64_t i, int64_t v) {
  if (dtype == DType::kInt32) {
    reinterpret_cast<int32_t*>(feed.data())[i] = static_cast<int32_t>(v);
  } else {
    reinterpret_cast<int64_t*>(feed.data())[i] = v;
  }
}
int64_t NumIndices(const Bytes& feed, DType dtype) { return static_cast<int64_t>(feed.size() / DTypeSize(dtype)); }

TEST(CudaIndexDType, EmbeddingWithInt32IdsOfEveryRowWidth) {
  TANDEM_SKIP_WITHOUT_GPU();
  // 16-byte rows take the vectorized kernel, the others one element at a
  // time; a warp loops over a row (2052 float32: 513 vectors, 17 passes).
  const std::vector<std::pair<DType, int64_t>> widths = {
      {DType::kFloat32, 256}, {DType::kFloat32, 7}, {DType::kFloat64, 2},    {DType::kFloat64, 3},
      {DType::kBFloat16, 8},  {DType::kFloat16, 5}, {DType::kFloat32, 2052}, {DType::kFloat32, 300}};
  for (const auto& [dtype, width] : widths) {
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " width " << width);
    const int64_t vocab = Dim(2, 3000);
    GraphMaker g;
    const int weight = g.Feed({dtype, {vocab, width}});
    const int ids = g.Feed({DType::kInt32, {Dim(1, 40), Dim(1, 70)}}, Fill::kLabels, vocab);
    const Shape grad_shape = {g.type(ids).shape[0], g.type(ids).shape[1], width};
    const int grad = g.Feed({dtype, grad_shape});
    g.Add1("embedding", {weight, ids});
    g.Add1("embedding_dense_backward", {grad, ids}, MakeAttrs({{"num_weights", vocab}, {"padding_idx", int64_t{-1}}}));
    // Few distinct ids: many repeats summed into the same rows.
    const int few = g.Feed({DType::kInt32, g.type(ids).shape}, Fill::kLabels, std::min<int64_t>(vocab, 20));
    g.Add1("embedding_dense_backward", {grad, few}, MakeAttrs({{"num_weights", vocab}, {"padding_idx", int64_t{1}}}));
    Check(g);
  }
}

TEST(CudaIndexDType, NllLossWithInt32Labels) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    // int64 labels too for the 16-bit types: their nll kernels are the
    // shared templates now.
    for (DType label : {DType::kInt32, DType::kInt64}) {
      for (int64_t reduction : {0, 1, 2}) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(dtype) << " labels " << DTypeName(label) << " reduction " << reduction);
        const int64_t n = Dim(1, 600), classes = Dim(2, 1000);
        const int64_t ignore_index = Dim(0, 1) == 0 ? -100 : Dim(0, classes - 1);
        GraphMaker g;
        const int x = g.Feed({dtype, {n, classes}});
        const int target = g.Feed({label, {n}}, Fill::kLabels, classes);
        const int weight = g.Feed({dtype, {classes}}, Fill::kPositive);
        const Attrs attrs = MakeAttrs({{"reduction", reduction}, {"ignore_index", ignore_index}});
        const std::vector<int> fwd = g.Add("nll_loss_forward", {x, target, weight}, attrs);
        ASSERT_EQ(fwd.size(), 2u);
        const int grad = g.Feed(g.type(fwd[0]));
        g.Add1("nll_loss_backward", {grad, x, target, fwd[1], weight}, attrs);
        const std::vector<int> unweighted = g.Add("nll_loss_forward", {x, target}, attrs);
        ASSERT_EQ(unweighted.size(), 2u);
        g.Add1("nll_loss_backward", {grad, x, target, unweighted[1]}, attrs);
        std::vector<Bytes> feeds = g.RandomFeeds(Rng());
        // About one label in ten ignored (never all of them with a mean:
        // 0 / 0 is NaN on both, and Matches refuses NaN).
        for (int64_t i = 1; i < n; ++i) {
          if (Dim(0, 9) == 0) SetIndex(feeds[target], label, i, ignore_index);
        }
        if (ignore_index >= 0) SetIndex(feeds[target], label, 0, (ignore_index + 1) % classes);
        Check(g, feeds);
      }
    }
  }
}

TEST(CudaIndexDType, GatherScatterIndexSelectWithInt32Indices) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t rows = Dim(2, 200), cols = Dim(2, 300);
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kBool}) {
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << rows << ", " << cols << "]");
    GraphMaker g;
    const int self = g.Feed({dtype, {rows, cols}});
    const int column = g.Feed({DType::kInt32, {rows, 1}}, Fill::kLabels, cols);
    const int row_ids = g.Feed({DType::kInt32, {3, cols}}, Fill::kLabels, rows);
    const int src = g.Feed({dtype, {rows + 1, cols + 2}});
    g.Add1("gather", {self, column}, MakeAttrs({{"dim", int64_t{1}}}));
    g.Add1("gather", {self, row_ids}, MakeAttrs({{"dim", int64_t{0}}}));
    // One index per row: the writes do not race.
    g.Add1("scatter.value", {self, column}, MakeAttrs({{"dim", int64_t{1}}, {"value", int64_t{-1}}}));
    g.Add1("scatter.src", {self, column, src}, MakeAttrs({{"dim", int64_t{-1}}}));
    const int pick = g.Feed({DType::kInt32, {17}}, Fill::kLabels, rows);
    g.Add1("index_select", {self, pick}, MakeAttrs({{"dim", int64_t{0}}}));
    const int pick_cols = g.Feed({DType::kInt32, {9}}, Fill::kLabels, cols);
    g.Add1("index_select", {self, pick_cols}, MakeAttrs({{"dim", int64_t{1}}}));
    const int one = g.Feed({DType::kInt32, {}}, Fill::kLabels, cols);
    g.Add1("index_select", {self, one}, MakeAttrs({{"dim", int64_t{1}}}));
    Check(g);
  }
}

TEST(CudaIndexDType, IndexPutWithInt32AndMixedIndexTensors) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t vocab = Dim(10, 1000), width = Dim(1, 256), count = Dim(1, 2000);
    GraphMaker g;
    // accumulate over repeated int32 rows (the decomposed embedding backward).
    const int zeros = g.Add1("zeros", {}, MakeAttrs({{"size", std::vector<int64_t>{vocab, width}}, {"dtype", dtype}}));
    const int ids = g.Feed({DType::kInt32, {count}}, Fill::kLabels, vocab);
    const int grad = g.Feed({dtype, {count, width}}, dtype == DType::kInt64 ? Fill::kUniform : Fill::kSmall);
    g.Add1("index_put", {zeros, ids, grad}, MakeAttrs({{"accumulate", true}}));
    // Without accumulate, distinct positions: an int32 and an int64 index
    // tensor broadcast together, negative ones wrapped.
    const int self = g.Feed({dtype, {50, 4, 3}});
    const int i0 = g.Feed({DType::kInt32, {10, 1}});
    const int i1 = g.Feed({DType::kInt64, {4}});
    const int values = g.Feed({dtype, {3}});
    g.Add1("index_put", {self, i0, i1, values});
    const int j0 = g.Feed({DType::kInt64, {10, 1}});
    const int j1 = g.Feed({DType::kInt32, {4}});
    g.Add1("index_put", {self, j0, j1, values}, MakeAttrs({{"accumulate", true}}));
    std::vector<Bytes> feeds = g.RandomFeeds(Rng());
    const std::vector<int64_t> rows = {0, -1, 5, 7, -20, 11, 13, 17, 19, 23};
    const std::vector<int64_t> cols = {3, 0, -3, 2};
    for (size_t i = 0; i < rows.size(); ++i) {
      SetIndex(feeds[i0], DType::kInt32, static_cast<int64_t>(i), rows[i]);
      SetIndex(feeds[j0], DType::kInt64, static_cast<int64_t>(i), rows[i]);
    }
    for (size_t i = 0; i < cols.size(); ++i) {
      SetIndex(feeds[i1], DType::kInt64, static_cast<int64_t>(i), cols[i]);
      SetIndex(feeds[j1], DType::kInt32, static_cast<int64_t>(i), cols[i]);
    }
    Check(g, feeds);
  }
}

// The index-taking ops in one graph, with index feeds of `index_dtype`; the
// node each feed's bad value is reported by comes first among its readers.
struct BadIndexGraph {
  GraphMaker g;
  int ids = 0, index = 0, column = 0, pick = 0, i1 = 0, target = 0, half_ids = 0;

  explicit BadIndexGraph(DType index_dtype) {
    const int weight = g.Feed({DType::kFloat32, {100, 8}});
    ids = g.Feed({index_dtype, {5, 7}}, Fill::kLabels, 100);
    const int grad = g.Feed({DType::kFloat32, {5, 7, 8}});
    g.Add1("embedding", {weight, ids});                                                           // node 0
    g.Add1("embedding_dense_backward", {grad, ids}, MakeAttrs({{"num_weights", int64_t{100}}}));  // node 1
    const int self = g.Feed({DType::kFloat32, {5, 9}});
    index = g.Feed({index_dtype, {5, 2}}, Fill::kLabels, 9);
    g.Add1("gather", {self, index}, MakeAttrs({{"dim", int64_t{1}}}));  // node 2
    // One index per row, so that the good iterations' writes do not race.
    column = g.Feed({index_dtype, {5, 1}}, Fill::kLabels, 9);
    const int src = g.Feed({DType::kFloat32, {5, 1}});
    g.Add1("scatter.src", {self, column, src}, MakeAttrs({{"dim", int64_t{1}}}));  // node 3
    pick = g.Feed({index_dtype, {6}}, Fill::kLabels, 5);
    g.Add1("index_select", {self, pick}, MakeAttrs({{"dim", int64_t{0}}}));  // node 4
    const int i0 = g.Feed({DType::kInt64, {3}}, Fill::kLabels, 5);
    i1 = g.Feed({index_dtype, {3}}, Fill::kLabels, 9);
    const int values = g.Feed({DType::kFloat32, {3}});
    // Accumulating: positions may repeat.
    g.Add1("index_put", {self, i0, i1, values}, MakeAttrs({{"accumulate", true}}));  // node 5
    const int logp = g.Feed({DType::kFloat32, {6, 10}});
    target = g.Feed({index_dtype, {6}}, Fill::kLabels, 10);
    g.Add("nll_loss_forward", {logp, target});  // node 6
    const int half_grad = g.Feed({DType::kBFloat16, {4, 8}});
    half_ids = g.Feed({index_dtype, {4}}, Fill::kLabels, 30);
    g.Add1("embedding_dense_backward", {half_grad, half_ids}, MakeAttrs({{"num_weights", int64_t{30}}}));  // node 7
  }
};

TEST(CudaIndexDType, BadInt32IndicesFailTheirIterationLikeInt64Ones) {
  TANDEM_SKIP_WITHOUT_GPU();
  BadIndexGraph narrow(DType::kInt32);
  BadIndexGraph wide(DType::kInt64);
  auto narrow_program = cuda::CreateCudaProgram(narrow.g.graph(), *Gpu(), cuda::CudaProgramOptions{});
  auto wide_program = cuda::CreateCudaProgram(wide.g.graph(), *Gpu(), cuda::CudaProgramOptions{});
  ASSERT_TRUE(narrow_program.ok()) << narrow_program.status();
  ASSERT_TRUE(wide_program.ok()) << wide_program.status();
  GpuRun narrow_run(narrow.g.graph());
  GpuRun wide_run(wide.g.graph());
  constexpr int64_t kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int64_t kMin32 = std::numeric_limits<int32_t>::min();
  struct Bad {
    int BadIndexGraph::*feed;
    int64_t value;
    int node;
    std::string op;
    std::string says;  // how the message names the value
  };
  const std::vector<Bad> cases = {
      {&BadIndexGraph::ids, 100, 0, "embedding", "index 100 "},
      {&BadIndexGraph::ids, -1, 0, "embedding", "index -1 "},
      {&BadIndexGraph::ids, kMax32, 0, "embedding", absl::StrCat("index ", kMax32, " ")},
      {&BadIndexGraph::ids, kMin32, 0, "embedding", absl::StrCat("index ", kMin32, " ")},
      {&BadIndexGraph::index, 9, 2, "gather", "index 9 "},
      {&BadIndexGraph::index, -4, 2, "gather", "index -4 "},
      {&BadIndexGraph::column, 9, 3, "scatter.src", "index 9 "},
      {&BadIndexGraph::column, kMax32, 3, "scatter.src", absl::StrCat("index ", kMax32, " ")},
      {&BadIndexGraph::pick, 5, 4, "index_select", "index 5 "},
      {&BadIndexGraph::i1, 9, 5, "index_put", "index 9 "},
      {&BadIndexGraph::i1, -10, 5, "index_put", "index -10 "},
      {&BadIndexGraph::target, 10, 6, "nll_loss_forward", "target value 10 "},
      {&BadIndexGraph::target, -3, 6, "nll_loss_forward", "target value -3 "},
      {&BadIndexGraph::half_ids, 30, 7, "embedding_dense_backward", "index 30 "},
      {&BadIndexGraph::half_ids, kMin32, 7, "embedding_dense_backward", absl::StrCat("index ", kMin32, " ")},
  };
  for (const Bad& bad : cases) {
    SCOPED_TRACE(::testing::Message() << bad.op << " " << bad.value);
    const int feed = narrow.*bad.feed;
    ASSERT_EQ(feed, wide.*bad.feed);  // the same graph but for the index dtypes
    std::vector<Bytes> narrow_feeds = narrow.g.RandomFeeds(Rng());
    const int64_t at = Dim(0, NumIndices(narrow_feeds[feed], DType::kInt32) - 1);
    SetIndex(narrow_feeds[feed], DType::kInt32, at, bad.value);
    // The int64 graph gets the same values, index feeds widened.
    std::vector<Bytes> wide_feeds = narrow_feeds;
    for (int f : wide.g.graph().feeds) {
      if (wide.g.type(f).dtype != DType::kInt64 || narrow.g.type(f).dtype != DType::kInt32) continue;
      wide_feeds[f].assign(wide.g.type(f).bytes(), 0);
      for (int64_t i = 0; i < wide.g.type(f).numel(); ++i) {
        SetIndex(wide_feeds[f], DType::kInt64, i, GetIndex(narrow_feeds[f], DType::kInt32, i));
      }
    }
    ASSERT_TRUE(narrow_run.Upload(narrow_feeds).ok());
    ASSERT_TRUE(wide_run.Upload(wide_feeds).ok());
    const absl::Status s = narrow_run.RunIteration(**narrow_program);
    const absl::Status expected = wide_run.RunIteration(**wide_program);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    const std::string node = absl::StrCat("node ", bad.node, " (", bad.op, " '", bad.op, bad.node, "')");
    EXPECT_EQ(s.message().rfind(node, 0), 0u) << s;
    EXPECT_NE(s.message().find(bad.says), absl::string_view::npos) << s;
    EXPECT_EQ(s, expected);

    // The next iteration on the same stream runs and is right.
    const std::vector<Bytes> good = narrow.g.RandomFeeds(Rng());
    auto ref = RunOnCpu(narrow.g.graph(), good);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_TRUE(narrow_run.Upload(good).ok());
    const absl::Status next = narrow_run.RunIteration(**narrow_program);
    ASSERT_TRUE(next.ok()) << next;
    auto out = narrow_run.Download();
    ASSERT_TRUE(out.ok()) << out.status();
    const Graph& graph = narrow.g.graph();
    for (const Node& n : graph.nodes) {
      for (int v : n.outputs) {
        const DType dtype = graph.values[v].type.dtype;
        const double tolerance = IsHalf(dtype) ? HalfTolerance(dtype) : kFloat32Tolerance;
        EXPECT_TRUE(Matches((*out)[v], (*ref)[v], graph.values[v].type, tolerance)) << n.op;
      }
    }
  }
}

}  // namespace
}  // namespace tandem::gpu_test
