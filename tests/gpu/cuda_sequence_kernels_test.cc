// The CUDA kernels of the LSTM, transformer and Adam/AdamW op families
// against the CPU kernels, on fresh random inputs (the seed is printed) with
// shapes from the reference models (an LSTM of hidden size 1024 scaled to
// 256, seq 35, vocab 10k; a transformer layer of d_model 512, 8 heads,
// seq 128). Each graph runs op by op and then as a replayed CUDA graph;
// outputs are poisoned before each run, and a NaN never passes.
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/cuda_program_options.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

constexpr double kPointwise32 = 1e-5;
constexpr double kReduce32 = 1e-4;  // sums over long rows or many rows in float32
constexpr double kAny64 = 1e-12;

int64_t Dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(Rng()); }

void Check(const GraphMaker& maker, double tolerance32, std::vector<std::pair<int, int>> alias = {},
           std::vector<Bytes> feeds = {}) {
  CompareWithCpuWithin(maker, tolerance32, kAny64, std::move(alias), std::move(feeds));
}

// Writes int64 `values` into feed `value` (row-major, cycling).
void SetInts(std::vector<Bytes>& feeds, int value, const std::vector<int64_t>& values) {
  auto* p = reinterpret_cast<int64_t*>(feeds[value].data());
  const size_t n = feeds[value].size() / sizeof(int64_t);
  for (size_t i = 0; i < n; ++i) p[i] = values[i % values.size()];
}

TEST(CudaSequenceKernels, ActivationsOnLstmGates) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Shape gates = {64, 4 * 256 + 3};
    GraphMaker g;
    const int x = g.Feed({dtype, gates});
    const int pos = g.Feed({dtype, gates}, Fill::kPositive);
    const int grad = g.Feed({dtype, gates});
    const int y = g.Add1("sigmoid", {x});
    const int t = g.Add1("tanh", {x});
    g.Add1("sigmoid_backward", {grad, y});
    g.Add1("tanh_backward", {grad, t});
    g.Add1("exp", {x});
    g.Add1("log", {pos});
    g.Add1("rsqrt", {pos});
    for (const char* approximate : {"none", "tanh"}) {
      const Attrs attrs = MakeAttrs({{"approximate", std::string(approximate)}});
      g.Add1("gelu", {x}, attrs);
      g.Add1("gelu_backward", {grad, x}, attrs);
    }
    g.Add1("pow.Tensor_Scalar", {pos}, MakeAttrs({{"exponent", 2.5}}));
    g.Add1("pow.Tensor_Scalar", {x}, MakeAttrs({{"exponent", int64_t{2}}}));
    g.Add1("pow.Scalar", {x}, MakeAttrs({{"self", 0.9}}));
    Check(g, kPointwise32);
  }
}

TEST(CudaSequenceKernels, OptimizerPointwiseWithBroadcasting) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t a = Dim(2, 20), b = Dim(2, 70), c = Dim(2, 300);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << a << ", " << b << ", " << c << "]");
    GraphMaker g;
    const int x = g.Feed({dtype, {a, b, c}});
    const int row = g.Feed({dtype, {c}});
    const int col = g.Feed({dtype, {b, 1}});
    const int den = g.Feed({dtype, {a, b, c}}, Fill::kPositive);
    const int w = g.Feed({dtype, {a, 1, c}}, Fill::kPositive);
    const int s = g.Feed({dtype, {}});
    g.Add1("clamp", {x}, MakeAttrs({{"min", -0.3}, {"max", 0.4}}));
    g.Add1("clamp", {x}, MakeAttrs({{"min", 0.1}}));
    g.Add1("maximum", {x, row});
    g.Add1("minimum", {col, x});
    g.Add1("addcmul", {x, row, col}, MakeAttrs({{"value", -0.25}}));
    g.Add1("addcdiv", {x, col, den}, MakeAttrs({{"value", 0.001}}));
    g.Add1("lerp.Scalar", {x, row}, MakeAttrs({{"weight", 0.1}}));
    g.Add1("lerp.Scalar", {x, row}, MakeAttrs({{"weight", 0.9}}));
    g.Add1("lerp.Tensor", {x, col, w});
    g.Add1("addcmul", {s, x, row});
    Check(g, kPointwise32);
  }
  GraphMaker g;
  const int x = g.Feed({DType::kInt64, {a, c}});
  const int y = g.Feed({DType::kInt64, {c}});
  g.Add1("clamp", {x}, MakeAttrs({{"min", int64_t{-7}}, {"max", int64_t{9}}}));
  g.Add1("maximum", {x, y});
  g.Add1("addcmul", {x, y, x}, MakeAttrs({{"value", int64_t{3}}}));
  Check(g, kPointwise32);
}

