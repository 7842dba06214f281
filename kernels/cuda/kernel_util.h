// Building blocks of the CUDA op wrappers (kernels/cuda/*_ops.cc only): the
// per-family kernel tables, launch-error conversion and dtype checks.
#ifndef TANDEM_KERNELS_CUDA_KERNEL_UTIL_H_
#define TANDEM_KERNELS_CUDA_KERNEL_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "device/cuda/cuda_status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernel_table.h"

namespace tandem::cuda {

using CudaKernelTable = KernelTable<CudaKernelFn>;
void AddElementwiseKernels(CudaKernelTable& table);
void AddLinalgKernels(CudaKernelTable& table);
void AddReductionKernels(CudaKernelTable& table);
void AddShapeKernels(CudaKernelTable& table);
void AddLossKernels(CudaKernelTable& table);
void AddFactoryKernels(CudaKernelTable& table);
void AddConvolutionKernels(CudaKernelTable& table);
using CudaWarmTable = KernelTable<CudaWarmFn>;
void AddConvolutionWarmers(CudaWarmTable& table);  // FindCudaWarmer's
void AddPoolingKernels(CudaKernelTable& table);
void AddBatchNormKernels(CudaKernelTable& table);
void AddIndexingKernels(CudaKernelTable& table);
void AddSlicingKernels(CudaKernelTable& table);
void AddActivationKernels(CudaKernelTable& table);
void AddComparisonKernels(CudaKernelTable& table);
void AddNormalizationKernels(CudaKernelTable& table);
void AddAttentionKernels(CudaKernelTable& table);
void AddFusedKernels(CudaKernelTable& table);
void AddRecurrentKernels(CudaKernelTable& table);
void AddMathKernels(CudaKernelTable& table);
void AddGroupNormKernels(CudaKernelTable& table);
void AddSpatialKernels(CudaKernelTable& table);        // resampling, padding, 3-D pooling
void AddAdvancedIndexKernels(CudaKernelTable& table);  // index.Tensor, index_put, scatter_add/_reduce, masked_scatter
void AddStridedKernels(CudaKernelTable& table);        // as_strided, diagonal, flip, repeat, slice/select scatters
void AddRandomKernels(CudaKernelTable& table);         // bernoulli.p, rand, randn, empty.memory_format, empty_strided
void AddTestKernels(CudaKernelTable& table);           // test_fault (test_fault.cu)

inline absl::Status UnsupportedDType(const KernelArgs& args, DType dtype) {
  return absl::UnimplementedError(
      absl::StrCat(args.node->op, ": the CUDA backend has no kernel for dtype ", DTypeName(dtype)));
}

// A launcher's result as a Status naming the op. Launchers answer
// cudaErrorInvalidValue, without launching, for a dtype they have no kernel
// for (the wrappers check dtypes first, so this is a backstop).
inline absl::Status Launched(const KernelArgs& args, cudaError_t error, DType dtype) {
  if (error == cudaSuccess) return absl::OkStatus();
  if (error == cudaErrorInvalidValue) {
    return absl::UnimplementedError(
        absl::StrCat(args.node->op, ": no CUDA kernel for dtype ", DTypeName(dtype), " (or an invalid launch)"));
  }
  return device::CudaStatus(error, absl::StrCat(args.node->op, " kernel launch"));
}

// Whether `stream` is being captured into a CUDA graph (so nothing may
// synchronize or allocate); `if_unknown` when CUDA cannot tell (its error is
// cleared).
inline bool Capturing(cudaStream_t stream, bool if_unknown = false) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return if_unknown;
  }
  return status != cudaStreamCaptureStatusNone;
}

// Whether the environment variable `name` is set to `value` (the daemon's
// switches: TANDEM_CUDNN_ALGOS=heuristic, TANDEM_CUDNN_ENGINES=0, ...). Read
// at each call: callers keep the answer in a static.
inline bool EnvIs(const char* name, const char* value) {
  const char* set = std::getenv(name);
  return set != nullptr && std::strcmp(set, value) == 0;
}

// Copies `bytes` from `src` to `dst` on the stream unless they are the same
// buffer (a view the planner placed on its input).
inline absl::Status CopyBytes(const CudaKernelContext& context, void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, context.native));
  return absl::OkStatus();
}

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_KERNEL_UTIL_H_
