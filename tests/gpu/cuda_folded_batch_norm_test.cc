// Batch norm with a folded ReLU, a folded residual add and a folded ReLU
// gradient (compiler/fold_activations.h) on the GPU: against the CPU oracle
// on fresh random inputs, op by op and replayed, and against the unfolded
// ops (batch norm, add, relu, threshold_backward, batch-norm backward) on
// the GPU, bit for bit. float32, float64, bfloat16 and float16; shapes whose rows
// are and are not whole 16-byte vectors, NCHW (the chunked kernels) and
// [M, C] (the column kernels: C a multiple of every vector width, of some,
// of none).
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// As cuda_half_cnn_test: the CPU rounds once from double, the GPU's batch
// norm computes in double too, so an element lands at most an ulp apart.
double Tolerance(DType dtype) {
  if (dtype == DType::kFloat64) return 1e-12;
  if (dtype == DType::kFloat32) return 1e-5;
  return 2 * (dtype == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11)) + 1e-3;
}

TEST(CudaFoldedBatchNorm, MatchesCpuAndTheUnfoldedOpsExactly) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    for (const Shape& shape :
         std::vector<Shape>{{8, 16, 14, 14}, {4, 64, 7, 7}, {3, 5, 9, 11}, {1568, 64}, {301, 24}, {45, 3}}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape));
      const DType param = dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
      const Shape c = {shape[1]};
      GraphMaker g;
      const int x = g.Feed({dtype, shape});
      const int gy = g.Feed({dtype, shape});
      const int w = g.Feed({param, c}, Fill::kPositive);
      const int b = g.Feed({param, c});
      const int rm = g.Feed({param, c});
      const int rv = g.Feed({param, c}, Fill::kPositive);
      const Attrs fwd = MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}});
      const std::vector<int> plain = g.Add("_native_batch_norm_legit_functional", {x, w, b, rm, rv}, fwd);
      ASSERT_EQ(plain.size(), 5u);
      const int r = g.Add1("relu", {plain[0]});
      Attrs fwd_relu = fwd;
      fwd_relu.Set("relu", true);
      const std::vector<int> folded = g.Add("_native_batch_norm_legit_functional", {x, w, b, rm, rv}, fwd_relu);
      ASSERT_EQ(folded.size(), 5u);
      // relu(bn(x) + identity) and bn(x) + identity, folded and not.
      const int identity = g.Feed({dtype, shape});
      const int sum = g.Add1("add.Tensor", {plain[0], identity});
      const int sum_relu = g.Add1("relu", {sum});
      Attrs fwd_residual = fwd;
      fwd_residual.Set("residual", true);
      const int folded_sum = g.Add("_native_batch_norm_legit_functional", {x, w, b, rm, rv, identity}, fwd_residual)[0];
      fwd_residual.Set("relu", true);
      const int folded_sum_relu =
          g.Add("_native_batch_norm_legit_functional", {x, w, b, rm, rv, identity}, fwd_residual)[0];
      const int gm = g.Add1("threshold_backward", {gy, r}, MakeAttrs({{"threshold", 0.0}}));
      const Attrs back = MakeAttrs({{"train", true}, {"eps", 1e-5}});
      const std::vector<int> plain_back =
          g.Add("native_batch_norm_backward", {gm, x, w, rm, rv, plain[1], plain[2]}, back);
      Attrs back_masked = back;
      back_masked.Set("mask_threshold", 0.0);
      const std::vector<int> folded_back =
          g.Add("native_batch_norm_backward", {gy, x, w, rm, rv, plain[1], plain[2], folded[0]}, back_masked);
      ASSERT_EQ(folded_back.size(), 3u);
      // The GPU's values of both forms, per run (op by op, replay).
      std::map<std::pair<int, bool>, Bytes> gpu;
      CompareWithCpu(g, [&](const OutputPair& o) {
        EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), IsHalf(o.type().dtype) ? Tolerance(dtype) : Tolerance(param)))
            << o.Where();
        gpu[{o.value, o.replay}] = *o.gpu;
      });
      for (bool replay : {false, true}) {
        EXPECT_TRUE(SameBytes(gpu[{folded[0], replay}], gpu[{r, replay}])) << "the folded ReLU";
        EXPECT_TRUE(SameBytes(gpu[{folded_sum, replay}], gpu[{sum, replay}])) << "the folded residual";
        EXPECT_TRUE(SameBytes(gpu[{folded_sum_relu, replay}], gpu[{sum_relu, replay}])) << "residual and ReLU";
        for (int k = 0; k < 3; ++k) {
          EXPECT_TRUE(SameBytes(gpu[{folded_back[k], replay}], gpu[{plain_back[k], replay}]))
              << "backward output " << k << (replay ? " (replay)" : "");
        }
      }
    }
  }
}

}  // namespace
}  // namespace tandem::gpu_test