TEST(CudaSequenceKernels, InPlaceOutputs) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Shape shape = {Dim(2, 64), Dim(2, 513)};
  {
    GraphMaker g;
    const int x = g.Feed({DType::kFloat32, shape});
    const int out = g.Add1("sigmoid", {x});
    Check(g, kPointwise32, {{out, x}});
  }
  {
    GraphMaker g;
    const int v = g.Feed({DType::kFloat32, shape}, Fill::kPositive);
    const int grad = g.Feed({DType::kFloat32, shape});
    const int out = g.Add1("addcmul", {v, grad, grad}, MakeAttrs({{"value", 0.001}}));
    Check(g, kPointwise32, {{out, v}});
  }
  {
    GraphMaker g;
    const int x = g.Feed({DType::kFloat32, shape});
    const int mask = g.Feed({DType::kBool, {shape[1]}});
    const int out = g.Add1("masked_fill.Scalar", {x, mask}, MakeAttrs({{"value", -1e9}}));
    Check(g, kPointwise32, {{out, x}});
  }
  {
    GraphMaker g;
    const int grad = g.Feed({DType::kFloat32, shape});
    const int logits = g.Feed({DType::kFloat32, shape});
    const int y = g.Add1("_softmax", {logits}, MakeAttrs({{"dim", int64_t{1}}}));
    const int out =
        g.Add1("_softmax_backward_data", {grad, y}, MakeAttrs({{"dim", int64_t{1}}, {"input_dtype", DType::kFloat32}}));
    Check(g, kPointwise32, {{out, grad}});
  }
}

TEST(CudaSequenceKernels, DropoutMasksMatchTheCpuBitForBit) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    GraphMaker g;
    const int x = g.Feed({dtype, {64, 35, 257}});
    const int seed = g.Feed({DType::kInt64, {}});
    const std::vector<int> out = g.Add("native_dropout", {x, seed}, MakeAttrs({{"p", 0.35}, {"seed", int64_t{11}}}));
    g.Add("native_dropout", {x}, MakeAttrs({{"p", 0.1}, {"train", false}}));
    const int grad = g.Feed({dtype, {64, 35, 257}});
    g.Add1("native_dropout_backward", {grad, out[1]}, MakeAttrs({{"scale", 1 / 0.65}}));
    Check(g, kPointwise32);
  }
}

TEST(CudaSequenceKernels, ComparisonsWhereMaskedFillAny) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t a = Dim(2, 30), b = Dim(2, 300);
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kBool}) {
    SCOPED_TRACE(DTypeName(dtype));
    GraphMaker g;
    const int x = g.Feed({dtype, {a, b}});
    const int y = g.Feed({dtype, {b}});
    const int z = g.Feed({dtype, {a, b}});
    for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge"}) {
      g.Add1(absl::StrCat(op, ".Tensor"), {x, y});
      g.Add1(absl::StrCat(op, ".Tensor"), {x, x});
      g.Add1(absl::StrCat(op, ".Scalar"), {x}, MakeAttrs({{"other", int64_t{0}}}));
      if (dtype != DType::kBool) g.Add1(absl::StrCat(op, ".Scalar"), {x}, MakeAttrs({{"other", 0.5}}));
    }
    const int cond = g.Add1("gt.Tensor", {x, z});
    g.Add1("where.self", {cond, x, y});
    g.Add1("logical_not", {x});
    g.Add1("masked_fill.Scalar", {x, cond}, MakeAttrs({{"value", int64_t{1}}}));
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{0}, {1}, {0, 1}}) {
      g.Add1("any.dims", {x}, MakeAttrs({{"dim", dims}}));
    }
    g.Add1("any", {x});
    Check(g, kPointwise32);
  }
  // The decomposed nll loss: where(ne(target, -100), target, 0).
  GraphMaker g;
  const int target = g.Feed({DType::kInt64, {64 * 35}}, Fill::kLabels, 10000);
  const int zero = g.Add1("scalar_tensor", {}, MakeAttrs({{"s", int64_t{0}}, {"dtype", DType::kInt64}}));
  const int keep = g.Add1("ne.Scalar", {target}, MakeAttrs({{"other", int64_t{-100}}}));
  g.Add1("where.self", {keep, target, zero});
  const int scores = g.Feed({DType::kFloat32, {4, 8, 128, 128}});
  const int mask = g.Feed({DType::kBool, {128, 128}});
  g.Add1("masked_fill.Tensor", {scores, mask, zero});
  g.Add1("any.dim", {mask}, MakeAttrs({{"dim", int64_t{-1}}, {"keepdim", true}}));
  Check(g, kPointwise32);
}

