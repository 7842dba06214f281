// Kernels of advanced indexing (index.Tensor, index_put), the reducing
// scatters (scatter_add, scatter_reduce.two) and masked_scatter.
//
// Index values are data: each is checked before it addresses anything; a
// bad one is skipped and reported through the error word (the first bad
// value of the iteration wins), so nothing is read or written out of
// bounds. Index tensors are int64 or int32, each read through LoadIndex.
// Repeated indices combine through atomics (adds where the hardware has
// them, compare-and-swap loops otherwise), so the order of a sum, and its
// last bits, may differ between runs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <type_traits>

#include "kernels/cuda/index_launch.h"
#include "kernels/cuda/kernel_common.cuh"

namespace tandem::cuda {
namespace {

__device__ __forceinline__ void ReportBadIndex(const ErrorWord& error, int64_t value) {
  if (error.word == nullptr) return;
  auto* word = reinterpret_cast<unsigned long long*>(error.word);
  if (atomicCAS(word, 0ull, static_cast<unsigned long long>(error.node) + 1) == 0ull) error.word[1] = value;
}

// Element i of an index tensor of either index dtype, as int64.
__device__ __forceinline__ int64_t LoadIndex(const IndexOperand& index, int64_t i) {
  return index.dtype == DType::kInt32 ? static_cast<const int32_t*>(index.data)[i]
                                      : static_cast<const int64_t*>(index.data)[i];
}

__device__ __forceinline__ int64_t At(const StridedOperand& layout, int64_t i) {
  return layout.rank == 0 ? i : StridedOffset(layout, i);
}

// The storable dtypes and the 16-bit floats as their CUDA types.
template <typename F>
bool DispatchAll(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kBFloat16:
      f(__nv_bfloat16{});
      return true;
    case DType::kFloat16:
      f(__half{});
      return true;
    default:
      return DispatchStorable(dtype, f);
  }
}

// 16-bit values compute in float32.
template <typename T>
__device__ __forceinline__ auto Wide(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else {
    return v;
  }
}

template <typename T, typename W>
__device__ __forceinline__ T Narrow(W v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// Sets *p = f(*p) atomically, by compare-and-swap on the element's bits.
template <typename T, typename F>
__device__ void AtomicUpdate(T* p, F f) {
  using Bits = std::conditional_t<sizeof(T) == 8, unsigned long long,
                                  std::conditional_t<sizeof(T) == 4, unsigned int, unsigned short>>;
  static_assert(sizeof(T) == sizeof(Bits), "no compare-and-swap for this element size");
  Bits* word = reinterpret_cast<Bits*>(p);
  Bits old = *word;
  Bits assumed;
  do {
    assumed = old;
    T current;
    memcpy(&current, &assumed, sizeof(T));
    const T next = f(current);
    Bits bits;
    memcpy(&bits, &next, sizeof(T));
    if (bits == assumed) return;
    old = atomicCAS(word, assumed, bits);
  } while (old != assumed);
}

// *p += v, atomically.
template <typename T>
__device__ __forceinline__ void AtomicAdd(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    if (v) *p = true;  // "or": idempotent
  } else {
    atomicAdd(p, v);  // float, double, int32, __nv_bfloat16, __half
  }
}

// ---- index.Tensor, index_put ----

// Self's element that element i names; false (reported) for a bad index.
__device__ __forceinline__ bool IndexedOffset(const AdvancedIndexParams& p, int64_t i, ErrorWord error,
                                              int64_t* offset) {
  int64_t at = At(p.self_layout, i);
  for (int j = 0; j < p.k; ++j) {
    int64_t v = LoadIndex(p.index[j], At(p.index_layout[j], i));
    if (v < -p.dim_size[j] || v >= p.dim_size[j]) {
      ReportBadIndex(error, v);
      return false;
    }
    if (v < 0) v += p.dim_size[j];
    at += v * p.dim_stride[j];
  }
  *offset = at;
  return true;
}

template <typename E>
__global__ void AdvancedIndexKernel(AdvancedIndexParams p, const E* self, E* out, ErrorWord error) {
  for (int64_t i = GlobalThread(); i < p.n; i += GlobalStride()) {
    int64_t offset = 0;
    out[i] = IndexedOffset(p, i, error, &offset) ? self[offset] : E{};
  }
}

template <typename T>
__global__ void AdvancedIndexPutKernel(AdvancedIndexParams p, const T* values, T* out, ErrorWord error) {
  for (int64_t i = GlobalThread(); i < p.n; i += GlobalStride()) {
    int64_t offset = 0;
    if (!IndexedOffset(p, i, error, &offset)) continue;
    const T v = values[At(p.values_layout, i)];
    if (p.accumulate) {
      AtomicAdd(&out[offset], v);
    } else {
      out[offset] = v;
    }
  }
}

// ---- scatter_add, scatter_reduce.two ----

// The index element's target in out; false (reported) for a bad index.
template <typename I>
__device__ __forceinline__ bool ScatterTarget(const DimIndexing& dims, const I* index, int64_t i, ErrorWord error,
                                              int64_t* target) {
  const int64_t v = index[i];
  if (v < 0 || v >= dims.dim_size) {
    ReportBadIndex(error, v);
    return false;
  }
  *target = StridedOffset(dims.self_offset, i) + v * dims.dim_stride;
  return true;
}

template <typename T>
__device__ __forceinline__ T Identity(ScatterReduceOp op) {
  using W = decltype(Wide(T{}));
  switch (op) {
    case ScatterReduceOp::kProd:
      return Narrow<T>(W(1));
    case ScatterReduceOp::kAmax:
      if constexpr (std::is_floating_point_v<W>) return Narrow<T>(-INFINITY);
      if constexpr (std::is_same_v<W, int64_t>) return INT64_MIN;
      if constexpr (std::is_same_v<W, int32_t>) return INT32_MIN;
      break;
    case ScatterReduceOp::kAmin:
      if constexpr (std::is_floating_point_v<W>) return Narrow<T>(INFINITY);
      if constexpr (std::is_same_v<W, int64_t>) return INT64_MAX;
      if constexpr (std::is_same_v<W, int32_t>) return INT32_MAX;
      break;
    default:
      break;
  }
  return Narrow<T>(W(0));
}

template <typename T, typename I>
__global__ void ScatterIdentityKernel(int64_t n, DimIndexing dims, const I* index, ScatterReduceOp op, T* out,
                                      ErrorWord error) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    int64_t target = 0;
    if (ScatterTarget(dims, index, i, error, &target)) out[target] = Identity<T>(op);
  }
}

