// The launchers of the CUDA kernels for 16-bit float tensors (bfloat16 and
// float16): half_kernels.cu (conversions, pointwise ops, dropout),
// half_row_kernels.cu (reductions, softmax, layer norm, embedding
// backward), half_attention_kernels.cu (attention, _safe_softmax),
// half_elementwise_kernels.cu (the optimizer step's math, comparisons, where)
// and half_recurrent_kernels.cu (the fused LSTM and GRU layers' steps, the
// LSTM cell math's activations).
//
// Every kernel loads 16-bit values, computes in float32 and rounds once when
// it stores (to nearest, ties to even), which is PyTorch's rule for these
// types; sums (reductions, softmax, layer norm statistics, embedding
// gradients) accumulate in float32 in a fixed order, so results repeat bit
// for bit. `dtype` arguments name the 16-bit type (kBFloat16 or kFloat16);
// any other answers cudaErrorInvalidValue without launching. The same
// conventions as launch.h otherwise: plain functions over device pointers,
// enqueued on `stream`, returning the launch's error. Thread-safe.
#ifndef TANDEM_KERNELS_CUDA_HALF_LAUNCH_H_
#define TANDEM_KERNELS_CUDA_HALF_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ir/dtype.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/recurrent_launch.h"
#include "kernels/cuda/sequence_launch.h"

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

// out[r, p] += bias[r % channels] over `rows` rows of `plane` elements of
// `dtype` (a 16-bit convolution's bias on its [N, C, H, W] output, rows =
// N * C): each sum in float32, rounded once.
cudaError_t LaunchHalfChannelBias(DType dtype, int64_t rows, int64_t channels, int64_t plane, const void* bias,
                                  void* out, cudaStream_t stream);

// native_dropout of a 16-bit `x` (n elements); the mask as dropout_mask.h
// computes it, so it equals the float32 kernels' and the CPU's bit for bit.
// `params` as sequence_launch.h's DropoutParams, passed field by field.
cudaError_t LaunchHalfDropout(DType dtype, int64_t n, const void* x, const int64_t* seed, bool train, int64_t attr_seed,
                              uint32_t threshold, float scale, void* out, bool* mask, cudaStream_t stream);
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
cudaError_t LaunchHalfLayerNorm(DType dtype, int64_t rows, int64_t cols, double eps, const void* x, const void* weight,
                                const void* bias, void* y, float* mean, float* rstd, cudaStream_t stream);
// Its backward: grad_input [rows, cols], grad_weight and grad_bias [cols]
// (always written; weight may be null, meaning ones).
cudaError_t LaunchHalfLayerNormBackward(DType dtype, int64_t rows, int64_t cols, const void* grad_out, const void* x,
                                        const float* mean, const float* rstd, const void* weight, void* grad_input,
                                        void* grad_weight, void* grad_bias, cudaStream_t stream);

// grad_weight [rows, width] = sum over the `count` ids of grad [count, width]
// rows, id padding_idx skipped (-1: none): a block per weight row scans the
// ids (int64 or int32), so every sum runs in float32 in id order with no
// atomics, and every row is written (zeros where no id points). A bad id is
// reported through `error`.
cudaError_t LaunchHalfEmbeddingBackward(DType dtype, int64_t count, int64_t rows, int64_t width, int64_t padding_idx,
                                        const void* grad, IndexOperand ids, void* grad_weight, ErrorWord error,
                                        cudaStream_t stream);

// ---- attention and _safe_softmax (half_attention_kernels.cu) ----

// The memory-efficient attention's forward over 16-bit q, k, v (and a bool
// or 16-bit float mask, as sequence_launch.h's AttentionParams): out
// [batch, rows, value_head] (16-bit), lse [batch, lse_row] float32 (padding
// written 0; null when params.lse_row is 0). Scores, softmax and products
// in float32. cudaErrorInvalidValue, without launching, when keys + head
// float32 values do not fit a block's shared memory.
cudaError_t LaunchHalfAttentionForward(DType dtype, const AttentionParams& params, const void* q, const void* k,
                                       const void* v, void* out, float* lse, cudaStream_t stream);
// Its backward from the forward's float32 lse: grad_q, grad_k, grad_v, and
// the bias gradient when grad_bias is not null (`bias_numel` elements of the
// bias's shape; summed over its broadcast dims in float32, in a fixed order).
cudaError_t LaunchHalfAttentionBackward(DType dtype, const AttentionParams& params, const void* grad_out, const void* q,
                                        const void* k, const void* v, const void* out, const float* lse, void* grad_q,
                                        void* grad_k, void* grad_v, void* grad_bias, int64_t bias_numel,
                                        cudaStream_t stream);