TEST(CudaSequenceKernels, EmbeddingOfTheLstmModel) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t vocab = 10000, width = 256;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    GraphMaker g;
    const int weight = g.Feed({dtype, {vocab, width}}, Fill::kSmall);
    const int ids = g.Feed({DType::kInt64, {35, 64}}, Fill::kLabels, vocab);
    const int grad = g.Feed({dtype, {35, 64, width}});
    g.Add1("embedding", {weight, ids});
    g.Add1("embedding_dense_backward", {grad, ids}, MakeAttrs({{"num_weights", vocab}, {"padding_idx", int64_t{-1}}}));
    const int few = g.Feed({DType::kInt64, {35, 64}}, Fill::kLabels, 20);  // many repeats
    g.Add1("embedding_dense_backward", {grad, few}, MakeAttrs({{"num_weights", vocab}, {"padding_idx", int64_t{3}}}));
    Check(g, kReduce32);
  }
}

TEST(CudaSequenceKernels, GatherScatterIndexSelectIndexPut) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t rows = Dim(2, 200), cols = Dim(2, 300);
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << rows << ", " << cols << "]");
    GraphMaker g;
    const int self = g.Feed({dtype, {rows, cols}});
    const int column = g.Feed({DType::kInt64, {rows, 1}}, Fill::kLabels, cols);
    const int row_ids = g.Feed({DType::kInt64, {3, cols}}, Fill::kLabels, rows);
    const int src = g.Feed({dtype, {rows + 1, cols + 2}});
    g.Add1("gather", {self, column}, MakeAttrs({{"dim", int64_t{1}}}));
    g.Add1("gather", {self, row_ids}, MakeAttrs({{"dim", int64_t{0}}}));
    // One index per row: the writes do not race.
    g.Add1("scatter.value", {self, column}, MakeAttrs({{"dim", int64_t{1}}, {"value", int64_t{-1}}}));
    g.Add1("scatter.src", {self, column, src}, MakeAttrs({{"dim", int64_t{1}}}));
    const int pick = g.Feed({DType::kInt64, {17}}, Fill::kLabels, rows);
    g.Add1("index_select", {self, pick}, MakeAttrs({{"dim", int64_t{0}}}));
    const int pick_cols = g.Feed({DType::kInt64, {9}}, Fill::kLabels, cols);
    g.Add1("index_select", {self, pick_cols}, MakeAttrs({{"dim", int64_t{1}}}));
    std::vector<Bytes> feeds = g.RandomFeeds(Rng());
    Check(g, kPointwise32, {}, feeds);
  }
  // index_put with accumulate (repeated rows: the decomposed embedding
  // backward) and without (distinct rows, negative ones wrapped).
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    GraphMaker g;
    const int zeros = g.Add1("zeros", {}, MakeAttrs({{"size", std::vector<int64_t>{1000, 256}}, {"dtype", dtype}}));
    const int ids = g.Feed({DType::kInt64, {35 * 64}}, Fill::kLabels, 1000);
    const int grad = g.Feed({dtype, {35 * 64, 256}});
    g.Add1("index_put", {zeros, ids, grad}, MakeAttrs({{"accumulate", true}}));
    const int self = g.Feed({dtype, {50, 4, 3}});
    const int i0 = g.Feed({DType::kInt64, {10, 1}});
    const int i1 = g.Feed({DType::kInt64, {4}});
    const int values = g.Feed({dtype, {3}});
    g.Add1("index_put", {self, i0, i1, values});
    std::vector<Bytes> feeds = g.RandomFeeds(Rng());
    SetInts(feeds, i0, {0, -1, 5, 7, -20, 11, 13, 17, 19, 23});
    SetInts(feeds, i1, {3, 0, -3, 2});
    Check(g, kReduce32, {}, feeds);
  }
}

