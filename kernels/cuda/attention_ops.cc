// CUDA kernels of bmm (cuBLASLt strided batches, no TF32) and of the
// scaled-dot-product attention ops (fused kernels, attention_kernels.cu;
// the efficient kernel's ops in bfloat16 and float16 through
// half_launch.h, with a float32 log-sum-exp).
#include <cmath>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/sequence_launch.h"

namespace tandem::cuda {
namespace {

bool IsFloat(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }

absl::Status BmmKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& a = args.inputs[0];
  const TensorArg& b = args.inputs[1];
  const TensorArg& out = args.outputs[0];
  // bfloat16 and float16 too: Matmul accumulates them in float32.
  const bool half = out.type.dtype == DType::kBFloat16 || out.type.dtype == DType::kFloat16;
  if (!IsFloat(out.type.dtype) && !half) return UnsupportedDType(args, out.type.dtype);
  if (out.numel() == 0) return absl::OkStatus();
  MatmulSpec spec;
  spec.dtype = out.type.dtype;
  spec.batch = a.type.shape[0];
  spec.n = a.type.shape[1];
  spec.k = a.type.shape[2];
  spec.m = b.type.shape[2];
  if (spec.k == 0) {
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out.data, 0, out.type.bytes(), context.native));
    return absl::OkStatus();
  }
  spec.a = a.data;
  spec.b = b.data;
  spec.out = out.data;
  spec.stride_a = spec.n * spec.k;
  spec.stride_b = spec.k * spec.m;
  spec.stride_out = spec.n * spec.m;
  return Matmul(*context.stream, spec);
}

// The kernels' view of query [..., L, E], key [..., S, E], value [..., S, Ev]
// and the optional mask (broadcast to [..., L, S]).
absl::StatusOr<AttentionParams> Params(const KernelArgs& args, const TensorArg& q, const TensorArg& k,
                                       const TensorArg& v, const TensorArg* mask) {
  AttentionParams p;
  const int r = q.type.rank();
  if (r - 2 > kMaxDims) return absl::UnimplementedError("attention with more batch dims than the kernels handle");
  p.rows = q.type.shape[r - 2];
  p.head = q.type.shape[r - 1];
  p.keys = k.type.shape[r - 2];
  p.value_head = v.type.shape[r - 1];
  for (int d = 0; d < r - 2; ++d) p.batch *= q.type.shape[d];
  ASSIGN_OR_RETURN(p.causal, args.node->attrs.GetBool("is_causal", false));
  p.scale = 1.0 / std::sqrt(static_cast<double>(p.head));
  if (args.node->attrs.Has("scale")) {
    ASSIGN_OR_RETURN(p.scale, args.node->attrs.GetFloat("scale"));
  }
  p.scale_f = static_cast<float>(p.scale);
  if (mask != nullptr) {
    if (mask->type.dtype != DType::kBool && mask->type.dtype != q.type.dtype) {
      return UnsupportedDType(args, mask->type.dtype);
    }
    p.mask = mask->data;
    p.mask_is_bool = mask->type.dtype == DType::kBool;
    Shape scores = q.type.shape;
    scores[r - 1] = p.keys;
    const std::vector<int64_t> strides = BroadcastStrides(mask->type.shape, scores);
    p.mask_row_stride = strides[r - 2];
    p.mask_key_stride = strides[r - 1];
    p.mask_batch.rank = r - 2;
    for (int d = 0; d < r - 2; ++d) {
      p.mask_batch.sizes[d] = scores[d];
      p.mask_batch.strides[d] = strides[d];
    }
  }
  return p;
}

// Whether a 16-bit query's log-sum-exp `lse` is float32 (the registry's rule
// for the efficient kernel's ops, the only 16-bit ones).
bool HalfWithFloatLse(const TensorArg& q, const TensorArg& lse) {
  return IsHalfDType(q.type.dtype) && lse.type.dtype == DType::kFloat32;
}

