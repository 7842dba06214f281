// CUDA kernels of the random ops (bernoulli.p, rand, randn; random_kernels.cu)
// and of the "empty" constructors empty.memory_format, empty_strided and
// new_empty_strided (zeros, as on the CPU). The seed tensor, when a node has
// one, is read on the device, so a captured CUDA graph draws fresh numbers
// whenever the feed changes.
#include "base/status_macros.h"
#include "ir/ops/dropout_mask.h"
#include "kernels/cuda/index_launch.h"
#include "kernels/cuda/kernel_util.h"

namespace tandem::cuda {
namespace {

// The optional seed tensor (input `index`), on the device.
const int64_t* SeedOf(const KernelArgs& args, size_t index) {
  return args.inputs.size() > index ? args.inputs[index].as<const int64_t>() : nullptr;
}

absl::Status BernoulliKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(double p, args.node->attrs.GetFloat("p", 0.5));
  ASSIGN_OR_RETURN(int64_t attr_seed, args.node->attrs.GetInt("seed", 0));
  return Launched(args,
                  LaunchBernoulli(out.type.dtype, out.numel(), attr_seed, SeedOf(args, 1), dropout::Threshold(p),
                                  out.data, context.native),
                  out.type.dtype);
}

template <RandomDistribution kDistribution>
absl::Status RandomKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(int64_t attr_seed, args.node->attrs.GetInt("seed", 0));
  return Launched(
      args,
      LaunchRandom(out.type.dtype, kDistribution, out.numel(), attr_seed, SeedOf(args, 0), out.data, context.native),
      out.type.dtype);
}

absl::Status ZerosKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  if (out.type.bytes() == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out.data, 0, out.type.bytes(), context.native));
  return absl::OkStatus();
}

}  // namespace

void AddRandomKernels(CudaKernelTable& table) {
  table["bernoulli.p"] = BernoulliKernel;
  table["rand"] = RandomKernel<RandomDistribution::kUniform>;
  table["randn"] = RandomKernel<RandomDistribution::kNormal>;
  table["empty.memory_format"] = ZerosKernel;
  table["empty_strided"] = ZerosKernel;
  table["new_empty_strided"] = ZerosKernel;
}

}  // namespace tandem::cuda