TEST(CudaSequenceKernels, SlicingOfTheLstmStep) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kInt64, DType::kBool}) {
    SCOPED_TRACE(DTypeName(dtype));
    GraphMaker g;
    const int gates = g.Feed({dtype, {64, 4 * 256}});
    g.Add("unsafe_split.Tensor", {gates}, MakeAttrs({{"split_size", int64_t{256}}, {"dim", int64_t{1}}}));
    g.Add("split_with_sizes", {gates},
          MakeAttrs({{"split_sizes", std::vector<int64_t>{100, 900, 24}}, {"dim", int64_t{1}}}));
    const int seq = g.Feed({dtype, {35, 64, 256}});
    g.Add("unbind.int", {seq}, MakeAttrs({{"dim", int64_t{0}}}));
    g.Add1("select.int", {seq}, MakeAttrs({{"dim", int64_t{0}}, {"index", int64_t{-1}}}));
    g.Add1("select.int", {seq}, MakeAttrs({{"dim", int64_t{2}}, {"index", int64_t{7}}}));
    g.Add1("slice.Tensor", {seq}, MakeAttrs({{"dim", int64_t{1}}, {"start", int64_t{3}}, {"end", int64_t{40}}}));
    g.Add1("slice.Tensor", {seq}, MakeAttrs({{"dim", int64_t{2}}, {"start", int64_t{1}}, {"step", int64_t{3}}}));
    const int h = g.Feed({dtype, {64, 256}});
    const int c = g.Feed({dtype, {64, 256}});
    g.Add1("cat", {h, c, h}, MakeAttrs({{"dim", int64_t{1}}}));
    g.Add1("cat", {h, c}, MakeAttrs({{"dim", int64_t{0}}}));
    g.Add1("stack", {h, c, h}, MakeAttrs({{"dim", int64_t{1}}}));
    g.Add1("stack", {h, c}, MakeAttrs({{"dim", int64_t{0}}}));
    const int one = g.Feed({dtype, {1, 64, 1, 256}});
    g.Add1("squeeze.dims", {one}, MakeAttrs({{"dim", std::vector<int64_t>{0, 2}}}));
    Check(g, kPointwise32);
  }
  GraphMaker g;
  const int grad_row = g.Feed({DType::kFloat32, {64, 256}});
  g.Add1("select_backward", {grad_row},
         MakeAttrs({{"input_sizes", std::vector<int64_t>{35, 64, 256}}, {"dim", int64_t{0}}, {"index", int64_t{34}}}));
  const int grad_slice = g.Feed({DType::kFloat32, {35, 64, 85}});
  g.Add1("slice_backward", {grad_slice},
         MakeAttrs({{"input_sizes", std::vector<int64_t>{35, 64, 256}},
                    {"dim", int64_t{2}},
                    {"start", int64_t{1}},
                    {"end", int64_t{256}},
                    {"step", int64_t{3}}}));
  const int grad_part = g.Feed({DType::kFloat32, {35, 37, 256}});
  g.Add1("slice_backward", {grad_part},
         MakeAttrs({{"input_sizes", std::vector<int64_t>{35, 64, 256}},
                    {"dim", int64_t{1}},
                    {"start", int64_t{3}},
                    {"end", int64_t{40}},
                    {"step", int64_t{1}}}));
  Check(g, kPointwise32);
}

TEST(CudaSequenceKernels, SoftmaxAndLayerNormOfTheTransformer) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    GraphMaker g;
    const int scores = g.Feed({dtype, {4, 8, 128, 128}});
    const int grad = g.Feed({dtype, {4, 8, 128, 128}});
    const int y = g.Add1("_softmax", {scores}, MakeAttrs({{"dim", int64_t{-1}}}));
    g.Add1("_softmax_backward_data", {grad, y}, MakeAttrs({{"dim", int64_t{-1}}}));
    const int y1 = g.Add1("_softmax", {scores}, MakeAttrs({{"dim", int64_t{1}}}));
    g.Add1("_softmax_backward_data", {grad, y1}, MakeAttrs({{"dim", int64_t{1}}}));
    const int wide = g.Feed({dtype, {3, 3000}});
    g.Add1("_softmax", {wide}, MakeAttrs({{"dim", int64_t{1}}}));
    // Layer norm over d_model 512 of [seq 128, batch 4, 512].
    const int x = g.Feed({dtype, {128, 4, 512}});
    const int w = g.Feed({dtype, {512}}, Fill::kPositive);
    const int b = g.Feed({dtype, {512}});
    const Attrs attrs = MakeAttrs({{"normalized_shape", std::vector<int64_t>{512}}, {"eps", 1e-5}});
    const std::vector<int> ln = g.Add("native_layer_norm", {x, w, b}, attrs);
    const int dy = g.Feed({dtype, {128, 4, 512}});
    g.Add("native_layer_norm_backward", {dy, x, ln[1], ln[2], w, b}, attrs);
    const std::vector<int> plain = g.Add("native_layer_norm", {x}, attrs);
    g.Add("native_layer_norm_backward", {dy, x, plain[1], plain[2]}, attrs);
    Check(g, kReduce32);
  }
}

