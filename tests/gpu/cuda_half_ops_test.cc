// The bfloat16 and float16 CUDA kernels against the CPU kernels (the oracle),
// on fresh random inputs and shapes (the seed is printed), in both 16-bit
// types. Each graph runs twice on the GPU, op by op and as a replay of the
// captured CUDA graph; outputs are poisoned (0xFF bytes: NaN) before each run
// and NaN never passes.
//
// Tolerances (normwise relative, ||gpu - cpu|| / ||cpu||): both backends
// round the same float32 value to 16 bits, so they differ where their
// float32 computations differ slightly (cuBLAS's summation order, erff vs
// std::erf, FMA contraction) and a rounding then lands one ulp apart; an
// element one ulp apart contributes at most 2u relative (u = 2^-8 for
// bfloat16, 2^-11 for float16). So a single op's tolerance is 2u plus 1e-3
// (bfloat16: about 1e-2) or 2u plus 1e-3 (float16: about 2e-3) for float32
// differences amplified by the sums' lengths here (at most a few thousand
// terms). Conversions, masks and indices must match bit for bit; float32
// outputs (layer norm statistics) to 1e-4.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/cuda_program_options.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

double UnitRoundoff(DType dtype) { return dtype == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

// One op's tolerance (see the file comment).
double OpTolerance(DType dtype) { return 2 * UnitRoundoff(dtype) + 1e-3; }

constexpr double kFloat32Tolerance = 1e-4;

int64_t Dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(Rng()); }

enum class Compare { kTolerance, kExact };

// Feeds -> CPU oracle; feeds -> GPU (op by op, then graph replay); every
// non-feed value compared: 16-bit floats within `tolerance` (or bit for bit
// with kExact), float32 within kFloat32Tolerance, others exactly.
void Check(const GraphMaker& maker, double tolerance, Compare compare = Compare::kTolerance,
           std::vector<std::pair<int, int>> alias = {}) {
  CompareWithCpu(
      maker,
      [&](const OutputPair& o) {
        const DType dtype = o.type().dtype;
        const bool half = dtype == DType::kBFloat16 || dtype == DType::kFloat16;
        // Matches refuses NaN (inputs here are finite, so a NaN is a
        // failure); kExact adds bit-for-bit equality.
        EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), half ? tolerance : kFloat32Tolerance)) << o.Where();
        if (half && compare == Compare::kExact) {
          EXPECT_TRUE(SameBytes(*o.gpu, *o.ref)) << o.Where();
        }
      },
      std::move(alias), /*feeds=*/{}, /*expect_capture=*/false);
}

class CudaHalfOps : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  double tolerance() const { return OpTolerance(GetParam()); }
};

TEST_P(CudaHalfOps, ConversionsMatchBitForBit) {
  TANDEM_SKIP_WITHOUT_GPU();
  const DType half = dtype();
  const DType other = half == DType::kBFloat16 ? DType::kFloat16 : DType::kBFloat16;
  const int64_t rows = Dim(1, 300), cols = Dim(1, 300);
  GraphMaker g;
  // From every storable type to the 16-bit one and back.
  for (DType from : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kBool, other}) {
    const int x = g.Feed({from, {rows, cols}});
    const int h = g.Add1("_to_copy", {x}, MakeAttrs({{"dtype", half}}));
    g.Add1("_to_copy", {h}, MakeAttrs({{"dtype", from}}));
  }
  // A broadcasting copy into a 16-bit tensor (the strided path).
  const int self = g.Feed({half, {rows, cols}});
  const int src = g.Feed({DType::kFloat32, {cols}});
  g.Add1("copy", {self, src});
  Check(g, 0.0, Compare::kExact);
}

