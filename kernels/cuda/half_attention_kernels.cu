// Kernels of 16-bit float tensors, part 3: the memory-efficient
// scaled-dot-product attention (forward and backward) and _safe_softmax.
//
// The attention kernels take the shape of attention_kernels.cu's float32
// ones: fused, a block per query row (forward; backward: dS row and dq) or
// per key column (backward: dk and dv), scores and probabilities in shared
// memory, no scratch memory in global memory. The products therefore run in
// these kernels, not in cuBLASLt, exactly as in float32: a library product
// would need the [batch, L, S] scores in a buffer that the op does not own.
// Every 16-bit value is widened to float32 as it is loaded; scores,
// probabilities, the softmax statistics and every dot product and sum stay
// in float32; the log-sum-exp is stored in float32 (as PyTorch's kernel
// does) and each 16-bit result is rounded once when stored.
//
// The gradient of a bias that broadcasts over some score dims (fewer
// elements than the scores) is its own kernel: a block per bias element
// sums, in float32 and in a fixed order, the dS of every score that reads
// that element (each recomputed from q, k, v, dO, o and the log-sum-exp), so
// it rounds once and repeats bit for bit, where 16-bit atomics would round
// at every addition. A bias of the scores' size gets dS written directly.
//
// _safe_softmax is the 16-bit softmax (half_row_kernels.cu) with one change:
// a slice of all -inf gives zeros instead of NaN.
#include <cmath>
#include <limits>

#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/row_kernels.cuh"

