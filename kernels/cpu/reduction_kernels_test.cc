// The reduction, scan and sort CPU kernels (mean, prod, var,
// linalg_vector_norm, amax / amin, argmax / argmin, max.dim / min.dim,
// cumsum, sort, topk) against hand-worked cases, values PyTorch 1.13 gives,
// and a naive double computation written here (each output's elements
// gathered by unraveling every input index), on fresh random inputs over
// every dim set: non-last dims, several dims, negative dims, keepdim, empty
// dim lists (all dims) and rank-0 inputs; NaN handling of the maxima, the
// norms and the sorts; the 16-bit path against the same reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/half_test_util.h"

namespace tandem {
namespace {

using half_test::Get;
using half_test::HostTensor;
using half_test::Make;
using half_test::MustRun;
using half_test::Values;
using Ints = std::vector<int64_t>;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::mt19937_64& Rng() {
  static std::mt19937_64 rng(half_test::TestSeed("reduction_kernels_test"));
  return rng;
}

// Nonzero values of magnitude in [lo, hi), either sign (integers: 1..50).
HostTensor Random(DType dtype, Shape shape, double lo = 0.1, double hi = 2.0) {
  std::uniform_real_distribution<double> magnitude(lo, hi);
  std::uniform_int_distribution<int64_t> integer(1, 50);
  std::bernoulli_distribution negative(0.5);
  std::vector<double> v(static_cast<size_t>(NumElements(shape)));
  for (double& x : v) {
    x = IsFloating(dtype) ? magnitude(Rng()) : static_cast<double>(integer(Rng()));
    if (negative(Rng())) x = -x;
  }
  return Make(dtype, std::move(shape), v);
}

Shape Unravel(int64_t i, const Shape& shape) {
  Shape index(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return index;
}

int64_t Ravel(const Shape& index, const Shape& shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + index[d];
  return i;
}

// For each output of a reduction of `shape` over `dims` (empty: all; negative
// dims count from the end), the values of its elements in row-major order.
std::vector<std::vector<double>> Slices(const HostTensor& x, const Ints& dims) {
  const Shape& shape = x.type.shape;
  const int rank = static_cast<int>(shape.size());
  std::vector<bool> reduced(rank, dims.empty());
  for (int64_t d : dims) reduced[(d + rank) % rank] = true;
  Shape kept;
  for (int d = 0; d < rank; ++d) kept.push_back(reduced[d] ? 1 : shape[d]);
  std::vector<std::vector<double>> slices(static_cast<size_t>(NumElements(kept)));
  for (int64_t i = 0; i < x.numel(); ++i) {
    Shape index = Unravel(i, shape);
    for (int d = 0; d < rank; ++d) {
      if (reduced[d]) index[d] = 0;
    }
    slices[Ravel(index, kept)].push_back(Get(x, i));
  }
  return slices;
}

std::vector<double> Map(const std::vector<std::vector<double>>& slices,
                        const std::function<double(const std::vector<double>&)>& f) {
  std::vector<double> out;
  for (const auto& s : slices) out.push_back(f(s));
  return out;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double Variance(const std::vector<double>& v, double correction) {
  const double m = Mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / std::max(0.0, static_cast<double>(v.size()) - correction);
}

double Norm(const std::vector<double>& v, double ord) {
  if (std::isinf(ord)) {
    double r = ord > 0 ? 0.0 : kInf;
    for (double x : v) {
      if (std::isnan(x)) return kNan;
      r = ord > 0 ? std::max(r, std::fabs(x)) : std::min(r, std::fabs(x));
    }
    return r;
  }
  double s = 0;
  for (double x : v) s += ord == 0 ? (x != 0 ? 1.0 : 0.0) : std::pow(std::fabs(x), ord);
  return ord == 0 ? s : std::pow(s, 1.0 / ord);
}

double Extreme(const std::vector<double>& v, bool max) {
  double r = max ? -kInf : kInf;
  for (double x : v) {
    if (std::isnan(x)) return kNan;
    r = max ? std::max(r, x) : std::min(r, x);
  }
  return r;
}

// The first position of the extreme; a NaN is the extreme of both kinds.
double ArgExtreme(const std::vector<double>& v, bool max) {
  size_t best = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) return static_cast<double>(i);
    if (max ? v[i] > v[best] : v[i] < v[best]) best = i;
  }
  return static_cast<double>(best);
}

double Product(const std::vector<double>& v) {
  double p = 1;
  for (double x : v) p *= x;
  return p;
}

// |actual - expected| <= rtol * (|expected| + atol_scale) elementwise; NaN
// expected means NaN actual (so a poisoned, unwritten float output fails
// where a number is expected).
void ExpectNear(const HostTensor& actual, const std::vector<double>& expected, double rtol, const std::string& what,
                double atol_scale = 1.0) {
  ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size())) << what;
  int failures = 0;
  for (int64_t i = 0; i < actual.numel() && failures < 5; ++i) {
    const double a = Get(actual, i), e = expected[i];
    const bool ok = std::isnan(e)   ? std::isnan(a)
                    : std::isinf(e) ? a == e
                                    : std::fabs(a - e) <= rtol * (std::fabs(e) + atol_scale);
    if (!ok) {
      ++failures;
      ADD_FAILURE() << what << ": element " << i << " is " << a << ", expected " << e;
    }
  }
}

