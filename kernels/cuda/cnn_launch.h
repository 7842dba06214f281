// The launchers of Tandem's own CUDA kernels for the CNN ops: 2-D pooling
// (pooling_kernels.cu) and batch normalization (batch_norm_kernels.cu).
// Like launch.h: plain functions over raw device pointers and small
// parameter structs, no absl types; the op wrappers (pooling_ops.cc,
// batch_norm_ops.cc) parse attributes, check dtypes and provide the batch
// norm's scratch memory. Every launcher enqueues on `stream` and returns the
// launch's error (cudaSuccess when there is nothing to do;
// cudaErrorInvalidValue, without launching, for a dtype other than float32
// and float64). Thread-safe (stateless).
//
// 16-bit floats: the pooling launchers also take bfloat16 and float16 (the
// same kernels in float32 arithmetic, one rounding per stored value), and
// batch norm has the 16-bit launchers at the end of this file.
#ifndef TANDEM_KERNELS_CUDA_CNN_LAUNCH_H_
#define TANDEM_KERNELS_CUDA_CNN_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ir/dtype.h"

namespace tandem::cuda {

// ---- pooling (pooling_kernels.cu) ----

// `planes` planes of h x w pooled into oh x ow (the geometry of
// cnn_rules.h's Pool2dGeometry).
struct PoolLaunchParams {
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  bool count_include_pad = true;
  int64_t divisor_override = 0;  // 0: none
  int64_t channels = 0;          // max and average pooling: C of a channels-last [N, H, W, C]; 0: channels-first
};

// A thread per output: the window's maximum (a NaN wins, ties keep the
// first) and its flat index h * W + w in the plane. 32-bit index arithmetic
// (multiply-shift dividers) whenever the sizes allow.
cudaError_t LaunchMaxPool2d(DType dtype, const PoolLaunchParams& p, const void* x, void* y, int64_t* indices,
                            cudaStream_t stream);
// A thread per input element: the sum of the gradients of the windows
// that hold it and whose index names it (deterministic; no atomics). Only
// the windows that can hold the element are visited. Indices are only
// compared, never used as addresses.
cudaError_t LaunchMaxPool2dBackward(DType dtype, const PoolLaunchParams& p, const void* grad_output,
                                    const int64_t* indices, void* grad_input, cudaStream_t stream);
cudaError_t LaunchAvgPool2d(DType dtype, const PoolLaunchParams& p, const void* x, void* y, cudaStream_t stream);
cudaError_t LaunchAvgPool2dBackward(DType dtype, const PoolLaunchParams& p, const void* grad_output, void* grad_input,
                                    cudaStream_t stream);
// Only planes, h, w, oh, ow of `p` are used.
cudaError_t LaunchAdaptiveAvgPool2d(DType dtype, const PoolLaunchParams& p, const void* x, void* y,
                                    cudaStream_t stream);
cudaError_t LaunchAdaptiveAvgPool2dBackward(DType dtype, const PoolLaunchParams& p, const void* grad_output,
                                            void* grad_input, cudaStream_t stream);

// ---- batch normalization (batch_norm_kernels.cu) ----

// An input [outer, channels, inner]; statistics accumulate in double.
struct BatchNormLaunchParams {
  int64_t outer = 0, channels = 0, inner = 0;
  bool training = false;
  double momentum = 0.1;
  double eps = 1e-5;
  bool relu = false;            // forward: out = relu(out), on the stored value (fold_activations.h)
  double mask_threshold = 0.0;  // backward with a mask: dy where mask > threshold, else 0
};

// Null pointers are absent operands or outputs not wanted.
struct BatchNormForwardOperands {
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  const void* running_mean = nullptr;  // eval mode: required
  const void* running_var = nullptr;
  const void* residual = nullptr;  // of x's type, or null: out = round(out + residual), then the relu
  void* out = nullptr;
  void* save_mean = nullptr;         // training only
  void* save_invstd = nullptr;       // training only
  void* new_running_mean = nullptr;  // with new_running_var: the updated (eval: copied) statistics
  void* new_running_var = nullptr;
};

// Bytes of device scratch (8-byte aligned) that the batch-norm launchers
// need for `p`: per-block partial sums, 2 doubles for each 4096-element
// chunk of every channel, and 4 doubles per channel. The launches of one
// call use it in stream order, so calls on one stream may share a buffer;
// calls that may run concurrently (other streams) may not.
size_t BatchNormScratchBytes(const BatchNormLaunchParams& p);

// Training: per-chunk statistics, then a per-channel merge (saved and
// running statistics), then out = x * scale + shift; eval: the merge step
// reads the running statistics. `scratch` holds BatchNormScratchBytes(p).
cudaError_t LaunchBatchNormForward(DType dtype, const BatchNormLaunchParams& p, const BatchNormForwardOperands& op,
                                   void* scratch, cudaStream_t stream);

struct BatchNormBackwardOperands {
  const void* grad_output = nullptr;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* mean = nullptr;    // training: save_mean; eval: running_mean
  const void* invstd = nullptr;  // training: save_invstd; eval: running_var (invstd = 1 / sqrt(var + eps))
  const void* mask = nullptr;    // of grad_output's type, or null: grad_output is read as it is
  void* grad_input = nullptr;    // null: not computed
  void* grad_weight = nullptr;
  void* grad_bias = nullptr;
};

// Per-chunk sum(dy) and sum(dy * (x - mean)) (when grad_weight, grad_bias
// or a training grad_input needs them), a per-channel merge (grad_weight,
// grad_bias), then grad_input. `scratch` holds BatchNormScratchBytes(p).
cudaError_t LaunchBatchNormBackward(DType dtype, const BatchNormLaunchParams& p, const BatchNormBackwardOperands& op,
                                    void* scratch, cudaStream_t stream);

// ---- 16-bit batch normalization (batch_norm_kernels.cu) ----
// The same kernels for a bfloat16 or float16 `dtype` (x, out, grad_output,
// grad_input): weight, bias, the running statistics, grad_weight and
// grad_bias are of `param_dtype`, which is `dtype` or float32 (PyTorch's
// mixed batch norm); save_mean and save_invstd (the backward's mean and
// invstd in training) are float32, as PyTorch's CUDA kernels return them.
// Arithmetic in double as for float32; each 16-bit value stored rounds
// once. cudaErrorInvalidValue, without launching, for other dtypes.
cudaError_t LaunchHalfBatchNormForward(DType dtype, DType param_dtype, const BatchNormLaunchParams& p,
                                       const BatchNormForwardOperands& op, void* scratch, cudaStream_t stream);
cudaError_t LaunchHalfBatchNormBackward(DType dtype, DType param_dtype, const BatchNormLaunchParams& p,
                                        const BatchNormBackwardOperands& op, void* scratch, cudaStream_t stream);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_CNN_LAUNCH_H_
