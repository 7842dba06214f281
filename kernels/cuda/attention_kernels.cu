// Fused scaled-dot-product attention, forward and backward, without any
// scratch memory (kernels allocate nothing):
//
// - forward: a block per (batch entry, query row): the row's scores go to
//   shared memory (a warp per key computes q . k), then the row's softmax
//   and o = p V (a thread per output column, reading V coalesced);
// - backward, rows: a block per (b, i) recomputes p_i from the forward's
//   logsumexp, forms dS_i = p_i (dO_i V^T - dO_i . o_i) in shared memory and
//   writes dq_i = scale dS_i K (and the bias gradient);
// - backward, columns: a block per (b, j) recomputes column j of p and dS
//   the same way and writes dk_j = scale dS_j^T Q and dv_j = p_j^T dO.
//
// float32 accumulates in float32. The sequence length is bounded by shared
// memory (keys or rows + head dims elements per block, up to the device's
// opt-in limit), beyond which the launch reports cudaErrorInvalidValue.
#include <cmath>
#include <limits>

#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/sequence_launch.h"

namespace tandem::cuda {
namespace {

constexpr int kAttentionThreads = 128;
constexpr int kWarps = kAttentionThreads / 32;

template <typename T>
__device__ __forceinline__ T Scale(const AttentionParams& p) {
  if constexpr (sizeof(T) == 4) {
    return p.scale_f;
  } else {
    return static_cast<T>(p.scale);
  }
}

// Lanes of a warp sum a[e] * b[e] over e < n; every lane gets the total.
template <typename T>
__device__ __forceinline__ T WarpDot(const T* a, const T* b, int64_t n, int lane) {
  T s = 0;
  for (int64_t e = lane; e < n; e += 32) s += a[e] * b[e];
  return WarpSum(s);
}

// The score's additive mask term (or -inf where the key is hidden).
template <typename T>
__device__ __forceinline__ T MaskTerm(const AttentionParams& p, int64_t mask_base, int64_t i, int64_t j) {
  if (p.causal && j > i) return -std::numeric_limits<T>::infinity();
  if (p.mask == nullptr) return T(0);
  const int64_t at = mask_base + i * p.mask_row_stride + j * p.mask_key_stride;
  if (p.mask_is_bool) return static_cast<const bool*>(p.mask)[at] ? T(0) : -std::numeric_limits<T>::infinity();
  return static_cast<const T*>(p.mask)[at];
}

template <typename T>
__global__ void AttentionForwardKernel(AttentionParams p, const T* q, const T* k, const T* v, T* out, T* lse) {
  extern __shared__ unsigned char smem[];
  T* scores = reinterpret_cast<T*>(smem);
  T* qi = scores + p.keys;
  __shared__ T reduce[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const T scale = Scale<T>(p);
  for (int64_t task = blockIdx.x; task < p.batch * p.rows; task += gridDim.x) {
    const int64_t b = task / p.rows, i = task - b * p.rows;
    const int64_t mask_base = p.mask != nullptr ? StridedOffset(p.mask_batch, b) : 0;
    const T* qrow = q + task * p.head;
    for (int64_t e = threadIdx.x; e < p.head; e += blockDim.x) qi[e] = qrow[e];
    __syncthreads();
    for (int64_t j = warp; j < p.keys; j += kWarps) {
      const T dot = WarpDot(qi, k + (b * p.keys + j) * p.head, p.head, lane);
      if (lane == 0) scores[j] = scale * dot + MaskTerm<T>(p, mask_base, i, j);
    }
    __syncthreads();
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t j = threadIdx.x; j < p.keys; j += blockDim.x) m = MaxNan(m, scores[j]);
    m = BlockMax(m, reduce, -std::numeric_limits<T>::infinity());
    T s = 0;
    for (int64_t j = threadIdx.x; j < p.keys; j += blockDim.x) {
      const T e = exp(scores[j] - m);
      scores[j] = e;
      s += e;
    }
    s = BlockSum(s, reduce);  // its barriers also publish scores[]
    const T inv = T(1) / s;
    for (int64_t e = threadIdx.x; e < p.value_head; e += blockDim.x) {
      T acc = 0;
      const T* vcol = v + b * p.keys * p.value_head + e;
      for (int64_t j = 0; j < p.keys; ++j) acc += scores[j] * vcol[j * p.value_head];
      out[task * p.value_head + e] = acc * inv;
    }
    if (lse != nullptr && threadIdx.x == 0) {
      lse[b * p.lse_row + i] = m + log(s);
      if (i == 0) {
        for (int64_t r = p.rows; r < p.lse_row; ++r) lse[b * p.lse_row + r] = T(0);
      }
    }
    __syncthreads();  // scores and qi are reused by the next task
  }
}

// dS row i into shared memory, dq_i, and the bias gradient of row i.
template <typename T>
__global__ void AttentionBackwardRowKernel(AttentionParams p, const T* dout, const T* q, const T* k, const T* v,
                                           const T* out, const T* lse, T* dq, T* dbias, bool bias_full) {
  extern __shared__ unsigned char smem[];
  T* ds = reinterpret_cast<T*>(smem);
  T* qi = ds + p.keys;
  T* doi = qi + p.head;
  __shared__ T reduce[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const T scale = Scale<T>(p);
  for (int64_t task = blockIdx.x; task < p.batch * p.rows; task += gridDim.x) {
    const int64_t b = task / p.rows, i = task - b * p.rows;
    const int64_t mask_base = p.mask != nullptr ? StridedOffset(p.mask_batch, b) : 0;
    for (int64_t e = threadIdx.x; e < p.head; e += blockDim.x) qi[e] = q[task * p.head + e];
    T d = 0;
    for (int64_t e = threadIdx.x; e < p.value_head; e += blockDim.x) {
      const T g = dout[task * p.value_head + e];
      doi[e] = g;
      d += g * out[task * p.value_head + e];
    }
    d = BlockSum(d, reduce);  // also publishes qi and doi
    const T log_sum = lse[b * p.lse_row + i];
    for (int64_t j = warp; j < p.keys; j += kWarps) {
      const T dot = WarpDot(qi, k + (b * p.keys + j) * p.head, p.head, lane);
      const T dp = WarpDot(doi, v + (b * p.keys + j) * p.value_head, p.value_head, lane);
      if (lane == 0) {
        const T prob = exp(scale * dot + MaskTerm<T>(p, mask_base, i, j) - log_sum);
        const T g = prob * (dp - d);
        ds[j] = g;
        if (dbias != nullptr) {
          T* at = dbias + mask_base + i * p.mask_row_stride + j * p.mask_key_stride;
          if (bias_full) {
            *at = g;
          } else {
            atomicAdd(at, g);
          }
        }
      }
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < p.head; e += blockDim.x) {
      T acc = 0;
      const T* kcol = k + b * p.keys * p.head + e;
      for (int64_t j = 0; j < p.keys; ++j) acc += ds[j] * kcol[j * p.head];
      dq[task * p.head + e] = scale * acc;
    }
    __syncthreads();
  }
}

// Column j of P and dS into shared memory, then dk_j and dv_j.
template <typename T>
__global__ void AttentionBackwardColumnKernel(AttentionParams p, const T* dout, const T* q, const T* k, const T* v,
                                              const T* out, const T* lse, T* dk, T* dv) {
  extern __shared__ unsigned char smem[];
  T* prob = reinterpret_cast<T*>(smem);
  T* ds = prob + p.rows;
  T* kj = ds + p.rows;
  T* vj = kj + p.head;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const T scale = Scale<T>(p);
  for (int64_t task = blockIdx.x; task < p.batch * p.keys; task += gridDim.x) {
    const int64_t b = task / p.keys, j = task - b * p.keys;
    const int64_t mask_base = p.mask != nullptr ? StridedOffset(p.mask_batch, b) : 0;
    for (int64_t e = threadIdx.x; e < p.head; e += blockDim.x) kj[e] = k[task * p.head + e];
    for (int64_t e = threadIdx.x; e < p.value_head; e += blockDim.x) vj[e] = v[task * p.value_head + e];
    __syncthreads();
    for (int64_t i = warp; i < p.rows; i += kWarps) {
      const int64_t row = b * p.rows + i;
      const T dot = WarpDot(kj, q + row * p.head, p.head, lane);
      const T dp = WarpDot(vj, dout + row * p.value_head, p.value_head, lane);
      const T d = WarpDot(dout + row * p.value_head, out + row * p.value_head, p.value_head, lane);
      if (lane == 0) {
        const T pr = exp(scale * dot + MaskTerm<T>(p, mask_base, i, j) - lse[b * p.lse_row + i]);
        prob[i] = pr;
        ds[i] = pr * (dp - d);
      }
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < p.value_head; e += blockDim.x) {
      T acc = 0;
      const T* gcol = dout + b * p.rows * p.value_head + e;
      for (int64_t i = 0; i < p.rows; ++i) acc += prob[i] * gcol[i * p.value_head];
      dv[task * p.value_head + e] = acc;
    }
    for (int64_t e = threadIdx.x; e < p.head; e += blockDim.x) {
      T acc = 0;
      const T* qcol = q + b * p.rows * p.head + e;
      for (int64_t i = 0; i < p.rows; ++i) acc += ds[i] * qcol[i * p.head];
      dk[task * p.head + e] = scale * acc;
    }
    __syncthreads();
  }
}

// Lets `kernel` use `bytes` of dynamic shared memory; false past the device's
// limit.
template <typename Kernel>
bool AllowSharedMemory(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return true;
  int device = 0, limit = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    return false;
  }
  // Leave room for the static reduction buffer.
  if (bytes + 1024 > static_cast<size_t>(limit)) return false;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)) ==
         cudaSuccess;
}

