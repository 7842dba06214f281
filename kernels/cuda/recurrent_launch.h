// The launchers of the pointwise CUDA kernels of the fused LSTM and GRU
// layers (recurrent_kernels.cu); the matrix products around them go through
// blas.h (recurrent_ops.cc composes the ops). Plain functions over raw
// float32 device pointers in the style of launch.h: each enqueues on
// `stream` and returns the launch's error (cudaSuccess when there is nothing
// to do). LSTM: gate order i, f, g, o; a step's state row n of `saved` (row
// stride 5H) holds the gates in columns [0, 4H) and the cell state in
// [4H, 5H).
// The step structs are templates over the element type: float here; the
// same steps over bfloat16 and float16 tensors take them with untyped
// pointers (Element = void) and the dtype beside them (half_launch.h).
// Thread-safe (stateless).
#ifndef TANDEM_KERNELS_CUDA_RECURRENT_LAUNCH_H_
#define TANDEM_KERNELS_CUDA_RECURRENT_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <bit>
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

// The GRU (gate order r, z, n; a step's row n of `saved`, row stride 4H,
// holds r, z, n and hn when the step is done).
//
// One forward step over [batch, hidden]. On entry row n of `saved_t` holds
// the pre-activations without biases: columns [0, 2H) x_t @ w_ih^T +
// h_{t-1} @ w_hh^T of r and z, [2H, 3H) h_{t-1} @ w_hh^T of n, [3H, 4H)
// x_t @ w_ih^T of n. The kernel adds the biases, writes r, z, n and
// hn = h_{t-1} @ w_hh^T + b_hn over them, h_t = (1 - z) n + z h_{t-1} into
// y_t [batch, hidden], and into h_n when not null (the last step). h_prev is
// [batch, hidden] (h0 or the previous step's y).
template <typename Element>
struct GruForwardStepOf {
  int64_t batch = 0, hidden = 0;
  Element* saved_t = nullptr;
  const Element* h_prev = nullptr;
  const Element* b_ih = nullptr;
  const Element* b_hh = nullptr;
  Element* y_t = nullptr;
  Element* h_n = nullptr;
};
using GruForwardStep = GruForwardStepOf<float>;
cudaError_t LaunchGruForwardStep(const GruForwardStep& step, cudaStream_t stream);

// One backward step over [batch, hidden]: dh = grad_y_t + dh_next; writes
// the gradients of the input side's and the recurrent side's
// pre-activations into grad_gates_x_t and grad_gates_h_t [batch, 3H] (equal
// but in the new gate, where the recurrent side's is scaled by r), and
// dh * z (the part of h_{t-1}'s gradient that skips the gates; the caller
// adds grad_gates_h_t @ w_hh to it) into dh_prev. dh_prev may be dh_next
// (each element is read before it is written, by the same thread).
template <typename Element>
struct GruBackwardStepOf {
  int64_t batch = 0, hidden = 0;
  const Element* grad_y_t = nullptr;
  const Element* dh_next = nullptr;
  const Element* saved_t = nullptr;
  const Element* h_prev = nullptr;
  Element* grad_gates_x_t = nullptr;
  Element* grad_gates_h_t = nullptr;
  Element* dh_prev = nullptr;
};
using GruBackwardStep = GruBackwardStepOf<float>;
cudaError_t LaunchGruBackwardStep(const GruBackwardStep& step, cudaStream_t stream);

// `step` with every pointer's element type changed to To (from the untyped
// form, or to it). The step structs hold sizes and pointers only, so every
// element type has the same layout.
template <typename To, template <typename> class Step, typename From>
Step<To> CastStep(const Step<From>& step) {
  static_assert(sizeof(Step<To>) == sizeof(Step<From>));
  return std::bit_cast<Step<To>>(step);
}

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_RECURRENT_LAUNCH_H_
