// Reference CPU kernels of the fused recurrent layers, LSTM and GRU
// (ir/ops/recurrent_ops.cc): plain loops over time steps, batch rows and
// gates, every dot product and gradient sum accumulated in double, results
// stored in the tensors' dtype (float32, bfloat16 or float16: one template
// over the element type).
//
// LSTM forward, per step t (gate order i, f, g, o):
//   a = x_t @ w_ih^T + b_ih + h_{t-1} @ w_hh^T + b_hh
//   i, f, o = sigmoid(a_i, a_f, a_o); g = tanh(a_g)
//   c_t = f * c_{t-1} + i * g; h_t = o * tanh(c_t)
//   y[t] = h_t; saved[t] = (i, f, g, o, c_t); h_n = h_T, c_n = c_T.
// The recurrence reads h_{t-1} and c_{t-1} back from y and saved (as stored,
// in the tensors' dtype), as a GPU implementation does, so that both start
// every step from the same state.
//
// LSTM backward, per step t = T-1 .. 0, with dh = grad_y[t] + dh_rec
// (dh_rec = grad_h_n at t = T-1) and dc_next (grad_c_n at t = T-1):
//   dc = dc_next + dh * o * (1 - tanh(c_t)^2)
//   da_i = dc * g * i(1-i); da_f = dc * c_{t-1} * f(1-f);
//   da_g = dc * i * (1-g^2); da_o = dh * tanh(c_t) * o(1-o)
//   grad_gates[t] = da; dc_next = dc * f; dh_rec = da @ w_hh
// and over all steps grad_x = da @ w_ih, grad_w_ih = sum da^T @ x_t,
// grad_w_hh = sum da^T @ h_{t-1}, grad_b = sum da; grad_h0 = dh_rec and
// grad_c0 = dc_next after step 0. The carried dh_rec and dc stay in double
// between steps; the gate gradients are used in double and stored rounded.
//
// 16 bits: every value the CUDA kernels (kernels/cuda/recurrent_ops.cc)
// store in a 16-bit tensor and read back is rounded here at the same point,
// so that both backends round the same quantities and differ only by their
// float32 vs double arithmetic: the input projection x_t @ w_ih^T (stored in
// saved's gate columns), then that plus h_{t-1} @ w_hh^T (stored there
// again) before the biases are added; in the backward the gate gradients
// (stored in grad_gates, the products' operand), the carried dh_rec and dc
// (stored in grad_h0 and grad_c0 between steps), and grad_w_hh's step-0
// term (h0's product, stored before the other steps' are added to it). In
// float32 these stay in double, as above.
//
// GRU forward, per step t (gate order r, z, n), h = h_{t-1}:
//   gx = x_t @ w_ih^T + b_ih; gh = h @ w_hh^T + b_hh
//   r, z = sigmoid(gx_r + gh_r, gx_z + gh_z); hn = gh_n
//   n = tanh(gx_n + r * hn); h_t = (1 - z) * n + z * h
//   y[t] = h_t; saved[t] = (r, z, n, hn); h_n = h_T.
// GRU backward, per step t = T-1 .. 0, with dh = grad_y[t] + dh_rec:
//   da_n = dh * (1-z) * (1-n^2); da_r = da_n * hn * r(1-r);
//   da_z = dh * (h - n) * z(1-z)
//   grad_gates_x[t] = (da_r, da_z, da_n); grad_gates_h[t] = (da_r, da_z,
//   da_n * r); dh_rec = dh * z + grad_gates_h[t] @ w_hh
// and over all steps grad_x = grad_gates_x @ w_ih, grad_w_ih =
// sum grad_gates_x^T @ x_t, grad_w_hh = sum grad_gates_h^T @ h_{t-1},
// grad_b_ih and grad_b_hh the sums of grad_gates_x and grad_gates_h.
// 16 bits, at the CUDA kernels' points as for the LSTM: the input
// projection (all three gates), the reset and update gates' pre-activations
// after the recurrent product is added, the new gate's recurrent product on
// its own (hn before b_hn is added); in the backward both gate gradients,
// the carried dh * z and then dh_rec, and grad_w_hh's step-0 term.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/recurrent_shape.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/half.h"

