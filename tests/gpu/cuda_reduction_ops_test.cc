// The reduction, scan and sort CUDA kernels (mean, prod, var,
// linalg_vector_norm, amax / amin, argmax / argmin, max.dim / min.dim,
// cumsum, sort, topk; reduce_launch.h) against the CPU kernels (the oracle),
// on fresh random inputs and shapes (the seed is printed), in every dtype
// each kernel takes: float32, float64, bfloat16, float16 and, where the op
// takes it, int64. Every kernel choice is reached: a thread, a warp or a
// block per output, column tiles, the general layout of scattered dims, rows
// of 10^7 elements, the thread, warp and block scans, and the sorting
// network within and across shared-memory tiles. Each graph runs twice on
// the GPU, op by op and as a replay of the captured CUDA graph; outputs are
// poisoned (0xFF bytes: NaN) before each run, must match the CPU both times,
// and must be the same bits in both runs (nothing depends on timing).
//
// Tolerances (normwise relative): float32 sums accumulate in float on the
// GPU and in double on the CPU, which differ by about eps * sqrt(n) relative
// to the terms (kReduce32; long scans and products of 10^6 terms more);
// 16-bit results are rounded once from float32, so a float32 difference
// moves them one ulp at most (2u + 1e-3, u = 2^-8 for bfloat16, 2^-11 for
// float16). Maxima, minima, their positions, integer results and counts
// (ord 0) are exact; NaN inputs must give NaN exactly where the CPU does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/half.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

using Ints = std::vector<int64_t>;

constexpr double kReduce32 = 1e-4;
constexpr double kLong32 = 1e-3;  // scans and products over 10^5..10^7 terms
constexpr double kAny64 = 1e-12;
constexpr double kExact = 0;
constexpr double kInf = std::numeric_limits<double>::infinity();

int64_t Dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(Rng()); }

double HalfTolerance(DType dtype) {
  return 2 * (dtype == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11)) + 1e-3;
}

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// Element i of `bytes` (of `dtype`) as a double.
double At(const Bytes& bytes, DType dtype, size_t i) {
  const uint8_t* p = bytes.data();
  switch (dtype) {
    case DType::kFloat32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DType::kFloat64: {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      return v;
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      return static_cast<double>(v);
    }
    case DType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return BFloat16BitsToFloat(v);
    }
    case DType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return Float16BitsToFloat(v);
    }
    default:
      ADD_FAILURE() << "dtype not handled by the test";
      return 0;
  }
}

// NaN exactly where `ref` has NaN, and the other elements within
// `tolerance` normwise (exactly when tolerance is 0).
::testing::AssertionResult MatchesWithNan(const Bytes& out, const Bytes& ref, const TensorType& type,
                                          double tolerance) {
  if (out.size() != ref.size()) return ::testing::AssertionFailure() << "sizes differ";
  const size_t n = static_cast<size_t>(type.numel());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    const double o = At(out, type.dtype, i), r = At(ref, type.dtype, i);
    if (std::isnan(r) != std::isnan(o)) {
      return ::testing::AssertionFailure() << "element " << i << " is " << o << ", reference " << r;
    }
    if (std::isnan(r)) continue;
    if (tolerance == 0 && o != r) {
      return ::testing::AssertionFailure() << "element " << i << " is " << o << ", reference " << r;
    }
    if (std::isinf(r) || std::isinf(o)) {
      if (o != r) return ::testing::AssertionFailure() << "element " << i << " is " << o << ", reference " << r;
      continue;
    }
    diff += (o - r) * (o - r);
    norm += r * r;
  }
  const double error = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  if (error <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative error " << error << " > " << tolerance;
}

struct Tolerances {
  double f32 = kReduce32;
  bool exact = false;  // maxima, positions: every float dtype exactly
  bool nan = false;    // the inputs hold NaNs: compare NaN positions, not refuse them
};

