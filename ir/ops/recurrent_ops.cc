// Registry entries of the fused recurrent layers: `lstm` and `gru` (the
// forward of one nn.LSTM / nn.GRU layer over a whole sequence) and their
// backwards `lstm_backward` and `gru_backward`. Single layer,
// unidirectional, time-major.
//
// LSTM, gate order i, f, g, o as in PyTorch (rows [0, H) of the weights and
// biases are the input gate, [H, 2H) the forget gate, [2H, 3H) the cell
// candidate, [3H, 4H) the output gate):
//
//   lstm(x [T, B, I], h0 [B, H], c0 [B, H], w_ih [4H, I], w_hh [4H, H],
//        b_ih [4H], b_hh [4H])
//     -> (y [T, B, H], h_n [B, H], c_n [B, H], saved [T, B, 5H])
//   lstm_backward(grad_y [T, B, H], grad_h_n [B, H], grad_c_n [B, H], x, h0,
//                 c0, w_ih, w_hh, y, saved)
//     -> (grad_x [T, B, I], grad_h0 [B, H], grad_c0 [B, H],
//         grad_w_ih [4H, I], grad_w_hh [4H, H], grad_b [4H],
//         grad_gates [T, B, 4H])
//
// saved[t] holds the step's activated gates i, f, g, o and its cell state
// c_t along the last dim: what the backward needs besides y. grad_b is the
// gradient of both b_ih and b_hh. grad_gates (the gradient of the gate
// pre-activations) is scratch of the backward made an output, since ops own
// no scratch memory; nothing needs to read it.
//
// GRU, gate order r, z, n as in PyTorch (rows [0, H) the reset gate,
// [H, 2H) the update gate, [2H, 3H) the new gate):
//
//   gru(x [T, B, I], h0 [B, H], w_ih [3H, I], w_hh [3H, H], b_ih [3H],
//       b_hh [3H])
//     -> (y [T, B, H], h_n [B, H], saved [T, B, 4H])
//   gru_backward(grad_y [T, B, H], grad_h_n [B, H], x, h0, w_ih, w_hh, y,
//                saved)
//     -> (grad_x [T, B, I], grad_h0 [B, H], grad_w_ih [3H, I],
//         grad_w_hh [3H, H], grad_b_ih [3H], grad_b_hh [3H],
//         grad_gates_x [T, B, 3H], grad_gates_h [T, B, 3H])
//
// Per step, with gx = x_t w_ih^T + b_ih and gh = h_{t-1} w_hh^T + b_hh:
// r = sigmoid(gx_r + gh_r), z = sigmoid(gx_z + gh_z), hn = gh_n,
// n = tanh(gx_n + r * hn), h_t = (1 - z) * n + z * h_{t-1}. saved[t] holds
// r, z, n and hn along the last dim. grad_gates_x and grad_gates_h (the
// gradients of gx and gh: they differ in the new gate, where gh_n is
// scaled by r) are the backward's scratch made outputs, as grad_gates.
//
// Every input and output has one dtype: float32, bfloat16 or float16 (x's;
// an input of another dtype is refused, naming it and x's dtype). In 16 bits
// every output is 16-bit, saved included, as PyTorch's cuDNN RNNs keep
// their outputs and states in the input's dtype while computing in float32:
// the kernels compute the gate math in float32 (the products with 16-bit
// operands, accumulating in float32) and round each tensor when they store
// it.
//
// The dims come from two inputs: T, B and I from x, H from h0's last dim.
// Every other input must match the shape they imply; a mismatch names the
// input, its expected shape symbolically and in numbers, and where the dims
// came from. Empty dims are refused (no step, no batch or no hidden unit is
// a malformed layer, not a no-op worth a special path in every backend).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"

namespace tandem {
namespace {

using ops::TypeList;

constexpr DType kRecurrentTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

struct LayerDims {
  int64_t t = 0, b = 0, i = 0, h = 0;

