// The bfloat16 and float16 CUDA kernels of the memory-efficient attention
// ops (forward and backward, half_attention_kernels.cu) and of _safe_softmax
// against the CPU kernels (the oracle), on fresh random inputs and shapes
// (the seed is printed), in both 16-bit types. Each graph runs twice on the
// GPU, op by op and as a replay of the captured CUDA graph; outputs are
// poisoned (0xFF bytes: NaN) before each run and NaN never passes.
//
// Tolerances (normwise relative, ||gpu - cpu|| / ||cpu||), as
// cuda_half_ops_test.cc: both backends round a float32 value to 16 bits
// once, and their float32 computations differ slightly (summation orders,
// expf), so a rounding can land one ulp apart (2u relative at most, u =
// 2^-8 for bfloat16, 2^-11 for float16); one op's tolerance is 2u + 1e-3.
// A backward reads its own backend's forward output (which may sit an ulp
// apart) through dO . o, so the gradients get 4 times that. The float32
// log-sum-exp matches to 1e-5, the philox outputs (zeros) exactly.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/half.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

double UnitRoundoff(DType dtype) { return dtype == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

double OpTolerance(DType dtype) { return 2 * UnitRoundoff(dtype) + 1e-3; }

constexpr double kFloat32Tolerance = 1e-5;

int64_t Dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(Rng()); }

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// Every node output compared: 16-bit outputs of the ops in `backward_ops`
// (which read an output of the op before them) within 4 * OpTolerance,
// other 16-bit outputs within OpTolerance, float32 within
// kFloat32Tolerance, the rest exactly. The program must capture and replay
// (the kernels allocate nothing and never synchronize).
void Check(const GraphMaker& maker, std::vector<Bytes> feeds, const std::vector<std::string>& backward_ops = {}) {
  CompareWithCpu(
      maker,
      [&](const OutputPair& o) {
        const DType dtype = o.type().dtype;
        double tolerance = kFloat32Tolerance;
        if (IsHalf(dtype)) {
          const std::string& op = o.graph->nodes[o.node].op;
          bool backward = false;
          for (const std::string& b : backward_ops) backward = backward || op == b;
          tolerance = (backward ? 4 : 1) * OpTolerance(dtype);
        }
        EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), tolerance)) << o.Where();
      },
      /*alias=*/{}, std::move(feeds), /*expect_capture=*/true);
}

// Writes -inf into element `i` of a 16-bit feed.
void SetNegInf(Bytes& feed, DType dtype, int64_t i) {
  reinterpret_cast<uint16_t*>(feed.data())[i] = dtype == DType::kBFloat16 ? 0xff80 : 0xfc00;
}

class CudaHalfAttention : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
};

// Forward and backward of _scaled_dot_product_efficient_attention: no bias,
// a full bias [B, H, L, S] (its gradient written directly), a bias shared
// by the batch [L, S] and a key-padding bias [B, 1, 1, S] with -inf past a
// random length per batch entry (both summed by the broadcast-bias
// kernel), each causal or not, with the default scale and an explicit one;
// random shapes up to 160 keys and heads of up to 96, E != Ev.
TEST_P(CudaHalfAttention, EfficientAttentionMatchesCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t B = Dim(1, 3), H = Dim(1, 4), L = Dim(1, 160), S = Dim(1, 160), E = Dim(1, 96), Ev = Dim(1, 96);
  SCOPED_TRACE(::testing::Message() << "B " << B << " H " << H << " L " << L << " S " << S << " E " << E << " Ev "
                                    << Ev);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    GraphMaker g;
    const int q = g.Feed({dtype(), {B, H, L, E}});
    const int k = g.Feed({dtype(), {B, H, S, E}});
    const int v = g.Feed({dtype(), {B, H, S, Ev}});
    const int go = g.Feed({dtype(), {B, H, L, Ev}});
    const int full_bias = g.Feed({dtype(), {B, H, L, S}});
    const int shared_bias = g.Feed({dtype(), {L, S}});
    const int padding_bias = g.Feed({dtype(), {B, 1, 1, S}});
    int index = 0;
    for (int bias : {-1, full_bias, shared_bias, padding_bias}) {
      Attrs attrs = MakeAttrs({{"compute_log_sumexp", true}, {"is_causal", causal}});
      if (index++ % 2 == 1) attrs.Set("scale", 0.3);
      std::vector<int> in = {q, k, v};
      if (bias >= 0) in.push_back(bias);
      const std::vector<int> out = g.Add("_scaled_dot_product_efficient_attention", in, attrs);
      ASSERT_EQ(out.size(), 4u);
      EXPECT_EQ(g.type(out[1]), (TensorType{DType::kFloat32, {B, H, (L + 31) / 32 * 32}}));
      std::vector<int> back = {go, q, k, v};
      if (bias >= 0) back.push_back(bias);
      back.insert(back.end(), {out[0], out[1], out[2], out[3]});
      g.Add("_scaled_dot_product_efficient_attention_backward", back, attrs);
    }
    // Without the log-sum-exp (inference).
    g.Add("_scaled_dot_product_efficient_attention", {q, k, v}, MakeAttrs({{"is_causal", causal}}));
    std::vector<Bytes> feeds = g.RandomFeeds(Rng());
    for (int64_t b = 0; b < B; ++b) {
      // Key 0 stays visible, so that no query row is hidden from every key.
      const int64_t length = Dim(1, S);
      for (int64_t j = length; j < S; ++j) SetNegInf(feeds[padding_bias], dtype(), b * S + j);
    }
    Check(g, std::move(feeds), {"_scaled_dot_product_efficient_attention_backward"});
  }
}

