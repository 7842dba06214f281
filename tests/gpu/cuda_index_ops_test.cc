// The CUDA kernels of advanced indexing (index.Tensor and its alias
// _unsafe_index.Tensor, index_put with indexed_dims), the reducing scatters
// (scatter_add, scatter_reduce.two), masked_scatter, the strided ops
// (slice_scatter, select_scatter, as_strided, as_strided_scatter, diagonal,
// diagonal_scatter, flip, repeat), the random ops (bernoulli.p, rand, randn) and the empty
// constructors against the CPU kernels, on fresh random inputs and shapes
// (the seed is printed), in every dtype each op takes. Each graph runs op by
// op and then as a replayed CUDA graph; outputs are poisoned before each run
// and a NaN never passes. Bad indices (and a source too short for
// masked_scatter) fail their iteration through the error word with
// INVALID_ARGUMENT naming the node and the value, and the next iteration
// runs and is right.
//
// Tolerances: ops that move bytes, integer sums, amax/amin, bernoulli and
// rand match exactly. Float sums and products with atomics (their order
// varies) within 1e-5 (float32) and 1e-12 (float64); 16-bit sums, which the
// GPU rounds at every atomic add and the CPU once, within 4u + 1e-3 (u =
// 2^-8 for bfloat16, 2^-11 for float16), norm-wise; randn (log and cos of
// the two backends' libraries) within 1e-6.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_program_options.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

using Ints = std::vector<int64_t>;

const DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64,  DType::kInt64,  DType::kInt32,
                            DType::kBool,    DType::kBFloat16, DType::kFloat16};
const DType kScatterDTypes[] = {DType::kFloat32, DType::kFloat64,  DType::kInt64,
                                DType::kInt32,   DType::kBFloat16, DType::kFloat16};

int64_t Dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(Rng()); }

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

double HalfTolerance(DType dtype) {
  return 4 * (dtype == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11)) + 1e-3;
}

// Every output exactly (the ops that move bytes).
void CheckExact(const GraphMaker& maker, std::vector<Bytes> feeds = {}, std::vector<std::pair<int, int>> alias = {}) {
  CompareWithCpu(
      maker, [](const OutputPair& o) { EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), 0.0)) << o.Where(); },
      std::move(alias), std::move(feeds));
}

// Floats within the sums' tolerances, the rest exactly.
void CheckSums(const GraphMaker& maker, std::vector<Bytes> feeds = {}, std::vector<std::pair<int, int>> alias = {}) {
  CompareWithCpu(
      maker,
      [](const OutputPair& o) {
        const DType dtype = o.type().dtype;
        const double tolerance = IsHalf(dtype)              ? HalfTolerance(dtype)
                                 : dtype == DType::kFloat64 ? 1e-12
                                 : dtype == DType::kFloat32 ? 1e-5
                                                            : 0.0;
        EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), tolerance)) << o.Where();
      },
      std::move(alias), std::move(feeds));
}

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

// About a third of an index feed's values (in [0, size)) made negative, as
// PyTorch's advanced indexing counts them from the end.
void MakeSomeNegative(Bytes& feed, DType dtype, int64_t size) {
  const int64_t n = static_cast<int64_t>(feed.size() / DTypeSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    if (Dim(0, 2) == 0) SetIndex(feed, dtype, i, GetIndex(feed, dtype, i) - size);
  }
}

Attrs IndexedDims(Ints dims) { return MakeAttrs({{"indexed_dims", dims}}); }