  std::string Origin() const { return absl::StrCat("T=", t, ", B=", b, ", I=", i, " from x; H=", h, " from h0"); }
};

// x [T, B, I] and h0 [B, H] give the dims; h0's B must be x's.
absl::StatusOr<LayerDims> DimsOf(const TensorType& x, const TensorType& h0) {
  if (x.rank() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("x must be [T, B, I] (time-major), got ", x.ToString()));
  }
  if (h0.rank() != 2) return absl::InvalidArgumentError(absl::StrCat("h0 must be [B, H], got ", h0.ToString()));
  LayerDims d{x.shape[0], x.shape[1], x.shape[2], h0.shape[1]};
  if (d.t < 1 || d.b < 1 || d.i < 1) {
    return absl::InvalidArgumentError(absl::StrCat("x is ", x.ToString(), "; T, B and I must each be at least 1"));
  }
  if (d.h < 1) return absl::InvalidArgumentError(absl::StrCat("h0 is ", h0.ToString(), "; H must be at least 1"));
  if (h0.shape[0] != d.b) {
    return absl::InvalidArgumentError(absl::StrCat("h0 must be [B, H] = ", ShapeString({d.b, d.h}), ", got ",
                                                   ShapeString(h0.shape), " (B=", d.b, " from x)"));
  }
  return d;
}

// Input `index` must have `expected` (written `symbolic` in terms of T, B,
// I, H).
struct ShapeRule {
  size_t index;
  absl::string_view symbolic;
  Shape expected;
};

absl::Status CheckShapes(absl::Span<const TensorType> in, absl::Span<const absl::string_view> names,
                         const std::vector<ShapeRule>& rules, const LayerDims& d) {
  for (const ShapeRule& rule : rules) {
    const Shape& actual = in[rule.index].shape;
    if (actual == rule.expected) continue;
    return absl::InvalidArgumentError(absl::StrCat(names[rule.index], " must be ", rule.symbolic, " = ",
                                                   ShapeString(rule.expected), ", got ", ShapeString(actual), " (",
                                                   d.Origin(), ")"));
  }
  return absl::OkStatus();
}

// The input count (the graph builder checks it too; inference may be called
// directly) and every input's dtype: a supported one, and input `x`'s.
// Returns that dtype.
absl::StatusOr<DType> CheckInputs(absl::Span<const TensorType> in, absl::Span<const absl::string_view> names,
                                  size_t x) {
  if (in.size() != names.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", in.size(), " inputs; expected ", names.size(), ": ", absl::StrJoin(names, ", ")));
  }
  for (size_t k = 0; k < in.size(); ++k) RETURN_IF_ERROR(ops::RequireDType(names[k], in[k], kRecurrentTypes));
  const DType dtype = in[x].dtype;
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k].dtype == dtype) continue;
    return absl::InvalidArgumentError(absl::StrCat(names[k], " is ", in[k].ToString(), " but ", names[x], " is ",
                                                   in[x].ToString(), "; every input must have ", names[x], "'s dtype (",
                                                   DTypeName(dtype), ")"));
  }
  return dtype;
}

constexpr absl::string_view kLstmForwardInputs[] = {"x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"};

absl::StatusOr<TypeList> LstmInfer(const Attrs&, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(const DType dtype, CheckInputs(in, kLstmForwardInputs, 0));
  ASSIGN_OR_RETURN(LayerDims d, DimsOf(in[0], in[1]));
  const int64_t g = 4 * d.h;
  RETURN_IF_ERROR(CheckShapes(in, kLstmForwardInputs,
                              {{2, "[B, H]", {d.b, d.h}},
                               {3, "[4H, I]", {g, d.i}},
                               {4, "[4H, H]", {g, d.h}},
                               {5, "[4H]", {g}},
                               {6, "[4H]", {g}}},
                              d));
  return TypeList{TensorType{dtype, {d.t, d.b, d.h}}, TensorType{dtype, {d.b, d.h}}, TensorType{dtype, {d.b, d.h}},
                  TensorType{dtype, {d.t, d.b, 5 * d.h}}};
}

constexpr absl::string_view kLstmBackwardInputs[] = {"grad_y", "grad_h_n", "grad_c_n", "x", "h0",
                                                     "c0",     "w_ih",     "w_hh",     "y", "saved"};

