// Copies and fills: converting copies (copy, _to_copy, expand), byte-moving
// gathers (permute, transpose), a tiled transpose for the common matrix
// case, and constant fills.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/launch.h"

namespace tandem::cuda {
namespace {

template <typename To, typename From>
__global__ void ConvertCopyKernel(int64_t n, const From* in, StridedOperand layout, To* out) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    out[i] = Convert<To>(in[layout.rank == 0 ? i : StridedOffset(layout, i)]);
  }
}

template <typename E>
__global__ void GatherKernel(int64_t n, const E* in, StridedOperand layout, E* out) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) out[i] = in[StridedOffset(layout, i)];
}

constexpr int kTile = 32;
constexpr int kTileRows = 8;  // threads per tile column: each thread moves kTile / kTileRows elements

// One tile of 32 x 32 through shared memory: reads along input rows and
// writes along output rows, both coalesced. The +1 column avoids bank
// conflicts on the transposed read.
template <typename E>
__global__ void TransposeKernel(int64_t batch, int64_t rows, int64_t cols, const E* in, E* out) {
  __shared__ E tile[kTile][kTile + 1];
  const int64_t tiles_x = (cols + kTile - 1) / kTile;
  const int64_t tiles_y = (rows + kTile - 1) / kTile;
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const E* src = in + b * rows * cols;
    E* dst = out + b * rows * cols;
    for (int64_t ty = blockIdx.y; ty < tiles_y; ty += gridDim.y) {
      for (int64_t tx = blockIdx.x; tx < tiles_x; tx += gridDim.x) {
        const int64_t col = tx * kTile + threadIdx.x;
        for (int r = threadIdx.y; r < kTile; r += kTileRows) {
          const int64_t row = ty * kTile + r;
          if (row < rows && col < cols) tile[r][threadIdx.x] = src[row * cols + col];
        }
        __syncthreads();
        // Output is [cols, rows]: its row index is an input column.
        const int64_t out_col = ty * kTile + threadIdx.x;
        for (int r = threadIdx.y; r < kTile; r += kTileRows) {
          const int64_t out_row = tx * kTile + r;
          if (out_row < cols && out_col < rows) dst[out_row * rows + out_col] = tile[threadIdx.x][r];
        }
        __syncthreads();
      }
    }
  }
}

template <typename T>
__global__ void FillKernel(int64_t n, T value, T* out) {
  using V = Vec16<T>;
  constexpr int kCount = V::kCount;
  V v;
#pragma unroll
  for (int k = 0; k < kCount; ++k) v.v[k] = value;
  // The buffer is 16-byte aligned when the launcher picks this path.
  const int64_t vectors = n / kCount;
  for (int64_t i = GlobalThread(); i < vectors; i += GlobalStride()) reinterpret_cast<V*>(out)[i] = v;
  for (int64_t i = vectors * kCount + GlobalThread(); i < n; i += GlobalStride()) out[i] = value;
}

template <typename T>
__global__ void FillFlatKernel(int64_t n, T value, T* out) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) out[i] = value;
}

// 16-byte chunks when both sides allow it, bytes otherwise.
__global__ void CopyUnlessErrorKernel(const int64_t* error, const uint8_t* src, uint8_t* dst, size_t bytes) {
  if (error != nullptr && error[0] != 0) return;
  const bool wide = (reinterpret_cast<uintptr_t>(src) % 16 == 0) && (reinterpret_cast<uintptr_t>(dst) % 16 == 0);
  size_t done = 0;
  if (wide) {
    const size_t chunks = bytes / 16;
    for (int64_t i = GlobalThread(); i < static_cast<int64_t>(chunks); i += GlobalStride()) {
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    }
    done = chunks * 16;
  }
  for (int64_t i = GlobalThread(); i < static_cast<int64_t>(bytes - done); i += GlobalStride()) {
    dst[done + i] = src[done + i];
  }
}

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

__global__ void DelayKernel(uint64_t ns) {
  const uint64_t start = GlobalTimerNs();
  while (GlobalTimerNs() - start < ns) {
  }
}

__global__ void PublishErrorWordKernel(int64_t* error, int64_t* host) {
  const int64_t tag = error[0], value = error[1];
  host[1] = value;
  host[0] = tag;
  error[0] = 0;
  error[1] = 0;
}

// Rows of `units` units of U from src (rows src_pitch units apart) to dst
// (dst_pitch apart): a thread per unit, 32-bit index arithmetic, so a warp
// moves consecutive units of consecutive rows.
template <typename U>
__global__ void CopyRowsKernel(uint32_t rows, uint32_t units, const U* src, uint32_t src_pitch, U* dst,
                               uint32_t dst_pitch) {
  const uint32_t total = rows * units;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const uint32_t row = i / units;
    const uint32_t col = i - row * units;
    dst[static_cast<uint64_t>(row) * dst_pitch + col] = src[static_cast<uint64_t>(row) * src_pitch + col];
  }
}

