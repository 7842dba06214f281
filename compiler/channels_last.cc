#include "compiler/channels_last.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "compiler/graph_rewriter.h"
#include "ir/ops/cnn_rules.h"
#include "ir/ops/math_table.h"

namespace tandem {
namespace {

constexpr char kSuffix[] = ".channels_last";

// Where channels-first dim d (0..3) sits in channels-last storage.
constexpr int64_t kLastPosition[4] = {0, 3, 1, 2};

// Ops that compute each output element from the operands' elements at the
// same position (after broadcasting), with no dim in their attributes: the
// list below, the comparisons, and the math family (ir/ops/math_table.h).
// Random ops are not here: their draws follow the storage order.
bool IsElementwise(const std::string& op) {
  static const auto* const kOps = [] {
    constexpr char kNames[] =
        "abs acos acosh add.Scalar add.Tensor addcdiv addcmul asin asinh atan atanh ceil clamp clone cos cosh "
        "div.Scalar div.Tensor elu elu_backward erf exp expm1 floor gelu gelu_backward hardsigmoid "
        "hardsigmoid_backward hardswish hardswish_backward hardtanh hardtanh_backward leaky_relu "
        "leaky_relu_backward lerp.Scalar lerp.Tensor log log1p maximum minimum mul.Scalar mul.Tensor neg "
        "pow.Scalar pow.Tensor_Scalar reciprocal relu rsqrt sigmoid sigmoid_backward silu silu_backward sqrt "
        "sub.Scalar sub.Tensor tanh tanh_backward threshold_backward where.self _to_copy masked_fill.Scalar "
        "masked_fill.Tensor logical_not";
    auto* ops = new absl::flat_hash_set<std::string>(absl::StrSplit(kNames, ' '));
    for (const char* compare : {"eq", "ne", "lt", "le", "gt", "ge"}) {
      ops->insert(absl::StrCat(compare, ".Tensor"));
      ops->insert(absl::StrCat(compare, ".Scalar"));
    }
    for (const MathOpInfo& info : kMathOps) ops->insert(info.name);
    return ops;
  }();
  return kOps->contains(op);
}

bool IsDimReduction(const std::string& op) {
  return op == "sum.dim_IntList" || op == "mean.dim" || op == "amax" || op == "amin";
}

// Ops with one dim attribute `dim` over rank-4 operands and outputs.
bool IsOneDimOp(const std::string& op) { return op == "cat" || op == "slice.Tensor" || op == "slice_copy.Tensor"; }

bool IsBatchNormForward(const std::string& op) {
  return op == "native_batch_norm" || op == "_native_batch_norm_legit_functional";
}

// Ops whose output is one value everywhere and reads no operand's data (a
// `*_like` op or fill.Scalar reads only its operand's type): layout-free,
// made directly in whichever layout a reader wants.
bool IsConstantFill(const std::string& op) {
  return op == "zeros" || op == "zeros_like" || op == "ones" || op == "ones_like" || op == "full" ||
         op == "full_like" || op == "fill.Scalar";
}

absl::StatusOr<double> FillValue(const Node& n) {
  if (n.op == "zeros" || n.op == "zeros_like") return 0.0;
  if (n.op == "ones" || n.op == "ones_like") return 1.0;
  return n.attrs.GetFloat(n.op == "fill.Scalar" ? "value" : "fill_value");
}

bool IsLayoutDType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kBFloat16 || dtype == DType::kFloat16;
}

// A dim attribute value (negative counts from the end) as 0..3; -1 if out
// of range.
int64_t Dim4(int64_t d) {
  if (d < 0) d += 4;
  return d >= 0 && d < 4 ? d : -1;
}

// Whether storing `shape` (rank 4) channels-last moves no bytes: the dims
// other than 1 keep their order.
bool RelayoutIsFree(const Shape& shape) { return shape[1] == 1 || shape[2] * shape[3] == 1; }

class Pass {
 public:
  explicit Pass(const Graph& g)
      : g_(g),
        out_(g),
        last_(g.values.size(), -1),
        computed_last_(g.values.size(), false),
        constant_(g.values.size(), nullptr),
        fill_value_(g.values.size(), 0.0) {}

  absl::StatusOr<Graph> Run() {
    for (const Node& n : g_.nodes) RETURN_IF_ERROR(Emit(n));
    for (int v : g_.fetchable) First(v);
    for (const auto& [target, value] : g_.updates) First(value);
    RETURN_IF_ERROR(out_.status());
    return std::move(out_).Finish();
  }

