// Kernels of the ops that index with data (embedding and its backward,
// gather, scatter, index_select; index_put's are in
// advanced_index_kernels.cu), arange, and the strided scatter the slicing
// backwards use.
//
// Index values are data: each is checked before it addresses anything; a bad
// one is skipped and reported through the error word (the first bad value of
// the iteration wins), so nothing is read or written out of bounds. Index
// tensors are int64 or int32: every kernel that reads one is a template over
// its element type I.
// Accumulating writes (embedding_dense_backward) are atomic adds in the
// tensor's float dtype: the sum's order, and so its last bits, may differ
// between runs.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/sequence_launch.h"

namespace tandem::cuda {
namespace {

__device__ __forceinline__ void ReportBadIndex(const ErrorWord& error, int64_t value) {
  if (error.word == nullptr) return;
  auto* word = reinterpret_cast<unsigned long long*>(error.word);
  if (atomicCAS(word, 0ull, static_cast<unsigned long long>(error.node) + 1) == 0ull) error.word[1] = value;
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

// kWarps warps per output row (a block moves blockDim.x / (32 * kWarps)
// rows at a time, striding by the grid): the row's id is read by every lane and checked
// before it addresses anything; a bad one is reported once and its output
// row is zeros. The row moves in units U: 16-byte vectors when the row's
// bytes allow (LaunchEmbedding), single elements otherwise; lane l of the
// row's warp w moves units w * 32 + l + k * 32 * kWarps. Each lane loads a
// batch of kBatch units into registers before it stores any, so that many
// loads are in flight at once: a plain `dst[j] = src[j]` loop keeps one,
// since a store may alias the next load.
template <typename U, typename I, int kWarps, int kBatch>
__global__ void EmbeddingKernel(int64_t count, int64_t rows, int64_t row_units, const U* __restrict__ weight,
                                const I* __restrict__ ids, U* __restrict__ out, ErrorWord error) {
  const int rows_per_block = static_cast<int>(blockDim.x / 32) / kWarps;
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int64_t start = (warp % kWarps) * 32 + threadIdx.x % 32;  // this thread's first unit of a row
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_block + warp / kWarps;
  const int64_t step = static_cast<int64_t>(gridDim.x) * rows_per_block;
  constexpr int kStride = 32 * kWarps;
  for (int64_t n = first; n < count; n += step) {
    const int64_t id = ids[n];
    U* dst = out + n * row_units;
    if (id < 0 || id >= rows) {
      if (start == 0) ReportBadIndex(error, id);
      for (int64_t j = start; j < row_units; j += kStride) dst[j] = U{};
      continue;
    }
    const U* src = weight + id * row_units;
    for (int64_t base = start; base < row_units; base += kStride * kBatch) {
      U unit[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if (base + kStride * k < row_units) unit[k] = src[base + kStride * k];
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if (base + kStride * k < row_units) dst[base + kStride * k] = unit[k];
      }
    }
  }
}

// One embedding launch: kWarps warps per row in blocks of kThreadsPerBlock.
template <int kThreadsPerBlock, int kWarps, int kBatch, typename U, typename I>
void LaunchEmbeddingRows(int64_t count, int64_t rows, int64_t row_units, const U* weight, const I* ids, U* out,
                         ErrorWord error, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kThreadsPerBlock / 32 / kWarps;
  const int64_t blocks = std::min<int64_t>((count + kRowsPerBlock - 1) / kRowsPerBlock, kMaxBlocks);
  EmbeddingKernel<U, I, kWarps, kBatch>
      <<<blocks, kThreadsPerBlock, 0, stream>>>(count, rows, row_units, weight, ids, out, error);
}

template <typename T, typename I>
__global__ void EmbeddingBackwardKernel(int64_t count, int64_t rows, int64_t width, int64_t padding_idx, const T* grad,
                                        const I* ids, T* grad_weight, ErrorWord error) {
  const int64_t n = count * width;
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    const int64_t row = i / width;
    const int64_t c = i - row * width;
    const int64_t id = ids[row];
    if (id < 0 || id >= rows) {
      if (c == 0) ReportBadIndex(error, id);
      continue;
    }
    if (id == padding_idx) continue;
    atomicAdd(&grad_weight[id * width + c], grad[i]);
  }
}

template <typename E, typename I>
__global__ void GatherDimKernel(int64_t n, DimIndexing dims, const E* self, const I* index, E* out, ErrorWord error) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    const int64_t v = index[i];
    if (v < 0 || v >= dims.dim_size) {
      ReportBadIndex(error, v);
      out[i] = E{};
      continue;
    }
    out[i] = self[StridedOffset(dims.self_offset, i) + v * dims.dim_stride];
  }
}

