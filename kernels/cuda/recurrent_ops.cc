// CUDA kernels of the fused LSTM and GRU layers, lstm, lstm_backward, gru
// and gru_backward (registry entries and formulas: ir/ops/recurrent_ops.cc),
// composed of matrix products (blas.h: cuBLASLt as mm and addmm; in float32,
// TF32 tensor cores when the node's `allow_tf32` attribute is true, as
// PyTorch's cuDNN RNNs under torch.backends.cudnn.allow_tf32, its default,
// which the PyTorch adaptor copies onto the node) and the step kernels of
// recurrent_kernels.cu (float32) and half_recurrent_kernels.cu (bfloat16,
// float16), all on the context's stream.
//
// LSTM:
//   forward:  one product for every step's input projection, x viewed
//             [T*B, I] times w_ih^T, written straight into the gate columns
//             of saved (row stride 5H); then per step t: saved[t] gates +=
//             h_{t-1} @ w_hh^T (h0, then y[t-1]), and the step kernel (adds
//             the biases, activates in place, writes c_t, y[t], and at the
//             last step h_n and c_n). 1 + 2T launches.
//   backward: per step t = T-1 .. 0: the step kernel (grad_gates[t] and the
//             carried cell gradient, kept in grad_c0), then dh = grad_gates[t]
//             @ w_hh into grad_h0 (read by step t-1; after step 0 it is
//             grad_h0 itself); then grad_x = grad_gates @ w_ih, grad_w_ih =
//             grad_gates^T @ x, grad_w_hh = grad_gates[0]^T @ h0 +
//             grad_gates[1:]^T @ y[:-1] (two products, the second
//             accumulating), grad_b = column sums of grad_gates. 2T + 5
//             launches.
// GRU (saved's row: r, z, n, hn; the new gate keeps its two products apart,
// since r scales only the recurrent one):
//   forward:  saved's columns [2H, 3H) zeroed (one 2-D memset); the input
//             projections of every step, x viewed [T*B, I] times w_ih^T, in
//             two products: r's and z's into columns [0, 2H), n's into
//             [3H, 4H); then per step t: saved[t][:, 0:3H) += h_{t-1} @
//             w_hh^T (one product: r's and z's sums, n's recurrent term on
//             the zeros), and the step kernel (adds the biases, writes r, z,
//             n, hn, y[t], and at the last step h_n). 3 + 2T launches.
//   backward: per step t = T-1 .. 0: the step kernel (grad_gates_x[t],
//             grad_gates_h[t], and dh * z into grad_h0), then grad_h0 +=
//             grad_gates_h[t] @ w_hh (dh of h_{t-1}; after step 0 grad_h0
//             itself); then the LSTM's weight products with grad_gates_x on
//             the input side and grad_gates_h on the recurrent side, and
//             both bias gradients as column sums. 2T + 6 launches.
//
// No allocation, no host synchronization, no host copies: the ops are
// captured into CUDA graphs as they are. The outputs grad_h0 (and the
// LSTM's grad_c0) double as the recurrence's carried state, so the
// backwards need no scratch beyond their gate-gradient outputs.
//
// Every tensor has the node's one dtype (the registry's rule). In bfloat16
// and float16 the products take 16-bit operands and accumulate in float32
// (CUBLAS_COMPUTE_32F; allow_tf32 has no effect), the step kernels compute
// in float32, and every tensor written is rounded once per write: the gate
// pre-activations in saved are rounded after the input projection and again
// after the recurrent product is added (the step kernel adds the biases in
// float32; the GRU's new gate: each product rounded alone), the carried dh
// (the GRU's: dh * z, then with its product added) and dc after every step,
// grad_w_hh after its first product, and the bias gradients are the float32
// column sums of the rounded gate gradients (half_row_kernels.cu's
// reduction). The CPU kernels round at the same points.
#include "base/status_macros.h"
#include "ir/ops/recurrent_shape.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/recurrent_launch.h"