TEST_P(CudaHalfOps, MatrixProductsBothLibraries) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (bool force_cublas : {false, true}) {
    cuda::SetMatmulForceCublasForTesting(force_cublas);
    for (int trial = 0; trial < 3; ++trial) {
      const int64_t n = trial == 0 ? 1 : Dim(2, 300), k = Dim(1, 700), m = trial == 1 ? 1 : Dim(2, 300);
      SCOPED_TRACE(::testing::Message() << "[" << n << ", " << k << "] @ [" << k << ", " << m
                                        << "] cublas=" << force_cublas);
      GraphMaker g;
      const int a = g.Feed({dtype(), {n, k}});
      const int b = g.Feed({dtype(), {k, m}});
      const int bt = g.Feed({dtype(), {m, k}});
      g.Add1("mm", {a, b});
      g.Add1("mm", {a, bt}, MakeAttrs({{"transpose_b", true}}));
      // addmm: a bias row (cuBLASLt's epilogue), a full self with beta, a
      // broadcast column self.
      const int bias = g.Feed({dtype(), {m}});
      const int full = g.Feed({dtype(), {n, m}});
      const int column = g.Feed({dtype(), {n, 1}});
      g.Add1("addmm", {bias, a, b});
      g.Add1("addmm", {full, a, b}, MakeAttrs({{"beta", 0.5}, {"alpha", 2.0}}));
      g.Add1("addmm", {column, a, b}, MakeAttrs({{"beta", 0.25}}));
      // bmm of a few batches.
      const int64_t batch = Dim(1, 6);
      const int x = g.Feed({dtype(), {batch, n, k}});
      const int y = g.Feed({dtype(), {batch, k, m}});
      g.Add1("bmm", {x, y});
      Check(g, tolerance());
    }
  }
  cuda::SetMatmulForceCublasForTesting(false);
}

TEST_P(CudaHalfOps, ArithmeticAndActivations) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t rows = Dim(1, 200), cols = Dim(1, 300);
  GraphMaker g;
  const int x = g.Feed({dtype(), {rows, cols}});
  const int y = g.Feed({dtype(), {rows, cols}}, Fill::kNonZero);
  const int row = g.Feed({dtype(), {cols}});
  const int f32_scalar = g.Feed({DType::kFloat32, {}});
  g.Add1("add.Tensor", {x, y});
  g.Add1("sub.Tensor", {x, row}, MakeAttrs({{"alpha", 0.3}}));
  g.Add1("mul.Tensor", {x, f32_scalar});
  g.Add1("div.Tensor", {x, y});
  g.Add1("add.Scalar", {x}, MakeAttrs({{"other", 1.5}, {"alpha", 2.0}}));
  g.Add1("sub.Scalar", {x}, MakeAttrs({{"other", 0.7}}));
  g.Add1("mul.Scalar", {x}, MakeAttrs({{"other", -3.0}}));
  g.Add1("div.Scalar", {x}, MakeAttrs({{"other", 7.0}}));
  g.Add1("neg", {x});
  g.Add1("relu", {x});
  g.Add1("threshold_backward", {y, x}, MakeAttrs({{"threshold", 0.0}}));
  g.Add1("gelu", {x});
  g.Add1("gelu", {x}, MakeAttrs({{"approximate", std::string("tanh")}}));
  g.Add1("gelu_backward", {y, x});
  g.Add1("gelu_backward", {y, x}, MakeAttrs({{"approximate", std::string("tanh")}}));
  Check(g, tolerance());
}

// Rank-0 operands of another dtype: rounded to a 16-bit result's type
// first, and read exactly by float32 ops.
TEST_P(CudaHalfOps, ScalarOperandsOfOtherDTypes) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t n = Dim(1, 3000);
  GraphMaker g;
  const int x = g.Feed({dtype(), {n}});
  const int f = g.Feed({DType::kFloat32, {n}});
  const int f32_scalar = g.Feed({DType::kFloat32, {}});
  const int f64_scalar = g.Feed({DType::kFloat64, {}});
  const int i64_scalar = g.Feed({DType::kInt64, {}});
  const int half_scalar = g.Feed({dtype(), {}});
  g.Add1("mul.Tensor", {x, f32_scalar});
  g.Add1("sub.Tensor", {f64_scalar, x});
  g.Add1("add.Tensor", {x, i64_scalar}, MakeAttrs({{"alpha", 0.5}}));
  g.Add1("mul.Tensor", {f, half_scalar});
  g.Add1("add.Tensor", {half_scalar, f});
  g.Add1("maximum", {f, half_scalar});
  Check(g, tolerance());
}

TEST_P(CudaHalfOps, InPlaceArithmetic) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t n = Dim(1, 5000);
  GraphMaker g;
  const int x = g.Feed({dtype(), {n}});
  const int y = g.Feed({dtype(), {n}});
  const int sum = g.Add1("add.Tensor", {x, y}, MakeAttrs({{"alpha", 0.5}}));
  Check(g, tolerance(), Compare::kTolerance, {{sum, x}});
}