 private:
  const Shape& ShapeOf(int v) const { return g_.values[v].type.shape; }
  bool Rank4(int v) const { return ShapeOf(v).size() == 4; }
  // A value of rank <= 4 with 1s prepended to rank 4, as broadcasting
  // aligns it.
  Shape Padded(int v) const {
    Shape padded(4 - std::min<size_t>(ShapeOf(v).size(), 4), 1);
    padded.insert(padded.end(), ShapeOf(v).begin(), ShapeOf(v).end());
    return padded;
  }
  // A depthwise convolution (or its backward) of input `x` and weight `w`
  // with a window larger than 5x5 stays channels-first: cuDNN's NHWC
  // kernels for it are slow (ConvNeXt-T's 7x7 depthwise backward took 23.6
  // ms channels-last against 14.8 ms channels-first per step on an H100,
  // float32; the 3x3 and 5x5 ones of EfficientNet-B0 and MobileNetV3 gain
  // with the layout). docs/codegen.md.
  bool SlowChannelsLast(const Node& n, int x, int w) const {
    const int64_t groups = n.attrs.GetInt("groups", 1).value_or(1);
    return groups > 1 && groups == ShapeOf(x)[1] && ShapeOf(w)[2] * ShapeOf(w)[3] > 25;
  }
  // A 1x1 kernel's weight, which channels-last convolutions read as it is.
  bool Is1x1(int w) const { return Rank4(w) && ShapeOf(w)[2] == 1 && ShapeOf(w)[3] == 1; }
  // Whether `v` was computed channels-last (not merely relaid out: a
  // weight's twin does not draw its optimizer update into the layout).
  bool Native(int v) const { return computed_last_[v]; }
  // Whether `v` is computed channels-last or can be relaid out for free.
  bool Ready(int v) const { return Rank4(v) && (Native(v) || RelayoutIsFree(ShapeOf(v))); }

  // A new value: `id`, a value of channels-first shape `shape` stored
  // channels-first (`to_last`) or channels-last, in the other layout, named
  // `name`.
  int Relayout(int id, const Shape& shape, bool to_last, const std::string& name) {
    const Shape target = to_last ? Permuted(shape, ToChannelsLast(4)) : shape;
    const bool free = RelayoutIsFree(shape);
    Attrs attrs;
    std::string op = "permute";
    if (free) {
      op = "view";
      attrs = SizeAttrs(target);
    } else {
      attrs.Set("dims", to_last ? ToChannelsLast(4) : ToChannelsFirst(4));
    }
    std::vector<int> ids =
        out_.AddNew(op, {id}, std::move(attrs), {name}, to_last ? "to channels-last" : "to channels-first");
    return ids.empty() ? -1 : ids[0];
  }

  // Attributes {size: shape} (a view's, a full's).
  static Attrs SizeAttrs(const Shape& shape) {
    Attrs attrs;
    attrs.Set("size", std::vector<int64_t>(shape.begin(), shape.end()));
    return attrs;
  }

  // The constant fill value `v` as a `full` node in either layout (it reads
  // nothing, so neither layout costs a relayout).
  int Constant(int v, bool to_last) {
    const Shape& shape = ShapeOf(v);
    Attrs attrs = SizeAttrs(to_last ? Permuted(shape, ToChannelsLast(4)) : shape);
    attrs.Set("fill_value", fill_value_[v]);
    attrs.Set("dtype", g_.values[v].type.dtype);
    std::vector<int> ids = out_.AddNew(
        "full", {}, std::move(attrs), {to_last ? g_.values[v].name + kSuffix : g_.values[v].name}, constant_[v]->label);
    return ids.empty() ? -1 : ids[0];
  }