namespace tandem::cuda {
namespace {

constexpr int kAttentionThreads = 128;
constexpr int kAttentionWarps = kAttentionThreads / 32;

__device__ __forceinline__ float NegInf() { return -std::numeric_limits<float>::infinity(); }

// Lanes of a warp sum a[e] * b[e] over e < n (a float32, in shared memory;
// b 16-bit); every lane gets the total.
template <typename H>
__device__ __forceinline__ float WarpDot(const float* a, const H* b, int64_t n, int lane) {
  float s = 0.0f;
  for (int64_t e = lane; e < n; e += 32) s += a[e] * Widen(b[e]);
  return WarpSum(s);
}

// The same with both operands 16-bit.
template <typename H>
__device__ __forceinline__ float WarpDot(const H* a, const H* b, int64_t n, int lane) {
  float s = 0.0f;
  for (int64_t e = lane; e < n; e += 32) s += Widen(a[e]) * Widen(b[e]);
  return WarpSum(s);
}

// One thread's sum of a[e] * b[e] over e < n, both 16-bit.
template <typename H>
__device__ __forceinline__ float ThreadDot(const H* a, const H* b, int64_t n) {
  float s = 0.0f;
  for (int64_t e = 0; e < n; ++e) s += Widen(a[e]) * Widen(b[e]);
  return s;
}

// The score's additive mask term (or -inf where the key is hidden); a float
// mask is of the 16-bit type H.
template <typename H>
__device__ __forceinline__ float MaskTerm(const AttentionParams& p, int64_t mask_base, int64_t i, int64_t j) {
  if (p.causal && j > i) return NegInf();
  if (p.mask == nullptr) return 0.0f;
  const int64_t at = mask_base + i * p.mask_row_stride + j * p.mask_key_stride;
  if (p.mask_is_bool) return static_cast<const bool*>(p.mask)[at] ? 0.0f : NegInf();
  return Widen(static_cast<const H*>(p.mask)[at]);
}

// A block per (batch entry b, query row i): the row's scores into shared
// memory (a warp per key), their softmax, o_i = p_i V (a thread per output
// column) and lse_i = max + log(sum).
template <typename H>
__global__ void __launch_bounds__(kAttentionThreads)
    HalfAttentionForwardKernel(AttentionParams p, const H* q, const H* k, const H* v, H* out, float* lse) {
  extern __shared__ float shared_values[];  // float32 values, sized at launch
  float* scores = shared_values;
  float* qi = scores + p.keys;
  __shared__ float reduce[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t task = blockIdx.x; task < p.batch * p.rows; task += gridDim.x) {
    const int64_t b = task / p.rows, i = task - b * p.rows;
    const int64_t mask_base = p.mask != nullptr ? StridedOffset(p.mask_batch, b) : 0;
    for (int64_t e = threadIdx.x; e < p.head; e += blockDim.x) qi[e] = Widen(q[task * p.head + e]);
    __syncthreads();
    for (int64_t j = warp; j < p.keys; j += kAttentionWarps) {
      const float dot = WarpDot(qi, k + (b * p.keys + j) * p.head, p.head, lane);
      if (lane == 0) scores[j] = p.scale_f * dot + MaskTerm<H>(p, mask_base, i, j);
    }
    __syncthreads();
    float m = NegInf();
    for (int64_t j = threadIdx.x; j < p.keys; j += blockDim.x) m = MaxNan(m, scores[j]);
    m = BlockMax(m, reduce, NegInf());
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < p.keys; j += blockDim.x) {
      const float e = expf(scores[j] - m);
      scores[j] = e;
      s += e;
    }
    s = BlockSum(s, reduce);  // its barriers also publish scores[]
    const float inv = 1.0f / s;
    for (int64_t e = threadIdx.x; e < p.value_head; e += blockDim.x) {
      float acc = 0.0f;
      const H* vcol = v + b * p.keys * p.value_head + e;
      for (int64_t j = 0; j < p.keys; ++j) acc += scores[j] * Widen(vcol[j * p.value_head]);
      out[task * p.value_head + e] = Narrow<H>(acc * inv);
    }
    if (lse != nullptr && threadIdx.x == 0) {
      lse[b * p.lse_row + i] = m + logf(s);
      if (i == 0) {
        for (int64_t r = p.rows; r < p.lse_row; ++r) lse[b * p.lse_row + r] = 0.0f;
      }
    }
    __syncthreads();  // scores and qi are reused by the next task
  }
}

// A block per (b, i): p_i from the log-sum-exp, dS_i = p_i (dO_i V^T - dO_i
// . o_i) into shared memory (and into dbias when it has the scores' size),
// then dq_i = scale dS_i K.
template <typename H>
__global__ void __launch_bounds__(kAttentionThreads)
    HalfAttentionBackwardRowKernel(AttentionParams p, const H* dout, const H* q, const H* k, const H* v, const H* out,
                                   const float* lse, H* dq, H* dbias) {
  extern __shared__ float shared_values[];  // float32 values, sized at launch
  float* ds = shared_values;
  float* qi = ds + p.keys;
  float* doi = qi + p.head;
  __shared__ float reduce[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t task = blockIdx.x; task < p.batch * p.rows; task += gridDim.x) {
    const int64_t b = task / p.rows, i = task - b * p.rows;
    const int64_t mask_base = p.mask != nullptr ? StridedOffset(p.mask_batch, b) : 0;
    for (int64_t e = threadIdx.x; e < p.head; e += blockDim.x) qi[e] = Widen(q[task * p.head + e]);
    float d = 0.0f;
    for (int64_t e = threadIdx.x; e < p.value_head; e += blockDim.x) {
      const float g = Widen(dout[task * p.value_head + e]);
      doi[e] = g;
      d += g * Widen(out[task * p.value_head + e]);
    }
    d = BlockSum(d, reduce);  // also publishes qi and doi
    const float log_sum = lse[b * p.lse_row + i];
    for (int64_t j = warp; j < p.keys; j += kAttentionWarps) {
      const float dot = WarpDot(qi, k + (b * p.keys + j) * p.head, p.head, lane);
      const float dp = WarpDot(doi, v + (b * p.keys + j) * p.value_head, p.value_head, lane);
      if (lane == 0) {
        const float prob = expf(p.scale_f * dot + MaskTerm<H>(p, mask_base, i, j) - log_sum);
        const float g = prob * (dp - d);
        ds[j] = g;
        if (dbias != nullptr) dbias[mask_base + i * p.mask_row_stride + j * p.mask_key_stride] = Narrow<H>(g);
      }
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < p.head; e += blockDim.x) {
      float acc = 0.0f;
      const H* kcol = k + b * p.keys * p.head + e;
      for (int64_t j = 0; j < p.keys; ++j) acc += ds[j] * Widen(kcol[j * p.head]);
      dq[task * p.head + e] = Narrow<H>(p.scale_f * acc);
    }
    __syncthreads();
  }
}

// A block per (b, key j): column j of P and dS into shared memory, then
// dv_j = P_j^T dO and dk_j = scale dS_j^T Q.
template <typename H>
__global__ void __launch_bounds__(kAttentionThreads)
    HalfAttentionBackwardColumnKernel(AttentionParams p, const H* dout, const H* q, const H* k, const H* v,
                                      const H* out, const float* lse, H* dk, H* dv) {
  extern __shared__ float shared_values[];  // float32 values, sized at launch
  float* prob = shared_values;
  float* ds = prob + p.rows;
  float* kj = ds + p.rows;
  float* vj = kj + p.head;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t task = blockIdx.x; task < p.batch * p.keys; task += gridDim.x) {
    const int64_t b = task / p.keys, j = task - b * p.keys;
    const int64_t mask_base = p.mask != nullptr ? StridedOffset(p.mask_batch, b) : 0;
    for (int64_t e = threadIdx.x; e < p.head; e += blockDim.x) kj[e] = Widen(k[task * p.head + e]);
    for (int64_t e = threadIdx.x; e < p.value_head; e += blockDim.x) vj[e] = Widen(v[task * p.value_head + e]);
    __syncthreads();
    for (int64_t i = warp; i < p.rows; i += kAttentionWarps) {
      const int64_t row = b * p.rows + i;
      const float dot = WarpDot(kj, q + row * p.head, p.head, lane);
      const float dp = WarpDot(vj, dout + row * p.value_head, p.value_head, lane);
      const float d = WarpDot(dout + row * p.value_head, out + row * p.value_head, p.value_head, lane);
      if (lane == 0) {
        const float pr = expf(p.scale_f * dot + MaskTerm<H>(p, mask_base, i, j) - lse[b * p.lse_row + i]);
        prob[i] = pr;
        ds[i] = pr * (dp - d);
      }
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < p.value_head; e += blockDim.x) {
      float acc = 0.0f;
      const H* gcol = dout + b * p.rows * p.value_head + e;
      for (int64_t i = 0; i < p.rows; ++i) acc += prob[i] * Widen(gcol[i * p.value_head]);
      dv[task * p.value_head + e] = Narrow<H>(acc);
    }
    for (int64_t e = threadIdx.x; e < p.head; e += blockDim.x) {
      float acc = 0.0f;
      const H* qcol = q + b * p.rows * p.head + e;
      for (int64_t i = 0; i < p.rows; ++i) acc += ds[i] * Widen(qcol[i * p.head]);
      dk[task * p.head + e] = Narrow<H>(p.scale_f * acc);
    }
    __syncthreads();
  }
}