TEST_P(CudaHalfOps, Reductions) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t a = Dim(1, 32), b = Dim(1, 1000), c = Dim(1, 40);
  GraphMaker g;
  const int x = g.Feed({dtype(), {a, b, c}});
  const auto dims = [](std::vector<int64_t> d) { return MakeAttrs({{"dim", d}}); };
  g.Add1("sum.dim_IntList", {x}, dims({2}));     // rows
  g.Add1("sum.dim_IntList", {x}, dims({1}));     // columns
  g.Add1("sum.dim_IntList", {x}, dims({0, 2}));  // scattered
  g.Add1("mean.dim", {x}, MakeAttrs({{"dim", std::vector<int64_t>{0}}, {"keepdim", true}}));
  g.Add1("sum", {x});
  g.Add1("sum", {x}, MakeAttrs({{"dtype", DType::kFloat32}}));
  Check(g, tolerance());
}

// Rows of whole 16-byte packs (8 elements) take the row-tile kernels: 128
// (half a warp per row), 1032-4096 and 4104-8192 (a block's, 2 and 4 packs
// per thread); other widths the loop kernels.
TEST_P(CudaHalfOps, SoftmaxFamily) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (int64_t cols : {int64_t{128}, 8 * Dim(129, 512), 8 * Dim(513, 1024), Dim(1, 100), Dim(1000, 5000)}) {
    const int64_t rows = Dim(1, 100);
    SCOPED_TRACE(::testing::Message() << "[" << rows << ", " << cols << "]");
    GraphMaker g;
    const int x = g.Feed({dtype(), {rows, cols}});
    const int grad = g.Feed({dtype(), {rows, cols}});
    for (int64_t dim : {int64_t{1}, int64_t{0}}) {
      const Attrs attrs = MakeAttrs({{"dim", dim}, {"half_to_float", false}});
      const int s = g.Add1("_softmax", {x}, attrs);
      const int ls = g.Add1("_log_softmax", {x}, attrs);
      g.Add1("_softmax_backward_data", {grad, s}, MakeAttrs({{"dim", dim}, {"input_dtype", dtype()}}));
      g.Add1("_log_softmax_backward_data", {grad, ls}, MakeAttrs({{"dim", dim}, {"input_dtype", dtype()}}));
    }
    Check(g, tolerance());
  }
}

TEST_P(CudaHalfOps, LayerNormForwardAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (int64_t cols : {Dim(1, 512), Dim(1100, 4096)}) {
    const int64_t rows = Dim(1, 300);
    SCOPED_TRACE(::testing::Message() << "[" << rows << ", " << cols << "]");
    GraphMaker g;
    const int x = g.Feed({dtype(), {rows, cols}});
    const int w = g.Feed({dtype(), {cols}}, Fill::kPositive);
    const int b = g.Feed({dtype(), {cols}});
    const int dy = g.Feed({dtype(), {rows, cols}});
    const Attrs attrs = MakeAttrs({{"normalized_shape", std::vector<int64_t>{cols}}, {"eps", 1e-5}});
    const std::vector<int> out = g.Add("native_layer_norm", {x, w, b}, attrs);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(g.type(out[1]).dtype, DType::kFloat32);
    const Attrs backward =
        MakeAttrs({{"normalized_shape", std::vector<int64_t>{cols}}, {"output_mask", std::vector<int64_t>{1, 1, 1}}});
    g.Add("native_layer_norm_backward", {dy, x, out[1], out[2], w, b}, backward);
    Check(g, tolerance());
  }
}

TEST_P(CudaHalfOps, NllLoss) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t n = Dim(1, 500), classes = Dim(2, 1000);
  for (int64_t reduction : {0, 1, 2}) {
    SCOPED_TRACE(::testing::Message() << "reduction " << reduction);
    GraphMaker g;
    const int x = g.Feed({dtype(), {n, classes}});
    const int target = g.Feed({DType::kInt64, {n}}, Fill::kLabels, classes);
    const int weight = g.Feed({dtype(), {classes}}, Fill::kPositive);
    const Attrs attrs = MakeAttrs({{"reduction", reduction}, {"ignore_index", int64_t{-100}}});
    const std::vector<int> fwd = g.Add("nll_loss_forward", {x, target, weight}, attrs);
    ASSERT_EQ(fwd.size(), 2u);
    const int grad = g.Feed(g.type(fwd[0]));
    g.Add1("nll_loss_backward", {grad, x, target, fwd[1], weight}, attrs);
    Check(g, tolerance());
  }
}