  // The new id of `v` channels-first / channels-last, made on first use.
  int First(int v) {
    if (out_.Map(v) >= 0) return out_.Map(v);
    if (constant_[v] != nullptr) {
      const int id = Constant(v, /*to_last=*/false);
      if (id >= 0) out_.SetMap(v, id);
      return id;
    }
    if (last_[v] < 0) return -1;
    const int id = Relayout(last_[v], ShapeOf(v), /*to_last=*/false, g_.values[v].name);
    if (id >= 0) out_.SetMap(v, id);
    return id;
  }
  int Last(int v) {
    if (last_[v] >= 0) return last_[v];
    if (constant_[v] != nullptr) {
      last_[v] = Constant(v, /*to_last=*/true);
      return last_[v];
    }
    const int first = First(v);
    if (first < 0) return -1;
    if (!Rank4(v)) {  // a broadcast operand: its rank-4 form channels-last, the same bytes
      std::vector<int> ids = out_.AddNew("view", {first}, SizeAttrs(Permuted(Padded(v), ToChannelsLast(4))),
                                         {g_.values[v].name + kSuffix}, "to channels-last");
      last_[v] = ids.empty() ? -1 : ids[0];
      return last_[v];
    }
    last_[v] = Relayout(first, ShapeOf(v), /*to_last=*/true, g_.values[v].name + kSuffix);
    return last_[v];
  }