namespace tandem::cuda {
namespace {

// The node's dtype (all its tensors'): float32, bfloat16 or float16.
absl::StatusOr<DType> RecurrentDType(const KernelArgs& args) {
  const DType dtype = args.inputs[0].type.dtype;
  if (dtype != DType::kFloat32 && !IsHalfDType(dtype)) return UnsupportedDType(args, dtype);
  for (const TensorArg& t : args.inputs) {
    if (t.type.dtype != dtype) return UnsupportedDType(args, t.type.dtype);
  }
  return dtype;
}

// Element `offset` of a tensor of `dtype` at `base`.
void* At(void* base, DType dtype, int64_t offset) {
  return static_cast<char*>(base) + offset * static_cast<int64_t>(DTypeSize(dtype));
}
const void* At(const void* base, DType dtype, int64_t offset) {
  return static_cast<const char*>(base) + offset * static_cast<int64_t>(DTypeSize(dtype));
}

// out [n, m] (row stride ld_out, 0: dense) = op(a) @ op(b) (+ out when
// accumulate), in the node's dtype.
MatmulSpec Product(DType dtype, int64_t n, int64_t k, int64_t m, const void* a, bool trans_a, const void* b,
                   bool trans_b, void* out) {
  MatmulSpec spec;
  spec.dtype = dtype;
  spec.n = n;
  spec.k = k;
  spec.m = m;
  spec.a = a;
  spec.trans_a = trans_a;
  spec.b = b;
  spec.trans_b = trans_b;
  spec.out = out;
  return spec;
}

MatmulSpec Accumulating(MatmulSpec spec) {
  spec.c = spec.out;
  spec.beta = 1.0;
  return spec;
}

// The node's products: whether they may use TF32, and enqueuing one.
class Products {
 public:
  static absl::StatusOr<Products> Of(const CudaKernelContext& context, const KernelArgs& args) {
    ASSIGN_OR_RETURN(bool tf32, args.node->attrs.GetBool("allow_tf32", false));
    return Products(context, tf32);
  }

  absl::Status Run(MatmulSpec spec) const {
    spec.allow_tf32 = tf32_;
    return Matmul(*context_.stream, spec);
  }

 private:
  Products(const CudaKernelContext& context, bool tf32) : context_(context), tf32_(tf32) {}

  const CudaKernelContext& context_;
  bool tf32_;
};

// A step kernel over the node's dtype.
cudaError_t LaunchStep(DType dtype, const LstmForwardStepOf<void>& step, cudaStream_t stream) {
  if (dtype == DType::kFloat32) return LaunchLstmForwardStep(CastStep<float>(step), stream);
  return LaunchHalfLstmForwardStep(dtype, step, stream);
}

cudaError_t LaunchStep(DType dtype, const LstmBackwardStepOf<void>& step, cudaStream_t stream) {
  if (dtype == DType::kFloat32) return LaunchLstmBackwardStep(CastStep<float>(step), stream);
  return LaunchHalfLstmBackwardStep(dtype, step, stream);
}

cudaError_t LaunchStep(DType dtype, const GruForwardStepOf<void>& step, cudaStream_t stream) {
  if (dtype == DType::kFloat32) return LaunchGruForwardStep(CastStep<float>(step), stream);
  return LaunchHalfGruForwardStep(dtype, step, stream);
}

cudaError_t LaunchStep(DType dtype, const GruBackwardStepOf<void>& step, cudaStream_t stream) {
  if (dtype == DType::kFloat32) return LaunchGruBackwardStep(CastStep<float>(step), stream);
  return LaunchHalfGruBackwardStep(dtype, step, stream);
}

// grad_b [cols] = column sums of grad_gates [rows, cols].
cudaError_t LaunchBiasGradient(DType dtype, int64_t rows, int64_t cols, const void* grad_gates, void* grad_b,
                               cudaStream_t stream) {
  if (dtype == DType::kFloat32) {
    return LaunchColumnSums(rows, cols, static_cast<const float*>(grad_gates), static_cast<float*>(grad_b), stream);
  }
  return LaunchHalfReduceMiddle(dtype, dtype, 1, rows, cols, /*mean=*/false, grad_gates, grad_b, stream);
}

// The backward's products after the recurrence, from the gate gradients
// [T*B, G] of the input side (gates_x) and of the recurrent side (gates_h;
// the LSTM's are one tensor): grad_x = gates_x @ w_ih, grad_w_ih =
// gates_x^T @ x, grad_w_hh = gates_h[0]^T @ h0 + gates_h[1:]^T @ y[:-1]
// (two products, the second accumulating).
struct WeightProducts {
  const void* x = nullptr;
  const void* h0 = nullptr;
  const void* y = nullptr;
  const void* w_ih = nullptr;
  const void* gates_x = nullptr;
  const void* gates_h = nullptr;
  void* grad_x = nullptr;
  void* grad_w_ih = nullptr;
  void* grad_w_hh = nullptr;
};

absl::Status RunWeightProducts(const Products& products, DType dtype, const RecurrentShape& s, int64_t G,
                               const WeightProducts& w) {
  const int64_t rows = s.t * s.b;
  RETURN_IF_ERROR(products.Run(Product(dtype, rows, G, s.i, w.gates_x, false, w.w_ih, false, w.grad_x)));
  RETURN_IF_ERROR(products.Run(Product(dtype, G, rows, s.i, w.gates_x, true, w.x, false, w.grad_w_ih)));
  RETURN_IF_ERROR(products.Run(Product(dtype, G, s.b, s.h, w.gates_h, true, w.h0, false, w.grad_w_hh)));
  if (s.t == 1) return absl::OkStatus();
  return products.Run(
      Accumulating(Product(dtype, G, rows - s.b, s.h, At(w.gates_h, dtype, s.b * G), true, w.y, false, w.grad_w_hh)));
}

// Inputs: x, h0, c0, w_ih, w_hh, b_ih, b_hh. Outputs: y, h_n, c_n, saved.
absl::Status LstmKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(const DType dtype, RecurrentDType(args));
  ASSIGN_OR_RETURN(const Products products, Products::Of(context, args));
  const RecurrentShape s = RecurrentShapeOf(args.inputs[0], args.inputs[1]);
  const void* x = args.inputs[0].data;
  const void* h0 = args.inputs[1].data;
  const void* c0 = args.inputs[2].data;
  const void* w_ih = args.inputs[3].data;
  const void* w_hh = args.inputs[4].data;
  void* y = args.outputs[0].data;
  void* saved = args.outputs[3].data;
  const int64_t H = s.h, G = 4 * s.h, S = 5 * s.h;

