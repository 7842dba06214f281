// The launchers of the CUDA kernels of the LSTM, transformer and Adam/AdamW
// op families (activations, comparisons, indexing, normalization,
// attention): plain functions over raw device pointers and small parameter
// structs, in the style of launch.h (no absl types; the op wrappers in
// *_ops.cc validate and parse attributes). Every launcher enqueues on
// `stream` and returns the launch's error (cudaSuccess when there is nothing
// to do; cudaErrorInvalidValue, without launching, for a dtype it has no
// kernel for). Float32 math accumulates in float32, float64 in float64.
// Thread-safe (stateless).
#ifndef TANDEM_KERNELS_CUDA_SEQUENCE_LAUNCH_H_
#define TANDEM_KERNELS_CUDA_SEQUENCE_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ir/dtype.h"
#include "kernels/cuda/launch.h"

namespace tandem::cuda {

// ---- activations and pointwise math (activation_kernels.cu) ----

enum class PointwiseOp {
  // one operand
  kSigmoid,
  kTanh,
  kExp,
  kLog,
  kRsqrt,
  kGelu,
  kGeluTanh,
  kPowExponent,  // x ^ p.f
  kPowBase,      // p.f ^ x
  kClamp,        // by PointwiseParams' bounds; NaN stays NaN
  // two operands
  kSigmoidBackward,  // (grad, y): grad * (1 - y) * y
  kTanhBackward,     // (grad, y): grad * (1 - y * y)
  kGeluBackward,     // (grad, x)
  kGeluTanhBackward,
  kMaximum,  // NaN-propagating
  kMinimum,
  kLerpScalar,  // (self, end) with weight p.f
  // three operands
  kAddcmul,  // self + p.f * t1 * t2
  kAddcdiv,  // self + p.f * t1 / t2
  kLerp,     // (self, end, weight)
};

struct PointwiseParams {
  ScalarParam p;       // the op's number (exponent, value, weight)
  ScalarParam lo, hi;  // clamp's bounds
  bool has_lo = false, has_hi = false;
};

// out[i] = op(operands at i) for the out's n elements, all of `dtype`
// (operands marked scalar are one element of their own dtype, converted).
// Dtypes: float32, float64; kClamp, kMaximum, kMinimum, kAddcmul also int64.
cudaError_t LaunchPointwise(PointwiseOp op, DType dtype, int64_t n, const BinaryOperand* operands, int arity, void* out,
                            const PointwiseParams& params, cudaStream_t stream);

// native_dropout: out = keep ? x * scale : 0 (train) or x, mask = keep.
// `seed` (device, may be null) is the optional int64 seed tensor.
struct DropoutParams {
  int64_t attr_seed = 0;
  uint32_t threshold = 0;  // dropout::Threshold(p); 0 keeps all
  double scale = 1.0;
  bool train = true;
};
cudaError_t LaunchNativeDropout(DType dtype, int64_t n, const void* x, const int64_t* seed, const DropoutParams& params,
                                void* out, bool* mask, cudaStream_t stream);
// grad_in = grad * mask * scale.
cudaError_t LaunchDropoutBackward(DType dtype, int64_t n, const void* grad, const bool* mask, double scale,
                                  void* grad_in, cudaStream_t stream);

// ---- comparisons and boolean ops (comparison_kernels.cu) ----

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe };

// out (bool) = a op b, both read as `dtype` (float32, float64, int64, int32,
// bool).
cudaError_t LaunchCompare(CompareOp op, DType dtype, int64_t n, const BinaryOperand& a, const BinaryOperand& b,
                          bool* out, cudaStream_t stream);

// out (bool) = x op number: in x's dtype for a float x; for an integer or
// bool x in int64 (other.i) when `int_number`, else in float32 (other.f).
cudaError_t LaunchCompareScalar(CompareOp op, DType dtype, int64_t n, const void* x, ScalarParam other, bool int_number,
                                bool* out, cudaStream_t stream);

// out = cond ? a : b; cond is bool, a and b of `dtype`.
cudaError_t LaunchWhere(DType dtype, int64_t n, const BinaryOperand& cond, const BinaryOperand& a,
                        const BinaryOperand& b, void* out, cudaStream_t stream);

// out = mask ? value : x; x contiguous of out's size; value one element of
// `value_dtype` at `value` (device) or, when `value` is null, `number`. For
// a bfloat16 or float16 `dtype` the value goes through float32 and is
// rounded to `dtype` once (bits copied otherwise).
cudaError_t LaunchMaskedFill(DType dtype, int64_t n, const void* x, const BinaryOperand& mask, const void* value,
                             DType value_dtype, double number, void* out, cudaStream_t stream);

// out (bool) = x == 0 for x of `dtype` (16-bit floats too: -0 is zero, NaN
// is not).
cudaError_t LaunchLogicalNot(DType dtype, int64_t n, const void* x, bool* out, cudaStream_t stream);

// out[o, i] = any(x[o, :, i] != 0) over [outer, size, inner], or with the
// general layouts of LaunchReduceGeneral when `reduced.rank` > 0 (then
// outer/size/inner are ignored).
cudaError_t LaunchAny(DType dtype, int64_t outer, int64_t size, int64_t inner, const StridedOperand& kept,
                      const StridedOperand& reduced, int64_t out_n, const void* x, bool* out, cudaStream_t stream);

// ---- indexing (indexing_kernels.cu) ----
// Index values are checked on the GPU: a bad one is skipped and reported
// through the error word (launch.h). Index tensors are int64 or int32
// (launch.h's IndexOperand).