double Rtol(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 1e-5;
    case DType::kFloat64:
      return 1e-12;
    case DType::kInt64:
      return 0;
    default:
      return 2 * half_test::UnitRoundoff(dtype) + 1e-5;
  }
}

Shape KeptShape(const Shape& shape, const Ints& dims, bool keepdim) {
  const int rank = static_cast<int>(shape.size());
  std::vector<bool> reduced(rank, dims.empty());
  for (int64_t d : dims) reduced[(d + rank) % rank] = true;
  Shape out;
  for (int d = 0; d < rank; ++d) {
    if (!reduced[d]) {
      out.push_back(shape[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

struct DimCase {
  Ints dims;
  bool keepdim;
};

const std::vector<DimCase>& DimCases() {
  static const std::vector<DimCase> cases = {{{}, false}, {{0}, false},      {{-1}, true},      {{0, 2}, false},
                                             {{1}, true}, {{2, 0, 1}, true}, {{-3, -2}, false}, {{1, 2}, true}};
  return cases;
}

// ---- hand-worked cases and PyTorch 1.13's values ----

TEST(ReductionKernels, MeanByHand) {
  EXPECT_EQ(Values(MustRun("mean", {}, {Make(DType::kFloat32, {2, 2}, {1, 2, 3, 4})})[0]), std::vector<double>{2.5});
  EXPECT_EQ(Values(MustRun("mean", {}, {Make(DType::kFloat64, {}, {7})})[0]), std::vector<double>{7});
  EXPECT_TRUE(std::isnan(Get(MustRun("mean", {}, {Make(DType::kFloat32, {0, 3}, {})})[0], 0)));
  // torch.mean(bf16 [1, 2, 3, 4], dtype=float32) = 2.5 as float32.
  auto wide = MustRun("mean", MakeAttrs({{"dtype", DType::kFloat32}}), {Make(DType::kBFloat16, {4}, {1, 2, 3, 4})});
  EXPECT_EQ(wide[0].type.dtype, DType::kFloat32);
  EXPECT_EQ(Get(wide[0], 0), 2.5);
}

TEST(ReductionKernels, VarByHand) {
  const HostTensor x = Make(DType::kFloat32, {3}, {1, 2, 4});
  // Squared deviations from 7/3 sum to 42/9.
  ExpectNear(MustRun("var.correction", {}, {x})[0], {42.0 / 9 / 2}, 1e-6, "correction 1");
  ExpectNear(MustRun("var.correction", MakeAttrs({{"correction", int64_t{0}}}), {x})[0], {42.0 / 9 / 3}, 1e-6,
             "correction 0");
  ExpectNear(MustRun("var.correction", MakeAttrs({{"correction", 0.5}}), {x})[0], {42.0 / 9 / 2.5}, 1e-6,
             "correction 0.5");
  ExpectNear(MustRun("var.dim", MakeAttrs({{"unbiased", false}}), {x})[0], {42.0 / 9 / 3}, 1e-6, "biased");
  ExpectNear(MustRun("var.dim", MakeAttrs({{"dim", Ints{0}}}), {x})[0], {42.0 / 9 / 2}, 1e-6, "unbiased");
  // PyTorch: var of [[1, 2], [3, 4]] over dim 0 with keepdim is [[2, 2]];
  // N - correction <= 0 divides by 0 (inf), 0 / 0 is NaN.
  auto cols = MustRun("var.dim", MakeAttrs({{"dim", Ints{0}}, {"keepdim", true}}),
                      {Make(DType::kFloat64, {2, 2}, {1, 2, 3, 4})});
  EXPECT_EQ(cols[0].type.shape, (Shape{1, 2}));
  EXPECT_EQ(Values(cols[0]), (std::vector<double>{2, 2}));
  ExpectNear(MustRun("var.correction", MakeAttrs({{"dim", Ints{1}}, {"correction", int64_t{3}}}),
                     {Make(DType::kFloat32, {2, 2}, {1, 2, 3, 4})})[0],
             {kInf, kInf}, 0, "correction > N");
  EXPECT_TRUE(std::isnan(Get(MustRun("var.correction", {}, {Make(DType::kFloat32, {}, {2})})[0], 0)));
  EXPECT_EQ(
      Get(MustRun("var.correction", MakeAttrs({{"correction", int64_t{0}}}), {Make(DType::kFloat32, {}, {2})})[0], 0),
      0.0);
}

TEST(ReductionKernels, VectorNormByHand) {
  const HostTensor x = Make(DType::kFloat32, {2}, {3, -4});
  const std::vector<std::pair<double, double>> cases = {
      {2, 5}, {1, 7}, {kInf, 4}, {-kInf, 3}, {0, 2}, {3, std::cbrt(91.0)}, {-1, 12.0 / 7}};
  for (const auto& [ord, norm] : cases) {
    ExpectNear(MustRun("linalg_vector_norm", MakeAttrs({{"ord", ord}}), {x})[0], {norm}, 1e-6,
               "ord " + std::to_string(ord));
  }
  // An int ord (the capture's Scalar 2 or 1).
  ExpectNear(MustRun("linalg_vector_norm", MakeAttrs({{"ord", int64_t{1}}}), {x})[0], {7}, 1e-6, "int ord 1");
  // PyTorch 1.13: a 0 element makes a negative-ord norm 0, an inf adds 0 to
  // it; NaN propagates through every ord but 0, which counts it.
  ExpectNear(MustRun("linalg_vector_norm", MakeAttrs({{"ord", -0.5}}), {Make(DType::kFloat32, {3}, {0, 1, -2})})[0],
             {0}, 0, "ord -0.5 with a 0");
  ExpectNear(MustRun("linalg_vector_norm", MakeAttrs({{"ord", -1.0}}), {Make(DType::kFloat32, {3}, {1, kInf, -3})})[0],
             {0.75}, 1e-6, "ord -1 with an inf");
  const HostTensor nan = Make(DType::kFloat32, {3}, {1, kNan, -3});
  for (double ord : {kInf, -kInf, 1.0, 2.0, 3.0, 0.5, -1.0}) {
    EXPECT_TRUE(std::isnan(Get(MustRun("linalg_vector_norm", MakeAttrs({{"ord", ord}}), {nan})[0], 0))) << ord;
  }
  EXPECT_EQ(Get(MustRun("linalg_vector_norm", MakeAttrs({{"ord", 0.0}}), {nan})[0], 0), 3);
  // Columns of [[1, 2], [3, 4]] with ord -1 (PyTorch: [0.75, 1.3333]) and
  // ord 0.5 ([7.4641, 11.6569]).
  const HostTensor m = Make(DType::kFloat32, {2, 2}, {1, 2, 3, 4});
  ExpectNear(MustRun("linalg_vector_norm", MakeAttrs({{"ord", -1.0}, {"dim", Ints{0}}}), {m})[0], {0.75, 4.0 / 3}, 1e-6,
             "columns ord -1");
  ExpectNear(MustRun("linalg_vector_norm", MakeAttrs({{"ord", 0.5}, {"dim", Ints{0}}}), {m})[0], {7.4641, 11.6569},
             1e-5, "columns ord 0.5");
  // An empty reduction of ord 2 is 0; float32 into float64 (dtype).
  EXPECT_EQ(
      Values(MustRun("linalg_vector_norm", MakeAttrs({{"dim", Ints{0}}}), {Make(DType::kFloat32, {0, 2}, {})})[0]),
      (std::vector<double>{0, 0}));
  auto wide = MustRun("linalg_vector_norm", MakeAttrs({{"dtype", DType::kFloat64}}), {m});
  EXPECT_EQ(wide[0].type.dtype, DType::kFloat64);
  ExpectNear(wide[0], {std::sqrt(30.0)}, 1e-7, "to float64");
}

TEST(ReductionKernels, AmaxAminByHand) {
  const HostTensor ints = Make(DType::kInt64, {2, 2}, {1, 5, 7, 2});
  auto all = MustRun("amax", MakeAttrs({{"dim", Ints{0, 1}}, {"keepdim", true}}), {ints});
  EXPECT_EQ(all[0].type, (TensorType{DType::kInt64, {1, 1}}));
  EXPECT_EQ(Values(all[0]), std::vector<double>{7});
  EXPECT_EQ(Values(MustRun("amin", MakeAttrs({{"dim", Ints{0}}}), {ints})[0]), (std::vector<double>{1, 2}));
  EXPECT_EQ(Values(MustRun("amax", MakeAttrs({{"dim", Ints{-1}}}), {ints})[0]), (std::vector<double>{5, 7}));
  // Extreme int64 values are kept exactly.
  const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
  HostTensor extremes({DType::kInt64, {3}});
  int64_t* e = static_cast<int64_t*>(extremes.data());
  e[0] = small;
  e[1] = big;
  e[2] = 0;
  EXPECT_EQ(*static_cast<const int64_t*>(MustRun("amax", {}, {extremes})[0].data()), big);
  EXPECT_EQ(*static_cast<const int64_t*>(MustRun("amin", {}, {extremes})[0].data()), small);
  // NaN propagates (PyTorch: amax([[1, nan, 3]], 1) = [nan]), wherever it is.
  const HostTensor nan = Make(DType::kFloat32, {2, 3}, {1, kNan, 3, 2, 1, 0});
  ExpectNear(MustRun("amax", MakeAttrs({{"dim", Ints{1}}}), {nan})[0], {kNan, 2}, 0, "amax NaN");
  ExpectNear(MustRun("amin", MakeAttrs({{"dim", Ints{1}}}), {nan})[0], {kNan, 0}, 0, "amin NaN");
  ExpectNear(MustRun("amax", MakeAttrs({{"dim", Ints{0}}}), {nan})[0], {2, kNan, 3}, 0, "amax NaN columns");
  ExpectNear(MustRun("amin", {}, {Make(DType::kFloat32, {3}, {kNan, -kInf, 1})})[0], {kNan}, 0, "leading NaN");
  // Infinities are values like others.
  ExpectNear(MustRun("amax", {}, {Make(DType::kFloat64, {2}, {-kInf, -kInf})})[0], {-kInf}, 0, "all -inf");
  // A rank-0 self over dim 0 (PyTorch: amax(tensor(3.), [0]) = 3).
  EXPECT_EQ(Get(MustRun("amax", MakeAttrs({{"dim", Ints{0}}}), {Make(DType::kFloat32, {}, {3})})[0], 0), 3);
}

TEST(ReductionKernels, ArgExtremaByHand) {
  const HostTensor nan = Make(DType::kFloat32, {4}, {1, kNan, 3, kNan});
  // PyTorch: argmax and argmin of [1, nan, 3, nan] are both 1.
  EXPECT_EQ(Get(MustRun("argmax", {}, {nan})[0], 0), 1);
  EXPECT_EQ(Get(MustRun("argmin", {}, {nan})[0], 0), 1);
  // The first of equal extremes.
  EXPECT_EQ(Get(MustRun("argmax", {}, {Make(DType::kFloat32, {3}, {3, 1, 3})})[0], 0), 0);
  EXPECT_EQ(Get(MustRun("argmin", {}, {Make(DType::kFloat32, {3}, {1, 1, 3})})[0], 0), 0);
  EXPECT_EQ(Get(MustRun("argmax", {}, {Make(DType::kFloat32, {3}, {-kInf, -kInf, -kInf})})[0], 0), 0);
  const HostTensor m = Make(DType::kInt64, {2, 2}, {1, 5, 7, 2});
  // No dim: the flattened position; keepdim keeps every dim as 1.
  EXPECT_EQ(Get(MustRun("argmax", {}, {m})[0], 0), 2);
  auto kept = MustRun("argmax", MakeAttrs({{"keepdim", true}}), {m});
  EXPECT_EQ(kept[0].type, (TensorType{DType::kInt64, {1, 1}}));
  EXPECT_EQ(Get(kept[0], 0), 2);
  auto rows = MustRun("argmax", MakeAttrs({{"dim", int64_t{-1}}, {"keepdim", true}}), {m});
  EXPECT_EQ(rows[0].type.shape, (Shape{2, 1}));
  EXPECT_EQ(Values(rows[0]), (std::vector<double>{1, 0}));
  EXPECT_EQ(Values(MustRun("argmin", MakeAttrs({{"dim", int64_t{0}}}), {m})[0]), (std::vector<double>{0, 1}));
  EXPECT_EQ(Get(MustRun("argmax", MakeAttrs({{"dim", int64_t{0}}}), {Make(DType::kFloat32, {}, {2})})[0], 0), 0);
  // max.dim / min.dim: PyTorch gives ([[2, 2]], [[1, 0]]) for [[1, 2], [2, 1]] over dim 0.
  const HostTensor ties = Make(DType::kFloat32, {2, 2}, {1, 2, 2, 1});
  auto max = MustRun("max.dim", MakeAttrs({{"dim", int64_t{0}}, {"keepdim", true}}), {ties});
  ASSERT_EQ(max.size(), 2u);
  EXPECT_EQ(max[0].type, (TensorType{DType::kFloat32, {1, 2}}));
  EXPECT_EQ(Values(max[0]), (std::vector<double>{2, 2}));
  EXPECT_EQ(Values(max[1]), (std::vector<double>{1, 0}));
  auto min = MustRun("min.dim", MakeAttrs({{"dim", int64_t{1}}}), {Make(DType::kFloat32, {1, 4}, {1, kNan, 3, kNan})});
  EXPECT_TRUE(std::isnan(Get(min[0], 0)));
  EXPECT_EQ(Get(min[1], 0), 1);
}

TEST(ReductionKernels, ProdByHand) {
  EXPECT_EQ(Values(MustRun("prod", {}, {Make(DType::kInt64, {2, 2}, {1, 2, 3, 4})})[0]), std::vector<double>{24});
  // int64 wraps as PyTorch's does: 2^40 * 2^40 = 2^80 = 0 mod 2^64.
  EXPECT_EQ(Values(MustRun("prod", {}, {Make(DType::kInt64, {2}, {std::ldexp(1.0, 40), std::ldexp(1.0, 40)})})[0]),
            std::vector<double>{0});
  auto as_float = MustRun("prod", MakeAttrs({{"dtype", DType::kFloat32}}), {Make(DType::kInt64, {3}, {2, 3, 4})});
  EXPECT_EQ(as_float[0].type.dtype, DType::kFloat32);
  EXPECT_EQ(Get(as_float[0], 0), 24);
  auto cols = MustRun("prod.dim_int", MakeAttrs({{"dim", int64_t{0}}, {"keepdim", true}}),
                      {Make(DType::kFloat32, {2, 2}, {1, 2, 3, 4})});
  EXPECT_EQ(cols[0].type.shape, (Shape{1, 2}));
  EXPECT_EQ(Values(cols[0]), (std::vector<double>{3, 8}));
  EXPECT_EQ(Values(MustRun("prod.dim_int", MakeAttrs({{"dim", int64_t{0}}}), {Make(DType::kFloat32, {0, 3}, {})})[0]),
            (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(Get(MustRun("prod.dim_int", MakeAttrs({{"dim", int64_t{-1}}}), {Make(DType::kFloat64, {}, {5})})[0], 0), 5);
}

TEST(ReductionKernels, CumsumByHand) {
  const HostTensor m = Make(DType::kInt64, {2, 2}, {1, 2, 3, 4});
  auto rows = MustRun("cumsum", MakeAttrs({{"dim", int64_t{1}}}), {m});
  EXPECT_EQ(rows[0].type, m.type);
  EXPECT_EQ(Values(rows[0]), (std::vector<double>{1, 3, 3, 7}));
  EXPECT_EQ(Values(MustRun("cumsum", MakeAttrs({{"dim", int64_t{-2}}}), {m})[0]), (std::vector<double>{1, 2, 4, 6}));
  // PyTorch: cumsum([2^62] * 3) wraps to [2^62, -2^63, -2^62].
  const double p62 = std::ldexp(1.0, 62);
  HostTensor big({DType::kInt64, {3}});
  for (int i = 0; i < 3; ++i) static_cast<int64_t*>(big.data())[i] = int64_t{1} << 62;
  auto wrapped = MustRun("cumsum", MakeAttrs({{"dim", int64_t{0}}}), {big});
  EXPECT_EQ(Values(wrapped[0]), (std::vector<double>{p62, -2 * p62, -p62}));
  auto wide = MustRun("cumsum", MakeAttrs({{"dim", int64_t{0}}, {"dtype", DType::kFloat64}}), {m});
  EXPECT_EQ(wide[0].type.dtype, DType::kFloat64);
  EXPECT_EQ(Values(wide[0]), (std::vector<double>{1, 2, 4, 6}));
  auto half = MustRun("cumsum", MakeAttrs({{"dim", int64_t{1}}, {"dtype", DType::kFloat32}}),
                      {Make(DType::kBFloat16, {2, 2}, {1, 2, 3, 4})});
  EXPECT_EQ(half[0].type.dtype, DType::kFloat32);
  EXPECT_EQ(Values(half[0]), (std::vector<double>{1, 3, 3, 7}));
  EXPECT_EQ(Values(MustRun("cumsum", MakeAttrs({{"dim", int64_t{0}}}), {Make(DType::kFloat32, {}, {3})})[0]),
            std::vector<double>{3});
}

TEST(ReductionKernels, SortAndTopkByHand) {
  // PyTorch 1.13: sort([3, nan, 1, 3, nan], descending) = ([nan, nan, 3, 3, 1], [1, 4, 0, 3, 2]) and ascending
  // ([1, 3, 3, nan, nan], [2, 0, 3, 1, 4]): NaN above every number, equal values in position order.
  const HostTensor x = Make(DType::kFloat32, {5}, {3, kNan, 1, 3, kNan});
  auto down = MustRun("sort", MakeAttrs({{"descending", true}}), {x});
  ASSERT_EQ(down.size(), 2u);
  ExpectNear(down[0], {kNan, kNan, 3, 3, 1}, 0, "descending values");
  EXPECT_EQ(Values(down[1]), (std::vector<double>{1, 4, 0, 3, 2}));
  auto up = MustRun("sort", {}, {x});
  ExpectNear(up[0], {1, 3, 3, kNan, kNan}, 0, "ascending values");
  EXPECT_EQ(Values(up[1]), (std::vector<double>{2, 0, 3, 1, 4}));
  // topk([3, nan, 1, 3], 2) = [nan, 3] at [1, 0] (the first 3; PyTorch's CPU may name either); smallest: [1, 3].
  const HostTensor y = Make(DType::kFloat32, {4}, {3, kNan, 1, 3});
  auto top = MustRun("topk", MakeAttrs({{"k", int64_t{2}}}), {y});
  ExpectNear(top[0], {kNan, 3}, 0, "topk values");
  EXPECT_EQ(Values(top[1]), (std::vector<double>{1, 0}));
  auto low = MustRun("topk", MakeAttrs({{"k", int64_t{2}}, {"largest", false}, {"sorted", false}}), {y});
  EXPECT_EQ(Values(low[0]), (std::vector<double>{1, 3}));
  EXPECT_EQ(Values(low[1]), (std::vector<double>{2, 0}));
  // Along dim 0 of int64 [[1, 2], [3, 4]] (PyTorch: values as self, positions [[0, 0], [1, 1]]).
  const HostTensor m = Make(DType::kInt64, {2, 2}, {1, 2, 3, 4});
  auto cols = MustRun("sort", MakeAttrs({{"dim", int64_t{0}}}), {m});
  EXPECT_EQ(Values(cols[0]), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(Values(cols[1]), (std::vector<double>{0, 0, 1, 1}));
  auto best = MustRun("topk", MakeAttrs({{"k", int64_t{1}}, {"dim", int64_t{0}}}), {m});
  EXPECT_EQ(best[0].type.shape, (Shape{1, 2}));
  EXPECT_EQ(Values(best[0]), (std::vector<double>{3, 4}));
  EXPECT_EQ(Values(best[1]), (std::vector<double>{1, 1}));
  auto none = MustRun("topk", MakeAttrs({{"k", int64_t{0}}}), {m});
  EXPECT_EQ(none[0].numel(), 0);
  auto scalar = MustRun("sort", {}, {Make(DType::kFloat64, {}, {5})});
  EXPECT_EQ(Get(scalar[0], 0), 5);
  EXPECT_EQ(Get(scalar[1], 0), 0);
}

// ---- random inputs against the naive reference ----

TEST(ReductionKernels, DimReductionsMatchReference) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    const HostTensor x = Random(dtype, {3, 4, 5});
    const double rtol = Rtol(dtype);
    for (const DimCase& c : DimCases()) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " dims " << ::testing::PrintToString(c.dims)
                                        << " keepdim " << c.keepdim);
      const auto slices = Slices(x, c.dims);
      const Shape shape = KeptShape(x.type.shape, c.dims, c.keepdim);
      const Attrs attrs = MakeAttrs({{"dim", c.dims}, {"keepdim", c.keepdim}});
      auto run = [&](const std::string& op, const Attrs& a) {
        auto out = MustRun(op, a, {x});
        EXPECT_EQ(out.empty() ? TensorType{} : out[0].type, (TensorType{dtype, shape})) << op;
        return out.empty() ? HostTensor({dtype, {}}) : out[0];
      };
      ExpectNear(run("mean.dim", attrs), Map(slices, Mean), rtol, "mean.dim");
      for (double correction : {1.0, 0.0, 2.5}) {
        Attrs a = attrs;
        a.Set("correction", correction);
        ExpectNear(run("var.correction", a), Map(slices, [&](const auto& v) { return Variance(v, correction); }), rtol,
                   "var.correction " + std::to_string(correction));
      }
      Attrs biased = attrs;
      biased.Set("unbiased", false);
      ExpectNear(run("var.dim", biased), Map(slices, [](const auto& v) { return Variance(v, 0); }), rtol,
                 "var.dim biased");
      for (double ord : {2.0, 1.0, kInf, -kInf, 0.0, 3.0, 0.5, -1.5}) {
        Attrs a = attrs;
        a.Set("ord", ord);
        ExpectNear(run("linalg_vector_norm", a), Map(slices, [&](const auto& v) { return Norm(v, ord); }), rtol,
                   "linalg_vector_norm " + std::to_string(ord));
      }
      ExpectNear(run("amax", attrs), Map(slices, [](const auto& v) { return Extreme(v, true); }), 0, "amax");
      ExpectNear(run("amin", attrs), Map(slices, [](const auto& v) { return Extreme(v, false); }), 0, "amin");
    }
  }
}

TEST(ReductionKernels, Int64ExtremaMatchReference) {
  const HostTensor x = Random(DType::kInt64, {3, 4, 5});
  for (const DimCase& c : DimCases()) {
    SCOPED_TRACE(::testing::PrintToString(c.dims));
    const auto slices = Slices(x, c.dims);
    const Attrs attrs = MakeAttrs({{"dim", c.dims}, {"keepdim", c.keepdim}});
    ExpectNear(MustRun("amax", attrs, {x})[0], Map(slices, [](const auto& v) { return Extreme(v, true); }), 0, "amax");
    ExpectNear(MustRun("amin", attrs, {x})[0], Map(slices, [](const auto& v) { return Extreme(v, false); }), 0, "amin");
  }
}

// The single-dim ops over every dim (negative too) and, for argmax / argmin,
// the flattened tensor; NaNs sprinkled into the float inputs.
TEST(ReductionKernels, SingleDimOpsMatchReference) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kBFloat16, DType::kFloat16}) {
    for (bool with_nan : {false, true}) {
      if (with_nan && !IsFloating(dtype)) continue;
      // Small integers in 16-bit floats make ties likely, which the first
      // index must win.
      HostTensor x = Random(dtype, {3, 4, 5}, 0.5, 1.5);
      if (dtype == DType::kBFloat16 || dtype == DType::kFloat16) {
        std::vector<double> v = Values(x);
        for (double& e : v) e = std::round(e * 4);
        x = Make(dtype, x.type.shape, v);
      }
      if (with_nan) {
        std::vector<double> v = Values(x);
        for (int k = 0; k < 6; ++k) v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(Rng())] = kNan;
        x = Make(dtype, x.type.shape, v);
      }
      const double rtol = Rtol(dtype);
      for (int64_t dim : {0, 1, 2, -1, -3}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " dim " << dim << " NaN " << with_nan);
        const auto slices = Slices(x, {dim});
        for (bool keepdim : {false, true}) {
          const Attrs attrs = MakeAttrs({{"dim", dim}, {"keepdim", keepdim}});
          const Shape shape = KeptShape(x.type.shape, {dim}, keepdim);
          for (bool max : {true, false}) {
            auto arg = MustRun(max ? "argmax" : "argmin", attrs, {x});
            EXPECT_EQ(arg[0].type, (TensorType{DType::kInt64, shape}));
            ExpectNear(arg[0], Map(slices, [&](const auto& v) { return ArgExtreme(v, max); }), 0, "arg");
            auto both = MustRun(max ? "max.dim" : "min.dim", attrs, {x});
            ASSERT_EQ(both.size(), 2u);
            EXPECT_EQ(both[0].type, (TensorType{dtype, shape}));
            ExpectNear(both[0], Map(slices, [&](const auto& v) { return Extreme(v, max); }), 0, "values");
            ExpectNear(both[1], Map(slices, [&](const auto& v) { return ArgExtreme(v, max); }), 0, "indices");
          }
          if (!with_nan) {
            ExpectNear(MustRun("prod.dim_int", attrs, {x})[0], Map(slices, Product), rtol, "prod.dim_int");
          }
        }
        // cumsum: element r of a slice is the sum of its first r + 1.
        if (!with_nan) {
          auto out = MustRun("cumsum", MakeAttrs({{"dim", dim}}), {x});
          std::vector<double> expected(static_cast<size_t>(x.numel()));
          const int rank = 3;
          const int d = static_cast<int>((dim + rank) % rank);
          for (int64_t i = 0; i < x.numel(); ++i) {
            Shape index = Unravel(i, x.type.shape);
            const int64_t end = index[d];
            double s = 0;
            for (index[d] = 0; index[d] <= end; ++index[d]) s += Get(x, Ravel(index, x.type.shape));
            expected[i] = s;
          }
          ExpectNear(out[0], expected, rtol, "cumsum", 4.0);
        }
      }
      for (bool max : {true, false}) {
        const auto all = Slices(x, {});
        ExpectNear(MustRun(max ? "argmax" : "argmin", {}, {x})[0],
                   Map(all, [&](const auto& v) { return ArgExtreme(v, max); }), 0, "flattened arg");
      }
      if (!with_nan) {
        const std::vector<double> all = Values(x);
        const std::vector<double> head(all.begin(), all.begin() + 6);
        ExpectNear(MustRun("prod", {}, {Make(dtype, {2, 3}, head)})[0], {Product(head)}, rtol, "prod");
      }
    }
  }
}

