// CUDA kernels of convolution and convolution_backward through cuDNN's
// convolution API (cudnnConvolutionForward / BackwardData /
// BackwardFilter), NCHW (2-D) or NCDHW (3-D); the bias gradient is the
// reductions' channel sum.
//
// Numerics: float32 convolutions run with CUDNN_FMA_MATH, i.e. plain float32
// FMA kernels, unless the node's `allow_tf32` attribute is true; then cuDNN
// may also pick TF32 tensor-core algorithms (what PyTorch does under
// torch.backends.cudnn.allow_tf32, its default; the PyTorch adaptor copies
// that flag into every convolution node it lowers). float64 in float64.
// bfloat16 and float16 convolutions give cuDNN 16-bit tensors with a
// float32 compute type (CUDNN_DATA_FLOAT in the convolution descriptor:
// float32 accumulation, one rounding per stored value, as PyTorch
// configures them); cuDNN may pick tensor-core algorithms for them
// whatever `allow_tf32` says (that attribute concerns float32 data only),
// never a math type that converts the data to another precision. The bias
// is added by the 16-bit pointwise kernel after the convolution (the stored
// convolution rounds, then the sum rounds, as PyTorch's `output.add_(bias)`
// after cuDNN does), and the bias gradient is the 16-bit channel sum
// (float32 accumulation).
//
// The per-stream plans and the choice of each direction's algorithm:
// conv_plans.h, conv_algorithms.h.
#include <cudnn.h>

#include <vector>

#include "absl/types/span.h"
#include "base/status_macros.h"
#include "ir/ops/cnn_rules.h"
#include "kernels/cuda/conv_algorithms.h"
#include "kernels/cuda/conv_plans.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/launch.h"

namespace tandem::cuda {
namespace {

using conv::AdoptShared;
using conv::ConvOperands;
using conv::ConvPlan;
using conv::CudnnState;
using conv::Direction;
using conv::IsHalfData;
using conv::kOne;
using conv::MathMode;
using conv::PlanFor;
using conv::Run;

struct Setup {
  CudnnState* state = nullptr;
  ConvPlan* plan = nullptr;
};

absl::StatusOr<Setup> SetUp(const CudaKernelContext& context, const KernelArgs& args, const TensorArg& input,
                            const TensorArg& weight, ConvGeometry* geometry) {
  const DType dtype = input.type.dtype;
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64 && dtype != DType::kBFloat16 && dtype != DType::kFloat16) {
    return UnsupportedDType(args, dtype);
  }
  ASSIGN_OR_RETURN(*geometry, ParseConvGeometry(args.node->attrs, input.type.shape, weight.type.shape));
  MathMode mode;
  ASSIGN_OR_RETURN(mode.allow_tf32, args.node->attrs.GetBool("allow_tf32", false));
  ASSIGN_OR_RETURN(mode.deterministic, args.node->attrs.GetBool("deterministic", false));
  Setup s;
  ASSIGN_OR_RETURN(s.state, CudnnState::For(*context.stream));
  ASSIGN_OR_RETURN(s.plan, PlanFor(*s.state, input.type.dtype, *geometry, mode, context.native));
  return s;
}

// out[n, o, :] += bias[o] for a 16-bit convolution's output: each element
// widened, summed in float32 and rounded once (as the 16-bit add.Tensor).
// Channels-last output is n * oH * oW rows of O: planes of one element.
absl::Status AddHalfBias(const CudaKernelContext& context, const KernelArgs& args, const ConvGeometry& g,
                         const TensorArg& bias, const TensorArg& out) {
  const DType dtype = out.type.dtype;
  const bool last = g.params.channels_last;
  const int64_t planes = last ? g.n * g.out_plane() * g.o : g.n * g.o;
  const int64_t plane = last ? 1 : g.out_plane();
  return Launched(args, LaunchHalfChannelBias(dtype, planes, g.o, plane, bias.data, out.data, context.native), dtype);
}

// Inputs: input, weight[, bias].
absl::Status ConvolutionKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& input = args.inputs[0];
  const TensorArg& weight = args.inputs[1];
  ConvGeometry g;
  ASSIGN_OR_RETURN(Setup s, SetUp(context, args, input, weight, &g));
  ConvPlan& plan = *s.plan;
  const TensorArg& out = args.outputs[0];
  const ConvOperands op{.x = input.data, .w = weight.data, .out = out.data};
  RETURN_IF_ERROR(Run(*s.state, plan, Direction::kForward, context.native, op));
  if (args.inputs.size() > 2) {
    if (IsHalfData(plan.type)) return AddHalfBias(context, args, g, args.inputs[2], out);
    CUDNN_RETURN_IF_ERROR(cudnnAddTensor(s.state->handle, kOne.of(plan), plan.bias, args.inputs[2].data, kOne.of(plan),
                                         plan.y, out.data));
  }
  return absl::OkStatus();
}