// Softmax and log_softmax, forward and backward, over the innermost dim at
// row lengths that take every kernel shape: a warp's row tile of 1, 2, 4
// and 8 packs (36, 128, 512, 1000 float32 elements), a block's of 2, 8 and
// 16 (2048, 5000, 10000), rows too long for any tile (20000) and rows that
// are no whole number of 16-byte packs (37, 1001: one element at a time).
// Row counts are random and include counts that leave part of a block
// without a row.
TEST(CudaSequenceKernels, SoftmaxFamilyAtEveryRowLength) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t size : {36, 37, 128, 512, 1000, 1001, 2048, 5000, 10000, 20000}) {
      const int64_t rows = size > 4096 ? Dim(1, 12) : Dim(1, 300);
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << rows << ", " << size << "]");
      GraphMaker g;
      const int x = g.Feed({dtype, {rows, size}});
      const int grad = g.Feed({dtype, {rows, size}});
      const Attrs dim = MakeAttrs({{"dim", int64_t{1}}});
      const Attrs backward = MakeAttrs({{"dim", int64_t{1}}, {"input_dtype", dtype}});
      const int y = g.Add1("_softmax", {x}, dim);
      g.Add1("_softmax_backward_data", {grad, y}, backward);
      g.Add1("_safe_softmax", {x}, dim);
      const int lsm = g.Add1("_log_softmax", {x}, MakeAttrs({{"dim", int64_t{1}}, {"half_to_float", false}}));
      g.Add1("_log_softmax_backward_data", {grad, lsm}, backward);
      Check(g, kReduce32);
    }
  }
}

// Layer norm forward and backward at row lengths that take every kernel
// shape (as above), with and without weight and bias, and a tall input
// (4096 rows) whose grad_weight and grad_bias spread over a cluster of
// blocks.
TEST(CudaSequenceKernels, LayerNormAtEveryRowLength) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t cols : {36, 37, 512, 1000, 3000, 20000}) {
      const int64_t rows = cols > 4096 ? Dim(1, 9) : Dim(1, 200);
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << rows << ", " << cols << "]");
      GraphMaker g;
      const int x = g.Feed({dtype, {rows, cols}});
      const int dy = g.Feed({dtype, {rows, cols}});
      const int w = g.Feed({dtype, {cols}}, Fill::kPositive);
      const int b = g.Feed({dtype, {cols}});
      const Attrs attrs = MakeAttrs({{"normalized_shape", std::vector<int64_t>{cols}}, {"eps", 1e-5}});
      const std::vector<int> ln = g.Add("native_layer_norm", {x, w, b}, attrs);
      g.Add("native_layer_norm_backward", {dy, x, ln[1], ln[2], w, b}, attrs);
      const std::vector<int> plain = g.Add("native_layer_norm", {x}, attrs);
      g.Add("native_layer_norm_backward", {dy, x, plain[1], plain[2]}, attrs);
      Check(g, kReduce32);
    }
  }
  GraphMaker g;
  const Shape shape = {4096, 512};
  const int x = g.Feed({DType::kFloat32, shape});
  const int dy = g.Feed({DType::kFloat32, shape});
  const int w = g.Feed({DType::kFloat32, {512}}, Fill::kPositive);
  const int b = g.Feed({DType::kFloat32, {512}});
  const Attrs attrs = MakeAttrs({{"normalized_shape", std::vector<int64_t>{512}}, {"eps", 1e-5}});
  const std::vector<int> ln = g.Add("native_layer_norm", {x, w, b}, attrs);
  g.Add("native_layer_norm_backward", {dy, x, ln[1], ln[2], w, b}, attrs);
  Check(g, kReduce32);
}