namespace tandem::cpu {
namespace {

double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// An element of T as a double (exact).
template <typename T>
double Wide(T v) {
  if constexpr (kIsHalf<T>) {
    return static_cast<double>(v.ToFloat());
  } else {
    return static_cast<double>(v);
  }
}

// `v` as a T element.
template <typename T>
T Narrow(double v) {
  return T(v);
}

// `v` as the CUDA kernels have it after storing it into a tensor of T and
// reading it back, where they do and this kernel would otherwise keep
// double: rounded to T in 16 bits; as it is in float32 (file comment).
template <typename T>
double Stored(double v) {
  if constexpr (kIsHalf<T>) {
    return Wide(T(v));
  } else {
    return v;
  }
}

// sum_k a[k] * b[k] in double, four independent partial sums (the loop is
// the forward's whole cost; one dependent chain of adds would be 4x slower).
template <typename T>
double Dot(const T* a, const T* b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 += Wide(a[k]) * Wide(b[k]);
    s1 += Wide(a[k + 1]) * Wide(b[k + 1]);
    s2 += Wide(a[k + 2]) * Wide(b[k + 2]);
    s3 += Wide(a[k + 3]) * Wide(b[k + 3]);
  }
  for (; k < n; ++k) s0 += Wide(a[k]) * Wide(b[k]);
  return (s0 + s1) + (s2 + s3);
}

// A layer's weights, w_ih [G, I] and w_hh [G, H] (G = 4H or 3H).
template <typename T>
struct LayerWeights {
  const T* w_ih;
  const T* w_hh;
};

// One batch row of one step: its x_t row and h_{t-1} row, its grad_x row,
// and the row of the gradient carried to h_{t-1}.
template <typename T>
struct LayerRow {
  const T* x;
  const T* h_prev;
  T* grad_x;
  double* dh_prev;
};

// A row's gate gradients through the layer's products, as the CUDA kernels'
// products take them (stored, rounded: grad_x and grad_w_ih from the input
// side's `gx`, the carried dh and grad_w_hh from the recurrent side's
// `gh`; the LSTM's are one vector): grad_x row = gx @ w_ih (rounded once),
// dw_ih += gx^T x_t, dh_prev += gh @ w_hh, dw_hh += gh^T h_{t-1}, each sum in
// double in gate order.
template <typename T>
void BackpropagateRow(const RecurrentShape& s, int64_t G, const LayerWeights<T>& w, const double* gx, const double* gh,
                      const LayerRow<T>& row, double* dw_ih, double* dw_hh) {
  std::vector<double> dx(s.i, 0.0);
  for (int64_t j = 0; j < G; ++j) {
    const T* w_ih_row = w.w_ih + j * s.i;
    double* dw_ih_row = dw_ih + j * s.i;
    for (int64_t k = 0; k < s.i; ++k) {
      dx[k] += gx[j] * Wide(w_ih_row[k]);
      dw_ih_row[k] += gx[j] * Wide(row.x[k]);
    }
    const T* w_hh_row = w.w_hh + j * s.h;
    double* dw_hh_row = dw_hh + j * s.h;
    for (int64_t k = 0; k < s.h; ++k) {
      row.dh_prev[k] += gh[j] * Wide(w_hh_row[k]);
      dw_hh_row[k] += gh[j] * Wide(row.h_prev[k]);
    }
  }
  for (int64_t k = 0; k < s.i; ++k) row.grad_x[k] = Narrow<T>(dx[k]);
}

// grad_w_ih and grad_w_hh from their double sums; grad_w_hh's step-0 term
// (h0's product, which the CUDA kernels store before adding the other
// steps' to it) rounded on its own first.
template <typename T>
void StoreWeightGradients(const RecurrentShape& s, int64_t G, const std::vector<double>& dw_ih,
                          const std::vector<double>& dw_hh0, const std::vector<double>& dw_hh, T* grad_w_ih,
                          T* grad_w_hh) {
  for (int64_t e = 0; e < G * s.i; ++e) grad_w_ih[e] = Narrow<T>(dw_ih[e]);
  for (int64_t e = 0; e < G * s.h; ++e) grad_w_hh[e] = Narrow<T>(Stored<T>(dw_hh0[e]) + dw_hh[e]);
}

// Calls f(T{}) with T the element type of the node's dtype (input 0's; the
// registry gives every input and output that dtype, and a direct call with
// another is refused).
template <typename F>
absl::Status DispatchRecurrent(const KernelArgs& args, F&& f) {
  const DType dtype = args.inputs[0].type.dtype;
  for (const TensorArg& t : args.inputs) {
    if (t.type.dtype != dtype) return UnsupportedDType(args, t.type.dtype);
  }
  switch (dtype) {
    case DType::kFloat32:
      return f(float{});
    case DType::kBFloat16:
      return f(BFloat16{});
    case DType::kFloat16:
      return f(Float16{});
    default:
      return UnsupportedDType(args, dtype);
  }
}

// Inputs: x, h0, c0, w_ih, w_hh, b_ih, b_hh. Outputs: y, h_n, c_n, saved.
template <typename T>
absl::Status LstmForward(const KernelArgs& args) {
  const RecurrentShape s = RecurrentShapeOf(args.inputs[0], args.inputs[1]);
  const T* x = args.inputs[0].as<const T>();
  const T* h0 = args.inputs[1].as<const T>();
  const T* c0 = args.inputs[2].as<const T>();
  const T* w_ih = args.inputs[3].as<const T>();
  const T* w_hh = args.inputs[4].as<const T>();
  const T* b_ih = args.inputs[5].as<const T>();
  const T* b_hh = args.inputs[6].as<const T>();
  T* y = args.outputs[0].as<T>();
  T* h_n = args.outputs[1].as<T>();
  T* c_n = args.outputs[2].as<T>();
  T* saved = args.outputs[3].as<T>();
  const int64_t H = s.h, G = 4 * s.h, S = 5 * s.h;
  std::vector<double> a(G);
  for (int64_t t = 0; t < s.t; ++t) {
    for (int64_t n = 0; n < s.b; ++n) {
      const T* x_row = x + (t * s.b + n) * s.i;
      const T* h_prev = t == 0 ? h0 + n * H : y + ((t - 1) * s.b + n) * H;
      const T* c_prev = t == 0 ? c0 + n * H : saved + ((t - 1) * s.b + n) * S + G;
      for (int64_t j = 0; j < G; ++j) {
        const double products = Stored<T>(Stored<T>(Dot(x_row, w_ih + j * s.i, s.i)) + Dot(h_prev, w_hh + j * H, H));
        a[j] = products + Wide(b_ih[j]) + Wide(b_hh[j]);
      }
      T* out = saved + (t * s.b + n) * S;
      T* h_out = y + (t * s.b + n) * H;
      for (int64_t k = 0; k < H; ++k) {
        const double i = Sigmoid(a[k]), f = Sigmoid(a[H + k]), g = std::tanh(a[2 * H + k]), o = Sigmoid(a[3 * H + k]);
        const double c = f * Wide(c_prev[k]) + i * g;
        out[k] = Narrow<T>(i);
        out[H + k] = Narrow<T>(f);
        out[2 * H + k] = Narrow<T>(g);
        out[3 * H + k] = Narrow<T>(o);
        out[G + k] = Narrow<T>(c);
        h_out[k] = Narrow<T>(o * std::tanh(c));
      }
    }
  }
  const int64_t last = (s.t - 1) * s.b;
  for (int64_t n = 0; n < s.b; ++n) {
    for (int64_t k = 0; k < H; ++k) {
      h_n[n * H + k] = y[(last + n) * H + k];
      c_n[n * H + k] = saved[(last + n) * S + G + k];
    }
  }
  return absl::OkStatus();
}

// Inputs: grad_y, grad_h_n, grad_c_n, x, h0, c0, w_ih, w_hh, y, saved.
// Outputs: grad_x, grad_h0, grad_c0, grad_w_ih, grad_w_hh, grad_b,
// grad_gates.
template <typename T>
absl::Status LstmBackward(const KernelArgs& args) {
  const RecurrentShape s = RecurrentShapeOf(args.inputs[3], args.inputs[4]);
  const T* grad_y = args.inputs[0].as<const T>();
  const T* grad_h_n = args.inputs[1].as<const T>();
  const T* grad_c_n = args.inputs[2].as<const T>();
  const T* x = args.inputs[3].as<const T>();
  const T* h0 = args.inputs[4].as<const T>();
  const T* c0 = args.inputs[5].as<const T>();
  const T* w_ih = args.inputs[6].as<const T>();
  const T* w_hh = args.inputs[7].as<const T>();
  const T* y = args.inputs[8].as<const T>();
  const T* saved = args.inputs[9].as<const T>();
  T* grad_x = args.outputs[0].as<T>();
  T* grad_h0 = args.outputs[1].as<T>();
  T* grad_c0 = args.outputs[2].as<T>();
  T* grad_w_ih = args.outputs[3].as<T>();
  T* grad_w_hh = args.outputs[4].as<T>();
  T* grad_b = args.outputs[5].as<T>();
  T* grad_gates = args.outputs[6].as<T>();
  const int64_t H = s.h, G = 4 * s.h, S = 5 * s.h;

  std::vector<double> dh_rec(s.b * H), dc_next(s.b * H);
  for (int64_t e = 0; e < s.b * H; ++e) {
    dh_rec[e] = Wide(grad_h_n[e]);
    dc_next[e] = Wide(grad_c_n[e]);
  }
  // grad_w_hh's terms of steps 1.. (h_{t-1} from y) and of step 0 (h0).
  std::vector<double> dw_ih(G * s.i, 0.0), dw_hh(G * H, 0.0), dw_hh0(G * H, 0.0), db(G, 0.0), da(G);
  const LayerWeights<T> weights{w_ih, w_hh};
  for (int64_t t = s.t - 1; t >= 0; --t) {
    std::vector<double> dh_prev(s.b * H, 0.0);
    double* dw_hh_t = t == 0 ? dw_hh0.data() : dw_hh.data();
    for (int64_t n = 0; n < s.b; ++n) {
      const int64_t row = t * s.b + n;
      const T* act = saved + row * S;
      const T* c_prev = t == 0 ? c0 + n * H : saved + (row - s.b) * S + G;
      const T* h_prev = t == 0 ? h0 + n * H : y + (row - s.b) * H;
      for (int64_t k = 0; k < H; ++k) {
        const double i = Wide(act[k]), f = Wide(act[H + k]), g = Wide(act[2 * H + k]), o = Wide(act[3 * H + k]);
        const double tanh_c = std::tanh(Wide(act[G + k]));
        const double dh = Wide(grad_y[row * H + k]) + dh_rec[n * H + k];
        const double dc = dc_next[n * H + k] + dh * o * (1.0 - tanh_c * tanh_c);
        da[k] = dc * g * i * (1.0 - i);
        da[H + k] = dc * Wide(c_prev[k]) * f * (1.0 - f);
        da[2 * H + k] = dc * i * (1.0 - g * g);
        da[3 * H + k] = dh * tanh_c * o * (1.0 - o);
        dc_next[n * H + k] = Stored<T>(dc * f);
      }
      for (int64_t j = 0; j < G; ++j) {
        grad_gates[row * G + j] = Narrow<T>(da[j]);
        da[j] = Stored<T>(da[j]);
        db[j] += da[j];
      }
      const LayerRow<T> at{x + row * s.i, h_prev, grad_x + row * s.i, dh_prev.data() + n * H};
      BackpropagateRow(s, G, weights, da.data(), da.data(), at, dw_ih.data(), dw_hh_t);
    }
    for (double& v : dh_prev) v = Stored<T>(v);
    dh_rec.swap(dh_prev);
  }
  for (int64_t e = 0; e < s.b * H; ++e) {
    grad_h0[e] = Narrow<T>(dh_rec[e]);
    grad_c0[e] = Narrow<T>(dc_next[e]);
  }
  StoreWeightGradients(s, G, dw_ih, dw_hh0, dw_hh, grad_w_ih, grad_w_hh);
  for (int64_t j = 0; j < G; ++j) grad_b[j] = Narrow<T>(db[j]);
  return absl::OkStatus();
}

// GRU, inputs: x, h0, w_ih, w_hh, b_ih, b_hh. Outputs: y, h_n, saved.
template <typename T>
absl::Status GruForward(const KernelArgs& args) {
  const RecurrentShape s = RecurrentShapeOf(args.inputs[0], args.inputs[1]);
  const T* x = args.inputs[0].as<const T>();
  const T* h0 = args.inputs[1].as<const T>();
  const T* w_ih = args.inputs[2].as<const T>();
  const T* w_hh = args.inputs[3].as<const T>();
  const T* b_ih = args.inputs[4].as<const T>();
  const T* b_hh = args.inputs[5].as<const T>();
  T* y = args.outputs[0].as<T>();
  T* h_n = args.outputs[1].as<T>();
  T* saved = args.outputs[2].as<T>();
  const int64_t H = s.h, G = 3 * s.h, S = 4 * s.h;
  // a: the reset and update gates' pre-activations, then the new gate's
  // input side gx_n; hn: the new gate's recurrent side (b_hn included).
  std::vector<double> a(G), hn(H);
  for (int64_t t = 0; t < s.t; ++t) {
    for (int64_t n = 0; n < s.b; ++n) {
      const T* x_row = x + (t * s.b + n) * s.i;
      const T* h_prev = t == 0 ? h0 + n * H : y + ((t - 1) * s.b + n) * H;
      for (int64_t j = 0; j < G; ++j) {
        const double input = Stored<T>(Dot(x_row, w_ih + j * s.i, s.i));
        const double recurrent = Dot(h_prev, w_hh + j * H, H);
        if (j < 2 * H) {
          a[j] = Stored<T>(input + recurrent) + Wide(b_ih[j]) + Wide(b_hh[j]);
        } else {
          a[j] = input + Wide(b_ih[j]);
          hn[j - 2 * H] = Stored<T>(recurrent) + Wide(b_hh[j]);
        }
      }
      T* out = saved + (t * s.b + n) * S;
      T* h_out = y + (t * s.b + n) * H;
      for (int64_t k = 0; k < H; ++k) {
        const double r = Sigmoid(a[k]), z = Sigmoid(a[H + k]);
        const double candidate = std::tanh(a[2 * H + k] + r * hn[k]);
        out[k] = Narrow<T>(r);
        out[H + k] = Narrow<T>(z);
        out[2 * H + k] = Narrow<T>(candidate);
        out[3 * H + k] = Narrow<T>(hn[k]);
        h_out[k] = Narrow<T>((1.0 - z) * candidate + z * Wide(h_prev[k]));
      }
    }
  }
  std::copy(y + (s.t - 1) * s.b * H, y + s.t * s.b * H, h_n);
  return absl::OkStatus();
}

// GRU, inputs: grad_y, grad_h_n, x, h0, w_ih, w_hh, y, saved. Outputs:
// grad_x, grad_h0, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh, grad_gates_x,
// grad_gates_h.
template <typename T>
absl::Status GruBackward(const KernelArgs& args) {
  const RecurrentShape s = RecurrentShapeOf(args.inputs[2], args.inputs[3]);
  const T* grad_y = args.inputs[0].as<const T>();
  const T* grad_h_n = args.inputs[1].as<const T>();
  const T* x = args.inputs[2].as<const T>();
  const T* h0 = args.inputs[3].as<const T>();
  const T* y = args.inputs[6].as<const T>();
  const T* saved = args.inputs[7].as<const T>();
  T* grad_x = args.outputs[0].as<T>();
  T* grad_h0 = args.outputs[1].as<T>();
  T* grad_b_ih = args.outputs[4].as<T>();
  T* grad_b_hh = args.outputs[5].as<T>();
  T* grad_gates_x = args.outputs[6].as<T>();
  T* grad_gates_h = args.outputs[7].as<T>();
  const LayerWeights<T> weights{args.inputs[4].as<const T>(), args.inputs[5].as<const T>()};
  const int64_t H = s.h, G = 3 * s.h, S = 4 * s.h;

  std::vector<double> dh_rec(s.b * H);
  for (int64_t e = 0; e < s.b * H; ++e) dh_rec[e] = Wide(grad_h_n[e]);
  std::vector<double> dw_ih(G * s.i, 0.0), dw_hh(G * H, 0.0), dw_hh0(G * H, 0.0), db_ih(G, 0.0), db_hh(G, 0.0);
  std::vector<double> gx(G), gh(G);
  for (int64_t t = s.t - 1; t >= 0; --t) {
    std::vector<double> dh_prev(s.b * H);
    double* dw_hh_t = t == 0 ? dw_hh0.data() : dw_hh.data();
    for (int64_t n = 0; n < s.b; ++n) {
      const int64_t row = t * s.b + n;
      const T* act = saved + row * S;
      const T* h_prev = t == 0 ? h0 + n * H : y + (row - s.b) * H;
      for (int64_t k = 0; k < H; ++k) {
        const double r = Wide(act[k]), z = Wide(act[H + k]), candidate = Wide(act[2 * H + k]),
                     hn = Wide(act[3 * H + k]);
        const double dh = Wide(grad_y[row * H + k]) + dh_rec[n * H + k];
        const double da_n = dh * (1.0 - z) * (1.0 - candidate * candidate);
        const double da_r = da_n * hn * r * (1.0 - r);
        const double da_z = dh * (Wide(h_prev[k]) - candidate) * z * (1.0 - z);
        gx[k] = gh[k] = da_r;
        gx[H + k] = gh[H + k] = da_z;
        gx[2 * H + k] = da_n;
        gh[2 * H + k] = da_n * r;
        // The part of dh_{t-1} that skips the products (stored before the
        // product is added to it, as the CUDA kernel's step does).
        dh_prev[n * H + k] = Stored<T>(dh * z);
      }
      for (int64_t j = 0; j < G; ++j) {
        grad_gates_x[row * G + j] = Narrow<T>(gx[j]);
        grad_gates_h[row * G + j] = Narrow<T>(gh[j]);
        gx[j] = Stored<T>(gx[j]);
        gh[j] = Stored<T>(gh[j]);
        db_ih[j] += gx[j];
        db_hh[j] += gh[j];
      }
      const LayerRow<T> at{x + row * s.i, h_prev, grad_x + row * s.i, dh_prev.data() + n * H};
      BackpropagateRow(s, G, weights, gx.data(), gh.data(), at, dw_ih.data(), dw_hh_t);
    }
    for (double& v : dh_prev) v = Stored<T>(v);
    dh_rec.swap(dh_prev);
  }
  for (int64_t e = 0; e < s.b * H; ++e) grad_h0[e] = Narrow<T>(dh_rec[e]);
  StoreWeightGradients(s, G, dw_ih, dw_hh0, dw_hh, args.outputs[2].as<T>(), args.outputs[3].as<T>());
  for (int64_t j = 0; j < G; ++j) {
    grad_b_ih[j] = Narrow<T>(db_ih[j]);
    grad_b_hh[j] = Narrow<T>(db_hh[j]);
  }
  return absl::OkStatus();
}

absl::Status LstmKernel(const KernelArgs& args) {
  return DispatchRecurrent(args, [&](auto tag) { return LstmForward<decltype(tag)>(args); });
}

absl::Status LstmBackwardKernel(const KernelArgs& args) {
  return DispatchRecurrent(args, [&](auto tag) { return LstmBackward<decltype(tag)>(args); });
}

absl::Status GruKernel(const KernelArgs& args) {
  return DispatchRecurrent(args, [&](auto tag) { return GruForward<decltype(tag)>(args); });
}

absl::Status GruBackwardKernel(const KernelArgs& args) {
  return DispatchRecurrent(args, [&](auto tag) { return GruBackward<decltype(tag)>(args); });
}

}  // namespace

void AddRecurrentKernels(CpuKernelTable& table) {
  table["lstm"] = LstmKernel;
  table["lstm_backward"] = LstmBackwardKernel;
  table["gru"] = GruKernel;
  table["gru_backward"] = GruBackwardKernel;
}

}  // namespace tandem::cpu
