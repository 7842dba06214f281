// Reference CPU kernels of the fused LSTM layer (adaptor/ops/recurrent_ops.cc):
// plain loops over time steps, batch rows and gates, every dot product and
// gradient sum accumulated in double, results stored in float32.
//
// Forward, per step t (gate order i, f, g, o):
//   a = x_t @ w_ih^T + b_ih + h_{t-1} @ w_hh^T + b_hh
//   i, f, o = sigmoid(a_i, a_f, a_o); g = tanh(a_g)
//   c_t = f * c_{t-1} + i * g; h_t = o * tanh(c_t)
//   y[t] = h_t; saved[t] = (i, f, g, o, c_t); h_n = h_T, c_n = c_T.
// The recurrence reads h_{t-1} and c_{t-1} back from y and saved (float32),
// as a GPU implementation does, so that both start every step from the same
// state.
//
// Backward, per step t = T-1 .. 0, with dh = grad_y[t] + dh_rec (dh_rec =
// grad_h_n at t = T-1) and dc_next (grad_c_n at t = T-1):
//   dc = dc_next + dh * o * (1 - tanh(c_t)^2)
//   da_i = dc * g * i(1-i); da_f = dc * c_{t-1} * f(1-f);
//   da_g = dc * i * (1-g^2); da_o = dh * tanh(c_t) * o(1-o)
//   grad_gates[t] = da; dc_next = dc * f; dh_rec = da @ w_hh
// and over all steps grad_x = da @ w_ih, grad_w_ih = sum da^T @ x_t,
// grad_w_hh = sum da^T @ h_{t-1}, grad_b = sum da; grad_h0 = dh_rec and
// grad_c0 = dc_next after step 0. The carried dh_rec and dc stay in double
// between steps; the gate gradients are used in double and stored rounded.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "adaptor/cpu/kernel_util.h"
#include "adaptor/ops/lstm_shape.h"
#include "base/status_macros.h"