// Pointwise ops over contiguous operands move 16-byte packs: element counts
// that are and are not whole packs (the last n % 4 elements one at a time)
// or whole steps of four packs, a rank-0 operand beside packed ones, and a
// broadcast operand (no packs).
TEST(CudaSequenceKernels, PointwisePacksAndTails) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    // At least 7 elements: the error is relative to the norm of the result,
    // which a single element near gelu_backward's zero makes tiny.
    for (int64_t n : {int64_t{7}, int64_t{4099}, (int64_t{1} << 20) + 5}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << n << "]");
      GraphMaker g;
      const int x = g.Feed({dtype, {n}});
      const int grad = g.Feed({dtype, {n}});
      const int pos = g.Feed({dtype, {n}}, Fill::kPositive);
      const int s = g.Feed({dtype, {}});
      for (const char* approximate : {"none", "tanh"}) {
        const Attrs attrs = MakeAttrs({{"approximate", std::string(approximate)}});
        g.Add1("gelu", {x}, attrs);
        g.Add1("gelu_backward", {grad, x}, attrs);
      }
      g.Add1("addcmul", {s, x, pos}, MakeAttrs({{"value", 0.5}}));
      g.Add1("addcdiv", {x, s, pos}, MakeAttrs({{"value", -0.25}}));
      g.Add1("lerp.Tensor", {x, grad, pos});
      g.Add1("maximum", {x, grad});
      Check(g, kPointwise32);
    }
  }
  GraphMaker g;
  const int64_t rows = Dim(2, 50), cols = 4 * Dim(1, 300);
  const int x = g.Feed({DType::kFloat32, {rows, cols}});
  const int row = g.Feed({DType::kFloat32, {cols}});
  g.Add1("addcmul", {x, row, x}, MakeAttrs({{"value", 0.5}}));
  const int ints = g.Feed({DType::kInt64, {4099}});
  g.Add1("clamp", {ints}, MakeAttrs({{"min", int64_t{-7}}, {"max", int64_t{9}}}));
  Check(g, kPointwise32);
}

// Embedding rows move as 16-byte units when a row's bytes are a whole
// number of them (width 1024 or 4 float32, 2 float64) and one element at a
// time otherwise (width 7 or 3); bad ids in both kinds fail the iteration
// with the value, and the next iteration is right. A lane moves its units
// in batches of 8 (256 a warp): width 1500 float32 (375 units) and 301
// (301 elements) end in a partial batch.
TEST(CudaSequenceKernels, EmbeddingOfEveryRowWidth) {
  TANDEM_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<DType, int64_t>> widths = {
      {DType::kFloat32, 1024}, {DType::kFloat32, 4}, {DType::kFloat32, 7},    {DType::kFloat32, 3},
      {DType::kFloat64, 2},    {DType::kFloat64, 3}, {DType::kFloat32, 1500}, {DType::kFloat32, 301}};
  for (const auto& [dtype, width] : widths) {
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " width " << width);
    const int64_t vocab = Dim(50, 3000);
    GraphMaker g;
    const int weight = g.Feed({dtype, {vocab, width}});
    const int ids = g.Feed({DType::kInt64, {Dim(1, 70), Dim(1, 40)}}, Fill::kLabels, vocab);
    g.Add1("embedding", {weight, ids});
    Check(g, kPointwise32);

    const Graph& graph = g.graph();
    auto program = cuda::CreateCudaProgram(graph, *Gpu(), cuda::CudaProgramOptions{});
    ASSERT_TRUE(program.ok()) << program.status();
    GpuRun run(graph);
    std::vector<Bytes> feeds = g.RandomFeeds(Rng());
    auto* id = reinterpret_cast<int64_t*>(feeds[ids].data());
    const int64_t bad = Dim(0, 1) == 0 ? vocab : -Dim(1, 5);
    id[feeds[ids].size() / sizeof(int64_t) - 1] = bad;
    ASSERT_TRUE(run.Upload(feeds).ok());
    absl::Status s = run.RunIteration(**program);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(absl::StrCat("index ", bad, " ")), absl::string_view::npos) << s;
    const std::vector<Bytes> good = g.RandomFeeds(Rng());
    auto ref = RunOnCpu(graph, good);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_TRUE(run.Upload(good).ok());
    s = run.RunIteration(**program);
    ASSERT_TRUE(s.ok()) << s;
    auto out = run.Download();
    ASSERT_TRUE(out.ok());
    for (const Node& node : graph.nodes) {
      for (int v : node.outputs) EXPECT_TRUE(SameBytes((*out)[v], (*ref)[v])) << node.op;
    }
  }
}

// Writes -inf into element `i` of a float32 or float64 feed.
void SetNegInf(Bytes& feed, DType dtype, int64_t i) {
  if (dtype == DType::kFloat32) {
    reinterpret_cast<float*>(feed.data())[i] = -std::numeric_limits<float>::infinity();
  } else {
    reinterpret_cast<double*>(feed.data())[i] = -std::numeric_limits<double>::infinity();
  }
}

