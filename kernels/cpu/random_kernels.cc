// Reference CPU kernels of the random ops (bernoulli.p, rand, randn) and of
// the "empty" constructors empty.memory_format, empty_strided and
// new_empty_strided (zeros). The numbers are ir/ops/random_draws.h's, keyed
// as native_dropout keys its mask (the `seed` attribute and the optional
// int64 seed tensor), so the CUDA kernels draw the same ones.
#include <cstring>

#include "base/status_macros.h"
#include "ir/ops/dropout_mask.h"
#include "ir/ops/random_draws.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

// The node's key: its seed attribute and, when input `seed_input` exists,
// the seed tensor's value.
absl::StatusOr<uint64_t> KeyOf(const KernelArgs& args, size_t seed_input) {
  ASSIGN_OR_RETURN(int64_t attr_seed, args.node->attrs.GetInt("seed", 0));
  const int64_t tensor_seed = args.inputs.size() > seed_input ? *args.inputs[seed_input].as<const int64_t>() : 0;
  return dropout::Key(attr_seed, tensor_seed);
}

absl::Status BernoulliKernel(const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(double p, args.node->attrs.GetFloat("p", 0.5));
  ASSIGN_OR_RETURN(uint64_t key, KeyOf(args, 1));
  const uint32_t threshold = dropout::Threshold(p);
  return DispatchStorableOrHalf(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* y = out.as<T>();
    for (int64_t i = 0; i < out.numel(); ++i) y[i] = ConvertAny<T>(random::Bernoulli(key, i, threshold) ? 1.0 : 0.0);
    return absl::OkStatus();
  });
}

// The significant bits of a uniform that are exact in `dtype` (and keep it
// below 1 after rounding).
int UniformBits(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return 53;
    case DType::kBFloat16:
      return 8;
    case DType::kFloat16:
      return 11;
    default:
      return 24;
  }
}

template <bool kNormal>
absl::Status RandKernel(const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(uint64_t key, KeyOf(args, 0));
  const int bits = UniformBits(out.type.dtype);
  auto fill = [&](auto tag) {
    using T = decltype(tag);
    T* y = out.as<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      y[i] = ConvertAny<T>(kNormal ? random::Normal(key, i) : random::Uniform(key, i, bits));
    }
    return absl::OkStatus();
  };
  switch (out.type.dtype) {
    case DType::kBFloat16:
      return fill(BFloat16{});
    case DType::kFloat16:
      return fill(Float16{});
    default:
      return DispatchFloat(args, out.type.dtype, fill);
  }
}

absl::Status ZerosKernel(const KernelArgs& args) {
  std::memset(args.outputs[0].data, 0, args.outputs[0].type.bytes());
  return absl::OkStatus();
}

}  // namespace

void AddRandomKernels(CpuKernelTable& table) {
  table["bernoulli.p"] = BernoulliKernel;
  table["rand"] = RandKernel<false>;
  table["randn"] = RandKernel<true>;
  table["empty.memory_format"] = ZerosKernel;
  table["empty_strided"] = ZerosKernel;
  table["new_empty_strided"] = ZerosKernel;
}

}  // namespace tandem::cpu
