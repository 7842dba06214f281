// The launchers of the CUDA kernels of advanced indexing (index.Tensor,
// index_put), the reducing scatters (scatter_add, scatter_reduce.two),
// masked_scatter (advanced_index_kernels.cu) and the random ops
// (random_kernels.cu): plain functions over raw device pointers and small
// parameter structs, in the style of launch.h (no absl types; the op
// wrappers validate and parse attributes). Every launcher enqueues on
// `stream` and returns the launch's error (cudaSuccess when there is nothing
// to do; cudaErrorInvalidValue, without launching, for a dtype it has no
// kernel for). Index values are checked on the GPU: a bad one is skipped
// and reported through the error word (launch.h). Thread-safe (stateless).
#ifndef TANDEM_KERNELS_CUDA_INDEX_LAUNCH_H_
#define TANDEM_KERNELS_CUDA_INDEX_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ir/dtype.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/sequence_launch.h"

namespace tandem::cuda {

// ---- advanced indexing (advanced_index_kernels.cu) ----

inline constexpr int kMaxAdvancedIndices = kMaxDims;

// index.Tensor and index_put over the n elements of self[indices]'s shape
// (ir/ops/index_rules.h): element i is self's element self_layout(i) +
// sum_j index_j[index_layout[j](i)] * dim_stride[j], each index value in
// [-dim_size[j], dim_size[j]) and wrapped when negative. Layouts are
// collapsed together over that shape (rank 0: element i).
struct AdvancedIndexParams {
  int k = 0;
  int64_t n = 0;
  IndexOperand index[kMaxAdvancedIndices];
  StridedOperand index_layout[kMaxAdvancedIndices];
  int64_t dim_size[kMaxAdvancedIndices] = {};
  int64_t dim_stride[kMaxAdvancedIndices] = {};
  StridedOperand self_layout;
  StridedOperand values_layout;  // index_put: values, broadcast to the shape
  bool accumulate = false;       // index_put
};
// out[i] = self's element i names (0 where an index is bad), elements of
// `element_bytes` (1, 2, 4 or 8) bytes.
cudaError_t LaunchAdvancedIndex(int element_bytes, const AdvancedIndexParams& params, const void* self, void* out,
                                ErrorWord error, cudaStream_t stream);
// out (already a copy of self) at element i's place = values (or += with
// accumulate: atomic adds in the tensor's dtype, 16-bit ones included;
// bool: or). Any storable or 16-bit dtype.
cudaError_t LaunchAdvancedIndexPut(DType dtype, const AdvancedIndexParams& params, const void* values, void* out,
                                   ErrorWord error, cudaStream_t stream);

enum class ScatterReduceOp { kSum, kProd, kMean, kAmax, kAmin };

// scatter_add / scatter_reduce.two on out (already a copy of self): index
// element i (n of them, `dims` as for LaunchScatterDim) combines src's
// element into out's, atomically (sum and mean by atomic adds, the others
// by compare-and-swap loops; amax / amin propagate NaN). Without
// `include_self` every targeted element starts from the reduction's
// identity. For kMean, `counts` (int64, out_n elements, written here) gets
// the number of values each element combined and out is divided by it
// (integers rounding toward -infinity). Dtypes: float32, float64, int64,
// int32, bfloat16, float16 (16-bit values combine in float32, rounded at
// each combination).
cudaError_t LaunchScatterReduce(DType dtype, ScatterReduceOp op, bool include_self, int64_t n, const DimIndexing& dims,
                                IndexOperand index, const void* src, void* out, int64_t out_n, int64_t* counts,
                                ErrorWord error, cudaStream_t stream);

// masked_scatter: out[i] = mask[mask_layout(i)] ? source[k] : self[i] over
// n elements, k counting the true mask elements before i. One block walks
// the tensor in order (a running count, no scratch space); more true
// elements than source_n is reported as that count. out may be self.
cudaError_t LaunchMaskedScatter(int element_bytes, int64_t n, const bool* mask, const StridedOperand& mask_layout,
                                const void* self, const void* source, int64_t source_n, void* out, ErrorWord error,
                                cudaStream_t stream);

// ---- random ops (random_kernels.cu) ----
// Keyed as native_dropout keys its mask: dropout::Key(attr_seed, *seed),
// `seed` (device, may be null) the optional int64 seed tensor; the numbers
// are ir/ops/random_draws.h's.

// out[i] = 1 with probability threshold / 2^24, else 0, of any storable or
// 16-bit dtype.
cudaError_t LaunchBernoulli(DType dtype, int64_t n, int64_t attr_seed, const int64_t* seed, uint32_t threshold,
                            void* out, cudaStream_t stream);

enum class RandomDistribution { kUniform, kNormal };
// rand / randn of a float dtype (float32, float64, bfloat16, float16).
cudaError_t LaunchRandom(DType dtype, RandomDistribution distribution, int64_t n, int64_t attr_seed,
                         const int64_t* seed, void* out, cudaStream_t stream);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_INDEX_LAUNCH_H_