  // Gates of every step, before the recurrent term: x @ w_ih^T.
  MatmulSpec projection = Product(dtype, s.t * s.b, s.i, G, x, false, w_ih, true, saved);
  projection.ld_out = S;
  RETURN_IF_ERROR(products.Run(projection));

  LstmForwardStepOf<void> step;
  step.batch = s.b;
  step.hidden = H;
  step.b_ih = args.inputs[5].data;
  step.b_hh = args.inputs[6].data;
  for (int64_t t = 0; t < s.t; ++t) {
    void* saved_t = At(saved, dtype, t * s.b * S);
    const void* h_prev = t == 0 ? h0 : At(y, dtype, (t - 1) * s.b * H);
    MatmulSpec recurrent = Accumulating(Product(dtype, s.b, H, G, h_prev, false, w_hh, true, saved_t));
    recurrent.ld_out = S;
    RETURN_IF_ERROR(products.Run(recurrent));
    step.saved_t = saved_t;
    step.c_prev = t == 0 ? c0 : At(saved_t, dtype, -s.b * S + G);
    step.c_prev_stride = t == 0 ? H : S;
    step.y_t = At(y, dtype, t * s.b * H);
    const bool last = t == s.t - 1;
    step.h_n = last ? args.outputs[1].data : nullptr;
    step.c_n = last ? args.outputs[2].data : nullptr;
    RETURN_IF_ERROR(Launched(args, LaunchStep(dtype, step, context.native), dtype));
  }
  return absl::OkStatus();
}

// Inputs: grad_y, grad_h_n, grad_c_n, x, h0, c0, w_ih, w_hh, y, saved.
// Outputs: grad_x, grad_h0, grad_c0, grad_w_ih, grad_w_hh, grad_b,
// grad_gates.
absl::Status LstmBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(const DType dtype, RecurrentDType(args));
  ASSIGN_OR_RETURN(const Products products, Products::Of(context, args));
  const RecurrentShape s = RecurrentShapeOf(args.inputs[3], args.inputs[4]);
  const void* grad_y = args.inputs[0].data;
  const void* x = args.inputs[3].data;
  const void* h0 = args.inputs[4].data;
  const void* c0 = args.inputs[5].data;
  const void* w_ih = args.inputs[6].data;
  const void* w_hh = args.inputs[7].data;
  const void* y = args.inputs[8].data;
  const void* saved = args.inputs[9].data;
  void* grad_h0 = args.outputs[1].data;  // dh carried from step t to t-1
  void* grad_c0 = args.outputs[2].data;  // dc carried from step t to t-1
  void* grad_gates = args.outputs[6].data;
  const int64_t H = s.h, G = 4 * s.h, S = 5 * s.h;