// _safe_softmax over the middle dim of [outer, size, inner]: the softmax,
// except that a slice of all -inf gives zeros.
cudaError_t LaunchHalfSafeSoftmax(DType dtype, int64_t outer, int64_t size, int64_t inner, const void* in, void* out,
                                  cudaStream_t stream);

// ---- the optimizer step's math, comparisons and where (half_elementwise_kernels.cu) ----
// Operands as LaunchHalfPointwise's: contiguous of `dtype` (layout rank 0),
// strided of `dtype`, or with `scalar` set one element of `scalar_dtype`
// rounded to `dtype` (PyTorch converts a rank-0 operand of another dtype to
// the common one; a 16-bit one is read as it is).

enum class HalfMathOp {
  kSqrt,     // (a): IEEE round to nearest
  kClamp,    // (a): NaN stays NaN; below lo -> lo, then above hi -> hi (the bounds given)
  kMaximum,  // (a, b): NaN-propagating
  kMinimum,
  kAddcmul,  // (self, t1, t2): self + value * t1 * t2
  kAddcdiv,  // (self, t1, t2): self + value * t1 / t2
};

struct HalfMathParams {
  float value = 1.0f;          // addcmul / addcdiv's value: a float32 number, as PyTorch uses it
  float lo = 0.0f, hi = 0.0f;  // clamp's bounds, already rounded to the 16-bit type
  bool has_lo = false, has_hi = false;
};

// out[i] = op(operands[0..arity) at i) over out's `n` elements of the 16-bit
// `dtype`, in float32 as the float32 kernels of these ops compute
// (activation_kernels.cu), rounded once.
cudaError_t LaunchHalfMath(HalfMathOp op, DType dtype, int64_t n, const BinaryOperand* operands,
                           const HalfMathParams& params, void* out, cudaStream_t stream);

// out (bool) = a op b, both read as the 16-bit `dtype` and compared as
// float32 values.
cudaError_t LaunchHalfCompare(CompareOp op, DType dtype, int64_t n, const BinaryOperand& a, const BinaryOperand& b,
                              bool* out, cudaStream_t stream);
// out (bool) = x op other for x (n contiguous elements of `dtype`); `other`
// is already rounded to `dtype`.
cudaError_t LaunchHalfCompareScalar(CompareOp op, DType dtype, int64_t n, const void* x, float other, bool* out,
                                    cudaStream_t stream);

// out = cond ? a : b over n elements of `dtype`; cond is bool (strided or one
// element). Values of `dtype` are copied bit for bit.
cudaError_t LaunchHalfWhere(DType dtype, int64_t n, const BinaryOperand& cond, const BinaryOperand& a,
                            const BinaryOperand& b, void* out, cudaStream_t stream);

// ---- the LSTM and GRU: the fused layers' steps, the cell math's activations (half_recurrent_kernels.cu) ----

// recurrent_launch.h's LSTM forward and backward step over tensors of the 16-bit
// `dtype` (every pointer of `step` points to elements of it): gates, cell
// state and gradients computed in float32 from the widened elements, each
// result rounded once when stored (saved's gates and cell state, y_t, h_n,
// c_n; grad_gates_t, dc_prev).
using HalfLstmForwardStep = LstmForwardStepOf<void>;
using HalfLstmBackwardStep = LstmBackwardStepOf<void>;
cudaError_t LaunchHalfLstmForwardStep(DType dtype, const HalfLstmForwardStep& step, cudaStream_t stream);
cudaError_t LaunchHalfLstmBackwardStep(DType dtype, const HalfLstmBackwardStep& step, cudaStream_t stream);

// recurrent_launch.h's GRU forward and backward step, the same way (saved's
// gates and hn, y_t, h_n; grad_gates_x_t, grad_gates_h_t, dh_prev).
using HalfGruForwardStep = GruForwardStepOf<void>;
using HalfGruBackwardStep = GruBackwardStepOf<void>;
cudaError_t LaunchHalfGruForwardStep(DType dtype, const HalfGruForwardStep& step, cudaStream_t stream);
cudaError_t LaunchHalfGruBackwardStep(DType dtype, const HalfGruBackwardStep& step, cudaStream_t stream);

enum class HalfActivationOp {
  kSigmoid,          // (a): 1 / (1 + exp(-a))
  kTanh,             // (a)
  kSigmoidBackward,  // (a: grad_output, b: output): a * (1 - b) * b
  kTanhBackward,     // (a: grad_output, b: output): a * (1 - b * b)
};

// out[i] = op(a[i], b[i]) over n contiguous elements of the 16-bit `dtype`
// (b unused by the one-operand ops), in float32 as the float32 kernels
// compute (activation_kernels.cu), rounded once. out may be a or b.
cudaError_t LaunchHalfActivation(HalfActivationOp op, DType dtype, int64_t n, const void* a, const void* b, void* out,
                                 cudaStream_t stream);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_HALF_LAUNCH_H_
