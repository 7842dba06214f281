// The step kernels of the fused LSTM and GRU layers (recurrent_launch.h), as
// templates over the element type of the tensors: float
// (recurrent_kernels.cu) and bfloat16 / float16 (half_recurrent_kernels.cu).
// A thread per element of the [batch, hidden] state reads its gates H apart
// in the step's row of saved, so that a warp's loads of each gate are
// consecutive. Every element is widened to float32 when loaded, the math
// runs in float32 with the accurate expf/tanhf (no fast-math intrinsics),
// and each result is rounded once when stored (a no-op for float).
// Header-only; included by .cu files only.
#ifndef TANDEM_KERNELS_CUDA_RECURRENT_STEP_KERNELS_CUH_
#define TANDEM_KERNELS_CUDA_RECURRENT_STEP_KERNELS_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/recurrent_launch.h"

namespace tandem::cuda::recurrent_steps {

__device__ __forceinline__ float Load(float v) { return v; }
__device__ __forceinline__ float Load(__nv_bfloat16 v) { return Widen(v); }
__device__ __forceinline__ float Load(__half v) { return Widen(v); }

// float32 -> T: exact for float, to nearest (ties to even) for 16 bits.
template <typename T>
__device__ __forceinline__ T Store(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return Narrow<T>(v);
  }
}

__device__ __forceinline__ float Sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

template <typename T>
__global__ void StepKernel(LstmForwardStepOf<T> s) {
  const int64_t H = s.hidden;
  const int64_t n_elements = s.batch * H;
  for (int64_t e = GlobalThread(); e < n_elements; e += GlobalStride()) {
    const int64_t n = e / H, k = e - n * H;
    T* row = s.saved_t + n * 5 * H;
    const float i = Sigmoid(Load(row[k]) + Load(s.b_ih[k]) + Load(s.b_hh[k]));
    const float f = Sigmoid(Load(row[H + k]) + Load(s.b_ih[H + k]) + Load(s.b_hh[H + k]));
    const float g = tanhf(Load(row[2 * H + k]) + Load(s.b_ih[2 * H + k]) + Load(s.b_hh[2 * H + k]));
    const float o = Sigmoid(Load(row[3 * H + k]) + Load(s.b_ih[3 * H + k]) + Load(s.b_hh[3 * H + k]));
    const float c = f * Load(s.c_prev[n * s.c_prev_stride + k]) + i * g;
    const float h = o * tanhf(c);
    const T c_stored = Store<T>(c);
    const T h_stored = Store<T>(h);
    row[k] = Store<T>(i);
    row[H + k] = Store<T>(f);
    row[2 * H + k] = Store<T>(g);
    row[3 * H + k] = Store<T>(o);
    row[4 * H + k] = c_stored;
    s.y_t[e] = h_stored;
    if (s.h_n != nullptr) {
      s.h_n[e] = h_stored;
      s.c_n[e] = c_stored;
    }
  }
}

template <typename T>
__global__ void StepKernel(LstmBackwardStepOf<T> s) {
  const int64_t H = s.hidden;
  const int64_t n_elements = s.batch * H;
  for (int64_t e = GlobalThread(); e < n_elements; e += GlobalStride()) {
    const int64_t n = e / H, k = e - n * H;
    const T* row = s.saved_t + n * 5 * H;
    const float i = Load(row[k]), f = Load(row[H + k]), g = Load(row[2 * H + k]), o = Load(row[3 * H + k]);
    const float tanh_c = tanhf(Load(row[4 * H + k]));
    const float dh = Load(s.grad_y_t[e]) + Load(s.dh_next[e]);
    const float dc = Load(s.dc_next[e]) + dh * o * (1.0f - tanh_c * tanh_c);
    T* grad = s.grad_gates_t + n * 4 * H;
    grad[k] = Store<T>(dc * g * i * (1.0f - i));
    grad[H + k] = Store<T>(dc * Load(s.c_prev[n * s.c_prev_stride + k]) * f * (1.0f - f));
    grad[2 * H + k] = Store<T>(dc * i * (1.0f - g * g));
    grad[3 * H + k] = Store<T>(dh * tanh_c * o * (1.0f - o));
    s.dc_prev[e] = Store<T>(dc * f);
  }
}

// The GRU's forward step: row n of saved_t holds, without biases, the
// reset and update gates' sums of both products, the new gate's recurrent
// product, then its input product (recurrent_launch.h).
template <typename T>
__global__ void StepKernel(GruForwardStepOf<T> s) {
  const int64_t H = s.hidden;
  const int64_t n_elements = s.batch * H;
  for (int64_t e = GlobalThread(); e < n_elements; e += GlobalStride()) {
    const int64_t n = e / H, k = e - n * H;
    T* row = s.saved_t + n * 4 * H;
    const float r = Sigmoid(Load(row[k]) + Load(s.b_ih[k]) + Load(s.b_hh[k]));
    const float z = Sigmoid(Load(row[H + k]) + Load(s.b_ih[H + k]) + Load(s.b_hh[H + k]));
    const float hn = Load(row[2 * H + k]) + Load(s.b_hh[2 * H + k]);
    const float candidate = tanhf(Load(row[3 * H + k]) + Load(s.b_ih[2 * H + k]) + r * hn);
    const T h_stored = Store<T>((1.0f - z) * candidate + z * Load(s.h_prev[e]));
    row[k] = Store<T>(r);
    row[H + k] = Store<T>(z);
    row[2 * H + k] = Store<T>(candidate);
    row[3 * H + k] = Store<T>(hn);
    s.y_t[e] = h_stored;
    if (s.h_n != nullptr) s.h_n[e] = h_stored;
  }
}

template <typename T>
__global__ void StepKernel(GruBackwardStepOf<T> s) {
  const int64_t H = s.hidden;
  const int64_t n_elements = s.batch * H;
  for (int64_t e = GlobalThread(); e < n_elements; e += GlobalStride()) {
    const int64_t n = e / H, k = e - n * H;
    const T* row = s.saved_t + n * 4 * H;
    const float r = Load(row[k]), z = Load(row[H + k]), candidate = Load(row[2 * H + k]), hn = Load(row[3 * H + k]);
    const float dh = Load(s.grad_y_t[e]) + Load(s.dh_next[e]);
    const float da_n = dh * (1.0f - z) * (1.0f - candidate * candidate);
    const T da_r = Store<T>(da_n * hn * r * (1.0f - r));
    const T da_z = Store<T>(dh * (Load(s.h_prev[e]) - candidate) * z * (1.0f - z));
    T* grad_x = s.grad_gates_x_t + n * 3 * H;
    T* grad_h = s.grad_gates_h_t + n * 3 * H;
    grad_x[k] = da_r;
    grad_x[H + k] = da_z;
    grad_x[2 * H + k] = Store<T>(da_n);
    grad_h[k] = da_r;
    grad_h[H + k] = da_z;
    grad_h[2 * H + k] = Store<T>(da_n * r);
    s.dh_prev[e] = Store<T>(dh * z);
  }
}

// Enqueues the step kernel of `step` (any of the four step structs) over
// its [batch, hidden] elements.
template <typename Step>
cudaError_t LaunchStep(const Step& step, cudaStream_t stream) {
  const int64_t n = step.batch * step.hidden;
  if (n == 0) return cudaSuccess;
  StepKernel<<<static_cast<unsigned>(Blocks(n)), kThreads, 0, stream>>>(step);
  return LaunchError();
}

}  // namespace tandem::cuda::recurrent_steps

#endif  // TANDEM_KERNELS_CUDA_RECURRENT_STEP_KERNELS_CUH_