  // `n` with the inputs marked in `last_inputs` read channels-last and the
  // outputs marked in `last_outputs` made channels-last, `attrs` its
  // attributes.
  absl::Status EmitLast(const Node& n, const std::vector<bool>& last_inputs, const std::vector<bool>& last_outputs,
                        Attrs attrs) {
    std::vector<int> inputs;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      inputs.push_back(last_inputs[i] ? Last(n.inputs[i]) : First(n.inputs[i]));
      if (inputs.back() < 0) return out_.status();
    }
    std::vector<std::string> names;
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      names.push_back(last_outputs[o] ? g_.values[n.outputs[o]].name + kSuffix : g_.values[n.outputs[o]].name);
    }
    std::vector<int> ids = out_.AddNew(n.op, std::move(inputs), std::move(attrs), names, n.label);
    if (ids.size() != n.outputs.size()) return out_.status();
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (last_outputs[o]) {
        last_[n.outputs[o]] = ids[o];
        computed_last_[n.outputs[o]] = true;
      } else {
        out_.SetMap(n.outputs[o], ids[o]);
      }
    }
    return absl::OkStatus();
  }

  absl::Status EmitFirst(const Node& n) {
    for (int v : n.inputs) {
      if (First(v) < 0)
        return out_.status().ok() ? absl::InternalError("channels_last: an input has no value") : out_.status();
    }
    return out_.Copy(n);
  }

  // Marks: rank-4 values of `ids`.
  std::vector<bool> Rank4Marks(const std::vector<int>& ids) const {
    std::vector<bool> marks;
    for (int v : ids) marks.push_back(Rank4(v));
    return marks;
  }

  absl::Status Emit(const Node& n) {
    const std::string& op = n.op;
    Attrs attrs = n.attrs;
    if (attrs.Has("channels_last")) return EmitFirst(n);
    if (IsConstantFill(op) && n.outputs.size() == 1 && Rank4(n.outputs[0]) &&
        IsLayoutDType(g_.values[n.outputs[0]].type.dtype)) {
      ASSIGN_OR_RETURN(fill_value_[n.outputs[0]], FillValue(n));
      constant_[n.outputs[0]] = &n;  // made where it is first read, in the layout its reader wants
      return absl::OkStatus();
    }
    const bool float_layout = !n.outputs.empty() && IsLayoutDType(g_.values[n.outputs[0]].type.dtype);
    if (op == "convolution" && float_layout && Rank4(n.inputs[0]) && Rank4(n.inputs[1]) &&
        !SlowChannelsLast(n, n.inputs[0], n.inputs[1])) {
      attrs.Set("channels_last", true);
      std::vector<bool> in = {true, !Is1x1(n.inputs[1]), false};
      in.resize(n.inputs.size());
      return EmitLast(n, in, {true}, std::move(attrs));
    }
    if (op == "convolution_backward" && float_layout && Rank4(n.inputs[1]) && Rank4(n.inputs[2]) &&
        !SlowChannelsLast(n, n.inputs[1], n.inputs[2])) {
      attrs.Set("channels_last", true);
      const bool permuted_weight = !Is1x1(n.inputs[2]);
      const int grad_weight = n.outputs[1];
      RETURN_IF_ERROR(EmitLast(n, {true, true, permuted_weight},
                               {Rank4(n.outputs[0]), permuted_weight && Rank4(grad_weight), false}, std::move(attrs)));
      // The weight's gradient goes to the optimizer: back to channels-first
      // at once, so that the update's elementwise chain stays channels-first
      // (and fused) and reads no channels-last twin.
      if (last_[grad_weight] >= 0 && First(grad_weight) >= 0) {
        last_[grad_weight] = -1;
        computed_last_[grad_weight] = false;
      }
      return out_.status();
    }
    if (IsBatchNormForward(op) && Rank4(n.inputs[0]) && Native(n.inputs[0])) {
      attrs.Set("channels_last", true);
      std::vector<bool> in(n.inputs.size(), false);
      in[0] = true;
      if (attrs.GetBool("residual", false).value_or(false)) in.back() = true;
      std::vector<bool> outs(n.outputs.size(), false);
      outs[0] = true;
      return EmitLast(n, in, outs, std::move(attrs));
    }
    if (op == "native_batch_norm_backward" && n.inputs.size() >= 2 && Rank4(n.inputs[1]) &&
        (Native(n.inputs[0]) || Native(n.inputs[1]))) {
      attrs.Set("channels_last", true);
      std::vector<bool> in(n.inputs.size(), false);
      in[0] = in[1] = true;
      if (attrs.Has("mask_threshold")) in.back() = true;
      std::vector<bool> outs(n.outputs.size(), false);
      outs[0] = Rank4(n.outputs[0]);
      return EmitLast(n, in, outs, std::move(attrs));
    }
    if ((op == "max_pool2d_with_indices" || op == "avg_pool2d") && Rank4(n.inputs[0]) && Native(n.inputs[0])) {
      attrs.Set("channels_last", true);
      return EmitLast(n, {true}, Rank4Marks(n.outputs), std::move(attrs));
    }
    if ((op == "max_pool2d_with_indices_backward" || op == "avg_pool2d_backward") && Rank4(n.inputs[1]) &&
        (Native(n.inputs[0]) || Native(n.inputs[1]))) {
      attrs.Set("channels_last", true);
      return EmitLast(n, Rank4Marks(n.inputs), {true}, std::move(attrs));
    }
    if ((op == "permute" || op == "permute_copy") && Rank4(n.inputs[0]) && n.outputs.size() == 1 &&
        IsLayoutDType(g_.values[n.outputs[0]].type.dtype)) {
      ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("dims"));
      for (int64_t& d : dims) d = Dim4(d);
      const int in = n.inputs[0], result = n.outputs[0];
      // The network's own move to [N, H, W, C] (ConvNeXt's and Swin's
      // permute before a LayerNorm) of a value computed channels-last: the
      // twin's bytes already are the result, so a view names them.
      if (dims == ToChannelsLast(4) && Native(in)) {
        const int twin = Last(in);
        if (twin < 0) return out_.status();
        std::vector<int> ids = out_.AddNew("view", {twin}, SizeAttrs(ShapeOf(result)), {g_.values[result].name},
                                           n.label.empty() ? "a permute of a channels-last value" : n.label);
        if (ids.empty()) return out_.status();
        out_.SetMap(result, ids[0]);
        return absl::OkStatus();
      }
      // And back to [N, C, H, W]: the input's bytes are the result's
      // channels-last twin, computed channels-last for its readers (a
      // channels-first reader gets the permute back as any twin's would).
      if (dims == ToChannelsFirst(4)) {
        const int source = First(in);
        if (source < 0) return out_.status();
        std::vector<int> ids =
            out_.AddNew("view", {source}, SizeAttrs(ShapeOf(in)), {g_.values[result].name + kSuffix}, n.label);
        if (ids.empty()) return out_.status();
        last_[result] = ids[0];
        computed_last_[result] = true;
        return absl::OkStatus();
      }
      return EmitFirst(n);
    }
    if (IsElementwise(op) && n.outputs.size() == 1 && Rank4(n.outputs[0])) {
      bool any = false, all = true;
      std::vector<bool> marks;
      for (int v : n.inputs) {
        const bool broadcast = !Rank4(v) && g_.values[v].type.numel() != 1;
        if (Rank4(v)) any = any || Native(v);
        // A lower-rank broadcast operand aligns with the trailing dims: it
        // follows as a view where its rank-4 form relays out for free
        // (ConvNeXt's layer scale [C, 1, 1]).
        if (broadcast) all = all && ShapeOf(v).size() < 4 && RelayoutIsFree(Padded(v));
        marks.push_back(Rank4(v) || broadcast);
      }
      if (any && all) return EmitLast(n, marks, {true}, std::move(attrs));
      return EmitFirst(n);
    }
    if (IsDimReduction(op) && Rank4(n.inputs[0]) && Native(n.inputs[0])) {
      ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("dim", std::vector<int64_t>{}));
      ASSIGN_OR_RETURN(bool keepdim, attrs.GetBool("keepdim", false));
      bool reduced[4] = {dims.empty(), dims.empty(), dims.empty(), dims.empty()};
      std::vector<int64_t> mapped;
      bool ok = true;
      for (int64_t d : dims) {
        const int64_t d4 = Dim4(d);
        ok = ok && d4 >= 0;
        if (d4 < 0) break;
        reduced[d4] = true;
        mapped.push_back(kLastPosition[d4]);
      }
      // Without keepdim the kept dims must come out in the same order.
      int64_t previous = -1;
      for (int d = 0; ok && !keepdim && d < 4; ++d) {
        if (reduced[d]) continue;
        ok = kLastPosition[d] > previous;
        previous = kLastPosition[d];
      }
      if (ok) {
        if (!dims.empty()) attrs.Set("dim", mapped);
        return EmitLast(n, {true}, {keepdim}, std::move(attrs));  // without keepdim: channels-first order
      }
      return EmitFirst(n);
    }
    if ((op == "expand" || op == "expand_copy") && Ready(n.inputs[0]) && Rank4(n.outputs[0])) {
      ASSIGN_OR_RETURN(std::vector<int64_t> size, attrs.GetInts("size"));
      if (size.size() == 4) {
        attrs.Set("size", std::vector<int64_t>{size[0], size[2], size[3], size[1]});
        return EmitLast(n, {true}, {true}, std::move(attrs));
      }
      return EmitFirst(n);
    }
    if (IsOneDimOp(op) && Rank4(n.outputs[0])) {
      bool any = false, all = true;
      for (int v : n.inputs) {
        all = all && Rank4(v);
        any = any || (Rank4(v) && Native(v));
      }
      ASSIGN_OR_RETURN(int64_t dim, attrs.GetInt("dim", 0));
      const int64_t d4 = Dim4(dim);
      if (any && all && d4 >= 0) {
        attrs.Set("dim", kLastPosition[d4]);
        return EmitLast(n, std::vector<bool>(n.inputs.size(), true), {true}, std::move(attrs));
      }
      return EmitFirst(n);
    }
    return EmitFirst(n);
  }

  const Graph& g_;
  GraphRewriter out_;
  std::vector<int> last_;              // source value -> its channels-last twin's new id, -1: none
  std::vector<bool> computed_last_;    // source value -> computed channels-last (its twin is no relayout)
  std::vector<const Node*> constant_;  // source value -> its constant fill node, emitted per layout on first use
  std::vector<double> fill_value_;     // source value -> that node's value
};

