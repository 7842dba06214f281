// What the two batch-norm kernel files share: batch_norm_kernels.cu (the
// launchers, and the chunked kernels for [outer, channels, inner] with
// inner > 1) and batch_norm_column_kernels.cu (the column kernels for
// inner == 1, the channel the fastest-moving index). Both cut each channel
// into chunks and leave per-chunk partial results in the scratch buffer as
// partials[2 * (c * chunks + j)], partials[2 * (c * chunks + j) + 1] for
// chunk j of channel c; the finalize kernels here merge them whatever the
// chunks' shape (ChunkSplit). Also the storage pack, the masked gradient,
// the vector-width choice, and the column path's entry points. Device code,
// header-only; included by those two .cu files only.
#ifndef TANDEM_KERNELS_CUDA_BATCH_NORM_COMMON_CUH_
#define TANDEM_KERNELS_CUDA_BATCH_NORM_COMMON_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/cnn_launch.h"
#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/kernel_common.cuh"

namespace tandem::cuda::batch_norm {

inline constexpr int kBatchNormThreads = 256;
inline constexpr int kWarpsPerBlock = kBatchNormThreads / 32;
inline constexpr int64_t kMaxGrid = int64_t{1} << 30;

// `kWidth` consecutive elements, loaded and stored as one access (16 bytes
// when kWidth is Vec16<T>::kCount).
template <typename T, int kWidth>
struct alignas(sizeof(T) * kWidth) Pack {
  T v[kWidth];
};

// How each channel's `outer * inner` elements are cut for the partial
// results: `chunks` chunks of `chunk_elements` elements, the last one
// possibly short. The same for every channel.
struct ChunkSplit {
  int64_t chunks = 0;
  int64_t chunk_elements = 0;
};

// Elements in chunk `j` of a channel of `count` elements.
__host__ __device__ __forceinline__ int64_t ChunkCount(int64_t count, int64_t chunk_elements, int64_t j) {
  const int64_t rest = count - j * chunk_elements;
  return rest < chunk_elements ? rest : chunk_elements;
}

// A gradient element as the kernels read it: dy, or with a mask (a folded
// threshold_backward) dy where mask > threshold and 0 elsewhere, compared
// as threshold_backward compares (float32, or float64 for double tensors).
template <typename T>
__device__ __forceinline__ double MaskedGrad(T dy, const T* mask_pack_element, double threshold) {
  if (mask_pack_element == nullptr) return WidenTo<double>(dy);
  bool above;
  if constexpr (std::is_same_v<T, double>) {
    above = *mask_pack_element > threshold;
  } else {
    above = static_cast<float>(WidenTo<double>(*mask_pack_element)) > static_cast<float>(threshold);
  }
  return above ? WidenTo<double>(dy) : 0.0;
}

// The vector width (elements per 16 bytes) when `contiguous` (the run of
// elements the kernels walk: inner, or the channels of a column layout) is a
// multiple of it and every pointer is 16-byte aligned (null ones are
// ignored), else 1.
template <typename T>
int WidthFor(int64_t contiguous, std::initializer_list<const void*> pointers) {
  constexpr int kVector = Vec16<T>::kCount;
  if (contiguous % kVector != 0) return 1;
  for (const void* ptr : pointers) {
    if (ptr != nullptr && !Aligned16(ptr)) return 1;
  }
  return kVector;
}

// out + residual as add.Tensor computes it (in float32 for float32 and
// 16-bit tensors, in double for float64), rounded to T: a residual folded
// into the batch norm (fold_activations.h) stores what the add would have.
template <typename T>
__device__ __forceinline__ T AddResidual(T out, T residual) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  return RoundTo<T>(WidenTo<A>(out) + WidenTo<A>(residual));
}