// sort and topk over every dim against a stable sort of each slice's
// (value, position) pairs written here; 16-bit values hold many ties.
TEST(ReductionKernels, SortAndTopkMatchReference) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kBFloat16, DType::kFloat16}) {
    HostTensor x = Random(dtype, {3, 4, 6}, 0.5, 1.5);
    std::vector<double> v = Values(x);
    if (dtype == DType::kBFloat16 || dtype == DType::kFloat16) {
      for (double& e : v) e = std::round(e * 2);
    }
    if (IsFloating(dtype)) {
      for (int k = 0; k < 5; ++k) v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(Rng())] = kNan;
    }
    x = Make(dtype, x.type.shape, v);
    for (int64_t dim : {0, 1, 2, -1}) {
      const auto slices = Slices(x, {dim});
      const int d = static_cast<int>((dim + 3) % 3);
      const int64_t size = x.type.shape[d];
      for (bool descending : {false, true}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " dim " << dim << " descending " << descending);
        // Each slice's positions ordered by (NaN last / first, value, position).
        std::vector<std::vector<int64_t>> orders;
        for (const auto& s : slices) {
          std::vector<int64_t> order(s.size());
          for (size_t r = 0; r < s.size(); ++r) order[r] = static_cast<int64_t>(r);
          std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            const double va = s[a], vb = s[b];
            const int ka = std::isnan(va) ? 1 : 0, kb = std::isnan(vb) ? 1 : 0;
            if (ka != kb) return descending ? ka > kb : ka < kb;
            if (!ka && va != vb) return descending ? va > vb : va < vb;
            return a < b;
          });
          orders.push_back(order);
        }
        for (int64_t k : {size, int64_t{1}, size / 2}) {
          const bool topk = k != size || descending;  // topk with k == size is sort
          auto out = topk ? MustRun("topk", MakeAttrs({{"k", k}, {"dim", dim}, {"largest", descending}}), {x})
                          : MustRun("sort", MakeAttrs({{"dim", dim}, {"descending", descending}}), {x});
          ASSERT_EQ(out.size(), 2u);
          Shape shape = x.type.shape;
          shape[d] = k;
          ASSERT_EQ(out[0].type, (TensorType{dtype, shape}));
          ASSERT_EQ(out[1].type, (TensorType{DType::kInt64, shape}));
          std::vector<double> values(static_cast<size_t>(out[0].numel())), positions(values.size());
          for (int64_t i = 0; i < out[0].numel(); ++i) {
            Shape index = Unravel(i, shape);
            const int64_t m = index[d];
            index[d] = 0;
            Shape kept = x.type.shape;
            kept[d] = 1;
            const int64_t slice = Ravel(index, kept);
            positions[i] = static_cast<double>(orders[slice][m]);
            values[i] = slices[slice][orders[slice][m]];
          }
          ExpectNear(out[0], values, 0, topk ? "topk values" : "sort values");
          ExpectNear(out[1], positions, 0, topk ? "topk positions" : "sort positions");
        }
      }
    }
  }
}

