// Reference CPU kernels of the shape ops. They move bytes and so serve every
// dtype. Views (AliasKind::kView) copy only when the planner gave the output
// its own buffer; an output that is the input needs nothing.
#include <cstring>
#include <numeric>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

absl::Status SameBytesKernel(const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  if (out.data != in.data) std::memmove(out.data, in.data, out.type.bytes());
  return absl::OkStatus();
}

// out[index] = in[sum(index[d] * strides[d])] over out's shape: a gather
// that covers transposes, permutations and broadcasts.
absl::Status StridedGather(const KernelArgs& args, std::vector<int64_t> strides) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  return DispatchElementBytes(args, out.type.dtype, [&](auto tag) {
    using E = decltype(tag);
    const E* x = in.as<const E>();
    E* y = out.as<E>();
    ForEachIndex<1>(out.type.shape, {std::move(strides)},
                    [&](int64_t i, const std::array<int64_t, 1>& off) { y[i] = x[off[0]]; });
    return absl::OkStatus();
  });
}

// out dim d is input dim perm[d].
absl::Status Permute(const KernelArgs& args, const std::vector<int>& perm) {
  const std::vector<int64_t> in_strides = ContiguousStrides(args.inputs[0].type.shape);
  std::vector<int64_t> strides(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) strides[d] = in_strides[perm[d]];
  return StridedGather(args, std::move(strides));
}

absl::Status TKernel(const KernelArgs& args) {
  if (args.inputs[0].type.rank() < 2) return SameBytesKernel(args);
  return Permute(args, {1, 0});
}

absl::Status TransposeKernel(const KernelArgs& args) {
  const int rank = args.inputs[0].type.rank();
  ASSIGN_OR_RETURN(int64_t dim0, args.node->attrs.GetInt("dim0"));
  ASSIGN_OR_RETURN(int64_t dim1, args.node->attrs.GetInt("dim1"));
  ASSIGN_OR_RETURN(int d0, NormalizeDim(dim0, rank));
  ASSIGN_OR_RETURN(int d1, NormalizeDim(dim1, rank));
  if (rank == 0 || d0 == d1) return SameBytesKernel(args);
  std::vector<int> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return Permute(args, perm);
}

absl::Status PermuteKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, args.node->attrs.GetInts("dims"));
  ASSIGN_OR_RETURN(std::vector<int> perm, NormalizePermutation(dims, args.inputs[0].type.rank()));
  return Permute(args, perm);
}

absl::Status ExpandKernel(const KernelArgs& args) {
  return StridedGather(args, BroadcastStrides(args.inputs[0].type.shape, args.outputs[0].type.shape));
}

}  // namespace

void AddShapeKernels(CpuKernelTable& table) {
  for (const char* op : {"view", "unsqueeze", "squeeze.dim", "alias", "clone"}) {
    table[op] = SameBytesKernel;
  }
  table["t"] = TKernel;
  table["transpose.int"] = TransposeKernel;
  table["permute"] = PermuteKernel;
  table["expand"] = ExpandKernel;
}

}  // namespace tandem::cpu