namespace tandem::cpu {
namespace {

double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// sum_k a[k] * b[k] in double, four independent partial sums (the loop is
// the forward's whole cost; one dependent chain of adds would be 4x slower).
double Dot(const float* a, const float* b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 += static_cast<double>(a[k]) * b[k];
    s1 += static_cast<double>(a[k + 1]) * b[k + 1];
    s2 += static_cast<double>(a[k + 2]) * b[k + 2];
    s3 += static_cast<double>(a[k + 3]) * b[k + 3];
  }
  for (; k < n; ++k) s0 += static_cast<double>(a[k]) * b[k];
  return (s0 + s1) + (s2 + s3);
}

// The registry admits float32 only; this guards direct calls.
absl::Status Float32Only(const KernelArgs& args) {
  for (const TensorArg& t : args.inputs) {
    if (t.type.dtype != DType::kFloat32) return UnsupportedDType(args, t.type.dtype);
  }
  return absl::OkStatus();
}

// Inputs: x, h0, c0, w_ih, w_hh, b_ih, b_hh. Outputs: y, h_n, c_n, saved.
absl::Status LstmKernel(const KernelArgs& args) {
  RETURN_IF_ERROR(Float32Only(args));
  const LstmShape s = LstmShapeOf(args.inputs[0], args.inputs[1]);
  const float* x = args.inputs[0].as<const float>();
  const float* h0 = args.inputs[1].as<const float>();
  const float* c0 = args.inputs[2].as<const float>();
  const float* w_ih = args.inputs[3].as<const float>();
  const float* w_hh = args.inputs[4].as<const float>();
  const float* b_ih = args.inputs[5].as<const float>();
  const float* b_hh = args.inputs[6].as<const float>();
  float* y = args.outputs[0].as<float>();
  float* h_n = args.outputs[1].as<float>();
  float* c_n = args.outputs[2].as<float>();
  float* saved = args.outputs[3].as<float>();
  const int64_t H = s.h, G = 4 * s.h, S = 5 * s.h;
  std::vector<double> a(G);
  for (int64_t t = 0; t < s.t; ++t) {
    for (int64_t n = 0; n < s.b; ++n) {
      const float* x_row = x + (t * s.b + n) * s.i;
      const float* h_prev = t == 0 ? h0 + n * H : y + ((t - 1) * s.b + n) * H;
      const float* c_prev = t == 0 ? c0 + n * H : saved + ((t - 1) * s.b + n) * S + G;
      for (int64_t j = 0; j < G; ++j) {
        a[j] = static_cast<double>(b_ih[j]) + static_cast<double>(b_hh[j]) + Dot(x_row, w_ih + j * s.i, s.i) +
               Dot(h_prev, w_hh + j * H, H);
      }
      float* out = saved + (t * s.b + n) * S;
      float* h_out = y + (t * s.b + n) * H;
      for (int64_t k = 0; k < H; ++k) {
        const double i = Sigmoid(a[k]), f = Sigmoid(a[H + k]), g = std::tanh(a[2 * H + k]), o = Sigmoid(a[3 * H + k]);
        const double c = f * static_cast<double>(c_prev[k]) + i * g;
        out[k] = static_cast<float>(i);
        out[H + k] = static_cast<float>(f);
        out[2 * H + k] = static_cast<float>(g);
        out[3 * H + k] = static_cast<float>(o);
        out[G + k] = static_cast<float>(c);
        h_out[k] = static_cast<float>(o * std::tanh(c));
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
absl::Status LstmBackwardKernel(const KernelArgs& args) {
  RETURN_IF_ERROR(Float32Only(args));
  const LstmShape s = LstmShapeOf(args.inputs[3], args.inputs[4]);
  const float* grad_y = args.inputs[0].as<const float>();
  const float* grad_h_n = args.inputs[1].as<const float>();
  const float* grad_c_n = args.inputs[2].as<const float>();
  const float* x = args.inputs[3].as<const float>();
  const float* h0 = args.inputs[4].as<const float>();
  const float* c0 = args.inputs[5].as<const float>();
  const float* w_ih = args.inputs[6].as<const float>();
  const float* w_hh = args.inputs[7].as<const float>();
  const float* y = args.inputs[8].as<const float>();
  const float* saved = args.inputs[9].as<const float>();
  float* grad_x = args.outputs[0].as<float>();
  float* grad_h0 = args.outputs[1].as<float>();
  float* grad_c0 = args.outputs[2].as<float>();
  float* grad_w_ih = args.outputs[3].as<float>();
  float* grad_w_hh = args.outputs[4].as<float>();
  float* grad_b = args.outputs[5].as<float>();
  float* grad_gates = args.outputs[6].as<float>();
  const int64_t H = s.h, G = 4 * s.h, S = 5 * s.h;

  std::vector<double> dh_rec(s.b * H), dc_next(s.b * H);
  for (int64_t e = 0; e < s.b * H; ++e) {
    dh_rec[e] = grad_h_n[e];
    dc_next[e] = grad_c_n[e];
  }
  std::vector<double> dw_ih(G * s.i, 0.0), dw_hh(G * H, 0.0), db(G, 0.0), da(G), dx(s.i);
  for (int64_t t = s.t - 1; t >= 0; --t) {
    std::vector<double> dh_prev(s.b * H, 0.0);
    for (int64_t n = 0; n < s.b; ++n) {
      const int64_t row = t * s.b + n;
      const float* act = saved + row * S;
      const float* c_prev = t == 0 ? c0 + n * H : saved + (row - s.b) * S + G;
      const float* h_prev = t == 0 ? h0 + n * H : y + (row - s.b) * H;
      for (int64_t k = 0; k < H; ++k) {
        const double i = act[k], f = act[H + k], g = act[2 * H + k], o = act[3 * H + k];
        const double tanh_c = std::tanh(static_cast<double>(act[G + k]));
        const double dh = static_cast<double>(grad_y[row * H + k]) + dh_rec[n * H + k];
        const double dc = dc_next[n * H + k] + dh * o * (1.0 - tanh_c * tanh_c);
        da[k] = dc * g * i * (1.0 - i);
        da[H + k] = dc * static_cast<double>(c_prev[k]) * f * (1.0 - f);
        da[2 * H + k] = dc * i * (1.0 - g * g);
        da[3 * H + k] = dh * tanh_c * o * (1.0 - o);
        dc_next[n * H + k] = dc * f;
      }
      const float* x_row = x + row * s.i;
      std::fill(dx.begin(), dx.end(), 0.0);
      for (int64_t j = 0; j < G; ++j) {
        const double d = da[j];
        grad_gates[row * G + j] = static_cast<float>(d);
        db[j] += d;
        const float* w_ih_row = w_ih + j * s.i;
        double* dw_ih_row = dw_ih.data() + j * s.i;
        for (int64_t k = 0; k < s.i; ++k) {
          dx[k] += d * w_ih_row[k];
          dw_ih_row[k] += d * x_row[k];
        }
        const float* w_hh_row = w_hh + j * H;
        double* dw_hh_row = dw_hh.data() + j * H;
        double* dh_prev_row = dh_prev.data() + n * H;
        for (int64_t k = 0; k < H; ++k) {
          dh_prev_row[k] += d * w_hh_row[k];
          dw_hh_row[k] += d * h_prev[k];
        }
      }
      for (int64_t k = 0; k < s.i; ++k) grad_x[row * s.i + k] = static_cast<float>(dx[k]);
    }
    dh_rec.swap(dh_prev);
  }
  for (int64_t e = 0; e < s.b * H; ++e) {
    grad_h0[e] = static_cast<float>(dh_rec[e]);
    grad_c0[e] = static_cast<float>(dc_next[e]);
  }
  for (int64_t e = 0; e < G * s.i; ++e) grad_w_ih[e] = static_cast<float>(dw_ih[e]);
  for (int64_t e = 0; e < G * H; ++e) grad_w_hh[e] = static_cast<float>(dw_hh[e]);
  for (int64_t j = 0; j < G; ++j) grad_b[j] = static_cast<float>(db[j]);
  return absl::OkStatus();
}

}  // namespace

void AddRecurrentKernels(CpuKernelTable& table) {
  table["lstm"] = LstmKernel;
  table["lstm_backward"] = LstmBackwardKernel;
}

}  // namespace tandem::cpu