TEST(CudaIndexOps, IndexTensorInEveryDTypeAndPlacement) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : kAllDTypes) {
    const Shape shape = {Dim(1, 40), Dim(1, 30), Dim(1, 20), Dim(1, 9)};
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape));
    GraphMaker g;
    const int self = g.Feed({dtype, shape});
    // Indices of self's first dim (the common x[idx]), an embedding-sized
    // gather: [n].
    const int first = g.Feed({DType::kInt64, {Dim(1, 300)}}, Fill::kLabels, shape[0]);
    g.Add1("index.Tensor", {self, first});
    // Adjacent dims 1 and 2 with broadcasting int32 and int64 indices.
    const int64_t rows = Dim(1, 6), cols = Dim(1, 7);
    const int i1 = g.Feed({DType::kInt32, {rows, 1}}, Fill::kLabels, shape[1]);
    const int i2 = g.Feed({DType::kInt64, {cols}}, Fill::kLabels, shape[2]);
    g.Add1("index.Tensor", {self, i1, i2}, IndexedDims({1, 2}));
    // Dims 0 and 2, apart: the broadcast index shape first.
    const int j0 = g.Feed({DType::kInt64, {cols}}, Fill::kLabels, shape[0]);
    const int j2 = g.Feed({DType::kInt32, {1}}, Fill::kLabels, shape[2]);
    g.Add1("_unsafe_index.Tensor", {self, j0, j2}, IndexedDims({0, 2}));
    // The last dim alone, with a rank-0 index.
    const int last = g.Feed({DType::kInt64, {}}, Fill::kLabels, shape[3]);
    g.Add1("index.Tensor", {self, last}, IndexedDims({3}));
    std::vector<Bytes> feeds = g.RandomFeeds(Rng());
    MakeSomeNegative(feeds[first], DType::kInt64, shape[0]);
    MakeSomeNegative(feeds[i1], DType::kInt32, shape[1]);
    MakeSomeNegative(feeds[j0], DType::kInt64, shape[0]);
    CheckExact(g, feeds);
  }
}

// index_put on self's dims 1 and 3 (apart): values broadcast to [k, d0, d2].
TEST(CudaIndexOps, IndexPutWithIndexedDimsInEveryDType) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : kAllDTypes) {
    const Shape shape = {Dim(1, 6), Dim(4, 30), Dim(1, 8), Dim(4, 20)};
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape));
    GraphMaker g;
    const int self = g.Feed({dtype, shape});
    // Distinct positions for the plain put (no write races): a prefix of a
    // permutation of dim 1, paired with any dim 3 index.
    const int64_t k = Dim(1, 4);
    const int a = g.Feed({DType::kInt64, {k}});
    const int b = g.Feed({DType::kInt32, {k}}, Fill::kLabels, shape[3]);
    const int values = g.Feed({dtype, {k, 1, shape[2]}});
    g.Add1("index_put", {self, a, b, values}, IndexedDims({1, 3}));
    // Accumulating over repeated positions (bool: or).
    // Few repeats per position in 16 bits: the GPU rounds at every add.
    const int64_t many = IsHalf(dtype) ? Dim(1, 40) : Dim(1, 500);
    const int c = g.Feed({DType::kInt32, {many}}, Fill::kLabels, shape[1]);
    const int sums = g.Feed({dtype, {shape[0], many, shape[2], shape[3]}}, Fill::kSmall);
    g.Add1("_unsafe_index_put", {self, c, sums}, MakeAttrs({{"indexed_dims", Ints{1}}, {"accumulate", true}}));
    std::vector<Bytes> feeds = g.RandomFeeds(Rng());
    std::vector<int64_t> perm(static_cast<size_t>(shape[1]));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), Rng());
    for (int64_t i = 0; i < k; ++i) SetIndex(feeds[a], DType::kInt64, i, Dim(0, 1) ? perm[i] : perm[i] - shape[1]);
    MakeSomeNegative(feeds[c], DType::kInt32, shape[1]);
    CheckSums(g, feeds);
  }
}

TEST(CudaIndexOps, ScatterAddAndEveryScatterReduce) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : kScatterDTypes) {
    for (const char* reduce : {"sum", "prod", "mean", "amax", "amin"}) {
      if (dtype == DType::kInt32 && std::string(reduce) == "prod") continue;  // products overflow int32
      for (bool include_self : {true, false}) {
        // Many index entries per target along dim 0 (atomics collide), or
        // few, along dim 1.
        const int64_t rows = Dim(1, 64), cols = Dim(1, 70);
        const bool dense = Dim(0, 1) == 1;
        const int dim = dense ? 0 : 1;
        const Shape index_shape = dense ? Shape{Dim(1, 3 * rows), Dim(1, cols)} : Shape{Dim(1, rows), Dim(1, cols)};
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(dtype) << " " << reduce << " include_self " << include_self << " self [" << rows
                     << ", " << cols << "] index " << ShapeString(index_shape) << " dim " << dim);
        GraphMaker g;
        // Products of factors near 1 stay in range; others any value.
        const Fill fill = std::string(reduce) == "prod" && IsFloating(dtype) ? Fill::kPositive : Fill::kUniform;
        const int self = g.Feed({dtype, {rows, cols}}, fill);
        const int index =
            g.Feed({Dim(0, 1) ? DType::kInt64 : DType::kInt32, index_shape}, Fill::kLabels, dim == 0 ? rows : cols);
        const int src = g.Feed({dtype, {index_shape[0] + Dim(0, 2), index_shape[1] + Dim(0, 2)}}, fill);
        const Attrs attrs =
            MakeAttrs({{"dim", int64_t{dim}}, {"reduce", std::string(reduce)}, {"include_self", include_self}});
        g.Add("scatter_reduce.two", {self, index, src}, attrs);
        if (std::string(reduce) == "sum" && include_self) {
          g.Add1("scatter_add", {self, index, src}, MakeAttrs({{"dim", int64_t{dim}}}));
        }
        CheckSums(g);
      }
    }
  }
}

