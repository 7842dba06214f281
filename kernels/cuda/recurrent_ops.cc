// CUDA kernels of the fused LSTM layer, lstm and lstm_backward (registry
// entries and formulas: ir/ops/recurrent_ops.cc), composed of matrix
// products (blas.h: cuBLASLt as mm and addmm; in float32, TF32 tensor cores
// when the node's `allow_tf32` attribute is true, as PyTorch's cuDNN LSTM
// under torch.backends.cudnn.allow_tf32, its default, which the PyTorch
// adaptor copies onto the node) and the step kernels of recurrent_kernels.cu
// (float32) and half_recurrent_kernels.cu (bfloat16, float16), all on the
// context's stream:
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
// its grad_gates output.
//
// Every tensor has the node's one dtype (the registry's rule). In bfloat16
// and float16 the products take 16-bit operands and accumulate in float32
// (CUBLAS_COMPUTE_32F; allow_tf32 has no effect), the step kernels compute
// in float32, and every tensor written is rounded once per write: the gate
// pre-activations in saved are rounded after the input projection and again
// after the recurrent product is added (the step kernel adds the biases in
// float32), the carried dh and dc after every step, grad_w_hh after its
// first product, and grad_b is the float32 column sum of the rounded
// grad_gates (half_row_kernels.cu's reduction). The CPU kernel rounds at the
// same points.
#include "base/status_macros.h"
#include "ir/ops/lstm_shape.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/recurrent_launch.h"

namespace tandem::cuda {
namespace {

// The node's dtype (all its tensors'): float32, bfloat16 or float16.
absl::StatusOr<DType> LstmDType(const KernelArgs& args) {
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

cudaError_t LaunchForwardStep(DType dtype, const LstmForwardStepOf<void>& step, cudaStream_t stream) {
  if (dtype == DType::kFloat32) return LaunchLstmForwardStep(CastLstmStep<float>(step), stream);
  return LaunchHalfLstmForwardStep(dtype, step, stream);
}

cudaError_t LaunchBackwardStep(DType dtype, const LstmBackwardStepOf<void>& step, cudaStream_t stream) {
  if (dtype == DType::kFloat32) return LaunchLstmBackwardStep(CastLstmStep<float>(step), stream);
  return LaunchHalfLstmBackwardStep(dtype, step, stream);
}

// grad_b [cols] = column sums of grad_gates [rows, cols].
cudaError_t LaunchBiasGradient(DType dtype, int64_t rows, int64_t cols, const void* grad_gates, void* grad_b,
                               cudaStream_t stream) {
  if (dtype == DType::kFloat32) {
    return LaunchColumnSums(rows, cols, static_cast<const float*>(grad_gates), static_cast<float*>(grad_b), stream);
  }
  return LaunchHalfReduceMiddle(dtype, dtype, 1, rows, cols, /*mean=*/false, grad_gates, grad_b, stream);
}

// Inputs: x, h0, c0, w_ih, w_hh, b_ih, b_hh. Outputs: y, h_n, c_n, saved.
absl::Status LstmKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(const DType dtype, LstmDType(args));
  ASSIGN_OR_RETURN(const Products products, Products::Of(context, args));
  const LstmShape s = LstmShapeOf(args.inputs[0], args.inputs[1]);
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
    RETURN_IF_ERROR(Launched(args, LaunchForwardStep(dtype, step, context.native), dtype));
  }
  return absl::OkStatus();
}

// Inputs: grad_y, grad_h_n, grad_c_n, x, h0, c0, w_ih, w_hh, y, saved.
// Outputs: grad_x, grad_h0, grad_c0, grad_w_ih, grad_w_hh, grad_b,
// grad_gates.
absl::Status LstmBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(const DType dtype, LstmDType(args));
  ASSIGN_OR_RETURN(const Products products, Products::Of(context, args));
  const LstmShape s = LstmShapeOf(args.inputs[3], args.inputs[4]);
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
    RETURN_IF_ERROR(Launched(args, LaunchBackwardStep(dtype, step, context.native), dtype));
    // dh of h_{t-1} = grad_gates[t] @ w_hh; after step 0, grad_h0.
    RETURN_IF_ERROR(products.Run(Product(dtype, s.b, G, H, step.grad_gates_t, false, w_hh, false, grad_h0)));
  }

  const int64_t rows = s.t * s.b;
  RETURN_IF_ERROR(products.Run(Product(dtype, rows, G, s.i, grad_gates, false, w_ih, false, args.outputs[0].data)));
  RETURN_IF_ERROR(products.Run(Product(dtype, G, rows, s.i, grad_gates, true, x, false, args.outputs[3].data)));
  void* grad_w_hh = args.outputs[4].data;
  RETURN_IF_ERROR(products.Run(Product(dtype, G, s.b, H, grad_gates, true, h0, false, grad_w_hh)));
  if (s.t > 1) {
    RETURN_IF_ERROR(products.Run(
        Accumulating(Product(dtype, G, rows - s.b, H, At(grad_gates, dtype, s.b * G), true, y, false, grad_w_hh))));
  }
  return Launched(args, LaunchBiasGradient(dtype, rows, G, grad_gates, args.outputs[5].data, context.native), dtype);
}

}  // namespace

void AddRecurrentKernels(CudaKernelTable& table) {
  table["lstm"] = LstmKernel;
  table["lstm_backward"] = LstmBackwardKernel;
}

}  // namespace tandem::cuda