absl::StatusOr<TypeList> LstmBackwardInfer(const Attrs&, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(const DType dtype, CheckInputs(in, kLstmBackwardInputs, 3));
  ASSIGN_OR_RETURN(LayerDims d, DimsOf(in[3], in[4]));
  const int64_t g = 4 * d.h;
  RETURN_IF_ERROR(CheckShapes(in, kLstmBackwardInputs,
                              {{0, "[T, B, H]", {d.t, d.b, d.h}},
                               {1, "[B, H]", {d.b, d.h}},
                               {2, "[B, H]", {d.b, d.h}},
                               {5, "[B, H]", {d.b, d.h}},
                               {6, "[4H, I]", {g, d.i}},
                               {7, "[4H, H]", {g, d.h}},
                               {8, "[T, B, H]", {d.t, d.b, d.h}},
                               {9, "[T, B, 5H]", {d.t, d.b, 5 * d.h}}},
                              d));
  return TypeList{TensorType{dtype, {d.t, d.b, d.i}}, TensorType{dtype, {d.b, d.h}}, TensorType{dtype, {d.b, d.h}},
                  TensorType{dtype, {g, d.i}},        TensorType{dtype, {g, d.h}},   TensorType{dtype, {g}},
                  TensorType{dtype, {d.t, d.b, g}}};
}

constexpr absl::string_view kGruForwardInputs[] = {"x", "h0", "w_ih", "w_hh", "b_ih", "b_hh"};

absl::StatusOr<TypeList> GruInfer(const Attrs&, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(const DType dtype, CheckInputs(in, kGruForwardInputs, 0));
  ASSIGN_OR_RETURN(LayerDims d, DimsOf(in[0], in[1]));
  const int64_t g = 3 * d.h;
  RETURN_IF_ERROR(CheckShapes(in, kGruForwardInputs,
                              {{2, "[3H, I]", {g, d.i}}, {3, "[3H, H]", {g, d.h}}, {4, "[3H]", {g}}, {5, "[3H]", {g}}},
                              d));
  return TypeList{TensorType{dtype, {d.t, d.b, d.h}}, TensorType{dtype, {d.b, d.h}},
                  TensorType{dtype, {d.t, d.b, 4 * d.h}}};
}

constexpr absl::string_view kGruBackwardInputs[] = {"grad_y", "grad_h_n", "x", "h0", "w_ih", "w_hh", "y", "saved"};

absl::StatusOr<TypeList> GruBackwardInfer(const Attrs&, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(const DType dtype, CheckInputs(in, kGruBackwardInputs, 2));
  ASSIGN_OR_RETURN(LayerDims d, DimsOf(in[2], in[3]));
  const int64_t g = 3 * d.h;
  RETURN_IF_ERROR(CheckShapes(in, kGruBackwardInputs,
                              {{0, "[T, B, H]", {d.t, d.b, d.h}},
                               {1, "[B, H]", {d.b, d.h}},
                               {4, "[3H, I]", {g, d.i}},
                               {5, "[3H, H]", {g, d.h}},
                               {6, "[T, B, H]", {d.t, d.b, d.h}},
                               {7, "[T, B, 4H]", {d.t, d.b, 4 * d.h}}},
                              d));
  return TypeList{TensorType{dtype, {d.t, d.b, d.i}}, TensorType{dtype, {d.b, d.h}},   TensorType{dtype, {g, d.i}},
                  TensorType{dtype, {g, d.h}},        TensorType{dtype, {g}},          TensorType{dtype, {g}},
                  TensorType{dtype, {d.t, d.b, g}},   TensorType{dtype, {d.t, d.b, g}}};
}

}  // namespace

void RegisterRecurrentOps(OpRegistry& registry) {
  ops::RegisterOp(registry, "lstm", 7, 7, 4, AliasKind::kNone, LstmInfer);
  ops::RegisterOp(registry, "lstm_backward", 10, 10, 7, AliasKind::kNone, LstmBackwardInfer);
  ops::RegisterOp(registry, "gru", 6, 6, 3, AliasKind::kNone, GruInfer);
  ops::RegisterOp(registry, "gru_backward", 8, 8, 8, AliasKind::kNone, GruBackwardInfer);
}

}  // namespace tandem
