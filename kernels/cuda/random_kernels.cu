// Kernels of the random ops (bernoulli.p, rand, randn): each element's
// number is ir/ops/random_draws.h's function of the node's key and the
// element's index, the CPU kernels' bit for bit (randn up to the last bits
// of log and cos), keyed as native_dropout's mask is.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "ir/ops/dropout_mask.h"
#include "ir/ops/random_draws.h"
#include "kernels/cuda/half_cnn_common.cuh"
#include "kernels/cuda/index_launch.h"
#include "kernels/cuda/kernel_common.cuh"

namespace tandem::cuda {
namespace {

// `v` (exact in T for the numbers drawn here, randn's rounded through float
// as the CPU kernels round it) as T.
template <typename T>
__device__ __forceinline__ T FromDouble(double v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else {
    return static_cast<T>(v);
  }
}

__device__ __forceinline__ uint64_t KeyOf(int64_t attr_seed, const int64_t* seed) {
  return dropout::Key(attr_seed, seed != nullptr ? *seed : 0);
}

template <typename T>
__global__ void BernoulliKernel(int64_t n, int64_t attr_seed, const int64_t* seed, uint32_t threshold, T* out) {
  const uint64_t key = KeyOf(attr_seed, seed);
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    out[i] = FromDouble<T>(random::Bernoulli(key, i, threshold) ? 1.0 : 0.0);
  }
}

template <typename T>
__global__ void RandomKernel(int64_t n, bool normal, int bits, int64_t attr_seed, const int64_t* seed, T* out) {
  const uint64_t key = KeyOf(attr_seed, seed);
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    out[i] = FromDouble<T>(normal ? random::Normal(key, i) : random::Uniform(key, i, bits));
  }
}

}  // namespace

cudaError_t LaunchBernoulli(DType dtype, int64_t n, int64_t attr_seed, const int64_t* seed, uint32_t threshold,
                            void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    BernoulliKernel<T><<<Blocks(n), kThreads, 0, stream>>>(n, attr_seed, seed, threshold, static_cast<T*>(out));
  };
  const bool launched = DispatchFloatOrHalf(dtype, launch) || DispatchStorable(dtype, launch);
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchRandom(DType dtype, RandomDistribution distribution, int64_t n, int64_t attr_seed,
                         const int64_t* seed, void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  // The uniform's bits that are exact in the dtype (random_draws.h).
  const int bits = dtype == DType::kFloat64 ? 53 : dtype == DType::kBFloat16 ? 8 : dtype == DType::kFloat16 ? 11 : 24;
  const bool launched = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    RandomKernel<T><<<Blocks(n), kThreads, 0, stream>>>(n, distribution == RandomDistribution::kNormal, bits, attr_seed,
                                                        seed, static_cast<T*>(out));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