template <typename U>
void CopyRowsAs(const void* src, size_t src_pitch, void* dst, size_t dst_pitch, size_t width, int64_t rows,
                cudaStream_t stream) {
  const uint32_t units = static_cast<uint32_t>(width / sizeof(U));
  const int64_t total = rows * units;
  const int blocks = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t{1} << 16));
  CopyRowsKernel<U><<<blocks, kThreads, 0, stream>>>(static_cast<uint32_t>(rows), units, static_cast<const U*>(src),
                                                     static_cast<uint32_t>(src_pitch / sizeof(U)), static_cast<U*>(dst),
                                                     static_cast<uint32_t>(dst_pitch / sizeof(U)));
}

}  // namespace

cudaError_t LaunchCopyUnlessError(const int64_t* error, const void* src, void* dst, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  const int64_t units = static_cast<int64_t>(bytes / 16 + 1);
  CopyUnlessErrorKernel<<<Blocks(units), kThreads, 0, stream>>>(error, static_cast<const uint8_t*>(src),
                                                                static_cast<uint8_t*>(dst), bytes);
  return LaunchError();
}

cudaError_t LaunchPublishErrorWord(int64_t* error, int64_t* host, cudaStream_t stream) {
  PublishErrorWordKernel<<<1, 1, 0, stream>>>(error, host);
  return LaunchError();
}

cudaError_t LaunchDelay(int microseconds, cudaStream_t stream) {
  if (microseconds <= 0) return cudaSuccess;
  DelayKernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(microseconds) * 1000);
  return LaunchError();
}

cudaError_t LaunchConvertCopy(DType out_dtype, DType in_dtype, int64_t n, const void* in,
                              const StridedOperand& in_layout, void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  bool launched = false;
  DispatchStorable(out_dtype, [&](auto to_tag) {
    using To = decltype(to_tag);
    launched = DispatchStorable(in_dtype, [&](auto from_tag) {
      using From = decltype(from_tag);
      ConvertCopyKernel<To, From>
          <<<Blocks(n), kThreads, 0, stream>>>(n, static_cast<const From*>(in), in_layout, static_cast<To*>(out));
    });
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchGather(int element_bytes, int64_t n, const void* in, const StridedOperand& in_layout, void* out,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool launched = DispatchElementBytes(element_bytes, [&](auto tag) {
    using E = decltype(tag);
    GatherKernel<E><<<Blocks(n), kThreads, 0, stream>>>(n, static_cast<const E*>(in), in_layout, static_cast<E*>(out));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

bool LaunchCopyRows(const void* src, size_t src_pitch, void* dst, size_t dst_pitch, size_t width, int64_t rows,
                    cudaStream_t stream) {
  if (rows * static_cast<int64_t>(width) >= (int64_t{1} << 31) || src_pitch >= (size_t{1} << 31) ||
      dst_pitch >= (size_t{1} << 31)) {
    return false;
  }
  const auto aligned = [&](size_t a) {
    return (reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | src_pitch | dst_pitch | width) % a ==
           0;
  };
  if (aligned(16)) {
    CopyRowsAs<uint4>(src, src_pitch, dst, dst_pitch, width, rows, stream);
  } else if (aligned(8)) {
    CopyRowsAs<uint2>(src, src_pitch, dst, dst_pitch, width, rows, stream);
  } else if (aligned(4)) {
    CopyRowsAs<uint32_t>(src, src_pitch, dst, dst_pitch, width, rows, stream);
  } else {
    CopyRowsAs<uint8_t>(src, src_pitch, dst, dst_pitch, width, rows, stream);
  }
  return true;
}

cudaError_t LaunchTranspose(int element_bytes, int64_t batch, int64_t rows, int64_t cols, const void* in, void* out,
                            cudaStream_t stream) {
  if (batch == 0 || rows == 0 || cols == 0) return cudaSuccess;
  const int64_t tiles_x = (cols + kTile - 1) / kTile;
  const int64_t tiles_y = (rows + kTile - 1) / kTile;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(tiles_x, 1 << 20)),
                  static_cast<unsigned>(std::min<int64_t>(tiles_y, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(batch, 65535)));
  const dim3 block(kTile, kTileRows);
  const bool launched = DispatchElementBytes(element_bytes, [&](auto tag) {
    using E = decltype(tag);
    TransposeKernel<E><<<grid, block, 0, stream>>>(batch, rows, cols, static_cast<const E*>(in), static_cast<E*>(out));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchFill(DType dtype, int64_t n, double value, void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool launched = DispatchStorable(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = Convert<T>(value);
    if (Aligned16(out)) {
      FillKernel<T><<<Blocks(n / Vec16<T>::kCount + 1), kThreads, 0, stream>>>(n, v, static_cast<T*>(out));
    } else {
      FillFlatKernel<T><<<Blocks(n), kThreads, 0, stream>>>(n, v, static_cast<T*>(out));
    }
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