bool HasConvolution2d(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (n.op == "convolution" && !n.inputs.empty() && g.values[n.inputs[0]].type.shape.size() == 4 &&
        IsLayoutDType(g.values[n.inputs[0]].type.dtype)) {
      return true;
    }
  }
  return false;
}

}  // namespace

double ChannelsLastRelayoutShare(const Graph& graph) {
  std::vector<bool> weight(graph.values.size(), false);
  for (int v : graph.persistents) weight[v] = true;
  double convolved = 0, relaid = 0;
  for (const Node& n : graph.nodes) {
    if (n.op == "convolution_backward" && n.outputs.size() > 1 && n.outputs[1] >= 0) weight[n.outputs[1]] = true;
    if (n.op == "convolution" && !n.inputs.empty() && !n.outputs.empty()) {
      convolved +=
          static_cast<double>(graph.values[n.inputs[0]].type.bytes() + graph.values[n.outputs[0]].type.bytes());
    }
  }
  for (const Node& n : graph.nodes) {
    const bool relayout = n.label == "to channels-last" || n.label == "to channels-first";
    if (n.op == "permute" && relayout && !n.inputs.empty() && !weight[n.inputs[0]]) {
      relaid += static_cast<double>(graph.values[n.inputs[0]].type.bytes());
    }
  }
  return convolved > 0 ? relaid / convolved : 0.0;
}

absl::StatusOr<Graph> ChannelsLast(const Graph& graph) {
  if (!HasConvolution2d(graph)) return graph;
  return Pass(graph).Run();
}

}  // namespace tandem