  LstmBackwardStepOf<void> step;
  step.batch = s.b;
  step.hidden = H;
  step.dc_prev = grad_c0;
  for (int64_t t = s.t - 1; t >= 0; --t) {
    const bool last = t == s.t - 1;
    step.grad_y_t = At(grad_y, dtype, t * s.b * H);
    step.dh_next = last ? args.inputs[1].data : grad_h0;
    step.dc_next = last ? args.inputs[2].data : grad_c0;
    step.saved_t = At(saved, dtype, t * s.b * S);
    step.c_prev = t == 0 ? c0 : At(step.saved_t, dtype, -s.b * S + G);
    step.c_prev_stride = t == 0 ? H : S;
    step.grad_gates_t = At(grad_gates, dtype, t * s.b * G);
    RETURN_IF_ERROR(Launched(args, LaunchStep(dtype, step, context.native), dtype));
    // dh of h_{t-1} = grad_gates[t] @ w_hh; after step 0, grad_h0.
    RETURN_IF_ERROR(products.Run(Product(dtype, s.b, G, H, step.grad_gates_t, false, w_hh, false, grad_h0)));
  }

  RETURN_IF_ERROR(RunWeightProducts(products, dtype, s, G,
                                    {.x = x,
                                     .h0 = h0,
                                     .y = y,
                                     .w_ih = w_ih,
                                     .gates_x = grad_gates,
                                     .gates_h = grad_gates,
                                     .grad_x = args.outputs[0].data,
                                     .grad_w_ih = args.outputs[3].data,
                                     .grad_w_hh = args.outputs[4].data}));
  return Launched(args, LaunchBiasGradient(dtype, s.t * s.b, G, grad_gates, args.outputs[5].data, context.native),
                  dtype);
}

// GRU, inputs: x, h0, w_ih, w_hh, b_ih, b_hh. Outputs: y, h_n, saved.
absl::Status GruKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(const DType dtype, RecurrentDType(args));
  ASSIGN_OR_RETURN(const Products products, Products::Of(context, args));
  const RecurrentShape s = RecurrentShapeOf(args.inputs[0], args.inputs[1]);
  const void* x = args.inputs[0].data;
  const void* h0 = args.inputs[1].data;
  const void* w_ih = args.inputs[2].data;
  const void* w_hh = args.inputs[3].data;
  void* y = args.outputs[0].data;
  void* saved = args.outputs[2].data;
  const int64_t H = s.h, G = 3 * s.h, S = 4 * s.h, rows = s.t * s.b;
  const size_t element = DTypeSize(dtype);

  // The new gate's recurrent columns start at zero, so that each step's one
  // recurrent product accumulates onto all three gates' columns.
  CUDA_RETURN_IF_ERROR(cudaMemset2DAsync(At(saved, dtype, 2 * H), S * element, 0, H * element, rows, context.native));
  // Every step's input projections: r's and z's (w_ih's first 2H rows)
  // into columns [0, 2H), n's into [3H, 4H).
  MatmulSpec reset_update = Product(dtype, rows, s.i, 2 * H, x, false, w_ih, true, saved);
  reset_update.ld_out = S;
  RETURN_IF_ERROR(products.Run(reset_update));
  MatmulSpec new_gate =
      Product(dtype, rows, s.i, H, x, false, At(w_ih, dtype, 2 * H * s.i), true, At(saved, dtype, 3 * H));
  new_gate.ld_out = S;
  RETURN_IF_ERROR(products.Run(new_gate));

  GruForwardStepOf<void> step;
  step.batch = s.b;
  step.hidden = H;
  step.b_ih = args.inputs[4].data;
  step.b_hh = args.inputs[5].data;
  for (int64_t t = 0; t < s.t; ++t) {
    void* saved_t = At(saved, dtype, t * s.b * S);
    const void* h_prev = t == 0 ? h0 : At(y, dtype, (t - 1) * s.b * H);
    MatmulSpec recurrent = Accumulating(Product(dtype, s.b, H, G, h_prev, false, w_hh, true, saved_t));
    recurrent.ld_out = S;
    RETURN_IF_ERROR(products.Run(recurrent));
    step.saved_t = saved_t;
    step.h_prev = h_prev;
    step.y_t = At(y, dtype, t * s.b * H);
    step.h_n = t == s.t - 1 ? args.outputs[1].data : nullptr;
    RETURN_IF_ERROR(Launched(args, LaunchStep(dtype, step, context.native), dtype));
  }
  return absl::OkStatus();
}