// The graph on the CPU and on the GPU (op by op, then replayed): every node
// output within its dtype's tolerance of the CPU's, and the same bits in both
// GPU runs.
void Check(const GraphMaker& g, Tolerances t = {}, std::vector<Bytes> feeds = {}) {
  std::map<int, Bytes> first_run;
  CompareWithCpu(
      g,
      [&](const OutputPair& o) {
        const DType dtype = o.type().dtype;
        double tolerance = dtype == DType::kFloat64 ? kAny64 : IsHalf(dtype) ? HalfTolerance(dtype) : t.f32;
        if (t.exact || dtype == DType::kInt64) tolerance = kExact;
        if (t.nan || t.exact) {
          EXPECT_TRUE(MatchesWithNan(*o.gpu, *o.ref, o.type(), tolerance)) << o.Where();
        } else {
          EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), tolerance)) << o.Where();
        }
        if (!o.replay) {
          first_run[o.value] = *o.gpu;
        } else {
          EXPECT_TRUE(SameBytes(first_run[o.value], *o.gpu)) << o.Where() << ": the two GPU runs differ";
        }
      },
      /*alias=*/{}, std::move(feeds));
}

// Random feeds with about `per_million` NaNs per million elements (at least
// one per float feed) at random places.
std::vector<Bytes> FeedsWithNans(const GraphMaker& g, int64_t per_million) {
  std::vector<Bytes> feeds = g.RandomFeeds(Rng());
  for (int v : g.graph().feeds) {
    const TensorType& type = g.type(v);
    if (!IsFloating(type.dtype) || type.numel() == 0) continue;
    const int64_t n = type.numel();
    const int64_t nans = std::max<int64_t>(1, n * per_million / 1000000);
    for (int64_t k = 0; k < nans; ++k) {
      const size_t i = static_cast<size_t>(Dim(0, n - 1));
      const size_t size = DTypeSize(type.dtype);
      std::memset(feeds[v].data() + i * size, 0xFF, size);  // a NaN in every float type
    }
  }
  return feeds;
}

const std::vector<Ints>& DimSets() {
  static const std::vector<Ints> sets = {{0}, {1}, {2}, {-1}, {0, 2}, {0, 1}, {1, 2}, {}, {0, 1, 2}, {-3, -1}};
  return sets;
}

const std::vector<DType>& FloatTypes() {
  static const std::vector<DType> types = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16};
  return types;
}

const std::vector<DType>& AllTypes() {
  static const std::vector<DType> types = {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kBFloat16,
                                           DType::kFloat16};
  return types;
}

// Shapes that reach every kernel of a reduction over `dims`: small random
// ones (a thread or a warp per output, the general layout), long rows (a
// block per row), many short rows, wide and narrow columns (column tiles, a
// block per strided column) and per-channel statistics of [N, C, H, W].
struct ShapeCase {
  Shape shape;
  Ints dims;
};

std::vector<ShapeCase> LayoutCases() {
  return {{{Dim(1, 9), Dim(1, 40), Dim(1, 70)}, {1}},
          {{Dim(2, 5), Dim(1025, 9000)}, {1}},
          {{Dim(20000, 40000), 7}, {-1}},
          {{Dim(2000, 5000), Dim(100, 700)}, {0}},
          {{Dim(100000, 200000), 3}, {0}},
          {{Dim(2, 5), Dim(200, 900), Dim(33, 70)}, {1}},
          {{Dim(8, 16), Dim(3, 40), Dim(17, 40), Dim(17, 40)}, {0, 2, 3}},
          {{Dim(3, 5), Dim(3, 7), Dim(3, 9)}, {0, 2}},
          {{1, Dim(1000000, 3000000)}, {}}};
}

TEST(CudaReductionOps, Mean) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : FloatTypes()) {
    for (const Shape& shape :
         {Shape{}, Shape{Dim(1, 40)}, Shape{Dim(1, 30), Dim(1, 3000)}, Shape{Dim(100000, 2000000)}}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape));
      GraphMaker g;
      const int x = g.Feed({dtype, shape});
      g.Add1("mean", {x});
      if (dtype == DType::kFloat32) g.Add1("mean", {x}, MakeAttrs({{"dtype", DType::kFloat64}}));
      if (IsHalf(dtype)) g.Add1("mean", {x}, MakeAttrs({{"dtype", DType::kFloat32}}));
      Check(g);
    }
  }
}