inline unsigned FinalizeGrid(int64_t channels) {
  const int64_t blocks = (channels + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned>(blocks < kMaxGrid ? blocks : kMaxGrid);
}

// A warp per channel: the channel's statistics (training: merged from the
// chunks' partials, chunk by chunk in a fixed order; eval: the running
// ones), the saved and running statistics, and coeffs[2c], coeffs[2c + 1] =
// scale, shift.
template <typename P, typename S>
__global__ void __launch_bounds__(kBatchNormThreads)
    BatchNormForwardFinalizeKernel(BatchNormLaunchParams p, ChunkSplit split, BatchNormForwardOperands op,
                                   const double* partials, double* coeffs) {
  const P* weight = static_cast<const P*>(op.weight);
  const P* bias = static_cast<const P*>(op.bias);
  const P* running_mean = static_cast<const P*>(op.running_mean);
  const P* running_var = static_cast<const P*>(op.running_var);
  P* new_running_mean = static_cast<P*>(op.new_running_mean);
  P* new_running_var = static_cast<P*>(op.new_running_var);
  const int lane = threadIdx.x % 32;
  const int64_t count_elements = p.outer * p.inner;
  const double count = static_cast<double>(count_elements);
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; c < p.channels;
       c += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    double mean, invstd;
    if (p.training) {
      const double* part = partials + 2 * c * split.chunks;
      double sum = 0.0;
      for (int64_t j = lane; j < split.chunks; j += 32) {
        sum += static_cast<double>(ChunkCount(count_elements, split.chunk_elements, j)) * part[2 * j];
      }
      mean = WarpSum(sum) / count;
      double m2 = 0.0;
      for (int64_t j = lane; j < split.chunks; j += 32) {
        const double d = part[2 * j] - mean;
        m2 += part[2 * j + 1] + static_cast<double>(ChunkCount(count_elements, split.chunk_elements, j)) * d * d;
      }
      m2 = WarpSum(m2);
      invstd = 1.0 / sqrt(m2 / count + p.eps);
      if (lane == 0) {
        static_cast<S*>(op.save_mean)[c] = RoundTo<S>(mean);
        static_cast<S*>(op.save_invstd)[c] = RoundTo<S>(invstd);
        if (new_running_mean != nullptr) {
          new_running_mean[c] = RoundTo<P>((1.0 - p.momentum) * WidenTo<double>(running_mean[c]) + p.momentum * mean);
          new_running_var[c] =
              RoundTo<P>((1.0 - p.momentum) * WidenTo<double>(running_var[c]) + p.momentum * m2 / (count - 1.0));
        }
      }
    } else {
      mean = WidenTo<double>(running_mean[c]);
      invstd = 1.0 / sqrt(WidenTo<double>(running_var[c]) + p.eps);
      if (lane == 0 && new_running_mean != nullptr) {
        new_running_mean[c] = running_mean[c];
        new_running_var[c] = running_var[c];
      }
    }
    if (lane == 0) {
      const double scale = invstd * WidenTo<double>(weight[c]);
      coeffs[2 * c] = scale;
      coeffs[2 * c + 1] = WidenTo<double>(bias[c]) - mean * scale;
    }
  }
}

// A warp per channel: sum_dy and sum_dy_xmu over the chunks (zero when
// `partials` is null: no gradient output needs them), grad_weight and
// grad_bias, and, when grad_input is wanted, its coefficients
// coeffs[4c .. 4c + 3] = mean, sum_dy / n, sum_dy_xmu / n * invstd^2,
// invstd * weight. The mean and invstd inputs are of type M.
template <typename P, typename M>
__global__ void __launch_bounds__(kBatchNormThreads)
    BatchNormBackwardFinalizeKernel(BatchNormLaunchParams p, ChunkSplit split, BatchNormBackwardOperands op,
                                    const double* partials, double* coeffs) {
  const M* mean_in = static_cast<const M*>(op.mean);
  const M* invstd_in = static_cast<const M*>(op.invstd);
  P* grad_weight = static_cast<P*>(op.grad_weight);
  P* grad_bias = static_cast<P*>(op.grad_bias);
  const int lane = threadIdx.x % 32;
  const double count = static_cast<double>(p.outer * p.inner);
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; c < p.channels;
       c += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const double mean = WidenTo<double>(mean_in[c]);
    const double invstd =
        p.training ? WidenTo<double>(invstd_in[c]) : 1.0 / sqrt(WidenTo<double>(invstd_in[c]) + p.eps);
    double sum_dy = 0.0, sum_dy_xmu = 0.0;
    if (partials != nullptr) {
      const double* part = partials + 2 * c * split.chunks;
      for (int64_t j = lane; j < split.chunks; j += 32) {
        sum_dy += part[2 * j];
        sum_dy_xmu += part[2 * j + 1];
      }
      sum_dy = WarpSum(sum_dy);
      sum_dy_xmu = WarpSum(sum_dy_xmu);
    }
    if (lane == 0) {
      if (grad_weight != nullptr) grad_weight[c] = RoundTo<P>(sum_dy_xmu * invstd);
      if (grad_bias != nullptr) grad_bias[c] = RoundTo<P>(sum_dy);
      if (op.grad_input != nullptr) {
        coeffs[4 * c] = mean;
        coeffs[4 * c + 1] = sum_dy / count;
        coeffs[4 * c + 2] = sum_dy_xmu / count * invstd * invstd;
        coeffs[4 * c + 3] = invstd * WidenTo<double>(static_cast<const P*>(op.weight)[c]);
      }
    }
  }
}

// ---- the column path (batch_norm_column_kernels.cu) ----

// Whether the launchers take the column kernels for `p`.
bool UsesColumnKernels(const BatchNormLaunchParams& p);

// Scratch bytes of the column path for `p`, whatever the dtype and vector
// width (BatchNormScratchBytes knows neither).
size_t ColumnScratchBytes(const BatchNormLaunchParams& p);

// The column path's forward and backward, with the storage types of
// batch_norm_kernels.cu's Forward<T, P, S> and Backward<T, P, M>: T the
// data, P the parameters, S the saved statistics, M the backward's mean and
// invstd. Instantiated in batch_norm_column_kernels.cu for the combinations
// the launchers use.
template <typename T, typename P, typename S>
cudaError_t ColumnForward(const BatchNormLaunchParams& p, const BatchNormForwardOperands& op, void* scratch,
                          cudaStream_t stream);
template <typename T, typename P, typename M>
cudaError_t ColumnBackward(const BatchNormLaunchParams& p, const BatchNormBackwardOperands& op, void* scratch,
                           cudaStream_t stream);

}  // namespace tandem::cuda::batch_norm

#endif  // TANDEM_KERNELS_CUDA_BATCH_NORM_COMMON_CUH_