// The gradient of a broadcast bias: a block per bias element o, whose
// scores are at flat index StridedOffset(kept, o) + StridedOffset(reduced,
// r) of the scores [batch, rows, keys], r < count; each thread recomputes
// dS of its scores one at a time.
template <typename H>
__global__ void __launch_bounds__(kThreads)
    HalfAttentionBiasGradKernel(AttentionParams p, StridedOperand kept, StridedOperand reduced, int64_t bias_numel,
                                int64_t count, const H* dout, const H* q, const H* k, const H* v, const H* out,
                                const float* lse, H* dbias) {
  __shared__ float reduce[32];
  for (int64_t o = blockIdx.x; o < bias_numel; o += gridDim.x) {
    const int64_t base = StridedOffset(kept, o);
    float acc = 0.0f;
    for (int64_t r = threadIdx.x; r < count; r += blockDim.x) {
      const int64_t at = base + StridedOffset(reduced, r);
      const int64_t row = at / p.keys;  // b * rows + i
      const int64_t j = at - row * p.keys;
      const int64_t b = row / p.rows, i = row - b * p.rows;
      const int64_t mask_base = StridedOffset(p.mask_batch, b);
      const float dot = ThreadDot(q + row * p.head, k + (b * p.keys + j) * p.head, p.head);
      const float dp = ThreadDot(dout + row * p.value_head, v + (b * p.keys + j) * p.value_head, p.value_head);
      const float d = ThreadDot(dout + row * p.value_head, out + row * p.value_head, p.value_head);
      const float prob = expf(p.scale_f * dot + MaskTerm<H>(p, mask_base, i, j) - lse[b * p.lse_row + i]);
      acc += prob * (dp - d);
    }
    acc = BlockSum(acc, reduce);
    if (threadIdx.x == 0) dbias[o] = Narrow<H>(acc);
  }
}