template <typename T, typename I>
__global__ void ScatterDimKernel(int64_t n, DimIndexing dims, const I* index, const T* src, T value, T* out,
                                 ErrorWord error) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    const int64_t v = index[i];
    if (v < 0 || v >= dims.dim_size) {
      ReportBadIndex(error, v);
      continue;
    }
    out[StridedOffset(dims.self_offset, i) + v * dims.dim_stride] =
        src != nullptr ? src[StridedOffset(dims.src_offset, i)] : value;
  }
}

template <typename E, typename I>
__global__ void IndexSelectKernel(int64_t outer, int64_t size, int64_t inner, int64_t count, const E* self,
                                  const I* index, E* out, ErrorWord error) {
  const int64_t n = outer * count * inner;
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    const int64_t c = i % inner;
    const int64_t j = (i / inner) % count;
    const int64_t o = i / (inner * count);
    const int64_t v = index[j];
    if (v < 0 || v >= size) {
      if (o == 0 && c == 0) ReportBadIndex(error, v);
      out[i] = E{};
      continue;
    }
    out[i] = self[(o * size + v) * inner + c];
  }
}

template <typename T>
__global__ void ArangeKernel(int64_t n, double start, double step, int64_t int_start, int64_t int_step, bool exact,
                             T* out) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    out[i] = exact ? static_cast<T>(int_start + i * int_step) : static_cast<T>(start + static_cast<double>(i) * step);
  }
}

template <typename E>
__global__ void StridedScatterKernel(int64_t n, const E* in, StridedOperand layout, E* out) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) out[StridedOffset(layout, i)] = in[i];
}

}  // namespace