TEST(CudaIndexOps, MaskedScatterInEveryDType) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : kAllDTypes) {
    // Past one block's 1024 elements, so the running count crosses chunks.
    const Shape shape = {Dim(1, 90), Dim(1, 70)};
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape));
    GraphMaker g;
    const int self = g.Feed({dtype, shape});
    const int source = g.Feed({dtype, {shape[0] * shape[1] + Dim(0, 5)}});
    const int full = g.Feed({DType::kBool, shape});
    g.Add1("masked_scatter", {self, full, source});
    const int rows = g.Feed({DType::kBool, {shape[0], 1}});
    g.Add1("masked_scatter", {self, rows, source});
    CheckExact(g);
  }
}

TEST(CudaIndexOps, StridedOpsInEveryDType) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : kAllDTypes) {
    const Shape shape = {Dim(1, 9), Dim(2, 40), Dim(2, 33)};
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape));
    GraphMaker g;
    const int self = g.Feed({dtype, shape});
    // slice_scatter with and without a step, select_scatter.
    const int64_t start = Dim(0, shape[1] - 1), step = Dim(1, 3);
    const int64_t length = (shape[1] - start + step - 1) / step;
    const int part = g.Feed({dtype, {shape[0], length, shape[2]}});
    g.Add1("slice_scatter", {self, part}, MakeAttrs({{"dim", int64_t{1}}, {"start", start}, {"step", step}}));
    const int64_t end = Dim(1, shape[2]);
    const int cols = g.Feed({dtype, {shape[0], shape[1], end}});
    g.Add1("slice_scatter", {self, cols}, MakeAttrs({{"dim", int64_t{-1}}, {"end", end}}));
    const int row = g.Feed({dtype, {shape[0], shape[2]}});
    g.Add1("select_scatter", {self, row}, MakeAttrs({{"dim", int64_t{1}}, {"index", -Dim(1, shape[1])}}));
    // as_strided: a transposed view (the tiled transpose), a view with a
    // stride of 0, and one with an offset.
    const int64_t numel = shape[0] * shape[1] * shape[2];
    g.Add1("as_strided", {self}, MakeAttrs({{"size", Ints{shape[2], shape[1]}}, {"stride", Ints{1, shape[2]}}}));
    g.Add1("as_strided_copy", {self},
           MakeAttrs({{"size", Ints{5, shape[1], (shape[2] + 1) / 2}}, {"stride", Ints{0, shape[2], 2}}}));
    const int64_t offset = Dim(0, numel - shape[1]);
    g.Add1("as_strided", {self},
           MakeAttrs({{"size", Ints{shape[1]}}, {"stride", Ints{1}}, {"storage_offset", offset}}));
    // as_strided_scatter through a non-overlapping view (every other column).
    const int64_t half = shape[2] / 2;
    const int strided_src = g.Feed({dtype, {shape[0] * shape[1], half}});
    g.Add1("as_strided_scatter", {self, strided_src},
           MakeAttrs({{"size", Ints{shape[0] * shape[1], half}},
                      {"stride", Ints{shape[2], 2}},
                      {"storage_offset", int64_t{1}}}));
    // diagonal, flip, repeat.
    g.Add1("diagonal", {self}, MakeAttrs({{"offset", Dim(-1, 1)}, {"dim1", int64_t{2}}, {"dim2", int64_t{1}}}));
    const int diag = g.Add1("diagonal_copy", {self}, MakeAttrs({{"dim1", int64_t{0}}, {"dim2", int64_t{-1}}}));
    const int diag_src = g.Feed(g.type(diag));
    g.Add1("diagonal_scatter", {self, diag_src}, MakeAttrs({{"dim1", int64_t{0}}, {"dim2", int64_t{-1}}}));
    g.Add1("flip", {self}, MakeAttrs({{"dims", Ints{0, -1}}}));
    g.Add1("flip", {self}, MakeAttrs({{"dims", Ints{1}}}));
    g.Add1("repeat", {self}, MakeAttrs({{"repeats", Ints{2, 1, 3, 2}}}));
    CheckExact(g);
  }
}