TEST(CudaReductionOps, AmaxAmin) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Shape shape = {Dim(1, 9), Dim(1, 40), Dim(1, 70)};
  for (DType dtype : AllTypes()) {
    for (const Ints& dims : DimSets()) {
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape) << " dims "
                                          << ::testing::PrintToString(dims) << " keepdim " << keepdim);
        GraphMaker g;
        const int x = g.Feed({dtype, shape});
        g.Add1("amax", {x}, MakeAttrs({{"dim", dims}, {"keepdim", keepdim}}));
        g.Add1("amin", {x}, MakeAttrs({{"dim", dims}, {"keepdim", keepdim}}));
        Check(g, {.exact = true});
      }
    }
  }
  for (DType dtype : AllTypes()) {
    for (const ShapeCase& c : LayoutCases()) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(c.shape) << " dims "
                                        << ::testing::PrintToString(c.dims));
      GraphMaker g;
      const int x = g.Feed({dtype, c.shape});
      g.Add1("amax", {x}, MakeAttrs({{"dim", c.dims}}));
      g.Add1("amin", {x}, MakeAttrs({{"dim", c.dims}, {"keepdim", true}}));
      Check(g, {.exact = true});
    }
  }
}

// argmax / argmin over every dim and the flattened tensor, max.dim /
// min.dim; int64 and 16-bit inputs hold many equal values, so the first
// position must win on both backends.
TEST(CudaReductionOps, ArgExtrema) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Shape shape = {Dim(1, 9), Dim(1, 40), Dim(1, 70)};
  for (DType dtype : AllTypes()) {
    GraphMaker g;
    const int x = g.Feed({dtype, shape});
    for (int64_t dim : {0, 1, 2, -1}) {
      for (bool keepdim : {false, true}) {
        const Attrs attrs = MakeAttrs({{"dim", dim}, {"keepdim", keepdim}});
        g.Add1("argmax", {x}, attrs);
        g.Add1("argmin", {x}, attrs);
        g.Add("max.dim", {x}, attrs);
        g.Add("min.dim", {x}, attrs);
      }
    }
    g.Add1("argmax", {x});
    g.Add1("argmin", {x}, MakeAttrs({{"keepdim", true}}));
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape));
    Check(g, {.exact = true});
  }
  for (DType dtype : AllTypes()) {
    for (const ShapeCase& c : LayoutCases()) {
      if (c.dims.size() > 1) continue;  // single-dim ops
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(c.shape) << " dims "
                                        << ::testing::PrintToString(c.dims));
      GraphMaker g;
      const int x = g.Feed({dtype, c.shape});
      if (c.dims.empty()) {
        g.Add1("argmax", {x});
        g.Add1("argmin", {x});
      } else {
        const Attrs attrs = MakeAttrs({{"dim", c.dims[0]}});
        g.Add1("argmax", {x}, attrs);
        g.Add("min.dim", {x}, attrs);
      }
      Check(g, {.exact = true});
    }
  }
}

// NaN propagates through amax / amin and the norms, and is the extreme of
// argmax, argmin, max.dim and min.dim (the first NaN's position).
TEST(CudaReductionOps, NanInputs) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : FloatTypes()) {
    for (const Shape& shape : {Shape{Dim(50, 200), Dim(5, 60)}, Shape{Dim(2, 4), Dim(5000, 20000)}}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape));
      GraphMaker g;
      const int x = g.Feed({dtype, shape});
      for (int64_t dim : {0, 1}) {
        g.Add1("amax", {x}, MakeAttrs({{"dim", Ints{dim}}}));
        g.Add1("amin", {x}, MakeAttrs({{"dim", Ints{dim}}}));
        g.Add1("argmax", {x}, MakeAttrs({{"dim", dim}}));
        g.Add1("argmin", {x}, MakeAttrs({{"dim", dim}}));
        g.Add("max.dim", {x}, MakeAttrs({{"dim", dim}}));
        g.Add("min.dim", {x}, MakeAttrs({{"dim", dim}}));
        for (double ord : {2.0, kInf, -kInf, 0.0}) {
          g.Add1("linalg_vector_norm", {x}, MakeAttrs({{"dim", Ints{dim}}, {"ord", ord}}));
        }
      }
      g.Add1("argmax", {x});
      Check(g, {.nan = true}, FeedsWithNans(g, 2000));
    }
  }
}