// NaN-propagating max / min, as PyTorch's scatter_reduce amax / amin.
template <typename W>
__device__ __forceinline__ W Pick(ScatterReduceOp op, W a, W b) {
  if (a != a) return a;
  if (b != b) return b;
  return op == ScatterReduceOp::kAmax ? (b > a ? b : a) : (b < a ? b : a);
}

template <typename T, typename I>
__global__ void ScatterReduceKernel(int64_t n, DimIndexing dims, const I* index, const T* src, ScatterReduceOp op,
                                    T* out, unsigned long long* counts, ErrorWord error) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    int64_t target = 0;
    if (!ScatterTarget(dims, index, i, error, &target)) continue;
    const T v = src[StridedOffset(dims.src_offset, i)];
    if (op == ScatterReduceOp::kSum || op == ScatterReduceOp::kMean) {
      AtomicAdd(&out[target], v);
    } else if (op == ScatterReduceOp::kProd) {
      AtomicUpdate(&out[target], [v](T a) { return Narrow<T>(Wide(a) * Wide(v)); });
    } else {
      AtomicUpdate(&out[target], [v, op](T a) { return Narrow<T>(Pick(op, Wide(a), Wide(v))); });
    }
    if (counts != nullptr) atomicAdd(&counts[target], 1ull);
  }
}

__global__ void FillCountsKernel(int64_t n, int64_t value, int64_t* counts) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) counts[i] = value;
}

template <typename T>
__global__ void MeanKernel(int64_t n, const int64_t* counts, T* out) {
  using W = decltype(Wide(T{}));
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    const W count = static_cast<W>(counts[i] > 1 ? counts[i] : 1);
    const W sum = Wide(out[i]);
    if constexpr (std::is_integral_v<W>) {
      const W q = sum / count;
      out[i] = (q * count != sum && sum < 0) ? q - 1 : q;  // floor (count > 0)
    } else {
      out[i] = Narrow<T>(sum / count);
    }
  }
}

// ---- masked_scatter ----

constexpr int kScanThreads = 1024;