cudaError_t LaunchEmbedding(int element_bytes, int64_t count, int64_t rows, int64_t width, const void* weight,
                            IndexOperand ids, void* out, ErrorWord error, cudaStream_t stream) {
  if (count * width == 0) return cudaSuccess;
  const int64_t row_bytes = width * element_bytes;
  const bool known_size = element_bytes == 1 || element_bytes == 2 || element_bytes == 4 || element_bytes == 8;
  const bool vectorized = known_size && row_bytes % 16 == 0 && Aligned16(weight) && Aligned16(out);
  bool launched = false;
  DispatchIndex(ids.dtype, [&](auto index_tag) {
    using I = decltype(index_tag);
    const I* id = static_cast<const I*>(ids.data);
    if (vectorized) {
      const auto* w = static_cast<const uint4*>(weight);
      auto* o = static_cast<uint4*>(out);
      const int64_t units = row_bytes / 16;
      // Rows of 1 KB or more: two warps per row, a block per row (2240
      // blocks for the language model's [64, 35] ids of 4 KB rows, at 4.8-5.1
      // us per call on an H200 where a warp per row in blocks of eight took
      // 5.2; bench/results/2026-12-01-h200-embedding-shapes.json). Shorter
      // rows: a warp per row, eight rows per block.
      if (units >= 64) {
        LaunchEmbeddingRows<64, 2, 4>(count, rows, units, w, id, o, error, stream);
      } else {
        LaunchEmbeddingRows<kThreads, 1, 8>(count, rows, units, w, id, o, error, stream);
      }
      launched = true;
      return;
    }
    launched = DispatchElementBytes(element_bytes, [&](auto tag) {
      using E = decltype(tag);
      LaunchEmbeddingRows<kThreads, 1, 8>(count, rows, width, static_cast<const E*>(weight), id, static_cast<E*>(out),
                                          error, stream);
    });
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchEmbeddingBackward(DType dtype, int64_t count, int64_t rows, int64_t width, int64_t padding_idx,
                                    const void* grad, IndexOperand ids, void* grad_weight, ErrorWord error,
                                    cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(rows * width) * DTypeSize(dtype);
  if (bytes > 0) {
    const cudaError_t zeroed = cudaMemsetAsync(grad_weight, 0, bytes, stream);
    if (zeroed != cudaSuccess) return zeroed;
  }
  if (count * width == 0) return cudaSuccess;
  bool launched = false;
  DispatchIndex(ids.dtype, [&](auto index_tag) {
    using I = decltype(index_tag);
    launched = DispatchFloat(dtype, [&](auto tag) {
      using T = decltype(tag);
      EmbeddingBackwardKernel<T, I><<<Blocks(count * width), kThreads, 0, stream>>>(
          count, rows, width, padding_idx, static_cast<const T*>(grad), static_cast<const I*>(ids.data),
          static_cast<T*>(grad_weight), error);
    });
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchGatherDim(int element_bytes, int64_t n, const DimIndexing& dims, const void* self, IndexOperand index,
                            void* out, ErrorWord error, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  bool launched = false;
  DispatchIndex(index.dtype, [&](auto index_tag) {
    using I = decltype(index_tag);
    launched = DispatchElementBytes(element_bytes, [&](auto tag) {
      using E = decltype(tag);
      GatherDimKernel<E, I><<<Blocks(n), kThreads, 0, stream>>>(
          n, dims, static_cast<const E*>(self), static_cast<const I*>(index.data), static_cast<E*>(out), error);
    });
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchScatterDim(DType dtype, int64_t n, const DimIndexing& dims, IndexOperand index, const void* src,
                             double value, void* out, ErrorWord error, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  bool launched = false;
  DispatchIndex(index.dtype, [&](auto index_tag) {
    using I = decltype(index_tag);
    launched = DispatchStorable(dtype, [&](auto tag) {
      using T = decltype(tag);
      ScatterDimKernel<T, I><<<Blocks(n), kThreads, 0, stream>>>(n, dims, static_cast<const I*>(index.data),
                                                                 static_cast<const T*>(src), Convert<T>(value),
                                                                 static_cast<T*>(out), error);
    });
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchIndexSelect(int element_bytes, int64_t outer, int64_t size, int64_t inner, int64_t count,
                              const void* self, IndexOperand index, void* out, ErrorWord error, cudaStream_t stream) {
  const int64_t n = outer * count * inner;
  if (n == 0) return cudaSuccess;
  bool launched = false;
  DispatchIndex(index.dtype, [&](auto index_tag) {
    using I = decltype(index_tag);
    launched = DispatchElementBytes(element_bytes, [&](auto tag) {
      using E = decltype(tag);
      IndexSelectKernel<E, I>
          <<<Blocks(n), kThreads, 0, stream>>>(outer, size, inner, count, static_cast<const E*>(self),
                                               static_cast<const I*>(index.data), static_cast<E*>(out), error);
    });
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchArange(DType dtype, int64_t n, double start, double step, int64_t int_start, int64_t int_step,
                         bool exact, void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  bool launched = true;
  switch (dtype) {
    case DType::kFloat32:
      ArangeKernel<float>
          <<<Blocks(n), kThreads, 0, stream>>>(n, start, step, int_start, int_step, exact, static_cast<float*>(out));
      break;
    case DType::kFloat64:
      ArangeKernel<double>
          <<<Blocks(n), kThreads, 0, stream>>>(n, start, step, int_start, int_step, exact, static_cast<double*>(out));
      break;
    case DType::kInt64:
      ArangeKernel<int64_t>
          <<<Blocks(n), kThreads, 0, stream>>>(n, start, step, int_start, int_step, exact, static_cast<int64_t*>(out));
      break;
    default:
      launched = false;
  }
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchStridedScatter(int element_bytes, int64_t n, const void* in, const StridedOperand& out_layout,
                                 void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool launched = DispatchElementBytes(element_bytes, [&](auto tag) {
    using E = decltype(tag);
    StridedScatterKernel<E>
        <<<Blocks(n), kThreads, 0, stream>>>(n, static_cast<const E*>(in), out_layout, static_cast<E*>(out));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