TEST(CudaReductionOps, Var) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Shape shape = {Dim(1, 9), Dim(1, 40), Dim(1, 70)};
  for (DType dtype : FloatTypes()) {
    for (const Ints& dims : DimSets()) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape) << " dims "
                                        << ::testing::PrintToString(dims));
      GraphMaker g;
      const int x = g.Feed({dtype, shape});
      g.Add1("var.correction", {x}, MakeAttrs({{"dim", dims}}));
      g.Add1("var.correction", {x}, MakeAttrs({{"dim", dims}, {"correction", int64_t{0}}, {"keepdim", true}}));
      g.Add1("var.dim", {x}, MakeAttrs({{"dim", dims}, {"unbiased", false}}));
      // Slices of up to 2 elements divide by max(0, N - 2.5) = 0: inf or NaN.
      g.Add1("var.correction", {x}, MakeAttrs({{"dim", dims}, {"correction", 2.5}}));
      Check(g, {.nan = true});
    }
  }
  for (DType dtype : FloatTypes()) {
    for (const ShapeCase& c : LayoutCases()) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(c.shape) << " dims "
                                        << ::testing::PrintToString(c.dims));
      GraphMaker g;
      // Values around 1 test the deviations' accumulation, not the mean's.
      const int x = g.Feed({dtype, c.shape}, Fill::kPositive);
      g.Add1("var.correction", {x}, MakeAttrs({{"dim", c.dims}}));
      Check(g);
    }
  }
}

TEST(CudaReductionOps, VectorNorm) {
  TANDEM_SKIP_WITHOUT_GPU();
  const std::vector<double> ords = {2, 1, kInf, -kInf, 0, 3, 0.5, -1.5};
  const Shape shape = {Dim(1, 9), Dim(1, 40), Dim(1, 70)};
  for (DType dtype : FloatTypes()) {
    for (const Ints& dims : DimSets()) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape) << " dims "
                                        << ::testing::PrintToString(dims));
      GraphMaker g;
      // Nonzero values: a negative ord's |x|^p stays finite.
      const int x = g.Feed({dtype, shape}, Fill::kNonZero);
      for (double ord : ords) g.Add1("linalg_vector_norm", {x}, MakeAttrs({{"ord", ord}, {"dim", dims}}));
      g.Add1("linalg_vector_norm", {x}, MakeAttrs({{"dim", dims}, {"keepdim", true}, {"ord", int64_t{1}}}));
      if (dtype == DType::kFloat32) {
        g.Add1("linalg_vector_norm", {x}, MakeAttrs({{"dim", dims}, {"dtype", DType::kFloat64}}));
      }
      if (IsHalf(dtype)) g.Add1("linalg_vector_norm", {x}, MakeAttrs({{"dim", dims}, {"dtype", DType::kFloat32}}));
      Check(g);
    }
  }
  for (DType dtype : FloatTypes()) {
    for (const ShapeCase& c : LayoutCases()) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(c.shape) << " dims "
                                        << ::testing::PrintToString(c.dims));
      GraphMaker g;
      const int x = g.Feed({dtype, c.shape});
      g.Add1("linalg_vector_norm", {x}, MakeAttrs({{"dim", c.dims}}));
      g.Add1("linalg_vector_norm", {x}, MakeAttrs({{"dim", c.dims}, {"ord", kInf}}));
      g.Add1("linalg_vector_norm", {x}, MakeAttrs({{"dim", c.dims}, {"ord", 3.0}}));
      Check(g);
    }
  }
}