// GRU, inputs: grad_y, grad_h_n, x, h0, w_ih, w_hh, y, saved. Outputs:
// grad_x, grad_h0, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh, grad_gates_x,
// grad_gates_h.
absl::Status GruBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(const DType dtype, RecurrentDType(args));
  ASSIGN_OR_RETURN(const Products products, Products::Of(context, args));
  const RecurrentShape s = RecurrentShapeOf(args.inputs[2], args.inputs[3]);
  const void* grad_y = args.inputs[0].data;
  const void* h0 = args.inputs[3].data;
  const void* w_hh = args.inputs[5].data;
  const void* y = args.inputs[6].data;
  const void* saved = args.inputs[7].data;
  void* grad_h0 = args.outputs[1].data;  // dh carried from step t to t-1
  void* grad_gates_x = args.outputs[6].data;
  void* grad_gates_h = args.outputs[7].data;
  const int64_t H = s.h, G = 3 * s.h, S = 4 * s.h, rows = s.t * s.b;

  GruBackwardStepOf<void> step;
  step.batch = s.b;
  step.hidden = H;
  step.dh_prev = grad_h0;
  for (int64_t t = s.t - 1; t >= 0; --t) {
    step.grad_y_t = At(grad_y, dtype, t * s.b * H);
    step.dh_next = t == s.t - 1 ? args.inputs[1].data : grad_h0;
    step.saved_t = At(saved, dtype, t * s.b * S);
    step.h_prev = t == 0 ? h0 : At(y, dtype, (t - 1) * s.b * H);
    step.grad_gates_x_t = At(grad_gates_x, dtype, t * s.b * G);
    step.grad_gates_h_t = At(grad_gates_h, dtype, t * s.b * G);
    RETURN_IF_ERROR(Launched(args, LaunchStep(dtype, step, context.native), dtype));
    // dh of h_{t-1} = dh * z (the step's) + grad_gates_h[t] @ w_hh.
    RETURN_IF_ERROR(
        products.Run(Accumulating(Product(dtype, s.b, G, H, step.grad_gates_h_t, false, w_hh, false, grad_h0))));
  }

  RETURN_IF_ERROR(RunWeightProducts(products, dtype, s, G,
                                    {.x = args.inputs[2].data,
                                     .h0 = h0,
                                     .y = y,
                                     .w_ih = args.inputs[4].data,
                                     .gates_x = grad_gates_x,
                                     .gates_h = grad_gates_h,
                                     .grad_x = args.outputs[0].data,
                                     .grad_w_ih = args.outputs[2].data,
                                     .grad_w_hh = args.outputs[3].data}));
  RETURN_IF_ERROR(
      Launched(args, LaunchBiasGradient(dtype, rows, G, grad_gates_x, args.outputs[4].data, context.native), dtype));
  return Launched(args, LaunchBiasGradient(dtype, rows, G, grad_gates_h, args.outputs[5].data, context.native), dtype);
}

}  // namespace

void AddRecurrentKernels(CudaKernelTable& table) {
  table["lstm"] = LstmKernel;
  table["lstm_backward"] = LstmBackwardKernel;
  table["gru"] = GruKernel;
  table["gru_backward"] = GruBackwardKernel;
}

}  // namespace tandem::cuda
