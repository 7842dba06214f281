// The pointwise kernels of the fused LSTM and GRU layers over float32
// tensors (recurrent_launch.h): the forward and backward steps (the
// templates of recurrent_step_kernels.cuh, instantiated for float) and the
// column sums of the
// bias gradient (a block per 32 columns, 16 row lanes each summing every
// 16th row, then the lanes in a fixed order). Float32 throughout, with the
// accurate expf/tanhf (no fast-math intrinsics), as the CPU kernels compute
// in double and the comparison allows float32 rounding only.
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/recurrent_launch.h"
#include "kernels/cuda/recurrent_step_kernels.cuh"

namespace tandem::cuda {
namespace {

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
  return recurrent_steps::LaunchStep(step, stream);
}

cudaError_t LaunchLstmBackwardStep(const LstmBackwardStep& step, cudaStream_t stream) {
  return recurrent_steps::LaunchStep(step, stream);
}

cudaError_t LaunchGruForwardStep(const GruForwardStep& step, cudaStream_t stream) {
  return recurrent_steps::LaunchStep(step, stream);
}

cudaError_t LaunchGruBackwardStep(const GruBackwardStep& step, cudaStream_t stream) {
  return recurrent_steps::LaunchStep(step, stream);
}

cudaError_t LaunchColumnSums(int64_t rows, int64_t cols, const float* in, float* out, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  const int64_t blocks = (cols + kSumColumns - 1) / kSumColumns;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  ColumnSumsKernel<<<static_cast<unsigned>(blocks), dim3(kSumColumns, kSumRowLanes), 0, stream>>>(rows, cols, in, out);
  return LaunchError();
}

}  // namespace tandem::cuda