TEST(CudaReductionOps, Prod) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : AllTypes()) {
    // At most 12 factors in [0.5, 2): no float16 overflow. int64 products of
    // values up to 50 wrap identically on both backends.
    const Shape shape = {Dim(1, 12), Dim(1, 12), Dim(1, 7)};
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape));
    GraphMaker g;
    const int x = g.Feed({dtype, shape}, Fill::kPositive);
    for (int64_t dim : {0, 1, 2, -1}) {
      g.Add1("prod.dim_int", {x}, MakeAttrs({{"dim", dim}}));
      g.Add1("prod.dim_int", {x}, MakeAttrs({{"dim", dim}, {"keepdim", true}}));
    }
    const int row = g.Feed({dtype, {Dim(1, 12)}}, Fill::kPositive);
    g.Add1("prod", {row});
    if (dtype == DType::kInt64) {
      g.Add1("prod", {row}, MakeAttrs({{"dtype", DType::kFloat64}}));
      g.Add1("prod.dim_int", {x}, MakeAttrs({{"dim", int64_t{1}}, {"dtype", DType::kFloat32}}));
    }
    if (dtype == DType::kFloat32) g.Add1("prod", {row}, MakeAttrs({{"dtype", DType::kFloat64}}));
    if (IsHalf(dtype)) g.Add1("prod.dim_int", {x}, MakeAttrs({{"dim", int64_t{0}}, {"dtype", DType::kFloat32}}));
    Check(g);
  }
  // Long rows and columns of factors within 1e-3 of 1 (a block per row,
  // column tiles, a block per column); int64 products wrap.
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{
             {{3, Dim(100000, 1000000)}, 1}, {{Dim(5000, 20000), 300}, 0}, {{Dim(100000, 300000), 5}, 0}}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape) << " dim " << dim);
      GraphMaker g;
      const int x = g.Feed({dtype, shape});
      g.Add1("prod.dim_int", {x}, MakeAttrs({{"dim", dim}}));
      std::vector<Bytes> feeds = g.RandomFeeds(Rng());
      if (dtype != DType::kInt64) {
        const int64_t n = g.type(x).numel();
        for (int64_t i = 0; i < n; ++i) {
          const double v = 1.0 + 1e-3 * std::uniform_real_distribution<double>(-1, 1)(Rng());
          if (dtype == DType::kFloat32) {
            const float f = static_cast<float>(v);
            std::memcpy(feeds[x].data() + 4 * i, &f, 4);
          } else {
            std::memcpy(feeds[x].data() + 8 * i, &v, 8);
          }
        }
      }
      Check(g, {.f32 = kLong32}, feeds);
    }
  }
}

TEST(CudaReductionOps, Cumsum) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Shape shape = {Dim(1, 9), Dim(1, 40), Dim(1, 70)};
  for (DType dtype : AllTypes()) {
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape));
    GraphMaker g;
    const int x = g.Feed({dtype, shape});
    for (int64_t dim : {0, 1, 2, -1}) g.Add1("cumsum", {x}, MakeAttrs({{"dim", dim}}));
    if (dtype == DType::kInt64) {
      g.Add1("cumsum", {x}, MakeAttrs({{"dim", int64_t{1}}, {"dtype", DType::kFloat32}}));
      g.Add1("cumsum", {x}, MakeAttrs({{"dim", int64_t{2}}, {"dtype", DType::kFloat64}}));
    }
    if (dtype == DType::kFloat32) g.Add1("cumsum", {x}, MakeAttrs({{"dim", int64_t{2}}, {"dtype", DType::kFloat64}}));
    if (IsHalf(dtype)) g.Add1("cumsum", {x}, MakeAttrs({{"dim", int64_t{2}}, {"dtype", DType::kFloat32}}));
    const int scalar = g.Feed({dtype, {}});
    g.Add1("cumsum", {scalar}, MakeAttrs({{"dim", int64_t{0}}}));
    Check(g);
  }
  // The thread scan (short rows; many strided lines), the warp scan (rows up
  // to 4096), the block scan (long rows; few long strided lines), and a row
  // of up to 3 * 10^6 elements.
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{Dim(20000, 50000), Dim(2, 16)}, 1}, {{Dim(100, 300), Dim(5000, 9000)}, 0}, {{Dim(100, 2000), Dim(17, 4096)}, 1},
      {{Dim(2, 5), Dim(4097, 100000)}, 1},  {{Dim(5000, 20000), Dim(2, 40)}, 0},   {{1, Dim(1000000, 3000000)}, 1}};
  for (DType dtype : AllTypes()) {
    for (const auto& [s, dim] : cases) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(s) << " dim " << dim);
      GraphMaker g;
      const int x = g.Feed({dtype, s});
      g.Add1("cumsum", {x}, MakeAttrs({{"dim", dim}}));
      Check(g, {.f32 = kLong32});
    }
  }
}