// The in-place forms: output 0 on self's buffer, as the planner may place it.
TEST(CudaIndexOps, InPlaceOnSelf) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
    SCOPED_TRACE(DTypeName(dtype));
    GraphMaker g;
    const int a = g.Feed({dtype, {50, 40}});
    const int index = g.Feed({DType::kInt64, {120, 40}}, Fill::kLabels, 50);
    const int src = g.Feed({dtype, {120, 40}}, Fill::kSmall);
    const int add = g.Add1("scatter_add", {a, index, src}, MakeAttrs({{"dim", int64_t{0}}}));
    const int b = g.Feed({dtype, {50, 40}});
    const int part = g.Feed({dtype, {50, 13}});
    const int slice = g.Add1("slice_scatter", {b, part},
                             MakeAttrs({{"dim", int64_t{1}}, {"start", int64_t{1}}, {"step", int64_t{3}}}));
    const int c = g.Feed({dtype, {50, 40}});
    const int mask = g.Feed({DType::kBool, {40}});
    const int source = g.Feed({dtype, {2000}});
    const int masked = g.Add1("masked_scatter", {c, mask, source});
    const int d = g.Feed({dtype, {50, 40}});
    const int coin = g.Add1("bernoulli.p", {d}, MakeAttrs({{"p", 0.3}}));
    CheckSums(g, {}, {{add, a}, {slice, b}, {masked, c}, {coin, d}});
  }
}

// bernoulli, rand and randn draw what the CPU kernels draw; bernoulli's
// mean is p.
TEST(CudaIndexOps, RandomOpsDrawTheCpuNumbers) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker g;
  const int seed = g.Feed({DType::kInt64, {}});
  const int64_t n = Dim(100000, 300000);
  std::vector<std::pair<int, double>> coins;  // output, p
  for (DType dtype : kAllDTypes) {
    const int self = g.Feed({dtype, {n}});
    const double p = std::uniform_real_distribution<double>(0.05, 0.95)(Rng());
    coins.push_back({g.Add1("bernoulli.p", {self, seed}, MakeAttrs({{"p", p}, {"seed", int64_t{7}}})), p});
  }
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    g.Add1("rand", {seed}, MakeAttrs({{"size", Ints{n}}, {"dtype", dtype}, {"seed", int64_t{3}}}));
    g.Add1("rand", {}, MakeAttrs({{"size", Ints{7, 9}}, {"dtype", dtype}}));
    g.Add1("randn", {seed}, MakeAttrs({{"size", Ints{n}}, {"dtype", dtype}, {"seed", int64_t{4}}}));
  }
  g.Add1("empty.memory_format", {}, MakeAttrs({{"size", Ints{3, 4}}, {"dtype", DType::kBFloat16}}));
  g.Add1("empty_strided", {}, MakeAttrs({{"size", Ints{3, 4}}, {"stride", Ints{1, 3}}}));
  g.Add1("new_empty_strided", {seed}, MakeAttrs({{"size", Ints{5}}, {"stride", Ints{1}}}));
  CompareWithCpu(g, [&](const OutputPair& o) {
    const bool normal = o.graph->nodes[o.node].op == "randn";
    EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), normal ? 1e-6 : 0.0)) << o.Where();
    for (const auto& [value, p] : coins) {
      if (value != o.value) continue;
      // The fraction of ones, read through the CPU result (equal to the GPU's).
      int64_t ones = 0;
      const size_t bytes = DTypeSize(o.type().dtype);
      for (int64_t i = 0; i < n; ++i) {
        bool zero = true;
        for (size_t b = 0; b < bytes; ++b) zero = zero && (*o.gpu)[i * bytes + b] == 0;
        ones += zero ? 0 : 1;
      }
      EXPECT_NEAR(static_cast<double>(ones) / n, p, 5 * std::sqrt(p * (1 - p) / n)) << o.Where();
    }
  });
}