// ---- _safe_softmax ----

constexpr int64_t kWarpRowMax = 1024;

// A row of [outer, size, inner]: element k of row r = (o, j) is at
// base + k * inner, base = o * size * inner + j.
__device__ __forceinline__ int64_t RowBase(int64_t row, int64_t size, int64_t inner) {
  const int64_t o = row / inner;
  return o * size * inner + (row - o * inner);
}

// A warp per row (kThreadsPerRow 32) or a block per row (kThreads): max and
// sum in float32, each output rounded once; a row of all -inf is zeros (its
// max is -inf exactly then; a NaN anywhere makes the max NaN and the row
// NaN, as in PyTorch).
template <int kThreadsPerRow, typename H>
__global__ void __launch_bounds__(kThreads)
    HalfSafeSoftmaxKernel(int64_t rows, int64_t size, int64_t inner, const H* in, H* out) {
  __shared__ float shared[32];
  constexpr int kRowsPerBlock = kThreads / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t row = first; row < rows; row += step) {
    const int64_t base = RowBase(row, size, inner);
    float max = NegInf();
    for (int64_t c = lane; c < size; c += kThreadsPerRow) max = MaxNan(max, Widen(in[base + c * inner]));
    max = RowMax<kThreadsPerRow>(max, shared);
    float sum = 0.0f;
    for (int64_t c = lane; c < size; c += kThreadsPerRow) sum += expf(Widen(in[base + c * inner]) - max);
    sum = RowSum<kThreadsPerRow>(sum, shared);
    // Every thread of the row read its elements above, so out may be in.
    const bool zeros = max == NegInf();
    const float inverse = 1.0f / sum;
    for (int64_t c = lane; c < size; c += kThreadsPerRow) {
      const int64_t at = base + c * inner;
      out[at] = zeros ? Narrow<H>(0.0f) : Narrow<H>(expf(Widen(in[at]) - max) * inverse);
    }
  }
}

// ---- launch helpers ----

// Lets `kernel` use `bytes` of dynamic shared memory; false past the
// device's opt-in limit.
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

size_t FloatBytes(int64_t count) { return static_cast<size_t>(count) * sizeof(float); }

// The bias gradient's reduction over the scores [batch dims..., rows, keys]
// (row-major, contiguous): `kept` walks the bias's own dims in order (so
// that output o is the bias's element o), `reduced` the dims it broadcasts
// over, both with the scores' strides; `count` is the number of scores per
// bias element. False when either needs more dims than a StridedOperand
// holds.
bool BiasReduction(const AttentionParams& p, StridedOperand& kept, StridedOperand& reduced, int64_t& count) {
  const int rank = p.mask_batch.rank + 2;
  int64_t sizes[kMaxDims + 2], bias_strides[kMaxDims + 2];
  for (int d = 0; d < p.mask_batch.rank; ++d) {
    sizes[d] = p.mask_batch.sizes[d];
    bias_strides[d] = p.mask_batch.strides[d];
  }
  sizes[rank - 2] = p.rows;
  bias_strides[rank - 2] = p.mask_row_stride;
  sizes[rank - 1] = p.keys;
  bias_strides[rank - 1] = p.mask_key_stride;
  int64_t score_strides[kMaxDims + 2];
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    score_strides[d] = stride;
    stride *= sizes[d];
  }
  kept.rank = 0;
  reduced.rank = 0;
  count = 1;
  for (int d = 0; d < rank; ++d) {
    if (sizes[d] == 1) continue;
    StridedOperand& into = bias_strides[d] != 0 ? kept : reduced;
    if (into.rank == kMaxDims) return false;
    into.sizes[into.rank] = sizes[d];
    into.strides[into.rank] = score_strides[d];
    ++into.rank;
    if (bias_strides[d] == 0) count *= sizes[d];
  }
  return true;
}

}  // namespace

