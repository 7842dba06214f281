// CUDA kernels of batch normalization (batch_norm_kernels.cu):
// native_batch_norm, _native_batch_norm_legit_functional and
// native_batch_norm_backward, a few launches each. Input lists as in the
// registry (ir/ops/batch_norm_ops.cc). float32 and float64, and
// bfloat16 and float16 inputs with float32 saved statistics and weight,
// bias and running statistics of the input's dtype or float32.
//
// Scratch: the launches keep per-chunk partial sums and per-channel
// coefficients in a device buffer owned by the stream (a CudaStream
// attachment), shared by every batch norm on the stream (they run in
// stream order). It grows the first time a larger layer runs on the
// stream, which is an op-by-op run; an iteration being captured into a CUDA
// graph only finds a large enough buffer (if not, the kernel fails with
// FAILED_PRECONDITION and the capture is abandoned rather than allocating
// inside it). A grown buffer never frees the old one while the stream
// lives: graphs captured earlier on the stream may still use it.
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "device/cuda/cuda_stream.h"
#include "ir/ops/cnn_rules.h"
#include "kernels/cuda/cnn_launch.h"
#include "kernels/cuda/kernel_util.h"

namespace tandem::cuda {
namespace {

bool IsFloat(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }
bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// A stream's batch-norm scratch buffer.
class BatchNormScratch final : public device::CudaStream::Attachment {
 public:
  static BatchNormScratch& For(device::CudaStream& stream) {
    static const char kKey = 0;
    if (auto* scratch = static_cast<BatchNormScratch*>(stream.attachment(&kKey))) return *scratch;
    auto scratch = std::make_unique<BatchNormScratch>();
    BatchNormScratch* raw = scratch.get();
    stream.Attach(&kKey, std::move(scratch));
    return *raw;
  }

  ~BatchNormScratch() override {
    for (void* p : buffers_) cudaFree(p);
  }

  // A buffer of at least `bytes` (rounded up to whole MiB when it grows).
  absl::StatusOr<void*> Get(const KernelArgs& args, size_t bytes, int ordinal, cudaStream_t stream) {
    if (bytes <= bytes_ && !buffers_.empty()) return buffers_.back();
    if (Capturing(stream)) {
      return absl::FailedPreconditionError(
          absl::StrCat(args.node->op, ": the batch-norm scratch must grow to ", bytes,
                       " bytes while the stream is being captured; the iteration must run op by op first"));
    }
    const size_t rounded = (bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);
    CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
    void* p = nullptr;
    CUDA_RETURN_IF_ERROR(cudaMalloc(&p, rounded));
    buffers_.push_back(p);
    bytes_ = rounded;
    return p;
  }

