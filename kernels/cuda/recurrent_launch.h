// The launchers of the pointwise CUDA kernels of the fused LSTM layer
// (recurrent_kernels.cu); the matrix products around them go through blas.h
// (recurrent_ops.cc composes the op). Plain functions over raw float32
// device pointers in the style of launch.h: each enqueues on `stream` and
// returns the launch's error (cudaSuccess when there is nothing to do).
// Gate order i, f, g, o; a step's state row n of `saved` (row stride 5H)
// holds the gates in columns [0, 4H) and the cell state in [4H, 5H).
// The step structs are templates over the element type: float here; the
// same steps over bfloat16 and float16 tensors take them with untyped
// pointers (Element = void) and the dtype beside them (half_launch.h).
// Thread-safe (stateless).
#ifndef TANDEM_KERNELS_CUDA_RECURRENT_LAUNCH_H_
#define TANDEM_KERNELS_CUDA_RECURRENT_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

// One forward step over [batch, hidden]. On entry the gate columns of
// `saved_t` hold x_t @ w_ih^T + h_{t-1} @ w_hh^T (no biases); the kernel adds
// b_ih + b_hh, activates the gates in place, writes c_t into the cell
// columns and h_t into y_t [batch, hidden], and, when h_n / c_n are not
// null (the last step), h_t and c_t there too. c_prev row n starts at
// c_prev + n * c_prev_stride (c0: stride H; the previous step's cell
// columns: stride 5H).
template <typename Element>
struct LstmForwardStepOf {
  int64_t batch = 0, hidden = 0;
  Element* saved_t = nullptr;
  const Element* c_prev = nullptr;
  int64_t c_prev_stride = 0;
  const Element* b_ih = nullptr;
  const Element* b_hh = nullptr;
  Element* y_t = nullptr;
  Element* h_n = nullptr;
  Element* c_n = nullptr;
};
using LstmForwardStep = LstmForwardStepOf<float>;
cudaError_t LaunchLstmForwardStep(const LstmForwardStep& step, cudaStream_t stream);

// One backward step over [batch, hidden]: dh = grad_y_t + dh_next,
// dc = dc_next + dh * o * (1 - tanh(c_t)^2); writes the gate
// pre-activation gradients into grad_gates_t [batch, 4H] and dc * f (the
// cell gradient carried to step t-1) into dc_prev. dc_prev may be dc_next
// (each element is read before it is written, by the same thread).
// saved_t is the step's row block of saved (stride 5H); c_prev as in
// LstmForwardStep.
template <typename Element>
struct LstmBackwardStepOf {
  int64_t batch = 0, hidden = 0;
  const Element* grad_y_t = nullptr;
  const Element* dh_next = nullptr;
  const Element* dc_next = nullptr;
  const Element* saved_t = nullptr;
  const Element* c_prev = nullptr;
  int64_t c_prev_stride = 0;
  Element* grad_gates_t = nullptr;
  Element* dc_prev = nullptr;
};
using LstmBackwardStep = LstmBackwardStepOf<float>;
cudaError_t LaunchLstmBackwardStep(const LstmBackwardStep& step, cudaStream_t stream);

// out[j] = sum over r of in[r * cols + j] for in [rows, cols]: the bias
// gradient from the gate gradients. Summed in float32 in a fixed order
// (deterministic); no atomics, no scratch.
cudaError_t LaunchColumnSums(int64_t rows, int64_t cols, const float* in, float* out, cudaStream_t stream);

// `step` with every pointer cast to To (from the untyped form, or to it).
template <typename To, typename From>
LstmForwardStepOf<To> CastLstmStep(const LstmForwardStepOf<From>& s) {
  LstmForwardStepOf<To> t;
  t.batch = s.batch;
  t.hidden = s.hidden;
  t.saved_t = static_cast<To*>(static_cast<void*>(s.saved_t));
  t.c_prev = static_cast<const To*>(static_cast<const void*>(s.c_prev));
  t.c_prev_stride = s.c_prev_stride;
  t.b_ih = static_cast<const To*>(static_cast<const void*>(s.b_ih));
  t.b_hh = static_cast<const To*>(static_cast<const void*>(s.b_hh));
  t.y_t = static_cast<To*>(static_cast<void*>(s.y_t));
  t.h_n = static_cast<To*>(static_cast<void*>(s.h_n));
  t.c_n = static_cast<To*>(static_cast<void*>(s.c_n));
  return t;
}

template <typename To, typename From>
LstmBackwardStepOf<To> CastLstmStep(const LstmBackwardStepOf<From>& s) {
  LstmBackwardStepOf<To> t;
  t.batch = s.batch;
  t.hidden = s.hidden;
  t.grad_y_t = static_cast<const To*>(static_cast<const void*>(s.grad_y_t));
  t.dh_next = static_cast<const To*>(static_cast<const void*>(s.dh_next));
  t.dc_next = static_cast<const To*>(static_cast<const void*>(s.dc_next));
  t.saved_t = static_cast<const To*>(static_cast<const void*>(s.saved_t));
  t.c_prev = static_cast<const To*>(static_cast<const void*>(s.c_prev));
  t.c_prev_stride = s.c_prev_stride;
  t.grad_gates_t = static_cast<To*>(static_cast<void*>(s.grad_gates_t));
  t.dc_prev = static_cast<To*>(static_cast<void*>(s.dc_prev));
  return t;
}

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_RECURRENT_LAUNCH_H_