// The transformer's attention (8 heads of 64, sequence 128, batch 4) in 16
// bits, forward and backward with a causal mask, and a bias broadcast over
// the heads.
TEST_P(CudaHalfAttention, TransformerSizedAttention) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Shape shape = {4, 8, 128, 64};
  GraphMaker g;
  const int q = g.Feed({dtype(), shape}), k = g.Feed({dtype(), shape}), v = g.Feed({dtype(), shape});
  const int go = g.Feed({dtype(), shape});
  const int bias = g.Feed({dtype(), {4, 1, 128, 128}});
  for (bool causal : {true, false}) {
    const Attrs attrs = MakeAttrs({{"compute_log_sumexp", true}, {"is_causal", causal}});
    std::vector<int> in = {q, k, v};
    if (!causal) in.push_back(bias);
    const std::vector<int> out = g.Add("_scaled_dot_product_efficient_attention", in, attrs);
    std::vector<int> back = {go, q, k, v};
    if (!causal) back.push_back(bias);
    back.insert(back.end(), {out[0], out[1], out[2], out[3]});
    g.Add("_scaled_dot_product_efficient_attention_backward", back, attrs);
  }
  Check(g, g.RandomFeeds(Rng()), {"_scaled_dot_product_efficient_attention_backward"});
}

// _safe_softmax on masked attention scores [batch, heads, L, S]: query rows
// hidden from every key (all -inf: zeros, where _softmax gives NaN), keys
// padded away (partly -inf rows), and scattered -inf; over the key dim (a
// warp per row), over the heads dim (the padded keys make whole slices -inf
// there too), and over rows past 1024 elements (a block per row), one of
// them all -inf. Its backward is _softmax_backward_data.
TEST_P(CudaHalfAttention, SafeSoftmaxOfMaskedScores) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t batch = 3, heads = Dim(1, 8), seq = Dim(2, 200), wide_size = Dim(1025, 5000);
  SCOPED_TRACE(::testing::Message() << "heads " << heads << " seq " << seq << " wide " << wide_size);
  GraphMaker g;
  const int scores = g.Feed({dtype(), {batch, heads, seq, seq}}, Fill::kUniform);
  const int grad = g.Feed({dtype(), {batch, heads, seq, seq}});
  const int y = g.Add1("_safe_softmax", {scores}, MakeAttrs({{"dim", int64_t{-1}}}));
  g.Add1("_softmax_backward_data", {grad, y}, MakeAttrs({{"dim", int64_t{-1}}, {"input_dtype", dtype()}}));
  g.Add1("_safe_softmax", {scores}, MakeAttrs({{"dim", int64_t{1}}, {"dtype", dtype()}}));
  const int wide = g.Feed({dtype(), {3, wide_size}});
  g.Add1("_safe_softmax", {wide}, MakeAttrs({{"dim", int64_t{1}}}));

  std::vector<Bytes> feeds = g.RandomFeeds(Rng());
  Bytes& s = feeds[scores];
  // Batch entry 0: two query rows hidden from every key, in every head.
  for (int64_t q : {Dim(0, seq / 2 - 1), Dim(seq / 2, seq - 1)}) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t k = 0; k < seq; ++k) SetNegInf(s, dtype(), ((0 * heads + h) * seq + q) * seq + k);
    }
  }
  // Batch entry 1: keys from a random length on are padding.
  const int64_t length = Dim(1, seq - 1);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t q = 0; q < seq; ++q) {
      for (int64_t k = length; k < seq; ++k) SetNegInf(s, dtype(), ((1 * heads + h) * seq + q) * seq + k);
    }
  }
  // Batch entry 2: about a tenth of the scores, scattered.
  std::bernoulli_distribution scatter(0.1);
  for (int64_t i = 2 * heads * seq * seq; i < batch * heads * seq * seq; ++i) {
    if (scatter(Rng())) SetNegInf(s, dtype(), i);
  }
  // The wide rows: row 1 all -inf, row 2 -inf up to a random length.
  const int64_t wide_cut = Dim(1, wide_size - 1);
  for (int64_t k = 0; k < wide_size; ++k) SetNegInf(feeds[wide], dtype(), wide_size + k);
  for (int64_t k = 0; k < wide_cut; ++k) SetNegInf(feeds[wide], dtype(), 2 * wide_size + k);
  Check(g, std::move(feeds), {"_softmax_backward_data"});
}

INSTANTIATE_TEST_SUITE_P(SixteenBit, CudaHalfAttention, ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tandem::gpu_test