// _safe_softmax on masked attention scores [batch, heads, L, S]: query rows
// hidden from every key (all -inf: zeros, where _softmax gives NaN), keys
// padded away (partly -inf rows), and scattered -inf; over the key dim (a
// warp per row), over the heads dim (a thread per position; the padded keys
// make whole slices -inf there too), and over a row past 1024 elements (a
// block per row). Its backward is _softmax_backward_data.
TEST(CudaSequenceKernels, SafeSoftmaxOfMaskedScores) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t batch = 4, heads = 8, seq = 128, wide_size = 3000;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    GraphMaker g;
    const int scores = g.Feed({dtype, {batch, heads, seq, seq}});
    const int grad = g.Feed({dtype, {batch, heads, seq, seq}});
    const int y = g.Add1("_safe_softmax", {scores}, MakeAttrs({{"dim", int64_t{-1}}}));
    g.Add1("_softmax_backward_data", {grad, y}, MakeAttrs({{"dim", int64_t{-1}}, {"input_dtype", dtype}}));
    g.Add1("_safe_softmax", {scores}, MakeAttrs({{"dim", int64_t{1}}, {"dtype", dtype}}));
    const int wide = g.Feed({dtype, {3, wide_size}});
    g.Add1("_safe_softmax", {wide}, MakeAttrs({{"dim", int64_t{1}}}));

    std::vector<Bytes> feeds = g.RandomFeeds(Rng());
    Bytes& s = feeds[scores];
    // Batch entry 0: two query rows hidden from every key, in every head.
    for (int64_t q : {Dim(0, seq / 2 - 1), Dim(seq / 2, seq - 1)}) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t k = 0; k < seq; ++k) SetNegInf(s, dtype, ((0 * heads + h) * seq + q) * seq + k);
      }
    }
    // Batch entry 1: keys from a random length on are padding.
    const int64_t length = Dim(1, seq - 1);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t q = 0; q < seq; ++q) {
        for (int64_t k = length; k < seq; ++k) SetNegInf(s, dtype, ((1 * heads + h) * seq + q) * seq + k);
      }
    }
    // Batch entries 2 and 3: about a tenth of the scores, scattered.
    std::bernoulli_distribution scatter(0.1);
    for (int64_t i = 2 * heads * seq * seq; i < batch * heads * seq * seq; ++i) {
      if (scatter(Rng())) SetNegInf(s, dtype, i);
    }
    // The wide rows: row 1 all -inf, row 2 -inf up to a random length.
    const int64_t wide_cut = Dim(1, wide_size - 1);
    for (int64_t k = 0; k < wide_size; ++k) SetNegInf(feeds[wide], dtype, wide_size + k);
    for (int64_t k = 0; k < wide_cut; ++k) SetNegInf(feeds[wide], dtype, 2 * wide_size + k);
    Check(g, kReduce32, {}, feeds);
  }
}

TEST(CudaSequenceKernels, BmmBothLibraries) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (bool force_cublas : {false, true}) {
    cuda::SetMatmulForceCublasForTesting(force_cublas);
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      const int64_t b = Dim(1, 40), n = Dim(1, 130), k = Dim(1, 70), m = Dim(1, 130);
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << b << ", " << n << ", " << k << "] @ [" << k
                                        << ", " << m << "] cublas=" << force_cublas);
      GraphMaker g;
      const int x = g.Feed({dtype, {b, n, k}});
      const int y = g.Feed({dtype, {b, k, m}});
      g.Add1("bmm", {x, y});
      Check(g, kReduce32);
    }
  }
  cuda::SetMatmulForceCublasForTesting(false);
}

TEST(CudaSequenceKernels, AttentionOfTheTransformer) {
  TANDEM_SKIP_WITHOUT_GPU();
  // d_model 512 = 8 heads of 64, seq 128, batch 4 (float32); smaller in float64.
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const bool f32 = dtype == DType::kFloat32;
    const Shape qs = f32 ? Shape{4, 8, 128, 64} : Shape{2, 3, 37, 16};
    const Shape ks = f32 ? Shape{4, 8, 128, 64} : Shape{2, 3, 45, 16};
    const Shape vs = f32 ? Shape{4, 8, 128, 64} : Shape{2, 3, 45, 24};
    const int64_t L = qs[2], S = ks[2], Ev = vs[3];
    for (bool causal : {false, true}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " causal " << causal);
      GraphMaker g;
      const int q = g.Feed({dtype, qs}), k = g.Feed({dtype, ks}), v = g.Feed({dtype, vs});
      const int go = g.Feed({dtype, {qs[0], qs[1], L, Ev}});
      const int full_bias = g.Feed({dtype, {qs[0], qs[1], L, S}});
      const int shared_bias = g.Feed({dtype, {L, S}});
      const int keep = g.Feed({DType::kBool, {qs[0], 1, L, S}});
      const Attrs eff = MakeAttrs({{"compute_log_sumexp", true}, {"is_causal", causal}});
      for (int bias : {-1, full_bias, shared_bias}) {
        std::vector<int> in = {q, k, v};
        if (bias >= 0) in.push_back(bias);
        const std::vector<int> out = g.Add("_scaled_dot_product_efficient_attention", in, eff);
        std::vector<int> back = {go, q, k, v};
        if (bias >= 0) back.push_back(bias);
        back.insert(back.end(), {out[0], out[1], out[2], out[3]});
        g.Add("_scaled_dot_product_efficient_attention_backward", back, eff);
      }
      const Attrs flash = MakeAttrs({{"is_causal", causal}, {"scale", 0.2}});
      const std::vector<int> out = g.Add("_scaled_dot_product_flash_attention_for_cpu", {q, k, v, keep}, flash);
      g.Add("_scaled_dot_product_flash_attention_for_cpu_backward", {go, q, k, v, out[0], out[1], keep}, flash);
      std::vector<Bytes> feeds = g.RandomFeeds(Rng());
      // Key 0 stays visible to every query, so no row is fully hidden.
      bool* mask = reinterpret_cast<bool*>(feeds[keep].data());
      for (int64_t i = 0; i < qs[0] * L; ++i) mask[i * S] = true;
      Check(g, kReduce32, {}, feeds);
    }
  }
}

