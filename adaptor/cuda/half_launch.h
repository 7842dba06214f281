// The launchers of the CUDA kernels for 16-bit float tensors (bfloat16 and
// float16): half_kernels.cu (conversions, pointwise ops, dropout) and
// half_row_kernels.cu (reductions, softmax, layer norm, nll loss, embedding
// backward).
//
// Every kernel loads 16-bit values, computes in float32 and rounds once when
// it stores (to nearest, ties to even), which is PyTorch's rule for these
// types; sums (reductions, softmax, layer norm statistics, nll loss, embedding
// gradients) accumulate in float32 in a fixed order, so results repeat bit
// for bit. `dtype` arguments name the 16-bit type (kBFloat16 or kFloat16);
// any other answers cudaErrorInvalidValue without launching. The same
// conventions as launch.h otherwise: plain functions over device pointers,
// enqueued on `stream`, returning the launch's error. Thread-safe.
#ifndef TANDEM_ADAPTOR_CUDA_HALF_LAUNCH_H_
#define TANDEM_ADAPTOR_CUDA_HALF_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "adaptor/cuda/launch.h"
#include "adaptor/dtype.h"

namespace tandem::cuda {

inline bool IsHalfDType(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// ---- conversions and pointwise ops (half_kernels.cu) ----

// Fills n elements with `value` rounded to the 16-bit type.
cudaError_t LaunchHalfFill(DType dtype, int64_t n, float value, void* out, cudaStream_t stream);

// out[i] = convert(in[offset(i)]) where at least one side is a 16-bit float
// and the other any storable dtype: a 16-bit value widens exactly to float;
// a float, double or integer rounds to the 16-bit type through float (as
// PyTorch converts); bool is "nonzero" / 0 or 1.
cudaError_t LaunchHalfConvertCopy(DType out_dtype, DType in_dtype, int64_t n, const void* in,
                                  const StridedOperand& in_layout, void* out, cudaStream_t stream);

enum class HalfPointwiseOp {
  // Two operands (a, b):
  kAdd,                // a + p * b
  kSub,                // a - p * b
  kMul,                // a * b
  kDiv,                // a / b
  kThresholdBackward,  // b > p ? a : 0 (a: grad_output, b: self)
  kGeluBackward,       // exact gelu's derivative at b, times a (a: grad_output, b: self)
  kGeluTanhBackward,   // the same for the tanh approximation
  // One operand (a):
  kNeg,
  kRelu,  // a < 0 ? 0 : a (keeps NaN)
  kAddConst,
  kMulConst,
  kDivConst,
  kGelu,
  kGeluTanh,
};

// out[i] = op(a[i], b[i]) over out's `n` elements of `dtype`. Each operand is
// contiguous of `dtype` (layout rank 0), strided of `dtype`, or with
// `scalar` set one element of `scalar_dtype`, rounded to `dtype` (PyTorch
// converts a rank-0 operand of another dtype to the result's). `b` is
// ignored by the one-operand ops. `param` (alpha, a scalar op's constant) is
// used in float32 as is, as PyTorch uses such numbers.
cudaError_t LaunchHalfPointwise(HalfPointwiseOp op, DType dtype, int64_t n, const BinaryOperand& a,
                                const BinaryOperand& b, float param, void* out, cudaStream_t stream);

// native_dropout of a 16-bit `x` (n elements); the mask as dropout_mask.h
// computes it, so it equals the float32 kernels' and the CPU's bit for bit.
// `params` as sequence_launch.h's DropoutParams, passed field by field.
cudaError_t LaunchHalfDropout(DType dtype, int64_t n, const void* x, const int64_t* seed, bool train,
                              int64_t attr_seed, uint32_t threshold, float scale, void* out, bool* mask,
                              cudaStream_t stream);
// grad_input = mask ? grad * scale : 0.
cudaError_t LaunchHalfDropoutBackward(DType dtype, int64_t n, const void* grad, const bool* mask, float scale,
                                      void* out, cudaStream_t stream);

// ---- row kernels and reductions (half_row_kernels.cu) ----

// out[outer, inner] = sum (or mean) of in[outer, size, inner] over the
// middle dim. in_dtype or out_dtype (or both) is 16-bit; the other may be
// float32 or float64 (sum's `dtype` attribute). Accumulates in float32
// (float64 when either side is float64).
cudaError_t LaunchHalfReduceMiddle(DType out_dtype, DType in_dtype, int64_t outer, int64_t size, int64_t inner,
                                   bool mean, const void* in, void* out, cudaStream_t stream);
// Scattered reduced dims, as LaunchReduceGeneral.
cudaError_t LaunchHalfReduceGeneral(DType out_dtype, DType in_dtype, int64_t out_n, const StridedOperand& kept,
                                    const StridedOperand& reduced, bool mean, const void* in, void* out,
                                    cudaStream_t stream);

// softmax (log_softmax when `log`) over the middle dim of [outer, size,
// inner].
cudaError_t LaunchHalfSoftmax(DType dtype, bool log, int64_t outer, int64_t size, int64_t inner, const void* in,
                              void* out, cudaStream_t stream);
// softmax: grad_in = output * (grad - sum(grad * output));
// log_softmax: grad_in = grad - exp(output) * sum(grad). grad_in may be grad.
cudaError_t LaunchHalfSoftmaxBackward(DType dtype, bool log, int64_t outer, int64_t size, int64_t inner,
                                      const void* grad, const void* output, void* grad_in, cudaStream_t stream);

// Layer norm over the rows of x [rows, cols] (16-bit); weight and bias
// ([cols], 16-bit) may be null; mean and rstd are float32 [rows].
cudaError_t LaunchHalfLayerNorm(DType dtype, int64_t rows, int64_t cols, double eps, const void* x,
                                const void* weight, const void* bias, void* y, float* mean, float* rstd,
                                cudaStream_t stream);
// Its backward: grad_input [rows, cols], grad_weight and grad_bias [cols]
// (always written; weight may be null, meaning ones).
cudaError_t LaunchHalfLayerNormBackward(DType dtype, int64_t rows, int64_t cols, const void* grad_out,
                                        const void* x, const float* mean, const float* rstd, const void* weight,
                                        void* grad_input, void* grad_weight, void* grad_bias, cudaStream_t stream);

// nll_loss of 16-bit log-probabilities (launch.h's NllParams); the loss and
// total_weight are 16-bit, sums float32.
cudaError_t LaunchHalfNllLossForward(DType dtype, const NllParams& params, const void* self, const int64_t* target,
                                     const void* weight, void* loss, void* total_weight, cudaStream_t stream);
cudaError_t LaunchHalfNllLossBackward(DType dtype, const NllParams& params, const void* grad_output,
                                      const int64_t* target, const void* total_weight, const void* weight,
                                      void* grad_input, cudaStream_t stream);

// grad_weight [rows, width] = sum over the `count` ids of grad [count, width]
// rows, id padding_idx skipped (-1: none): a block per weight row scans the
// ids, so every sum runs in float32 in id order with no atomics, and every
// row is written (zeros where no id points). A bad id is reported through
// `error`.
cudaError_t LaunchHalfEmbeddingBackward(DType dtype, int64_t count, int64_t rows, int64_t width,
                                        int64_t padding_idx, const void* grad, const int64_t* ids,
                                        void* grad_weight, ErrorWord error, cudaStream_t stream);

}  // namespace tandem::cuda

#endif  // TANDEM_ADAPTOR_CUDA_HALF_LAUNCH_H_