// sort (insertion sort of short lines; the bitonic network, within shared
// memory tiles and across them, of lines up to 10^6) and topk (k passes of a
// block per line, or k == size as a sort), over the last dim and a middle
// one, with NaNs and (in 16-bit and int64 inputs) many equal values: the
// stable order must match the CPU's exactly.
TEST(CudaReductionOps, SortAndTopk) {
  TANDEM_SKIP_WITHOUT_GPU();
  const std::vector<Shape> shapes = {{Dim(1, 300), Dim(2, 16)},     {Dim(1, 50), Dim(17, 2048)},
                                     {Dim(1, 4), Dim(2049, 70000)}, {Dim(2, 9), Dim(17, 900), Dim(2, 5)},
                                     {1, Dim(300000, 1000000)},     {}};
  for (DType dtype : AllTypes()) {
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape));
      GraphMaker g;
      const int x = g.Feed({dtype, shape});
      const int64_t last = shape.empty() ? 1 : shape.back();
      g.Add("sort", {x});
      g.Add("sort", {x}, MakeAttrs({{"descending", true}}));
      g.Add("topk", {x}, MakeAttrs({{"k", std::min<int64_t>(last, Dim(1, 8))}}));
      g.Add("topk", {x}, MakeAttrs({{"k", std::min<int64_t>(last, 3)}, {"largest", false}, {"sorted", false}}));
      g.Add("topk", {x}, MakeAttrs({{"k", last}}));
      if (shape.size() == 3) {
        g.Add("sort", {x}, MakeAttrs({{"dim", int64_t{1}}, {"descending", true}}));
        g.Add("topk", {x}, MakeAttrs({{"k", int64_t{5}}, {"dim", int64_t{1}}}));
      }
      Check(g, {.exact = true}, FeedsWithNans(g, 500));
    }
  }
}

// Rows of 10^7 elements: one block each, never one thread; the results must
// match the double-accumulating CPU within float32 accuracy.
TEST(CudaReductionOps, TenMillionElementRows) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker g;
  const int x = g.Feed({DType::kFloat32, {10000000}}, Fill::kPositive);
  g.Add1("mean", {x});
  g.Add1("amax", {x});
  g.Add1("argmin", {x});
  g.Add("max.dim", {x}, MakeAttrs({{"dim", int64_t{0}}}));
  g.Add1("var.correction", {x});
  g.Add1("linalg_vector_norm", {x});
  g.Add1("linalg_vector_norm", {x}, MakeAttrs({{"ord", 1.0}}));
  g.Add1("cumsum", {x}, MakeAttrs({{"dim", int64_t{0}}}));
  const int rows = g.Feed({DType::kBFloat16, {2, 5000000}});
  g.Add1("amin", {rows}, MakeAttrs({{"dim", Ints{1}}}));
  g.Add1("argmax", {rows}, MakeAttrs({{"dim", int64_t{1}}}));
  g.Add1("var.dim", {rows}, MakeAttrs({{"dim", Ints{1}}}));
  Check(g, {.f32 = kLong32});
}

// Empty slices and empty outputs: prod is 1, the norms of ord >= 0 are 0, a
// variance is NaN; nothing is written for an empty output.
TEST(CudaReductionOps, EmptySlices) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    GraphMaker g;
    const int x = g.Feed({dtype, {0, 5}});
    g.Add1("prod.dim_int", {x}, MakeAttrs({{"dim", int64_t{0}}}));
    g.Add1("linalg_vector_norm", {x}, MakeAttrs({{"dim", Ints{0}}}));
    g.Add1("linalg_vector_norm", {x}, MakeAttrs({{"dim", Ints{0}}, {"ord", 0.0}}));
    g.Add1("var.correction", {x}, MakeAttrs({{"dim", Ints{0}}}));
    g.Add1("mean", {x});
    g.Add1("amax", {x}, MakeAttrs({{"dim", Ints{1}}}));
    g.Add1("argmax", {x}, MakeAttrs({{"dim", int64_t{1}}}));
    g.Add1("cumsum", {x}, MakeAttrs({{"dim", int64_t{0}}}));
    Check(g, {.nan = true});
  }
}

}  // namespace
}  // namespace tandem::gpu_test
