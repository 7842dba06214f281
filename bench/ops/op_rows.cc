#include "bench/ops/op_rows.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/half.h"

namespace tandem::bench {
namespace {

using gpu_test::Fill;
using gpu_test::GraphMaker;

constexpr DType kF32 = DType::kFloat32;
constexpr DType kBF16 = DType::kBFloat16;

// "[32,64,56,56]": compact, as torch_ops.py writes shapes.
std::string Dims(const Shape& shape) { return absl::StrCat("[", absl::StrJoin(shape, ","), "]"); }

double BytesOf(const GraphMaker& g, std::initializer_list<int> values) {
  double bytes = 0;
  for (int v : values) bytes += static_cast<double>(g.type(v).bytes());
  return bytes;
}

int Feed(OpRow& row, TensorType type, Fill fill = Fill::kUniform, int64_t labels_upper = 0) {
  const int v = row.graph.Feed(std::move(type), fill, labels_upper);
  row.feeds.push_back({v, fill, labels_upper});
  return v;
}

int SetupFeed(OpRow& row, TensorType type, Fill fill = Fill::kUniform, int64_t labels_upper = 0) {
  if (!row.setup.has_value()) row.setup.emplace();
  const int v = row.setup->Feed(std::move(type), fill, labels_upper);
  row.setup_feeds.push_back({v, fill, labels_upper});
  return v;
}

OpRow NewRow(std::string name, std::string op, RowKind kind) {
  OpRow row;
  row.name = std::move(name);
  row.op = std::move(op);
  row.kind = kind;
  return row;
}

// ---- matrix products ----

// [n, k] @ [k, m] (+ a bias [m] for addmm).
OpRow Matmul(std::string name, int64_t n, int64_t k, int64_t m, bool bias, DType dtype = kF32) {
  OpRow row = NewRow(std::move(name), bias ? "addmm" : "mm", RowKind::kCompute);
  const int a = Feed(row, {dtype, {n, k}});
  const int b = Feed(row, {dtype, {k, m}}, Fill::kSmall);
  if (bias) {
    const int c = Feed(row, {dtype, {m}});
    row.graph.Add("addmm", {c, a, b});
  } else {
    row.graph.Add("mm", {a, b});
  }
  row.shapes = absl::StrCat(Dims({n, k}), "@", Dims({k, m}), bias ? absl::StrCat("+", Dims({m})) : "");
  row.flops = 2.0 * n * k * m;
  return row;
}

// [batch, n, k] @ [batch, k, m].
OpRow Bmm(std::string name, int64_t batch, int64_t n, int64_t k, int64_t m, DType dtype = kF32) {
  OpRow row = NewRow(std::move(name), "bmm", RowKind::kCompute);
  const int a = Feed(row, {dtype, {batch, n, k}});
  const int b = Feed(row, {dtype, {batch, k, m}});
  row.graph.Add("bmm", {a, b});
  row.shapes = absl::StrCat(Dims({batch, n, k}), "@", Dims({batch, k, m}));
  row.flops = 2.0 * batch * n * k * m;
  return row;
}

// ---- convolutions ----

struct ConvLayer {
  std::string name;
  Shape x, w;  // [n, c, h, w], [o, c, kh, kw]
  int64_t stride, padding;
  bool bias;
  std::vector<int64_t> mask;  // convolution_backward's output_mask
};

Attrs ConvAttrs(const ConvLayer& c, bool allow_tf32) {
  Attrs attrs = MakeAttrs({{"stride", std::vector<int64_t>{c.stride, c.stride}},
                           {"padding", std::vector<int64_t>{c.padding, c.padding}},
                           {"dilation", std::vector<int64_t>{1, 1}},
                           {"transposed", false},
                           {"output_padding", std::vector<int64_t>{0, 0}},
                           {"groups", int64_t{1}}});
  if (allow_tf32) attrs.Set("allow_tf32", true);
  return attrs;
}

// The forward and the backward row of one layer.
void AddConvRows(const ConvLayer& c, bool allow_tf32, std::vector<OpRow>& rows, DType dtype = kF32) {
  const int64_t oh = (c.x[2] + 2 * c.padding - c.w[2]) / c.stride + 1;
  const int64_t ow = (c.x[3] + 2 * c.padding - c.w[3]) / c.stride + 1;
  const Shape y = {c.x[0], c.w[0], oh, ow};
  const double flops = 2.0 * c.x[0] * c.w[0] * oh * ow * c.w[1] * c.w[2] * c.w[3];
  const std::string geometry = absl::StrCat("s", c.stride, " p", c.padding);

  OpRow fwd = NewRow(c.name + ".fwd", "convolution", RowKind::kCompute);
  std::vector<int> inputs = {Feed(fwd, {dtype, c.x}), Feed(fwd, {dtype, c.w}, Fill::kSmall)};
  if (c.bias) inputs.push_back(Feed(fwd, {dtype, {c.w[0]}}));
  fwd.graph.Add("convolution", inputs, ConvAttrs(c, allow_tf32));
  fwd.shapes = absl::StrCat("x", Dims(c.x), " w", Dims(c.w), c.bias ? " +bias " : " ", geometry);
  fwd.flops = flops;
  rows.push_back(std::move(fwd));

  OpRow bwd = NewRow(c.name + ".bwd", "convolution_backward", RowKind::kCompute);
  const int grad = Feed(bwd, {dtype, y});
  const int x = Feed(bwd, {dtype, c.x});
  const int w = Feed(bwd, {dtype, c.w}, Fill::kSmall);
  Attrs attrs = ConvAttrs(c, allow_tf32);
  attrs.Set("output_mask", c.mask);
  if (c.bias) attrs.Set("bias_sizes", std::vector<int64_t>{c.w[0]});
  bwd.graph.Add("convolution_backward", {grad, x, w}, attrs);
  bwd.shapes =
      absl::StrCat("dy", Dims(y), " x", Dims(c.x), " w", Dims(c.w), " ", geometry, " mask", absl::StrJoin(c.mask, ""));
  // grad_input and grad_weight each cost one forward's products; grad_bias
  // is a reduction and is not counted.
  bwd.flops = flops * static_cast<double>(c.mask[0] + c.mask[1]);
  rows.push_back(std::move(bwd));
}

// ---- batch norm and pooling ----

// `shape` is [N, C, H, W]; with `channels_last` the tensors are [N, H, W, C]
// and the ops say so (the column kernels, as the layout pass leaves them).
void AddBatchNormRows(const std::string& name, Shape shape, std::vector<OpRow>& rows, bool channels_last = false) {
  const Shape channels = {shape[1]};
  if (channels_last) shape = {shape[0], shape[2], shape[3], shape[1]};
  const Attrs forward_attrs =
      MakeAttrs({{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}, {"channels_last", channels_last}});

  OpRow fwd = NewRow(name + ".fwd", "native_batch_norm", RowKind::kMemory);
  const int x = Feed(fwd, {kF32, shape});
  const int w = Feed(fwd, {kF32, channels}, Fill::kPositive);
  const int b = Feed(fwd, {kF32, channels});
  const std::vector<int> out = fwd.graph.Add("native_batch_norm", {x, w, b}, forward_attrs);
  fwd.shapes = absl::StrCat("x", Dims(shape), " training");
  if (out.size() == 3) fwd.bytes = BytesOf(fwd.graph, {x, w, b, out[0], out[1], out[2]});
  rows.push_back(std::move(fwd));

  OpRow bwd = NewRow(name + ".bwd", "native_batch_norm_backward", RowKind::kMemory);
  const int grad = Feed(bwd, {kF32, shape});
  const int bx = Feed(bwd, {kF32, shape});
  const int bw = Feed(bwd, {kF32, channels}, Fill::kPositive);
  const int mean = Feed(bwd, {kF32, channels});
  const int invstd = Feed(bwd, {kF32, channels}, Fill::kPositive);
  const std::vector<int> grads = bwd.graph.Add("native_batch_norm_backward", {grad, bx, bw, mean, invstd},
                                               MakeAttrs({{"train", true},
                                                          {"eps", 1e-5},
                                                          {"output_mask", std::vector<int64_t>{1, 1, 1}},
                                                          {"channels_last", channels_last}}));
  const int sx = SetupFeed(bwd, {kF32, shape});
  const int sw = SetupFeed(bwd, {kF32, channels}, Fill::kPositive);
  const int sb = SetupFeed(bwd, {kF32, channels});
  const std::vector<int> saved = bwd.setup->Add("native_batch_norm", {sx, sw, sb}, forward_attrs);
  if (saved.size() == 3) bwd.setup_links = {{sx, bx}, {sw, bw}, {saved[1], mean}, {saved[2], invstd}};
  bwd.shapes = absl::StrCat("dy", Dims(shape), " x", Dims(shape), " training");
  if (grads.size() == 3) bwd.bytes = BytesOf(bwd.graph, {grad, bx, bw, mean, invstd, grads[0], grads[1], grads[2]});
  rows.push_back(std::move(bwd));
}

void AddMaxPoolRows(const std::string& name, const Shape& shape, int64_t kernel, int64_t stride, int64_t padding,
                    std::vector<OpRow>& rows) {
  const Attrs attrs = MakeAttrs({{"kernel_size", std::vector<int64_t>{kernel, kernel}},
                                 {"stride", std::vector<int64_t>{stride, stride}},
                                 {"padding", std::vector<int64_t>{padding, padding}},
                                 {"dilation", std::vector<int64_t>{1, 1}},
                                 {"ceil_mode", false}});
  const std::string geometry = absl::StrCat("k", kernel, " s", stride, " p", padding);
  const int64_t oh = (shape[2] + 2 * padding - kernel) / stride + 1;
  const int64_t ow = (shape[3] + 2 * padding - kernel) / stride + 1;
  const Shape y = {shape[0], shape[1], oh, ow};

  OpRow fwd = NewRow(name + ".fwd", "max_pool2d_with_indices", RowKind::kMemory);
  const int x = Feed(fwd, {kF32, shape});
  const std::vector<int> out = fwd.graph.Add("max_pool2d_with_indices", {x}, attrs);
  fwd.shapes = absl::StrCat("x", Dims(shape), " ", geometry);
  if (out.size() == 2) fwd.bytes = BytesOf(fwd.graph, {x, out[0], out[1]});
  rows.push_back(std::move(fwd));

  // The backward reads the gradient and the indices; `self` only gives the
  // shape of the result and is not counted.
  OpRow bwd = NewRow(name + ".bwd", "max_pool2d_with_indices_backward", RowKind::kMemory);
  const int grad = Feed(bwd, {kF32, y});
  const int bx = Feed(bwd, {kF32, shape});
  const int indices = Feed(bwd, {DType::kInt64, y}, Fill::kLabels, 1);
  const int grad_in = bwd.graph.Add1("max_pool2d_with_indices_backward", {grad, bx, indices}, attrs);
  const int sx = SetupFeed(bwd, {kF32, shape});
  const std::vector<int> pooled = bwd.setup->Add("max_pool2d_with_indices", {sx}, attrs);
  if (pooled.size() == 2) bwd.setup_links = {{sx, bx}, {pooled[1], indices}};
  bwd.shapes = absl::StrCat("dy", Dims(y), " x", Dims(shape), " ", geometry);
  bwd.bytes = BytesOf(bwd.graph, {grad, indices, grad_in});
  rows.push_back(std::move(bwd));
}

// ---- elementwise ops and reductions ----

// One op over feeds of the given shapes; bytes = all feeds + the output.
OpRow Pointwise(std::string name, const std::string& op, std::vector<Shape> shapes, Attrs attrs = {},
                DType dtype = kF32) {
  OpRow row = NewRow(std::move(name), op, RowKind::kMemory);
  std::vector<int> inputs;
  std::vector<std::string> texts;
  for (const Shape& s : shapes) {
    inputs.push_back(Feed(row, {dtype, s}));
    texts.push_back(absl::StrCat("x", Dims(s)));
    row.bytes += BytesOf(row.graph, {inputs.back()});
  }
  const std::vector<int> out = row.graph.Add(op, inputs, std::move(attrs));
  for (int v : out) row.bytes += BytesOf(row.graph, {v});
  row.shapes = absl::StrJoin(texts, " ");
  return row;
}

OpRow Reduction(std::string name, const std::string& op, const Shape& shape, std::vector<int64_t> dims) {
  OpRow row = Pointwise(std::move(name), op, {shape}, MakeAttrs({{"dim", dims}, {"keepdim", false}}));
  row.shapes = absl::StrCat("x", Dims(shape), " dim", Dims(Shape(dims.begin(), dims.end())));
  return row;
}

OpRow Softmax(std::string name, const std::string& op, const Shape& shape, DType dtype = kF32) {
  OpRow row =
      Pointwise(std::move(name), op, {shape}, MakeAttrs({{"dim", int64_t{1}}, {"half_to_float", false}}), dtype);
  row.shapes = absl::StrCat("x", Dims(shape), " dim1");
  return row;
}

// The forward row, and for float32 the backward row (a 16-bit layer norm
// keeps float32 statistics, which the backward's setup would need to match).
void AddLayerNormRows(const std::string& name, const Shape& shape, std::vector<OpRow>& rows, DType dtype = kF32) {
  const Shape normalized = {shape.back()};
  const Attrs forward_attrs = MakeAttrs({{"normalized_shape", std::vector<int64_t>{shape.back()}}, {"eps", 1e-5}});

  OpRow fwd = NewRow(name + ".fwd", "native_layer_norm", RowKind::kMemory);
  const int x = Feed(fwd, {dtype, shape});
  const int w = Feed(fwd, {dtype, normalized}, Fill::kPositive);
  const int b = Feed(fwd, {dtype, normalized});
  const std::vector<int> out = fwd.graph.Add("native_layer_norm", {x, w, b}, forward_attrs);
  fwd.shapes = absl::StrCat("x", Dims(shape), " normalized", Dims(normalized));
  if (out.size() == 3) fwd.bytes = BytesOf(fwd.graph, {x, w, b, out[0], out[1], out[2]});
  rows.push_back(std::move(fwd));
  if (dtype != kF32) return;

  OpRow bwd = NewRow(name + ".bwd", "native_layer_norm_backward", RowKind::kMemory);
  Shape stats(shape.begin(), shape.end() - 1);
  stats.push_back(1);
  const int grad = Feed(bwd, {kF32, shape});
  const int bx = Feed(bwd, {kF32, shape});
  const int mean = Feed(bwd, {kF32, stats});
  const int rstd = Feed(bwd, {kF32, stats}, Fill::kPositive);
  const int bw = Feed(bwd, {kF32, normalized}, Fill::kPositive);
  const int bb = Feed(bwd, {kF32, normalized});
  Attrs attrs = forward_attrs;
  attrs.Set("output_mask", std::vector<int64_t>{1, 1, 1});
  const std::vector<int> grads = bwd.graph.Add("native_layer_norm_backward", {grad, bx, mean, rstd, bw, bb}, attrs);
  const int sx = SetupFeed(bwd, {kF32, shape});
  const int sw = SetupFeed(bwd, {kF32, normalized}, Fill::kPositive);
  const int sb = SetupFeed(bwd, {kF32, normalized});
  const std::vector<int> saved = bwd.setup->Add("native_layer_norm", {sx, sw, sb}, forward_attrs);
  if (saved.size() == 3) bwd.setup_links = {{sx, bx}, {sw, bw}, {sb, bb}, {saved[1], mean}, {saved[2], rstd}};
  bwd.shapes = absl::StrCat("dy", Dims(shape), " x", Dims(shape), " normalized", Dims(normalized));
  // The bias is an input of the op's signature only; the backward reads the
  // other five.
  if (grads.size() == 3) bwd.bytes = BytesOf(bwd.graph, {grad, bx, mean, rstd, bw, grads[0], grads[1], grads[2]});
  rows.push_back(std::move(bwd));
}

void AddEmbeddingRows(const std::string& name, int64_t vocab, int64_t width, const Shape& tokens,
                      std::vector<OpRow>& rows) {
  // The error word's clear and read-back cost as much as a small gather;
  // eight copies per iteration spread it as a training iteration does.
  constexpr int kCopies = 8;
  OpRow fwd = NewRow(name + ".fwd", "embedding", RowKind::kMemory);
  fwd.ops_per_run = kCopies;
  const int weight = Feed(fwd, {kF32, {vocab, width}});
  const int indices = Feed(fwd, {DType::kInt64, tokens}, Fill::kLabels, vocab);
  const int out = fwd.graph.Add1("embedding", {weight, indices});
  for (int i = 1; i < kCopies; ++i) fwd.graph.Add1("embedding", {weight, indices});
  fwd.shapes = absl::StrCat("weight", Dims({vocab, width}), " indices", Dims(tokens));
  // Only the gathered rows of the table are read: as many bytes as written.
  fwd.bytes = BytesOf(fwd.graph, {indices}) + 2 * BytesOf(fwd.graph, {out});
  rows.push_back(std::move(fwd));

  Shape grad_shape = tokens;
  grad_shape.push_back(width);
  OpRow bwd = NewRow(name + ".bwd", "embedding_dense_backward", RowKind::kMemory);
  bwd.ops_per_run = kCopies;
  const int grad = Feed(bwd, {kF32, grad_shape});
  const int bindices = Feed(bwd, {DType::kInt64, tokens}, Fill::kLabels, vocab);
  const Attrs backward_attrs =
      MakeAttrs({{"num_weights", vocab}, {"padding_idx", int64_t{-1}}, {"scale_grad_by_freq", false}});
  const int table = bwd.graph.Add1("embedding_dense_backward", {grad, bindices}, backward_attrs);
  for (int i = 1; i < kCopies; ++i) bwd.graph.Add1("embedding_dense_backward", {grad, bindices}, backward_attrs);
  bwd.shapes = absl::StrCat("dy", Dims(grad_shape), " indices", Dims(tokens), " num_weights ", vocab);
  bwd.bytes = BytesOf(bwd.graph, {grad, bindices, table});
  rows.push_back(std::move(bwd));
}

// One SGD-with-momentum step of one parameter, as the PyTorch adaptor
// lowers it: buf = momentum * buf + grad; p = p - lr * buf. Bytes: p, grad,
// buf read once and the new buf and p written once (a fused kernel's
// traffic), though the chain runs four kernels.
OpRow SgdMomentum(std::string name, const Shape& shape) {
  OpRow row = NewRow(std::move(name), "sgd_momentum (4 ops)", RowKind::kMemory);
  const int p = Feed(row, {kF32, shape});
  const int grad = Feed(row, {kF32, shape});
  const int buf = Feed(row, {kF32, shape});
  const int lr = Feed(row, {kF32, {}}, Fill::kSmall);
  GraphMaker& g = row.graph;
  const int scaled = g.Add1("mul.Scalar", {buf}, MakeAttrs({{"other", 0.9}}));
  const int new_buf = g.Add1("add.Tensor", {scaled, grad});
  const int step = g.Add1("mul.Tensor", {lr, new_buf});
  const int new_p = g.Add1("sub.Tensor", {p, step});
  row.shapes = absl::StrCat("p", Dims(shape), ": mul.Scalar add.Tensor mul.Tensor sub.Tensor");
  row.bytes = BytesOf(g, {p, grad, buf, lr, new_buf, new_p});
  return row;
}

}  // namespace

OpBenchDims OpBenchDims::Small() {
  OpBenchDims d;
  d.fcn_batch = 8;
  d.fcn_inputs = 12;
  d.fcn_hidden = 16;
  d.fcn_classes = 5;
  d.cnn_batch = 2;
  d.image = 32;
  d.vgg_hidden = 16;
  d.xf_batch = 2;
  d.xf_seq = 16;
  d.xf_model = 64;
  d.xf_heads = 4;
  d.xf_ff = 128;
  d.lstm_batch = 4;
  d.lstm_seq = 5;
  d.lstm_hidden = 64;
  d.lstm_vocab = 100;
  d.copy_bytes = int64_t{1} << 20;
  return d;
}

const char* RowKindName(RowKind kind) { return kind == RowKind::kCompute ? "compute" : "memory"; }

std::vector<OpRow> BuildOpRows(const OpBenchDims& d, bool allow_tf32) {
  std::vector<OpRow> rows;
  // fcn5: weights are [in, out]; the backward products are
  // grad_in = grad @ w^T and grad_w = x^T @ grad on materialized transposes.
  const int64_t fb = d.fcn_batch, fi = d.fcn_inputs, fh = d.fcn_hidden, fc = d.fcn_classes;
  rows.push_back(Matmul("fcn5.fc1.fwd", fb, fi, fh, true));
  rows.push_back(Matmul("fcn5.fc1.grad_w", fi, fb, fh, false));
  rows.push_back(Matmul("fcn5.fc.fwd", fb, fh, fh, true));
  rows.push_back(Matmul("fcn5.fc.grad_in", fb, fh, fh, false));
  rows.push_back(Matmul("fcn5.fc.grad_w", fh, fb, fh, false));
  rows.push_back(Matmul("fcn5.out.fwd", fb, fh, fc, true));
  rows.push_back(Matmul("fcn5.out.grad_in", fb, fc, fh, false));
  rows.push_back(Matmul("fcn5.out.grad_w", fh, fb, fc, false));
  // VGG-19's first classifier layer.
  const int64_t n = d.cnn_batch, img = d.image;
  const int64_t vgg_flat = 512 * (img / 32) * (img / 32);
  rows.push_back(Matmul("vgg.fc6.fwd", n, vgg_flat, d.vgg_hidden, true));
  rows.push_back(Matmul("vgg.fc6.grad_w", vgg_flat, n, d.vgg_hidden, false));
  // LSTM: the input projection of all steps at once, one step's recurrent
  // projection, the decoder.
  const int64_t lt = d.lstm_batch * d.lstm_seq, lh = d.lstm_hidden, lv = d.lstm_vocab;
  rows.push_back(Matmul("lstm.gates_x.fwd", lt, lh, 4 * lh, true));
  rows.push_back(Matmul("lstm.gates_h.fwd", d.lstm_batch, lh, 4 * lh, false));
  rows.push_back(Matmul("lstm.decoder.fwd", lt, lh, lv, true));
  rows.push_back(Matmul("lstm.decoder.grad_in", lt, lv, lh, false));
  rows.push_back(Matmul("lstm.decoder.grad_w", lh, lt, lv, false));
  // Transformer encoder layer over T = batch * seq tokens.
  const int64_t t = d.xf_batch * d.xf_seq, dm = d.xf_model, ff = d.xf_ff;
  const int64_t bh = d.xf_batch * d.xf_heads, s = d.xf_seq, hd = d.xf_model / d.xf_heads;
  rows.push_back(Matmul("xf.qkv.fwd", t, dm, 3 * dm, true));
  rows.push_back(Matmul("xf.qkv.grad_in", t, 3 * dm, dm, false));
  rows.push_back(Matmul("xf.qkv.grad_w", dm, t, 3 * dm, false));
  rows.push_back(Matmul("xf.out_proj.fwd", t, dm, dm, true));
  rows.push_back(Matmul("xf.ff1.fwd", t, dm, ff, true));
  rows.push_back(Matmul("xf.ff1.grad_in", t, ff, dm, false));
  rows.push_back(Matmul("xf.ff1.grad_w", dm, t, ff, false));
  rows.push_back(Matmul("xf.ff2.fwd", t, ff, dm, true));
  rows.push_back(Matmul("xf.ff2.grad_in", t, dm, ff, false));
  rows.push_back(Matmul("xf.ff2.grad_w", ff, t, dm, false));
  rows.push_back(Bmm("xf.attn.scores", bh, s, hd, s));
  rows.push_back(Bmm("xf.attn.context", bh, s, s, hd));

  // Convolutions of ResNet-50 (v1.5: the stride sits on the 3x3) and VGG-19.
  const int64_t s2 = img / 2, s4 = img / 4, s16 = img / 16, s32 = img / 32;
  const std::vector<int64_t> all = {1, 1, 0}, weight_only = {0, 1, 0};
  const std::vector<int64_t> all_bias = {1, 1, 1}, weight_bias = {0, 1, 1};
  const std::vector<ConvLayer> convs = {{"r50.conv1", {n, 3, img, img}, {64, 3, 7, 7}, 2, 3, false, weight_only},
                                        {"r50.layer1.conv1", {n, 256, s4, s4}, {64, 256, 1, 1}, 1, 0, false, all},
                                        {"r50.layer1.conv2", {n, 64, s4, s4}, {64, 64, 3, 3}, 1, 1, false, all},
                                        {"r50.layer1.conv3", {n, 64, s4, s4}, {256, 64, 1, 1}, 1, 0, false, all},
                                        {"r50.layer2.conv2", {n, 128, s4, s4}, {128, 128, 3, 3}, 2, 1, false, all},
                                        {"r50.layer2.downsample", {n, 256, s4, s4}, {512, 256, 1, 1}, 2, 0, false, all},
                                        {"r50.layer4.conv2", {n, 512, s32, s32}, {512, 512, 3, 3}, 1, 1, false, all},
                                        {"vgg.conv1_1", {n, 3, img, img}, {64, 3, 3, 3}, 1, 1, true, weight_bias},
                                        {"vgg.conv1_2", {n, 64, img, img}, {64, 64, 3, 3}, 1, 1, true, all_bias},
                                        {"vgg.conv3_2", {n, 256, s4, s4}, {256, 256, 3, 3}, 1, 1, true, all_bias},
                                        {"vgg.conv5_2", {n, 512, s16, s16}, {512, 512, 3, 3}, 1, 1, true, all_bias}};
  for (const ConvLayer& c : convs) AddConvRows(c, allow_tf32, rows);

  // Memory-bound ops.
  AddBatchNormRows("r50.bn1", {n, 64, s2, s2}, rows);
  AddBatchNormRows("r50.layer1.bn3", {n, 256, s4, s4}, rows);
  AddBatchNormRows("r50.bn1.nhwc", {n, 64, s2, s2}, rows, /*channels_last=*/true);
  AddBatchNormRows("r50.layer1.bn3.nhwc", {n, 256, s4, s4}, rows, /*channels_last=*/true);
  AddBatchNormRows("r50.layer4.bn3.nhwc", {n, 2048, s32, s32}, rows, /*channels_last=*/true);
  AddMaxPoolRows("r50.maxpool", {n, 64, s2, s2}, 3, 2, 1, rows);
  AddMaxPoolRows("vgg.pool1", {n, 64, img, img}, 2, 2, 0, rows);
  const Shape act = {n, 256, s4, s4};
  rows.push_back(Pointwise("r50.relu.fwd", "relu", {act}));
  rows.push_back(Pointwise("r50.relu.bwd", "threshold_backward", {act, act}, MakeAttrs({{"threshold", 0.0}})));
  rows.push_back(Pointwise("r50.residual.add", "add.Tensor", {act, act}));
  rows.push_back(Pointwise("r50.act.mul", "mul.Tensor", {act, act}));
  rows.push_back(Pointwise("xf.ff.gelu", "gelu", {{t, ff}}, MakeAttrs({{"approximate", std::string("none")}})));
  rows.push_back(Reduction("fcn5.bias_grad.sum", "sum.dim_IntList", {fb, fh}, {0}));
  rows.push_back(Reduction("xf.ff1.bias_grad.sum", "sum.dim_IntList", {t, ff}, {0}));
  rows.push_back(Reduction("r50.channel.mean", "mean.dim", act, {0, 2, 3}));
  rows.push_back(Softmax("xf.attn.softmax", "_softmax", {bh * s, s}));
  rows.push_back(Softmax("xf.attn.log_softmax", "_log_softmax", {bh * s, s}));
  rows.push_back(Softmax("lstm.decoder.log_softmax", "_log_softmax", {lt, lv}));
  AddLayerNormRows("xf.ln", {t, dm}, rows);
  AddEmbeddingRows("lstm.embedding", lv, lh, {d.lstm_batch, d.lstm_seq}, rows);
  rows.push_back(SgdMomentum("fcn5.sgd_momentum", {fh, fh}));
  rows.push_back(Pointwise("fcn5.fc.t", "t", {{fh, fh}}));

  // bfloat16 versions of some of the rows above (float32 accumulation inside,
  // as PyTorch's bf16 kernels), named "bf16." + the float32 row's name.
  rows.push_back(Matmul("bf16.fcn5.fc.fwd", fb, fh, fh, true, kBF16));
  rows.push_back(Matmul("bf16.fcn5.fc.grad_w", fh, fb, fh, false, kBF16));
  rows.push_back(Matmul("bf16.lstm.decoder.fwd", lt, lh, lv, true, kBF16));
  rows.push_back(Matmul("bf16.xf.qkv.fwd", t, dm, 3 * dm, true, kBF16));
  rows.push_back(Bmm("bf16.xf.attn.scores", bh, s, hd, s, kBF16));
  AddConvRows({"bf16.r50.layer1.conv2", {n, 64, s4, s4}, {64, 64, 3, 3}, 1, 1, false, all}, allow_tf32, rows, kBF16);
  AddConvRows({"bf16.vgg.conv3_2", {n, 256, s4, s4}, {256, 256, 3, 3}, 1, 1, true, all_bias}, allow_tf32, rows, kBF16);
  rows.push_back(Pointwise("bf16.r50.relu.fwd", "relu", {act}, {}, kBF16));
  rows.push_back(Pointwise("bf16.r50.residual.add", "add.Tensor", {act, act}, {}, kBF16));
  rows.push_back(
      Pointwise("bf16.xf.ff.gelu", "gelu", {{t, ff}}, MakeAttrs({{"approximate", std::string("none")}}), kBF16));
  rows.push_back(Softmax("bf16.xf.attn.softmax", "_softmax", {bh * s, s}, kBF16));
  AddLayerNormRows("bf16.xf.ln", {t, dm}, rows, kBF16);
  return rows;
}

absl::Status CheckRowOnCpu(const OpRow& row, std::mt19937_64& rng) {
  std::vector<gpu_test::Bytes> feeds = row.graph.RandomFeeds(rng);
  if (row.setup.has_value()) {
    absl::StatusOr<std::vector<gpu_test::Bytes>> setup =
        gpu_test::RunOnCpu(row.setup->graph(), row.setup->RandomFeeds(rng));
    if (!setup.ok()) return setup.status();
    for (const auto& [from, to] : row.setup_links) {
      if ((*setup)[from].size() != feeds[to].size()) {
        return absl::InternalError(absl::StrCat("setup value ", from, " does not fit feed ", to));
      }
      feeds[to] = (*setup)[from];
    }
  }
  const Graph& graph = row.graph.graph();
  absl::StatusOr<std::vector<gpu_test::Bytes>> values = gpu_test::RunOnCpu(graph, feeds);
  if (!values.ok()) return values.status();
  for (const Node& node : graph.nodes) {
    for (int v : node.outputs) {
      const DType dtype = graph.values[v].type.dtype;
      if (dtype != kF32 && dtype != kBF16 && dtype != DType::kFloat16) continue;
      const gpu_test::Bytes& bytes = (*values)[v];
      const size_t width = dtype == kF32 ? sizeof(float) : sizeof(uint16_t);
      for (size_t i = 0; i + width <= bytes.size(); i += width) {
        float x;
        if (dtype == kF32) {
          std::memcpy(&x, bytes.data() + i, sizeof(x));
        } else {
          uint16_t bits;
          std::memcpy(&bits, bytes.data() + i, sizeof(bits));
          x = dtype == kBF16 ? BFloat16BitsToFloat(bits) : Float16BitsToFloat(bits);
        }
        if (!std::isfinite(x)) {
          return absl::InternalError(
              absl::StrCat(node.op, " wrote ", x, " at element ", i / width, " of ", graph.values[v].type.ToString()));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::bench