TEST(CudaSequenceKernels, ArangeAndEmpty) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker g;
  g.Add1("arange.start_step", {}, MakeAttrs({{"start", int64_t{-5}}, {"end", int64_t{1000}}, {"step", int64_t{3}}}));
  g.Add1("arange.start_step", {}, MakeAttrs({{"start", 0.25}, {"end", 9.0}, {"step", 0.125}}));
  g.Add1("arange", {}, MakeAttrs({{"end", int64_t{128}}, {"dtype", DType::kFloat64}}));
  const int x = g.Feed({DType::kFloat32, {7, 9}});
  g.Add1("empty_like", {x});
  g.Add1("empty_permuted", {},
         MakeAttrs({{"size", std::vector<int64_t>{3, 5}}, {"physical_layout", std::vector<int64_t>{1, 0}}}));
  Check(g, kPointwise32);
}

// A bad token id fails its iteration with INVALID_ARGUMENT naming the node
// and the value; the next iteration on the same stream runs and is right.
TEST(CudaSequenceKernels, BadIndicesFailOnlyTheirIteration) {
  TANDEM_SKIP_WITHOUT_GPU();
  GraphMaker g;
  const int weight = g.Feed({DType::kFloat32, {100, 8}});
  const int ids = g.Feed({DType::kInt64, {5, 7}}, Fill::kLabels, 100);
  const int grad = g.Feed({DType::kFloat32, {5, 7, 8}});
  g.Add1("embedding", {weight, ids});
  g.Add1("embedding_dense_backward", {grad, ids}, MakeAttrs({{"num_weights", int64_t{100}}}));
  const int self = g.Feed({DType::kFloat32, {5, 9}});
  const int index = g.Feed({DType::kInt64, {5, 2}}, Fill::kLabels, 9);
  g.Add1("gather", {self, index}, MakeAttrs({{"dim", int64_t{1}}}));
  const Graph& graph = g.graph();
  auto program = cuda::CreateCudaProgram(graph, *Gpu(), cuda::CudaProgramOptions{});
  ASSERT_TRUE(program.ok()) << program.status();
  GpuRun run(graph);
  struct Bad {
    int feed;
    int64_t value;
    std::string op;
  };
  for (const Bad& bad : {Bad{ids, 100, "embedding"}, Bad{ids, -1, "embedding"}, Bad{index, 9, "gather"},
                         Bad{ids, int64_t{1} << 40, "embedding"}}) {
    SCOPED_TRACE(::testing::Message() << bad.op << " " << bad.value);
    std::vector<Bytes> feeds = g.RandomFeeds(Rng());
    reinterpret_cast<int64_t*>(feeds[bad.feed].data())[3] = bad.value;
    ASSERT_TRUE(run.Upload(feeds).ok());
    absl::Status s = run.RunIteration(**program);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(bad.op), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find(absl::StrCat("index ", bad.value, " ")), absl::string_view::npos) << s;
    const std::vector<Bytes> good = g.RandomFeeds(Rng());
    auto ref = RunOnCpu(graph, good);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_TRUE(run.Upload(good).ok());
    s = run.RunIteration(**program);
    ASSERT_TRUE(s.ok()) << s;
    auto out = run.Download();
    ASSERT_TRUE(out.ok());
    for (const Node& node : graph.nodes) {
      for (int v : node.outputs) EXPECT_TRUE(Matches((*out)[v], (*ref)[v], graph.values[v].type, kReduce32)) << node.op;
    }
  }
}

}  // namespace
}  // namespace tandem::gpu_test