cudaError_t LaunchHalfAttentionForward(DType dtype, const AttentionParams& params, const void* q, const void* k,
                                       const void* v, void* out, float* lse, cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  const int64_t tasks = params.batch * params.rows;
  if (tasks == 0) return cudaSuccess;
  cudaError_t result = cudaErrorInvalidValue;
  DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    const size_t bytes = FloatBytes(params.keys + params.head);
    if (!AllowSharedMemory(HalfAttentionForwardKernel<H>, bytes)) return;
    HalfAttentionForwardKernel<H><<<Blocks(tasks, 1), kAttentionThreads, bytes, stream>>>(
        params, static_cast<const H*>(q), static_cast<const H*>(k), static_cast<const H*>(v), static_cast<H*>(out),
        lse);
    result = LaunchError();
  });
  return result;
}

cudaError_t LaunchHalfAttentionBackward(DType dtype, const AttentionParams& params, const void* grad_out, const void* q,
                                        const void* k, const void* v, const void* out, const float* lse, void* grad_q,
                                        void* grad_k, void* grad_v, void* grad_bias, int64_t bias_numel,
                                        cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  cudaError_t result = cudaErrorInvalidValue;
  DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    const H* g = static_cast<const H*>(grad_out);
    const H* pq = static_cast<const H*>(q);
    const H* pk = static_cast<const H*>(k);
    const H* pv = static_cast<const H*>(v);
    const H* po = static_cast<const H*>(out);
    const int64_t row_tasks = params.batch * params.rows;
    const int64_t column_tasks = params.batch * params.keys;
    const bool bias_full = grad_bias != nullptr && bias_numel == row_tasks * params.keys;
    // Check every launch's shared memory before enqueuing any.
    const size_t row_bytes = FloatBytes(params.keys + params.head + params.value_head);
    const size_t column_bytes = FloatBytes(2 * params.rows + params.head + params.value_head);
    if ((row_tasks > 0 && !AllowSharedMemory(HalfAttentionBackwardRowKernel<H>, row_bytes)) ||
        (column_tasks > 0 && !AllowSharedMemory(HalfAttentionBackwardColumnKernel<H>, column_bytes))) {
      return;
    }
    StridedOperand kept, reduced;
    int64_t count = 0;
    if (grad_bias != nullptr && !bias_full && bias_numel > 0 && !BiasReduction(params, kept, reduced, count)) return;
    result = cudaSuccess;
    if (row_tasks > 0) {
      HalfAttentionBackwardRowKernel<H><<<Blocks(row_tasks, 1), kAttentionThreads, row_bytes, stream>>>(
          params, g, pq, pk, pv, po, lse, static_cast<H*>(grad_q), bias_full ? static_cast<H*>(grad_bias) : nullptr);
      result = LaunchError();
      if (result != cudaSuccess) return;
    }
    if (column_tasks > 0) {
      HalfAttentionBackwardColumnKernel<H><<<Blocks(column_tasks, 1), kAttentionThreads, column_bytes, stream>>>(
          params, g, pq, pk, pv, po, lse, static_cast<H*>(grad_k), static_cast<H*>(grad_v));
      result = LaunchError();
      if (result != cudaSuccess) return;
    }
    if (grad_bias != nullptr && !bias_full && bias_numel > 0) {
      HalfAttentionBiasGradKernel<H><<<Blocks(bias_numel, 1), kThreads, 0, stream>>>(
          params, kept, reduced, bias_numel, count, g, pq, pk, pv, po, lse, static_cast<H*>(grad_bias));
      result = LaunchError();
    }
  });
  return result;
}

cudaError_t LaunchHalfSafeSoftmax(DType dtype, int64_t outer, int64_t size, int64_t inner, const void* in, void* out,
                                  cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  const int64_t rows = outer * inner;
  if (rows == 0 || size == 0) return cudaSuccess;
  DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    const H* x = static_cast<const H*>(in);
    H* y = static_cast<H*>(out);
    if (size <= kWarpRowMax) {
      HalfSafeSoftmaxKernel<32, H><<<Blocks(rows, kThreads / 32), kThreads, 0, stream>>>(rows, size, inner, x, y);
    } else {
      HalfSafeSoftmaxKernel<kThreads, H><<<Blocks(rows, 1), kThreads, 0, stream>>>(rows, size, inner, x, y);
    }
  });
  return LaunchError();
}

}  // namespace tandem::cuda
