// The launchers of the reductions beyond sum and mean (extremum_kernels.cu:
// amax / amin, argmax / argmin and max.dim / min.dim; norm_var_kernels.cu:
// var, linalg_vector_norm; prod_scan_kernels.cu: prod) and of the scans and
// sorts (prod_scan_kernels.cu: cumsum; sort_kernels.cu: sort, topk). The conventions of launch.h: plain
// functions over device pointers and small structs, enqueued on `stream`,
// returning the launch's error, cudaErrorInvalidValue (without launching)
// for a dtype they have no kernel for. 16-bit floats (bfloat16, float16)
// are read as float32 and every result rounded once when stored; float32
// accumulates in float32 (as PyTorch's CUDA kernels do), anything with a
// float64 side in float64, int64 in int64 with two's-complement wraparound.
// Thread-safe (stateless).
#ifndef TANDEM_KERNELS_CUDA_REDUCE_LAUNCH_H_
#define TANDEM_KERNELS_CUDA_REDUCE_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ir/dtype.h"
#include "kernels/cuda/launch.h"

namespace tandem::cuda {

// What a reduction reads for each of its `out_n` outputs (in the output's
// row-major order): `count` elements of the input, either of
// [out_n / inner, count, inner] (general false: output j = o * inner + i
// reads in[o][r][i]) or, with `general`, at StridedOffset(kept, j) +
// StridedOffset(reduced, r). count may be 0 (an empty slice: the op's
// identity, or NaN for var).
struct ReduceLayout {
  int64_t out_n = 0;
  int64_t count = 0;
  int64_t inner = 1;
  bool general = false;
  StridedOperand kept;
  StridedOperand reduced;
};

// amax (max) or amin over each slice, NaN-propagating; dtype float32,
// float64, int64, bfloat16, float16; out has in's dtype. count >= 1.
cudaError_t LaunchExtremum(bool max, DType dtype, const ReduceLayout& layout, const void* in, void* out,
                           cudaStream_t stream);

// The position (0 .. count - 1) of the first maximum (minimum) of each
// slice into `indices` (int64), and its value into `values` (in's dtype)
// unless values is null. A NaN is the extreme of both kinds (the first NaN
// wins), as in PyTorch. layout.general must be false; count >= 1.
cudaError_t LaunchArgExtremum(bool max, DType dtype, const ReduceLayout& layout, const void* in, void* values,
                              int64_t* indices, cudaStream_t stream);

// sum((x - mean)^2) / max(0, count - correction) of each slice (Welford's
// running mean and squared deviations, combined pairwise); dtype float32,
// float64, bfloat16, float16.
cudaError_t LaunchVar(DType dtype, const ReduceLayout& layout, double correction, const void* in, void* out,
                      cudaStream_t stream);

// linalg_vector_norm's accumulations (reduction_rules.h's NormKind, in the
// same order).
enum class VectorNormOp { kSumSquares, kSumAbs, kMaxAbs, kMinAbs, kCountNonZero, kSumPow };

// The vector norm of each slice: sqrt(sum x^2), sum |x|, max |x|, min |x|
// (both NaN-propagating), the count of x != 0, or (sum |x|^p)^(1/p). Pairs
// (in -> out): a float dtype to itself, float32 to float64, a 16-bit float
// to float32.
cudaError_t LaunchVectorNorm(VectorNormOp op, double p, DType out_dtype, DType in_dtype, const ReduceLayout& layout,
                             const void* in, void* out, cudaStream_t stream);

// The product of each slice (1 when empty). Pairs (in -> out): any of
// float32, float64, int64, bfloat16, float16 to itself, float32 to float64,
// a 16-bit float to float32, int64 to float32 or float64. layout.general
// must be false.
cudaError_t LaunchProd(DType out_dtype, DType in_dtype, const ReduceLayout& layout, const void* in, void* out,
                       cudaStream_t stream);

// out[o][r][i] = sum of in[o][0..r][i] over [outer, size, inner], the
// dtype pairs of LaunchProd. A line (o, i) belongs to one thread when lines
// are many or short, else to a warp or a block that scans it in chunks.
cudaError_t LaunchCumsum(DType out_dtype, DType in_dtype, int64_t outer, int64_t size, int64_t inner, const void* in,
                         void* out, cudaStream_t stream);

// sort along the middle dim of [outer, size, inner]: values (in's dtype)
// and int64 positions, ascending or descending, NaN above every number,
// equal values in the order of their positions (stable). Any dtype of
// LaunchExtremum. values and indices are the workspace (no allocation).
cudaError_t LaunchSort(DType dtype, int64_t outer, int64_t size, int64_t inner, bool descending, const void* in,
                       void* values, int64_t* indices, cudaStream_t stream);

// topk: the first k (0 <= k <= size) of sort's order (descending when
// `largest`), in that order, into values and indices of [outer, k, inner].
// Costs k passes over each line unless k == size.
cudaError_t LaunchTopk(DType dtype, int64_t outer, int64_t size, int64_t inner, int64_t k, bool largest, const void* in,
                       void* values, int64_t* indices, cudaStream_t stream);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_REDUCE_LAUNCH_H_
