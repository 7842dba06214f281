// Reference CPU kernels of the reductions (sum, sum.dim_IntList, mean.dim).
// Float sums accumulate in double, integer sums in int64; the result is
// rounded once to the output dtype.
#include <type_traits>
#include <vector>

#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "ir/ops/shape_rules.h"
#include "base/status_macros.h"

namespace tandem::cpu {
namespace {

// out = sum of `in` over the dims in `mask` (divided by the count for mean).
template <typename In, typename Out>
void ReduceSum(const TensorArg& in, const TensorArg& out, const std::vector<bool>& mask, bool mean) {
  using Acc = std::conditional_t<std::is_floating_point_v<In> || std::is_floating_point_v<Out>, double, int64_t>;
  const Shape& shape = in.type.shape;
  // Where each input index lands in the output: the contiguous strides of the
  // keepdim shape, with 0 for a reduced dim.
  std::vector<int64_t> out_strides = ContiguousStrides(ReducedShape(shape, mask, /*keepdim=*/true));
  int64_t count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (mask[d]) {
      out_strides[d] = 0;
      count *= shape[d];
    }
  }
  std::vector<Acc> acc(static_cast<size_t>(out.numel()), Acc(0));
  const In* x = in.as<const In>();
  ForEachIndex<1>(shape, {out_strides},
                  [&](int64_t i, const std::array<int64_t, 1>& off) { acc[off[0]] += static_cast<Acc>(x[i]); });
  Out* y = out.as<Out>();
  for (size_t j = 0; j < acc.size(); ++j) {
    if constexpr (std::is_floating_point_v<Acc>) {
      // count == 0 gives NaN (0 / 0), as PyTorch's mean of an empty slice.
      y[j] = static_cast<Out>(mean ? acc[j] / static_cast<double>(count) : acc[j]);
    } else {
      y[j] = static_cast<Out>(acc[j]);
    }
  }
}

template <bool kMean>
absl::Status ReduceKernel(const KernelArgs& args, bool all_dims) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  std::vector<int64_t> dims;
  if (!all_dims) {
    ASSIGN_OR_RETURN(dims, args.node->attrs.GetInts("dim", std::vector<int64_t>{}));
  }
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReductionMask(dims, in.type.rank()));
  return DispatchNumeric(args, in.type.dtype, [&](auto in_tag) {
    using In = decltype(in_tag);
    return DispatchNumeric(args, out.type.dtype, [&](auto out_tag) {
      using Out = decltype(out_tag);
      ReduceSum<In, Out>(in, out, mask, kMean);
      return absl::OkStatus();
    });
  });
}

absl::Status SumKernel(const KernelArgs& args) { return ReduceKernel<false>(args, /*all_dims=*/true); }
absl::Status SumDimKernel(const KernelArgs& args) { return ReduceKernel<false>(args, /*all_dims=*/false); }
absl::Status MeanDimKernel(const KernelArgs& args) { return ReduceKernel<true>(args, /*all_dims=*/false); }

}  // namespace

void AddReductionKernels(CpuKernelTable& table) {
  table["sum"] = WithHalf<SumKernel>;
  table["sum.dim_IntList"] = WithHalf<SumDimKernel>;
  table["mean.dim"] = WithHalf<MeanDimKernel>;
}

}  // namespace tandem::cpu
