// CUDA kernels of the fused LSTM layer, lstm and lstm_backward (registry
// entries and formulas: adaptor/ops/recurrent_ops.cc), composed of float32
// matrix products (blas.h: cuBLASLt as mm and addmm; TF32 tensor cores when
// the node's `allow_tf32` attribute is true, as PyTorch's cuDNN LSTM under
// torch.backends.cudnn.allow_tf32, its default, which the PyTorch adaptor
// copies onto the node) and the step kernels of recurrent_kernels.cu, all on
// the context's stream:
//
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
//
// No allocation, no host synchronization, no host copies: the op is
// captured into CUDA graphs as it is. The outputs grad_h0 and grad_c0 double
// as the recurrence's carried state, so the backward needs no scratch beyond
// its grad_gates output. Inputs are float32 (the registry refuses others).
#include "adaptor/cuda/blas.h"
#include "adaptor/cuda/kernel_util.h"
#include "adaptor/cuda/recurrent_launch.h"
#include "adaptor/ops/lstm_shape.h"
#include "base/status_macros.h"

namespace tandem::cuda {
namespace {

absl::Status Float32Only(const KernelArgs& args) {
  for (const TensorArg& t : args.inputs) {
    if (t.type.dtype != DType::kFloat32) return UnsupportedDType(args, t.type.dtype);
  }
  return absl::OkStatus();
}

// out [n, m] (row stride ld_out, 0: dense) = op(a) @ op(b) (+ out when
// accumulate), in float32.
MatmulSpec Product(int64_t n, int64_t k, int64_t m, const float* a, bool trans_a, const float* b, bool trans_b,
                   float* out) {
  MatmulSpec spec;
  spec.dtype = DType::kFloat32;
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

// Inputs: x, h0, c0, w_ih, w_hh, b_ih, b_hh. Outputs: y, h_n, c_n, saved.
absl::Status LstmKernel(const CudaKernelContext& context, const KernelArgs& args) {
  RETURN_IF_ERROR(Float32Only(args));
  ASSIGN_OR_RETURN(const Products products, Products::Of(context, args));
  const LstmShape s = LstmShapeOf(args.inputs[0], args.inputs[1]);
  const float* x = args.inputs[0].as<const float>();
  const float* h0 = args.inputs[1].as<const float>();
  const float* c0 = args.inputs[2].as<const float>();
  const float* w_ih = args.inputs[3].as<const float>();
  const float* w_hh = args.inputs[4].as<const float>();
  float* y = args.outputs[0].as<float>();
  float* saved = args.outputs[3].as<float>();
  const int64_t H = s.h, G = 4 * s.h, S = 5 * s.h;

  // Gates of every step, before the recurrent term: x @ w_ih^T.
  MatmulSpec projection = Product(s.t * s.b, s.i, G, x, false, w_ih, true, saved);
  projection.ld_out = S;
  RETURN_IF_ERROR(products.Run(projection));

  LstmForwardStep step;
  step.batch = s.b;
  step.hidden = H;
  step.b_ih = args.inputs[5].as<const float>();
  step.b_hh = args.inputs[6].as<const float>();
  for (int64_t t = 0; t < s.t; ++t) {
    float* saved_t = saved + t * s.b * S;
    const float* h_prev = t == 0 ? h0 : y + (t - 1) * s.b * H;
    MatmulSpec recurrent = Accumulating(Product(s.b, H, G, h_prev, false, w_hh, true, saved_t));
    recurrent.ld_out = S;
    RETURN_IF_ERROR(products.Run(recurrent));
    step.saved_t = saved_t;
    step.c_prev = t == 0 ? c0 : saved_t - s.b * S + G;
    step.c_prev_stride = t == 0 ? H : S;
    step.y_t = y + t * s.b * H;
    const bool last = t == s.t - 1;
    step.h_n = last ? args.outputs[1].as<float>() : nullptr;
    step.c_n = last ? args.outputs[2].as<float>() : nullptr;
    RETURN_IF_ERROR(Launched(args, LaunchLstmForwardStep(step, context.native), DType::kFloat32));
  }
  return absl::OkStatus();
}

// Inputs: grad_y, grad_h_n, grad_c_n, x, h0, c0, w_ih, w_hh, y, saved.
// Outputs: grad_x, grad_h0, grad_c0, grad_w_ih, grad_w_hh, grad_b,
// grad_gates.
absl::Status LstmBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  RETURN_IF_ERROR(Float32Only(args));
  ASSIGN_OR_RETURN(const Products products, Products::Of(context, args));
  const LstmShape s = LstmShapeOf(args.inputs[3], args.inputs[4]);
  const float* grad_y = args.inputs[0].as<const float>();
  const float* x = args.inputs[3].as<const float>();
  const float* h0 = args.inputs[4].as<const float>();
  const float* c0 = args.inputs[5].as<const float>();
  const float* w_ih = args.inputs[6].as<const float>();
  const float* w_hh = args.inputs[7].as<const float>();
  const float* y = args.inputs[8].as<const float>();
  const float* saved = args.inputs[9].as<const float>();
  float* grad_h0 = args.outputs[1].as<float>();  // dh carried from step t to t-1
  float* grad_c0 = args.outputs[2].as<float>();  // dc carried from step t to t-1
  float* grad_gates = args.outputs[6].as<float>();
  const int64_t H = s.h, G = 4 * s.h, S = 5 * s.h;

  LstmBackwardStep step;
  step.batch = s.b;
  step.hidden = H;
  step.dc_prev = grad_c0;
  for (int64_t t = s.t - 1; t >= 0; --t) {
    const bool last = t == s.t - 1;
    step.grad_y_t = grad_y + t * s.b * H;
    step.dh_next = last ? args.inputs[1].as<const float>() : grad_h0;
    step.dc_next = last ? args.inputs[2].as<const float>() : grad_c0;
    step.saved_t = saved + t * s.b * S;
    step.c_prev = t == 0 ? c0 : step.saved_t - s.b * S + G;
    step.c_prev_stride = t == 0 ? H : S;
    step.grad_gates_t = grad_gates + t * s.b * G;
    RETURN_IF_ERROR(Launched(args, LaunchLstmBackwardStep(step, context.native), DType::kFloat32));
    // dh of h_{t-1} = grad_gates[t] @ w_hh; after step 0, grad_h0.
    RETURN_IF_ERROR(products.Run(Product(s.b, G, H, step.grad_gates_t, false, w_hh, false, grad_h0)));
  }

  const int64_t rows = s.t * s.b;
  RETURN_IF_ERROR(
      products.Run(Product(rows, G, s.i, grad_gates, false, w_ih, false, args.outputs[0].as<float>())));
  RETURN_IF_ERROR(
      products.Run(Product(G, rows, s.i, grad_gates, true, x, false, args.outputs[3].as<float>())));
  float* grad_w_hh = args.outputs[4].as<float>();
  RETURN_IF_ERROR(products.Run(Product(G, s.b, H, grad_gates, true, h0, false, grad_w_hh)));
  if (s.t > 1) {
    RETURN_IF_ERROR(
        products.Run(Accumulating(Product(G, rows - s.b, H, grad_gates + s.b * G, true, y, false, grad_w_hh))));
  }
  return Launched(args, LaunchColumnSums(rows, G, grad_gates, args.outputs[5].as<float>(), context.native),
                  DType::kFloat32);
}

}  // namespace

void AddRecurrentKernels(CudaKernelTable& table) {
  table["lstm"] = LstmKernel;
  table["lstm_backward"] = LstmBackwardKernel;
}

}  // namespace tandem::cuda