template <typename F>
bool DispatchFloat(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      f(float{});
      return true;
    case DType::kFloat64:
      f(double{});
      return true;
    default:
      return false;
  }
}

}  // namespace

cudaError_t LaunchAttentionForward(DType dtype, const AttentionParams& params, const void* q, const void* k,
                                   const void* v, void* out, void* lse, cudaStream_t stream) {
  const int64_t tasks = params.batch * params.rows;
  if (tasks == 0 || params.value_head == 0) return cudaSuccess;
  cudaError_t result = cudaErrorInvalidValue;
  DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    const size_t bytes = static_cast<size_t>(params.keys + params.head) * sizeof(T);
    if (!AllowSharedMemory(AttentionForwardKernel<T>, bytes)) return;
    AttentionForwardKernel<T><<<Blocks(tasks, 1), kAttentionThreads, bytes, stream>>>(
        params, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(out),
        static_cast<T*>(lse));
    result = LaunchError();
  });
  return result;
}

cudaError_t LaunchAttentionBackward(DType dtype, const AttentionParams& params, const void* grad_out, const void* q,
                                    const void* k, const void* v, const void* out, const void* lse, void* grad_q,
                                    void* grad_k, void* grad_v, void* grad_bias, bool bias_full, int64_t bias_numel,
                                    cudaStream_t stream) {
  cudaError_t result = cudaErrorInvalidValue;
  DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (grad_bias != nullptr && !bias_full && bias_numel > 0) {
      result = cudaMemsetAsync(grad_bias, 0, static_cast<size_t>(bias_numel) * sizeof(T), stream);
      if (result != cudaSuccess) return;
    }
    const T* g = static_cast<const T*>(grad_out);
    const T* pq = static_cast<const T*>(q);
    const T* pk = static_cast<const T*>(k);
    const T* pv = static_cast<const T*>(v);
    const T* po = static_cast<const T*>(out);
    const T* pl = static_cast<const T*>(lse);
    result = cudaSuccess;
    const int64_t row_tasks = params.batch * params.rows;
    if (row_tasks > 0 && params.head > 0) {
      const size_t bytes = static_cast<size_t>(params.keys + params.head + params.value_head) * sizeof(T);
      if (!AllowSharedMemory(AttentionBackwardRowKernel<T>, bytes)) {
        result = cudaErrorInvalidValue;
        return;
      }
      AttentionBackwardRowKernel<T><<<Blocks(row_tasks, 1), kAttentionThreads, bytes, stream>>>(
          params, g, pq, pk, pv, po, pl, static_cast<T*>(grad_q), static_cast<T*>(grad_bias), bias_full);
      result = LaunchError();
      if (result != cudaSuccess) return;
    } else if (row_tasks > 0 && grad_bias != nullptr && bias_full && bias_numel > 0) {
      result = cudaMemsetAsync(grad_bias, 0, static_cast<size_t>(bias_numel) * sizeof(T), stream);
      if (result != cudaSuccess) return;
    }
    const int64_t column_tasks = params.batch * params.keys;
    if (column_tasks > 0) {
      const size_t bytes = static_cast<size_t>(2 * params.rows + params.head + params.value_head) * sizeof(T);
      if (!AllowSharedMemory(AttentionBackwardColumnKernel<T>, bytes)) {
        result = cudaErrorInvalidValue;
        return;
      }
      AttentionBackwardColumnKernel<T><<<Blocks(column_tasks, 1), kAttentionThreads, bytes, stream>>>(
          params, g, pq, pk, pv, po, pl, static_cast<T*>(grad_k), static_cast<T*>(grad_v));
      result = LaunchError();
    }
  });
  return result;
}

}  // namespace tandem::cuda