template <typename E>
__global__ void MaskedScatterKernel(int64_t n, const bool* mask, StridedOperand mask_layout, const E* self,
                                    const E* source, int64_t source_n, E* out, ErrorWord error) {
  __shared__ int warp_counts[kScanThreads / 32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  int64_t carry = 0;  // true elements before this chunk (the same in every thread)
  for (int64_t base = 0; base < n; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    const bool m = i < n && mask[At(mask_layout, i)];
    const unsigned ballot = __ballot_sync(0xffffffffu, m);
    const int before_in_warp = __popc(ballot & ((1u << lane) - 1u));
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before_warp = 0, total = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
      before_warp += w < warp ? warp_counts[w] : 0;
      total += warp_counts[w];
    }
    if (i < n) {
      const int64_t k = carry + before_warp + before_in_warp;
      out[i] = m && k < source_n ? source[k] : self[i];
    }
    carry += total;
    __syncthreads();  // warp_counts is rewritten by the next chunk
  }
  if (threadIdx.x == 0 && carry > source_n) ReportBadIndex(error, carry);
}

}  // namespace

cudaError_t LaunchAdvancedIndex(int element_bytes, const AdvancedIndexParams& params, const void* self, void* out,
                                ErrorWord error, cudaStream_t stream) {
  for (int j = 0; j < params.k; ++j) {
    if (params.index[j].dtype != DType::kInt64 && params.index[j].dtype != DType::kInt32) return cudaErrorInvalidValue;
  }
  if (params.n == 0) return cudaSuccess;
  const bool launched = DispatchElementBytes(element_bytes, [&](auto tag) {
    using E = decltype(tag);
    AdvancedIndexKernel<E>
        <<<Blocks(params.n), kThreads, 0, stream>>>(params, static_cast<const E*>(self), static_cast<E*>(out), error);
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAdvancedIndexPut(DType dtype, const AdvancedIndexParams& params, const void* values, void* out,
                                   ErrorWord error, cudaStream_t stream) {
  for (int j = 0; j < params.k; ++j) {
    if (params.index[j].dtype != DType::kInt64 && params.index[j].dtype != DType::kInt32) return cudaErrorInvalidValue;
  }
  if (params.n == 0) return cudaSuccess;
  const bool launched = DispatchAll(dtype, [&](auto tag) {
    using T = decltype(tag);
    AdvancedIndexPutKernel<T>
        <<<Blocks(params.n), kThreads, 0, stream>>>(params, static_cast<const T*>(values), static_cast<T*>(out), error);
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchScatterReduce(DType dtype, ScatterReduceOp op, bool include_self, int64_t n, const DimIndexing& dims,
                                IndexOperand index, const void* src, void* out, int64_t out_n, int64_t* counts,
                                ErrorWord error, cudaStream_t stream) {
  if (dtype == DType::kBool) return cudaErrorInvalidValue;
  const bool mean = op == ScatterReduceOp::kMean;
  if (mean && counts == nullptr) return cudaErrorInvalidValue;
  if (mean && out_n > 0) {
    FillCountsKernel<<<Blocks(out_n), kThreads, 0, stream>>>(out_n, include_self ? 1 : 0, counts);
  }
  bool launched = true;
  if (n > 0) {
    launched = false;
    DispatchIndex(index.dtype, [&](auto index_tag) {
      using I = decltype(index_tag);
      const I* idx = static_cast<const I*>(index.data);
      launched = DispatchAll(dtype, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (!std::is_same_v<T, bool>) {
          if (!include_self) {
            ScatterIdentityKernel<T, I>
                <<<Blocks(n), kThreads, 0, stream>>>(n, dims, idx, op, static_cast<T*>(out), error);
          }
          ScatterReduceKernel<T, I><<<Blocks(n), kThreads, 0, stream>>>(
              n, dims, idx, static_cast<const T*>(src), op, static_cast<T*>(out),
              mean ? reinterpret_cast<unsigned long long*>(counts) : nullptr, error);
        }
      });
    });
  }
  if (launched && mean && out_n > 0) {
    launched = DispatchAll(dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, bool>) {
        MeanKernel<T><<<Blocks(out_n), kThreads, 0, stream>>>(out_n, counts, static_cast<T*>(out));
      }
    });
  }
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchMaskedScatter(int element_bytes, int64_t n, const bool* mask, const StridedOperand& mask_layout,
                                const void* self, const void* source, int64_t source_n, void* out, ErrorWord error,
                                cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool launched = DispatchElementBytes(element_bytes, [&](auto tag) {
    using E = decltype(tag);
    MaskedScatterKernel<E><<<1, kScanThreads, 0, stream>>>(n, mask, mask_layout, static_cast<const E*>(self),
                                                           static_cast<const E*>(source), source_n,
                                                           static_cast<E*>(out), error);
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