// Inputs: grad_output, input, weight. Outputs: grad_input, grad_weight,
// grad_bias; those of 0 elements (output_mask false) are not computed.
absl::Status ConvolutionBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& input = args.inputs[1];
  const TensorArg& weight = args.inputs[2];
  ConvGeometry g;
  ASSIGN_OR_RETURN(Setup s, SetUp(context, args, input, weight, &g));
  ConvPlan& plan = *s.plan;
  if (args.outputs[0].numel() > 0) {
    RETURN_IF_ERROR(Run(*s.state, plan, Direction::kBackwardData, context.native,
                        {.w = weight.data, .dy = grad.data, .out = args.outputs[0].data}));
  }
  if (args.outputs[1].numel() > 0) {
    RETURN_IF_ERROR(Run(*s.state, plan, Direction::kBackwardFilter, context.native,
                        {.x = input.data, .dy = grad.data, .out = args.outputs[1].data}));
  }
  if (args.outputs[2].numel() > 0) {
    // grad_bias[o] = the sum of grad over n and the spatial dims: the reductions' channel
    // sum (fixed order, so deterministic), not cudnnConvolutionBackwardBias,
    // which took 1 ms more than PyTorch's whole conv1_1 backward of VGG-19
    // on an H200.
    StridedOperand kept, reduced;
    kept.rank = 1;
    kept.sizes[0] = g.o;
    if (g.params.channels_last) {  // [n * oH * oW, O]
      kept.strides[0] = 1;
      reduced.rank = 1;
      reduced.sizes[0] = g.n * g.out_plane();
      reduced.strides[0] = g.o;
    } else {  // [n, O, oH * oW]
      kept.strides[0] = g.out_plane();
      reduced.rank = 2;
      reduced.sizes[0] = g.n;
      reduced.strides[0] = g.o * g.out_plane();
      reduced.sizes[1] = g.out_plane();
      reduced.strides[1] = 1;
    }
    const TensorArg& grad_bias = args.outputs[2];
    if (IsHalfData(plan.type)) {
      return Launched(args,
                      LaunchHalfReduceGeneral(grad_bias.type.dtype, grad.type.dtype, g.o, kept, reduced,
                                              /*mean=*/false, grad.data, grad_bias.data, context.native),
                      grad.type.dtype);
    }
    return Launched(args,
                    LaunchReduceGeneral(grad_bias.type.dtype, grad.type.dtype, g.o, kept, reduced, /*mean=*/false,
                                        grad.data, grad_bias.data, context.native),
                    grad.type.dtype);
  }
  return absl::OkStatus();
}

// The warmers (FindCudaWarmer): each direction the kernel would run gets
// its plan on the context's stream now, from another stream's choice; a
// direction no stream has chosen yet is left to the first run, whose search
// needs the operands. True when the stream had no plan for the shape or a
// direction had no algorithm (its setup was done now, or tried).
absl::StatusOr<bool> WarmDirections(const CudaKernelContext& context, const KernelArgs& args, const TensorArg& input,
                                    const TensorArg& weight, absl::Span<const Direction> directions) {
  ASSIGN_OR_RETURN(CudnnState * state, CudnnState::For(*context.stream));
  const size_t plans = state->plans.size();
  ConvGeometry g;
  ASSIGN_OR_RETURN(Setup s, SetUp(context, args, input, weight, &g));
  bool warmed = state->plans.size() != plans;
  for (Direction dir : directions) {
    if (s.plan->algos[static_cast<int>(dir)].has_value()) continue;
    warmed = true;
    RETURN_IF_ERROR(AdoptShared(*s.state, *s.plan, dir, context.native));
  }
  return warmed;
}

absl::StatusOr<bool> ConvolutionWarmer(const CudaKernelContext& context, const KernelArgs& args) {
  const Direction forward[] = {Direction::kForward};
  return WarmDirections(context, args, args.inputs[0], args.inputs[1], forward);
}

absl::StatusOr<bool> ConvolutionBackwardWarmer(const CudaKernelContext& context, const KernelArgs& args) {
  std::vector<Direction> directions;
  if (args.outputs[0].numel() > 0) directions.push_back(Direction::kBackwardData);
  if (args.outputs[1].numel() > 0) directions.push_back(Direction::kBackwardFilter);
  if (directions.empty()) return false;
  return WarmDirections(context, args, args.inputs[1], args.inputs[2], directions);
}

}  // namespace

void AddConvolutionKernels(CudaKernelTable& table) {
  table["convolution"] = ConvolutionKernel;
  table["convolution_backward"] = ConvolutionBackwardKernel;
}

void AddConvolutionWarmers(CudaWarmTable& table) {
  table["convolution"] = ConvolutionWarmer;
  table["convolution_backward"] = ConvolutionBackwardWarmer;
}

}  // namespace tandem::cuda