// A bad index in index.Tensor, index_put or scatter_add, or too short a
// source for masked_scatter, fails its iteration through the error word,
// naming the node and the value; the next iteration runs and is right.
TEST(CudaIndexOps, BadIndicesFailTheirIteration) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker g;
  const int self = g.Feed({DType::kFloat32, {6, 9}});
  const int rows = g.Feed({DType::kInt32, {5}}, Fill::kLabels, 6);
  g.Add1("_unsafe_index.Tensor", {self, rows});  // node 0
  const int cols = g.Feed({DType::kInt64, {4}}, Fill::kLabels, 9);
  const int values = g.Feed({DType::kFloat32, {6, 4}});
  g.Add1("index_put", {self, cols, values}, MakeAttrs({{"indexed_dims", Ints{1}}, {"accumulate", true}}));  // node 1
  const int index = g.Feed({DType::kInt64, {3, 9}}, Fill::kLabels, 6);
  const int src = g.Feed({DType::kFloat32, {3, 9}});
  g.Add1("scatter_add", {self, index, src}, MakeAttrs({{"dim", int64_t{0}}}));  // node 2
  const int mask = g.Feed({DType::kBool, {6, 9}});
  const int source = g.Feed({DType::kFloat32, {20}});
  g.Add1("masked_scatter", {self, mask, source});  // node 3
  auto program = cuda::CreateCudaProgram(g.graph(), *Gpu(), cuda::CudaProgramOptions{});
  ASSERT_TRUE(program.ok()) << program.status();
  GpuRun run(g.graph());
  // At most 20 true mask elements in a good iteration.
  auto good_feeds = [&] {
    std::vector<Bytes> feeds = g.RandomFeeds(Rng());
    std::fill(feeds[mask].begin(), feeds[mask].end(), 0);
    for (int64_t i = 0; i < 20; ++i) feeds[mask][Dim(0, 53)] = 1;
    return feeds;
  };
  struct Bad {
    int feed;
    DType dtype;
    int64_t value;
    int node;
    std::string op;
    std::string says;
  };
  const std::vector<Bad> cases = {
      {rows, DType::kInt32, 6, 0, "_unsafe_index.Tensor", "index 6 is outside its dim of self float32[6, 9]"},
      {rows, DType::kInt32, -7, 0, "_unsafe_index.Tensor", "index -7 "},
      {cols, DType::kInt64, 9, 1, "index_put", "index 9 "},
      {index, DType::kInt64, -1, 2, "scatter_add", "index -1 is outside [0, 6) (dim 0 of self float32[6, 9])"},
      {mask, DType::kBool, 21, 3, "masked_scatter", "mask has 21 true elements but source has only 20"},
  };
  for (const Bad& bad : cases) {
    SCOPED_TRACE(::testing::Message() << bad.op << " " << bad.value);
    std::vector<Bytes> feeds = good_feeds();
    if (bad.dtype == DType::kBool) {
      std::fill(feeds[mask].begin(), feeds[mask].end(), 0);
      std::fill(feeds[mask].begin(), feeds[mask].begin() + bad.value, 1);
    } else {
      SetIndex(feeds[bad.feed], bad.dtype, Dim(0, g.type(bad.feed).numel() - 1), bad.value);
    }
    ASSERT_TRUE(run.Upload(feeds).ok());
    const absl::Status s = run.RunIteration(**program);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    const std::string node = absl::StrCat("node ", bad.node, " (", bad.op, " '", bad.op, bad.node, "')");
    EXPECT_EQ(s.message().rfind(node, 0), 0u) << s;
    EXPECT_NE(s.message().find(bad.says), absl::string_view::npos) << s;

    const std::vector<Bytes> good = good_feeds();
    auto ref = RunOnCpu(g.graph(), good);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_TRUE(run.Upload(good).ok());
    const absl::Status next = run.RunIteration(**program);
    ASSERT_TRUE(next.ok()) << next;
    auto out = run.Download();
    ASSERT_TRUE(out.ok()) << out.status();
    for (const Node& n : g.graph().nodes) {
      for (int v : n.outputs) {
        EXPECT_TRUE(Matches((*out)[v], (*ref)[v], g.type(v), 1e-5)) << n.op;
      }
    }
  }
}

}  // namespace
}  // namespace tandem::gpu_test