 private:
  std::vector<void*> buffers_;  // the last is the current one
  size_t bytes_ = 0;
};

absl::StatusOr<void*> ScratchFor(const CudaKernelContext& context, const KernelArgs& args,
                                 const BatchNormLaunchParams& p) {
  return BatchNormScratch::For(*context.stream)
      .Get(args, BatchNormScratchBytes(p), context.stream->ordinal(), context.native);
}

// [outer, channels, inner]; channels-last input is [rows, C, 1].
absl::StatusOr<BatchNormLaunchParams> SplitOf(const KernelArgs& args, const Shape& input) {
  ASSIGN_OR_RETURN(bool channels_last, args.node->attrs.GetBool("channels_last", false));
  const ChannelSplit s = SplitChannels(input, channels_last);
  BatchNormLaunchParams p;
  p.outer = s.outer;
  p.channels = s.channels;
  p.inner = s.inner;
  return p;
}

// Inputs: input, weight, bias[, running_mean, running_var][, residual].
// Outputs: out, save_mean, save_invstd[, new_running_mean, new_running_var].
absl::Status BatchNormForwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& input = args.inputs[0];
  const DType dtype = input.type.dtype;
  if (!IsFloat(dtype) && !IsHalf(dtype)) return UnsupportedDType(args, dtype);
  ASSIGN_OR_RETURN(BatchNormLaunchParams p, SplitOf(args, input.type.shape));
  ASSIGN_OR_RETURN(p.training, args.node->attrs.GetBool("training"));
  ASSIGN_OR_RETURN(p.momentum, args.node->attrs.GetFloat("momentum"));
  ASSIGN_OR_RETURN(p.eps, args.node->attrs.GetFloat("eps"));
  ASSIGN_OR_RETURN(p.relu, args.node->attrs.GetBool("relu", false));
  ASSIGN_OR_RETURN(bool residual, args.node->attrs.GetBool("residual", false));
  BatchNormForwardOperands op;
  op.x = input.data;
  op.weight = args.inputs[1].data;
  op.bias = args.inputs[2].data;
  if (residual) op.residual = args.inputs.back().data;
  if (args.inputs.size() - (residual ? 1 : 0) == 5) {
    op.running_mean = args.inputs[3].data;
    op.running_var = args.inputs[4].data;
  }
  op.out = args.outputs[0].data;
  if (p.training) {
    op.save_mean = args.outputs[1].data;
    op.save_invstd = args.outputs[2].data;
  }
  if (args.outputs.size() == 5) {
    op.new_running_mean = args.outputs[3].data;
    op.new_running_var = args.outputs[4].data;
  }
  if (p.channels == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(void* scratch, ScratchFor(context, args, p));
  if (IsHalf(dtype)) {
    return Launched(args, LaunchHalfBatchNormForward(dtype, args.inputs[1].type.dtype, p, op, scratch, context.native),
                    dtype);
  }
  return Launched(args, LaunchBatchNormForward(dtype, p, op, scratch, context.native), dtype);
}

// Inputs: grad_out, input, weight[, running_mean, running_var], save_mean,
// save_invstd[, mask]. Outputs of 0 elements (output_mask) are not computed.
absl::Status BatchNormBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& input = args.inputs[1];
  const DType dtype = input.type.dtype;
  if (!IsFloat(dtype) && !IsHalf(dtype)) return UnsupportedDType(args, dtype);
  ASSIGN_OR_RETURN(BatchNormLaunchParams p, SplitOf(args, input.type.shape));
  ASSIGN_OR_RETURN(p.training, args.node->attrs.GetBool("train"));
  ASSIGN_OR_RETURN(p.eps, args.node->attrs.GetFloat("eps"));
  // A folded threshold_backward (compiler/fold_activations.h): the mask is
  // the last input.
  const bool masked = args.node->attrs.Has("mask_threshold");
  if (masked) {
    ASSIGN_OR_RETURN(p.mask_threshold, args.node->attrs.GetFloat("mask_threshold"));
  }
  const bool has_running = args.inputs.size() - (masked ? 1 : 0) == 7;
  BatchNormBackwardOperands op;
  if (masked) op.mask = args.inputs.back().data;
  op.grad_output = args.inputs[0].data;
  op.x = input.data;
  op.weight = args.inputs[2].data;
  if (p.training) {
    op.mean = args.inputs[has_running ? 5 : 3].data;
    op.invstd = args.inputs[has_running ? 6 : 4].data;
  } else {
    op.mean = args.inputs[3].data;
    op.invstd = args.inputs[4].data;
  }
  auto out = [&](int i) { return args.outputs[i].numel() > 0 ? args.outputs[i].data : nullptr; };
  op.grad_input = out(0);
  op.grad_weight = out(1);
  op.grad_bias = out(2);
  if (op.grad_input == nullptr && op.grad_weight == nullptr && op.grad_bias == nullptr) return absl::OkStatus();
  if (p.channels == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(void* scratch, ScratchFor(context, args, p));
  if (IsHalf(dtype)) {
    return Launched(args, LaunchHalfBatchNormBackward(dtype, args.inputs[2].type.dtype, p, op, scratch, context.native),
                    dtype);
  }
  return Launched(args, LaunchBatchNormBackward(dtype, p, op, scratch, context.native), dtype);
}

}  // namespace

void AddBatchNormKernels(CudaKernelTable& table) {
  table["native_batch_norm"] = BatchNormForwardKernel;
  table["_native_batch_norm_legit_functional"] = BatchNormForwardKernel;
  table["native_batch_norm_backward"] = BatchNormBackwardKernel;
}

}  // namespace tandem::cuda
