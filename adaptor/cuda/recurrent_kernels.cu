// The pointwise kernels of the fused LSTM layer (recurrent_launch.h): the
// forward and backward step (a thread per element of the [batch, hidden]
// state, reading its four gates H apart in the step's row of saved, so that
// a warp's loads of each gate are consecutive) and the column sums of the
// bias gradient (a block per 32 columns, 16 row lanes each summing every
// 16th row, then the lanes in a fixed order). Float32 throughout, with the
// accurate expf/tanhf (no fast-math intrinsics), as the CPU kernels compute
// in double and the comparison allows float32 rounding only.
#include "adaptor/cuda/kernel_common.cuh"
#include "adaptor/cuda/recurrent_launch.h"

namespace tandem::cuda {
namespace {

__device__ __forceinline__ float Sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

__global__ void LstmForwardStepKernel(LstmForwardStep s) {
  const int64_t H = s.hidden;
  const int64_t n_elements = s.batch * H;
  for (int64_t e = GlobalThread(); e < n_elements; e += GlobalStride()) {
    const int64_t n = e / H, k = e - n * H;
    float* row = s.saved_t + n * 5 * H;
    const float i = Sigmoid(row[k] + s.b_ih[k] + s.b_hh[k]);
    const float f = Sigmoid(row[H + k] + s.b_ih[H + k] + s.b_hh[H + k]);
    const float g = tanhf(row[2 * H + k] + s.b_ih[2 * H + k] + s.b_hh[2 * H + k]);
    const float o = Sigmoid(row[3 * H + k] + s.b_ih[3 * H + k] + s.b_hh[3 * H + k]);
    const float c = f * s.c_prev[n * s.c_prev_stride + k] + i * g;
    const float h = o * tanhf(c);
    row[k] = i;
    row[H + k] = f;
    row[2 * H + k] = g;
    row[3 * H + k] = o;
    row[4 * H + k] = c;
    s.y_t[e] = h;
    if (s.h_n != nullptr) {
      s.h_n[e] = h;
      s.c_n[e] = c;
    }
  }
}

__global__ void LstmBackwardStepKernel(LstmBackwardStep s) {
  const int64_t H = s.hidden;
  const int64_t n_elements = s.batch * H;
  for (int64_t e = GlobalThread(); e < n_elements; e += GlobalStride()) {
    const int64_t n = e / H, k = e - n * H;
    const float* row = s.saved_t + n * 5 * H;
    const float i = row[k], f = row[H + k], g = row[2 * H + k], o = row[3 * H + k];
    const float tanh_c = tanhf(row[4 * H + k]);
    const float dh = s.grad_y_t[e] + s.dh_next[e];
    const float dc = s.dc_next[e] + dh * o * (1.0f - tanh_c * tanh_c);
    float* grad = s.grad_gates_t + n * 4 * H;
    grad[k] = dc * g * i * (1.0f - i);
    grad[H + k] = dc * s.c_prev[n * s.c_prev_stride + k] * f * (1.0f - f);
    grad[2 * H + k] = dc * i * (1.0f - g * g);
    grad[3 * H + k] = dh * tanh_c * o * (1.0f - o);
    s.dc_prev[e] = dc * f;
  }
}

constexpr int kSumColumns = 32;
constexpr int kSumRowLanes = 16;

__global__ void ColumnSumsKernel(int64_t rows, int64_t cols, const float* in, float* out) {
  __shared__ float partial[kSumRowLanes][kSumColumns + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kSumColumns + threadIdx.x;
  float sum = 0.0f;
  if (col < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kSumRowLanes) sum += in[r * cols + col];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int lane = 0; lane < kSumRowLanes; ++lane) total += partial[lane][threadIdx.x];
    out[col] = total;
  }
}

}  // namespace

cudaError_t LaunchLstmForwardStep(const LstmForwardStep& step, cudaStream_t stream) {
  const int64_t n = step.batch * step.hidden;
  if (n == 0) return cudaSuccess;
  LstmForwardStepKernel<<<static_cast<unsigned>(Blocks(n)), kThreads, 0, stream>>>(step);
  return LaunchError();
}

cudaError_t LaunchLstmBackwardStep(const LstmBackwardStep& step, cudaStream_t stream) {
  const int64_t n = step.batch * step.hidden;
  if (n == 0) return cudaSuccess;
  LstmBackwardStepKernel<<<static_cast<unsigned>(Blocks(n)), kThreads, 0, stream>>>(step);
  return LaunchError();
}

cudaError_t LaunchColumnSums(int64_t rows, int64_t cols, const float* in, float* out, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  const int64_t blocks = (cols + kSumColumns - 1) / kSumColumns;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  ColumnSumsKernel<<<static_cast<unsigned>(blocks), dim3(kSumColumns, kSumRowLanes), 0, stream>>>(rows, cols, in, out);
  return LaunchError();
}

}  // namespace tandem::cuda
