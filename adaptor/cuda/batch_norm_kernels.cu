// Batch normalization on CUDA: one block per channel (grid-stride over
// channels), which reduces the channel's statistics or gradient sums in
// double (per-thread partial sums, then a block reduction) and then writes
// the channel's output in a second pass, so forward and backward are one
// launch each and need no scratch memory. The formulas are the CPU
// kernels' (adaptor/cpu/batch_norm_kernels.cc); the variance is two-pass
// (sum of squared deviations from the mean), not E[x^2] - E[x]^2.
#include <cmath>

#include "adaptor/cuda/cnn_launch.h"
#include "adaptor/cuda/kernel_common.cuh"

namespace tandem::cuda {
namespace {

constexpr int kBatchNormThreads = 512;
constexpr int64_t kMaxChannelBlocks = int64_t{1} << 20;

// Calls f(offset) for every element of channel c, the block's threads
// striding over them: row by row when rows are at least a block wide,
// otherwise over the flattened (n, i) space.
template <typename F>
__device__ __forceinline__ void ForEachInChannel(const BatchNormLaunchParams& p, int64_t c, F&& f) {
  if (p.inner >= blockDim.x) {
    for (int64_t n = 0; n < p.outer; ++n) {
      const int64_t base = (n * p.channels + c) * p.inner;
      for (int64_t i = threadIdx.x; i < p.inner; i += blockDim.x) f(base + i);
    }
  } else {
    const int64_t count = p.outer * p.inner;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t n = j / p.inner;
      f((n * p.channels + c) * p.inner + (j - n * p.inner));
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kBatchNormThreads)
    BatchNormForwardKernel(BatchNormLaunchParams p, BatchNormForwardOperands op) {
  __shared__ double shared[32];
  const T* x = static_cast<const T*>(op.x);
  const T* weight = static_cast<const T*>(op.weight);
  const T* bias = static_cast<const T*>(op.bias);
  const T* running_mean = static_cast<const T*>(op.running_mean);
  const T* running_var = static_cast<const T*>(op.running_var);
  T* out = static_cast<T*>(op.out);
  T* new_running_mean = static_cast<T*>(op.new_running_mean);
  T* new_running_var = static_cast<T*>(op.new_running_var);
  const double count = static_cast<double>(p.outer * p.inner);
  for (int64_t c = blockIdx.x; c < p.channels; c += gridDim.x) {
    double mean, invstd;
    if (p.training) {
      double sum = 0.0;
      ForEachInChannel(p, c, [&](int64_t i) { sum += static_cast<double>(x[i]); });
      sum = BlockSum(sum, shared);
      mean = sum / count;
      double var_sum = 0.0;
      ForEachInChannel(p, c, [&](int64_t i) {
        const double d = static_cast<double>(x[i]) - mean;
        var_sum += d * d;
      });
      var_sum = BlockSum(var_sum, shared);
      invstd = 1.0 / sqrt(var_sum / count + p.eps);
      if (threadIdx.x == 0) {
        static_cast<T*>(op.save_mean)[c] = static_cast<T>(mean);
        static_cast<T*>(op.save_invstd)[c] = static_cast<T>(invstd);
        if (new_running_mean != nullptr) {
          new_running_mean[c] =
              static_cast<T>((1.0 - p.momentum) * static_cast<double>(running_mean[c]) + p.momentum * mean);
          new_running_var[c] = static_cast<T>((1.0 - p.momentum) * static_cast<double>(running_var[c]) +
                                              p.momentum * var_sum / (count - 1.0));
        }
      }
    } else {
      mean = static_cast<double>(running_mean[c]);
      invstd = 1.0 / sqrt(static_cast<double>(running_var[c]) + p.eps);
      if (threadIdx.x == 0 && new_running_mean != nullptr) {
        new_running_mean[c] = running_mean[c];
        new_running_var[c] = running_var[c];
      }
    }
    const double scale = invstd * static_cast<double>(weight[c]);
    const double shift = static_cast<double>(bias[c]) - mean * scale;
    ForEachInChannel(p, c, [&](int64_t i) { out[i] = static_cast<T>(static_cast<double>(x[i]) * scale + shift); });
  }
}

template <typename T>
__global__ void __launch_bounds__(kBatchNormThreads)
    BatchNormBackwardKernel(BatchNormLaunchParams p, BatchNormBackwardOperands op) {
  __shared__ double shared[32];
  const T* dy = static_cast<const T*>(op.grad_output);
  const T* x = static_cast<const T*>(op.x);
  const T* weight = static_cast<const T*>(op.weight);
  const T* mean_in = static_cast<const T*>(op.mean);
  const T* invstd_in = static_cast<const T*>(op.invstd);
  T* grad_input = static_cast<T*>(op.grad_input);
  T* grad_weight = static_cast<T*>(op.grad_weight);
  T* grad_bias = static_cast<T*>(op.grad_bias);
  const double count = static_cast<double>(p.outer * p.inner);
  for (int64_t c = blockIdx.x; c < p.channels; c += gridDim.x) {
    const double mean = static_cast<double>(mean_in[c]);
    const double invstd = p.training ? static_cast<double>(invstd_in[c])
                                     : 1.0 / sqrt(static_cast<double>(invstd_in[c]) + p.eps);
    double sum_dy = 0.0, sum_dy_xmu = 0.0;
    ForEachInChannel(p, c, [&](int64_t i) {
      const double g = static_cast<double>(dy[i]);
      sum_dy += g;
      sum_dy_xmu += g * (static_cast<double>(x[i]) - mean);
    });
    sum_dy = BlockSum(sum_dy, shared);
    sum_dy_xmu = BlockSum(sum_dy_xmu, shared);
    if (threadIdx.x == 0) {
      if (grad_weight != nullptr) grad_weight[c] = static_cast<T>(sum_dy_xmu * invstd);
      if (grad_bias != nullptr) grad_bias[c] = static_cast<T>(sum_dy);
    }
    if (grad_input == nullptr) continue;
    const double w = static_cast<double>(weight[c]);
    if (p.training) {
      const double mean_dy = sum_dy / count;
      const double k = sum_dy_xmu / count * invstd * invstd;
      ForEachInChannel(p, c, [&](int64_t i) {
        const double xmu = static_cast<double>(x[i]) - mean;
        grad_input[i] = static_cast<T>((static_cast<double>(dy[i]) - mean_dy - xmu * k) * invstd * w);
      });
    } else {
      ForEachInChannel(p, c, [&](int64_t i) { grad_input[i] = static_cast<T>(static_cast<double>(dy[i]) * invstd * w); });
    }
  }
}

unsigned ChannelBlocks(int64_t channels) {
  return static_cast<unsigned>(channels < kMaxChannelBlocks ? channels : kMaxChannelBlocks);
}

}  // namespace

cudaError_t LaunchBatchNormForward(DType dtype, const BatchNormLaunchParams& p, const BatchNormForwardOperands& op,
                                   cudaStream_t stream) {
  if (p.channels == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32:
      BatchNormForwardKernel<float><<<ChannelBlocks(p.channels), kBatchNormThreads, 0, stream>>>(p, op);
      break;
    case DType::kFloat64:
      BatchNormForwardKernel<double><<<ChannelBlocks(p.channels), kBatchNormThreads, 0, stream>>>(p, op);
      break;
    default: return cudaErrorInvalidValue;
  }
  return LaunchError();
}

cudaError_t LaunchBatchNormBackward(DType dtype, const BatchNormLaunchParams& p,
                                    const BatchNormBackwardOperands& op, cudaStream_t stream) {
  if (p.channels == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32:
      BatchNormBackwardKernel<float><<<ChannelBlocks(p.channels), kBatchNormThreads, 0, stream>>>(p, op);
      break;
    case DType::kFloat64:
      BatchNormBackwardKernel<double><<<ChannelBlocks(p.channels), kBatchNormThreads, 0, stream>>>(p, op);
      break;
    default: return cudaErrorInvalidValue;
  }
  return LaunchError();
}

}  // namespace tandem::cuda