TEST_P(CudaHalfOps, EmbeddingForwardAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t vocab = Dim(2, 3000), width = Dim(1, 700), batch = Dim(1, 8), length = Dim(1, 64);
  GraphMaker g;
  const int weight = g.Feed({dtype(), {vocab, width}});
  const int ids = g.Feed({DType::kInt64, {batch, length}}, Fill::kLabels, vocab);
  const int grad = g.Feed({dtype(), {batch, length, width}});
  g.Add1("embedding", {weight, ids});
  g.Add1("embedding_dense_backward", {grad, ids}, MakeAttrs({{"num_weights", vocab}, {"padding_idx", int64_t{-1}}}));
  g.Add1("embedding_dense_backward", {grad, ids}, MakeAttrs({{"num_weights", vocab}, {"padding_idx", int64_t{0}}}));
  Check(g, tolerance());
}

TEST_P(CudaHalfOps, DropoutMaskMatchesExactly) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t n = Dim(1, 100000);
  GraphMaker g;
  const int x = g.Feed({dtype(), {n}});
  const int seed = g.Feed({DType::kInt64, {}});
  const std::vector<int> out =
      g.Add("native_dropout", {x, seed}, MakeAttrs({{"p", 0.3}, {"train", true}, {"seed", int64_t{7}}}));
  ASSERT_EQ(out.size(), 2u);
  g.Add1("native_dropout_backward", {x, out[1]}, MakeAttrs({{"scale", 1.0 / 0.7}}));
  Check(g, 0.0, Compare::kExact);
}

// An MLP training step's forward and backward in 16 bits: errors of one op
// feed the next, so its tolerance is a few ops' worth.
TEST_P(CudaHalfOps, MlpStep) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t batch = 64, in = 256, hidden = 512, classes = 10;
  GraphMaker g;
  const int x = g.Feed({dtype(), {batch, in}});
  const int target = g.Feed({DType::kInt64, {batch}}, Fill::kLabels, classes);
  const int w1 = g.Feed({dtype(), {hidden, in}}, Fill::kSmall);
  const int b1 = g.Feed({dtype(), {hidden}}, Fill::kSmall);
  const int w2 = g.Feed({dtype(), {classes, hidden}}, Fill::kSmall);
  const int b2 = g.Feed({dtype(), {classes}}, Fill::kSmall);
  const Attrs transposed = MakeAttrs({{"transpose_b", true}});
  const int h = g.Add1("addmm", {b1, x, w1}, transposed);
  const int r = g.Add1("relu", {h});
  const int logits = g.Add1("addmm", {b2, r, w2}, transposed);
  const int ls = g.Add1("_log_softmax", {logits}, MakeAttrs({{"dim", int64_t{1}}, {"half_to_float", false}}));
  const Attrs nll = MakeAttrs({{"reduction", int64_t{1}}});
  const std::vector<int> loss = g.Add("nll_loss_forward", {ls, target}, nll);
  ASSERT_EQ(loss.size(), 2u);
  const int one = g.Add1("mul.Scalar", {loss[0]}, MakeAttrs({{"other", 0.0}}));
  const int seed_grad = g.Add1("add.Scalar", {one}, MakeAttrs({{"other", 1.0}}));
  const int dls = g.Add1("nll_loss_backward", {seed_grad, ls, target, loss[1]}, nll);
  const int dlogits =
      g.Add1("_log_softmax_backward_data", {dls, ls}, MakeAttrs({{"dim", int64_t{1}}, {"input_dtype", dtype()}}));
  g.Add1("mm", {dlogits, r}, MakeAttrs({{"transpose_a", true}}));                       // grad w2
  g.Add1("sum.dim_IntList", {dlogits}, MakeAttrs({{"dim", std::vector<int64_t>{0}}}));  // grad b2
  const int dr = g.Add1("mm", {dlogits, w2});
  const int dh = g.Add1("threshold_backward", {dr, r}, MakeAttrs({{"threshold", 0.0}}));
  g.Add1("mm", {dh, x}, MakeAttrs({{"transpose_a", true}}));  // grad w1
  Check(g, 4 * tolerance());
}

INSTANTIATE_TEST_SUITE_P(SixteenBit, CudaHalfOps, ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tandem::gpu_test