absl::Status Forward(const CudaKernelContext& context, const KernelArgs& args, const TensorArg* mask,
                     const TensorArg* lse) {
  const TensorArg& q = args.inputs[0];
  const bool half = lse != nullptr && HalfWithFloatLse(q, *lse);
  if (!IsFloat(q.type.dtype) && !half) return UnsupportedDType(args, q.type.dtype);
  ASSIGN_OR_RETURN(AttentionParams p, Params(args, q, args.inputs[1], args.inputs[2], mask));
  p.lse_row = lse != nullptr ? lse->type.shape.back() : 0;
  void* lse_data = p.lse_row > 0 ? lse->data : nullptr;
  const cudaError_t error =
      half ? LaunchHalfAttentionForward(q.type.dtype, p, q.data, args.inputs[1].data, args.inputs[2].data,
                                        args.outputs[0].data, static_cast<float*>(lse_data), context.native)
           : LaunchAttentionForward(q.type.dtype, p, q.data, args.inputs[1].data, args.inputs[2].data,
                                    args.outputs[0].data, lse_data, context.native);
  if (error == cudaErrorInvalidValue) {
    return absl::UnimplementedError(
        absl::StrCat(args.node->op, ": ", p.keys, " keys do not fit the fused kernel's shared memory"));
  }
  return Launched(args, error, q.type.dtype);
}

// Outputs: output, log_sumexp, philox_seed, philox_offset.
absl::Status EfficientAttentionKernel(const CudaKernelContext& context, const KernelArgs& args) {
  for (int o : {2, 3}) {
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(args.outputs[o].data, 0, sizeof(int64_t), context.native));
  }
  return Forward(context, args, args.inputs.size() > 3 ? &args.inputs[3] : nullptr, &args.outputs[1]);
}

absl::Status FlashAttentionKernel(const CudaKernelContext& context, const KernelArgs& args) {
  return Forward(context, args, args.inputs.size() > 3 ? &args.inputs[3] : nullptr, &args.outputs[1]);
}

absl::Status Backward(const CudaKernelContext& context, const KernelArgs& args, const TensorArg* mask, size_t out_input,
                      size_t lse_input, const TensorArg* grad_bias) {
  const TensorArg& q = args.inputs[1];
  const TensorArg& lse = args.inputs[lse_input];
  const bool half = HalfWithFloatLse(q, lse);
  if (!IsFloat(q.type.dtype) && !half) return UnsupportedDType(args, q.type.dtype);
  ASSIGN_OR_RETURN(AttentionParams p, Params(args, q, args.inputs[2], args.inputs[3], mask));
  p.lse_row = lse.type.shape.back();
  const bool bias_full = grad_bias != nullptr && grad_bias->numel() == p.batch * p.rows * p.keys;
  void* bias_data = grad_bias != nullptr ? grad_bias->data : nullptr;
  const int64_t bias_numel = grad_bias != nullptr ? grad_bias->numel() : 0;
  const cudaError_t error =
      half ? LaunchHalfAttentionBackward(q.type.dtype, p, args.inputs[0].data, q.data, args.inputs[2].data,
                                         args.inputs[3].data, args.inputs[out_input].data, lse.as<const float>(),
                                         args.outputs[0].data, args.outputs[1].data, args.outputs[2].data, bias_data,
                                         bias_numel, context.native)
           : LaunchAttentionBackward(q.type.dtype, p, args.inputs[0].data, q.data, args.inputs[2].data,
                                     args.inputs[3].data, args.inputs[out_input].data, lse.data, args.outputs[0].data,
                                     args.outputs[1].data, args.outputs[2].data, bias_data, bias_full, bias_numel,
                                     context.native);
  if (error == cudaErrorInvalidValue) {
    return absl::UnimplementedError(absl::StrCat(args.node->op, ": ", p.rows, " queries and ", p.keys,
                                                 " keys do not fit the fused kernels' shared memory"));
  }
  return Launched(args, error, q.type.dtype);
}

// Inputs: grad_out, query, key, value[, attn_bias], out, logsumexp,
// philox_seed, philox_offset.
absl::Status EfficientAttentionBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const bool has_bias = args.inputs.size() == 9;
  const size_t after = has_bias ? 5 : 4;
  return Backward(context, args, has_bias ? &args.inputs[4] : nullptr, after, after + 1,
                  has_bias ? &args.outputs[3] : nullptr);
}

// Inputs: grad_out, query, key, value, out, logsumexp[, attn_mask].
absl::Status FlashAttentionBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  return Backward(context, args, args.inputs.size() > 6 ? &args.inputs[6] : nullptr, 4, 5, nullptr);
}

}  // namespace

void AddAttentionKernels(CudaKernelTable& table) {
  table["bmm"] = BmmKernel;
  table["_scaled_dot_product_efficient_attention"] = EfficientAttentionKernel;
  table["_scaled_dot_product_efficient_attention_backward"] = EfficientAttentionBackwardKernel;
  table["_scaled_dot_product_flash_attention_for_cpu"] = FlashAttentionKernel;
  table["_scaled_dot_product_flash_attention_for_cpu_backward"] = FlashAttentionBackwardKernel;
}

}  // namespace tandem::cuda
