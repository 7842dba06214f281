// Pieces that several GPU tests share beyond gpu_test_util.h: the graph of a
// small ResNet stem and basic block's training step (float32 and 16-bit
// tests build the same one), and a scope that forces the matrix products
// through classic cuBLAS. Header-only, test-only; not thread-safe.
#ifndef TANDEM_TESTS_GPU_SHARED_GRAPHS_H_
#define TANDEM_TESTS_GPU_SHARED_GRAPHS_H_

#include <cstdint>
#include <vector>

#include "kernels/cuda/blas.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {

// Adds to `g`, in `dtype`, a ResNet stem (7x7 stride-2 convolution, training
// batch norm, relu, 3x3 stride-2 max pool) and a basic block's convolution
// with its identity shortcut, then adaptive average pooling to [1, 1], and
// the backward of all of it from d(pool) = ones: many cuDNN calls and own
// kernels in one graph. Feeds: x [2, 3, 64, 64], the two convolutions'
// weights (small), gamma (positive), beta, running mean and variance
// (positive).
inline void AddResNetBlockStep(GraphMaker& g, DType dtype) {
  const int x = g.Feed({dtype, {2, 3, 64, 64}});
  const int w1 = g.Feed({dtype, {16, 3, 7, 7}}, Fill::kSmall);
  const int w2 = g.Feed({dtype, {16, 16, 3, 3}}, Fill::kSmall);
  const int gamma = g.Feed({dtype, {16}}, Fill::kPositive);
  const int beta = g.Feed({dtype, {16}});
  const int rm = g.Feed({dtype, {16}});
  const int rv = g.Feed({dtype, {16}}, Fill::kPositive);
  const Attrs stem = MakeAttrs({{"stride", std::vector<int64_t>{2, 2}},
                                {"padding", std::vector<int64_t>{3, 3}},
                                {"dilation", std::vector<int64_t>{1, 1}},
                                {"groups", int64_t{1}}});
  const Attrs same = MakeAttrs({{"stride", std::vector<int64_t>{1, 1}},
                                {"padding", std::vector<int64_t>{1, 1}},
                                {"dilation", std::vector<int64_t>{1, 1}},
                                {"groups", int64_t{1}}});
  const Attrs bn = MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}});
  const Attrs pool = MakeAttrs({{"kernel_size", std::vector<int64_t>{3, 3}},
                                {"stride", std::vector<int64_t>{2, 2}},
                                {"padding", std::vector<int64_t>{1, 1}}});
  const int c1 = g.Add1("convolution", {x, w1}, stem);
  const std::vector<int> n1 = g.Add("_native_batch_norm_legit_functional", {c1, gamma, beta, rm, rv}, bn);
  const int r1 = g.Add1("relu", {n1[0]});
  const std::vector<int> p1 = g.Add("max_pool2d_with_indices", {r1}, pool);
  const int c2 = g.Add1("convolution", {p1[0], w2}, same);
  const int s = g.Add1("add.Tensor", {c2, p1[0]});
  const int a = g.Add1("_adaptive_avg_pool2d", {s}, MakeAttrs({{"output_size", std::vector<int64_t>{1, 1}}}));
  // Backward from d(a) = ones.
  const int ga = g.Add1("ones_like", {a});
  const int gs = g.Add1("_adaptive_avg_pool2d_backward", {ga, s});
  Attrs same_back = same;
  same_back.Set("output_mask", std::vector<int64_t>{1, 1, 0});
  const std::vector<int> gc2 = g.Add("convolution_backward", {gs, p1[0], w2}, same_back);
  const int gp1 = g.Add1("add.Tensor", {gc2[0], gs});
  const int gr1 = g.Add1("max_pool2d_with_indices_backward", {gp1, r1, p1[1]}, pool);
  const int gn1 = g.Add1("threshold_backward", {gr1, r1}, MakeAttrs({{"threshold", 0.0}}));
  const std::vector<int> gbn = g.Add("native_batch_norm_backward", {gn1, c1, gamma, rm, rv, n1[1], n1[2]},
                                     MakeAttrs({{"train", true}, {"eps", 1e-5}}));
  Attrs stem_back = stem;
  stem_back.Set("output_mask", std::vector<int64_t>{0, 1, 0});
  g.Add("convolution_backward", {gbn[0], x, w1}, stem_back);
}

// While alive, every matrix product goes through classic cuBLAS (the
// fallback when cuBLASLt has no algorithm), whose strided and accumulating
// output paths differ.
class ScopedForceCublas {
 public:
  ScopedForceCublas() { cuda::SetMatmulForceCublasForTesting(true); }
  ~ScopedForceCublas() { cuda::SetMatmulForceCublasForTesting(false); }
  ScopedForceCublas(const ScopedForceCublas&) = delete;
  ScopedForceCublas& operator=(const ScopedForceCublas&) = delete;
};

}  // namespace tandem::gpu_test

#endif  // TANDEM_TESTS_GPU_SHARED_GRAPHS_H_