// Every op on a rank-0 self: the value itself (var: NaN with correction 1).
TEST(ReductionKernels, RankZeroSelf) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    const HostTensor x = Make(dtype, {}, {-1.5});
    for (const char* op : {"mean", "amax", "amin"}) EXPECT_EQ(Get(MustRun(op, {}, {x})[0], 0), -1.5) << op;
    EXPECT_EQ(Get(MustRun("linalg_vector_norm", {}, {x})[0], 0), 1.5);
    EXPECT_EQ(Get(MustRun("linalg_vector_norm", MakeAttrs({{"dim", Ints{-1}}}), {x})[0], 0), 1.5);
    EXPECT_EQ(Get(MustRun("prod", {}, {x})[0], 0), -1.5);
    EXPECT_TRUE(std::isnan(Get(MustRun("var.dim", MakeAttrs({{"dim", Ints{0}}}), {x})[0], 0)));
    for (const char* op : {"argmax", "argmin"}) {
      EXPECT_EQ(Get(MustRun(op, {}, {x})[0], 0), 0) << op;
      EXPECT_EQ(Get(MustRun(op, MakeAttrs({{"dim", int64_t{-1}}, {"keepdim", true}}), {x})[0], 0), 0) << op;
    }
    auto max = MustRun("max.dim", MakeAttrs({{"dim", int64_t{0}}}), {x});
    EXPECT_EQ(max[0].type.shape, Shape{});
    EXPECT_EQ(Get(max[0], 0), -1.5);
    EXPECT_EQ(Get(max[1], 0), 0);
    EXPECT_EQ(Get(MustRun("cumsum", MakeAttrs({{"dim", int64_t{0}}}), {x})[0], 0), -1.5);
  }
}

// Long rows in float32: every sum accumulates in double, so the results
// stay within float32 rounding of the double reference.
TEST(ReductionKernels, LongRowsAccumulateInDouble) {
  const HostTensor x = Random(DType::kFloat32, {2, 100000});
  const auto slices = Slices(x, {1});
  ExpectNear(MustRun("mean.dim", MakeAttrs({{"dim", Ints{1}}}), {x})[0], Map(slices, Mean), 1e-6, "mean", 0.01);
  ExpectNear(MustRun("var.correction", MakeAttrs({{"dim", Ints{1}}}), {x})[0],
             Map(slices, [](const auto& v) { return Variance(v, 1); }), 1e-6, "var");
  ExpectNear(MustRun("linalg_vector_norm", MakeAttrs({{"dim", Ints{1}}}), {x})[0],
             Map(slices, [](const auto& v) { return Norm(v, 2); }), 1e-6, "norm");
}

}  // namespace
}  // namespace tandem
