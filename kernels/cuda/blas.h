// Matrix products on CUDA through cuBLASLt (classic cuBLAS as the fallback
// when cuBLASLt offers no algorithm), for kernels/cuda's mm and addmm.
//
// float32 products accumulate in float32 with no TF32 (PyTorch's default
// for float32 matmul) unless a spec allows TF32 tensor cores (what PyTorch's
// cuDNN RNNs use under torch.backends.cudnn.allow_tf32, its default);
// float64 in float64; bfloat16 and float16 (operands, output, c and bias
// all of that type) accumulate in float32 with float32 alpha and beta and
// round once into the output (CUBLAS_COMPUTE_32F, as PyTorch's half matmul
// without reduced-precision reductions). Row-major operands map onto the
// column-major libraries by computing out^T = op(b)^T op(a)^T, which needs
// no copies.
//
// Each stream gets its own handles, a workspace and a cache of the chosen
// algorithms (a CudaStream attachment), so products on different streams
// never share a workspace, and a product captured into a CUDA graph on a
// stream keeps using that stream's workspace, which lives as long as the
// stream. Not thread-safe beyond that of the stream (one enqueuing thread).
#ifndef TANDEM_KERNELS_CUDA_BLAS_H_
#define TANDEM_KERNELS_CUDA_BLAS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "device/cuda/cuda_stream.h"
#include "ir/dtype.h"

namespace tandem::cuda {

// out[n, m] = alpha * op(a) @ op(b) + beta * c + bias, all row-major and
// contiguous.
struct MatmulSpec {
  DType dtype = DType::kFloat32;  // float32, float64, bfloat16 or float16
  int64_t n = 0, k = 0, m = 0;
  bool trans_a = false;  // a is stored [k, n] (op(a) = a^T); else [n, k]
  bool trans_b = false;  // b is stored [m, k]; else [k, m]
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  // float32 only: inputs may be rounded to TF32 on tensor cores (10-bit
  // mantissa, float32 accumulation).
  bool allow_tf32 = false;
  double alpha = 1.0;
  double beta = 0.0;
  const void* c = nullptr;     // [n, m], may be `out`; ignored when beta == 0
  const void* bias = nullptr;  // [m], added to every row; not with `c`
  // Elements from one row of `out` (and of `c`) to the next; 0 means m
  // (dense). A larger stride writes the first m columns of a wider
  // row-major matrix (the LSTM's gate block inside its saved state). Not
  // with `bias` or batches.
  int64_t ld_out = 0;
  // Strided batches (bmm): `batch` products, product i reading a + i *
  // stride_a, b + i * stride_b and writing out + i * stride_out (strides in
  // elements). Not with `c` or `bias`.
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_out = 0;
};

// Enqueues the product on `stream`. n, m and k must be positive.
absl::Status Matmul(device::CudaStream& stream, const MatmulSpec& spec);

// Routes every product through classic cuBLAS instead of cuBLASLt (tests
// compare the two paths). Process-wide.
void SetMatmulForceCublasForTesting(bool force);

// Bytes of the per-stream workspace (for memory reserves).
inline constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_BLAS_H_