// out[n, :] = weight[ids[n], :] for weight [rows, width] (element_bytes 1-8).
cudaError_t LaunchEmbedding(int element_bytes, int64_t count, int64_t rows, int64_t width, const void* weight,
                            IndexOperand ids, void* out, ErrorWord error, cudaStream_t stream);
// grad_weight (zeroed here) [rows, width] += grad[n, :] at ids[n], except
// ids equal to padding_idx (atomic adds in the float dtype).
cudaError_t LaunchEmbeddingBackward(DType dtype, int64_t count, int64_t rows, int64_t width, int64_t padding_idx,
                                    const void* grad, IndexOperand ids, void* grad_weight, ErrorWord error,
                                    cudaStream_t stream);

// The index tensor of gather / scatter over `index_layout` (index's shape;
// strides: where element i lands in self apart from dim), with self's
// `dim_size` and `dim_stride`.
struct DimIndexing {
  StridedOperand self_offset;  // over index's shape: offset in self without dim
  StridedOperand src_offset;   // scatter.src: offset in src of element i
  int64_t dim_size = 0;
  int64_t dim_stride = 0;
};
// out[i] = self[self_offset(i) + index[i] * dim_stride].
cudaError_t LaunchGatherDim(int element_bytes, int64_t n, const DimIndexing& dims, const void* self, IndexOperand index,
                            void* out, ErrorWord error, cudaStream_t stream);
// out (already a copy of self)[self_offset(i) + index[i] * dim_stride] =
// src[src_offset(i)] (or the `value` element when src is null).
cudaError_t LaunchScatterDim(DType dtype, int64_t n, const DimIndexing& dims, IndexOperand index, const void* src,
                             double value, void* out, ErrorWord error, cudaStream_t stream);
// out[o, j, :] = self[o, index[j], :] over [outer, size, inner].
cudaError_t LaunchIndexSelect(int element_bytes, int64_t outer, int64_t size, int64_t inner, int64_t count,
                              const void* self, IndexOperand index, void* out, ErrorWord error, cudaStream_t stream);

// out[i] = start + i * step (int64: exactly from the integer forms).
cudaError_t LaunchArange(DType dtype, int64_t n, double start, double step, int64_t int_start, int64_t int_step,
                         bool exact, void* out, cudaStream_t stream);

// out[offset(i)] = in[i]: the inverse of LaunchGather (a contiguous input
// written into a strided region of out).
cudaError_t LaunchStridedScatter(int element_bytes, int64_t n, const void* in, const StridedOperand& out_layout,
                                 void* out, cudaStream_t stream);

// ---- softmax and layer norm (normalization_kernels.cu) ----

// Softmax over the middle dim of [outer, size, inner]; a slice of all -inf
// is NaN, or zeros with `zero_if_all_neg_inf` (_safe_softmax).
cudaError_t LaunchSoftmax(DType dtype, int64_t outer, int64_t size, int64_t inner, bool zero_if_all_neg_inf,
                          const void* in, void* out, cudaStream_t stream);
// grad_in = y * (grad - sum(grad * y)); grad_in may be grad.
cudaError_t LaunchSoftmaxBackward(DType dtype, int64_t outer, int64_t size, int64_t inner, const void* grad,
                                  const void* y, void* grad_in, cudaStream_t stream);
// Over [rows, cols]; weight and bias [cols] may be null.
cudaError_t LaunchLayerNorm(DType dtype, int64_t rows, int64_t cols, double eps, const void* x, const void* weight,
                            const void* bias, void* y, void* mean, void* rstd, cudaStream_t stream);
cudaError_t LaunchLayerNormBackward(DType dtype, int64_t rows, int64_t cols, const void* grad, const void* x,
                                    const void* mean, const void* rstd, const void* weight, void* grad_x,
                                    void* grad_weight, void* grad_bias, cudaStream_t stream);
// The row-tile kernels of softmax, log_softmax (every float dtype) and
// layer norm index in 32 bits, so their launchers split a tensor into
// launches of at most 2^30 elements; a test lowers that to make several
// launches of a small tensor (0 restores the default). Not thread-safe with
// launches in flight.
void SetTileLaunchElementsForTesting(int64_t elements);

// ---- attention (attention_kernels.cu) ----

struct AttentionParams {
  int64_t batch = 1, rows = 0, keys = 0, head = 0, value_head = 0;
  float scale_f = 1.0f;
  double scale = 1.0;
  bool causal = false;
  // The mask / bias (may be null): bool (true keeps) or of the dtype (added),
  // read at mask_batch(b) + i * mask_row_stride + j * mask_key_stride, where
  // mask_batch maps a batch entry to its offset (sizes: the batch dims).
  const void* mask = nullptr;
  bool mask_is_bool = false;
  StridedOperand mask_batch;
  int64_t mask_row_stride = 0, mask_key_stride = 0;
  int64_t lse_row = 0;  // row stride of logsumexp (0: not written)
};
// out [batch, rows, value_head], lse [batch, lse_row] (padding written 0).
cudaError_t LaunchAttentionForward(DType dtype, const AttentionParams& params, const void* q, const void* k,
                                   const void* v, void* out, void* lse, cudaStream_t stream);
// Gradients of q, k, v (and of the mask, a float bias, when grad_bias is not
// null: written directly when `bias_full`, else zeroed and accumulated).
cudaError_t LaunchAttentionBackward(DType dtype, const AttentionParams& params, const void* grad_out, const void* q,
                                    const void* k, const void* v, const void* out, const void* lse, void* grad_q,
                                    void* grad_k, void* grad_v, void* grad_bias, bool bias_full, int64_t bias_numel,
                                    cudaStream_t stream);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_SEQUENCE_LAUNCH_H_
