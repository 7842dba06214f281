// The launchers of the CUDA kernels of the spatial ops: group normalization
// (group_norm_kernels.cu), resampling (resample_kernels.cu), padding
// (padding_kernels.cu) and 3-D pooling (pooling3d_kernels.cu). Like
// launch.h: plain functions over raw device pointers and small parameter
// structs, no absl types; the op wrappers (group_norm_ops.cc,
// spatial_ops.cc) parse attributes (ir/ops/spatial_rules.h) and check
// dtypes. Every launcher enqueues on `stream` and returns the launch's error
// (cudaSuccess when there is nothing to do; cudaErrorInvalidValue, without
// launching, for a dtype it has no kernel for).
//
// Dtypes: float32, float64, bfloat16 and float16 (constant_pad_nd: any,
// moved as bytes). 16-bit kernels compute in float32 and round once when
// they store; sums of float32 and float64 values accumulate in double. No
// kernel allocates or uses atomics: every backward gathers, a thread per
// input element summing the output gradients that read it, in a fixed order,
// so results repeat bit for bit. Thread-safe (stateless).
#ifndef TANDEM_KERNELS_CUDA_SPATIAL_LAUNCH_H_
#define TANDEM_KERNELS_CUDA_SPATIAL_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ir/dtype.h"
#include "kernels/cuda/launch.h"

namespace tandem::cuda {

// ---- group normalization (group_norm_kernels.cu) ----

// x [n, c, hxw] in `groups` groups of c / groups adjacent channels.
struct GroupNormLaunchParams {
  int64_t n = 0, c = 0, hxw = 1, groups = 1;
  double eps = 1e-5;
};

// A block per (image, group) row: mean, biased variance (two passes), rstd;
// y = (x - mean) * rstd * weight[c] + bias[c]. weight and bias ([c]) may be
// null; mean and rstd are [n, groups]; everything of `dtype`.
cudaError_t LaunchGroupNorm(DType dtype, const GroupNormLaunchParams& p, const void* x, const void* weight,
                            const void* bias, void* y, void* mean, void* rstd, cudaStream_t stream);

// grad_input (a block per row) and grad_weight, grad_bias (a block per
// channel, summing over images and positions); a null output is not
// computed; weight may be null (ones).
cudaError_t LaunchGroupNormBackward(DType dtype, const GroupNormLaunchParams& p, const void* grad_out, const void* x,
                                    const void* mean, const void* rstd, const void* weight, void* grad_input,
                                    void* grad_weight, void* grad_bias, cudaStream_t stream);

// ---- resampling (resample_kernels.cu) ----

// `planes` planes of in_h x in_w resampled to out_h x out_w; scale_h and
// scale_w are the op's scale arguments (<= 0: none); index maps from
// ir/ops/spatial_index.h.
struct ResampleLaunchParams {
  int64_t planes = 0, in_h = 1, in_w = 1, out_h = 1, out_w = 1;
  double scale_h = 0.0, scale_w = 0.0;
  bool align_corners = false;  // bilinear only
};

cudaError_t LaunchUpsampleNearest2d(DType dtype, const ResampleLaunchParams& p, const void* x, void* y,
                                    cudaStream_t stream);
cudaError_t LaunchUpsampleNearest2dBackward(DType dtype, const ResampleLaunchParams& p, const void* grad_output,
                                            void* grad_input, cudaStream_t stream);
cudaError_t LaunchUpsampleBilinear2d(DType dtype, const ResampleLaunchParams& p, const void* x, void* y,
                                     cudaStream_t stream);
cudaError_t LaunchUpsampleBilinear2dBackward(DType dtype, const ResampleLaunchParams& p, const void* grad_output,
                                             void* grad_input, cudaStream_t stream);

// ---- padding (padding_kernels.cu) ----

// `planes` volumes of in[0] x in[1] x in[2] padded to out (before[d] in
// front of dim d): reflection or replication.
struct PadLaunchParams {
  int64_t planes = 0;
  int64_t in[3] = {1, 1, 1};
  int64_t out[3] = {1, 1, 1};
  int64_t before[3] = {0, 0, 0};
  bool reflect = true;
};

cudaError_t LaunchPad(DType dtype, const PadLaunchParams& p, const void* x, void* y, cudaStream_t stream);
cudaError_t LaunchPadBackward(DType dtype, const PadLaunchParams& p, const void* grad_output, void* grad_input,
                              cudaStream_t stream);

// constant_pad_nd over `rank` (1 to kMaxDims) dims: out[i] = x[i - before]
// where that lands inside x, else `value` (its bytes, in the low
// element_bytes bytes). element_bytes: 1, 2, 4 or 8.
struct ConstantPadLaunchParams {
  int rank = 0;
  int64_t in[kMaxDims] = {};
  int64_t out[kMaxDims] = {};
  int64_t before[kMaxDims] = {};
  int element_bytes = 4;
  uint64_t value = 0;
};
cudaError_t LaunchConstantPad(const ConstantPadLaunchParams& p, const void* x, void* y, cudaStream_t stream);

// ---- 3-D pooling (pooling3d_kernels.cu) ----

// `planes` volumes of in[0] x in[1] x in[2] pooled to out (the geometry of
// ir/ops/spatial_rules.h's Pool3dGeometry).
struct Pool3dLaunchParams {
  int64_t planes = 0;
  int64_t in[3] = {1, 1, 1};
  int64_t out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1};
  int64_t padding[3] = {0, 0, 0};
  int64_t dilation[3] = {1, 1, 1};
  bool count_include_pad = true;
  int64_t divisor_override = 0;  // 0: none
};

// A thread per output: the window's maximum (a NaN wins, ties keep the
// first) and its flat index (d * H + h) * W + w in the volume.
cudaError_t LaunchMaxPool3d(DType dtype, const Pool3dLaunchParams& p, const void* x, void* y, int64_t* indices,
                            cudaStream_t stream);
// A thread per input element: the gradients of the windows that hold it and
// whose index names it. Indices are only compared, never used as addresses.
cudaError_t LaunchMaxPool3dBackward(DType dtype, const Pool3dLaunchParams& p, const void* grad_output,
                                    const int64_t* indices, void* grad_input, cudaStream_t stream);
cudaError_t LaunchAvgPool3d(DType dtype, const Pool3dLaunchParams& p, const void* x, void* y, cudaStream_t stream);
cudaError_t LaunchAvgPool3dBackward(DType dtype, const Pool3dLaunchParams& p, const void* grad_output, void* grad_input,
                                    cudaStream_t stream);
// Only planes, in and out of `p` are used.
cudaError_t LaunchAdaptiveAvgPool3d(DType dtype, const Pool3dLaunchParams& p, const void* x, void* y,
                                    cudaStream_t stream);
cudaError_t LaunchAdaptiveAvgPool3dBackward(DType dtype, const Pool3dLaunchParams& p, const void* grad_output,
                                            void* grad_input, cudaStream_t stream);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_SPATIAL_LAUNCH_H_
