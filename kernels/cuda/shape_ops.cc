// CUDA kernels of the shape ops and the constant makers. Shape ops move
// bytes, so they serve every dtype: views copy only when the planner gave
// the output its own buffer, transposes of matrices (batched or not) go
// through a tiled kernel, other permutations and expand through a gather.
#include <cmath>
#include <numeric>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/strided_layout.h"

namespace tandem::cuda {
namespace {

absl::Status SameBytesKernel(const CudaKernelContext& context, const KernelArgs& args) {
  return CopyBytes(context, args.outputs[0].data, args.inputs[0].data, args.outputs[0].type.bytes());
}

// out[index] = in[sum(index[d] * strides[d])] over out's shape.
absl::Status Gather(const CudaKernelContext& context, const KernelArgs& args, std::vector<int64_t> strides) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(std::vector<StridedOperand> layouts, CollapseLayouts(out.type.shape, {std::move(strides)}));
  const StridedOperand& layout = layouts[0];
  const int element_bytes = static_cast<int>(DTypeSize(out.type.dtype));
  if (layout.rank == 0) return CopyBytes(context, out.data, in.data, out.type.bytes());
  int64_t batch = 0, rows = 0, cols = 0;
  if (IsBatchedTranspose(layout, &batch, &rows, &cols)) {
    return Launched(args, LaunchTranspose(element_bytes, batch, rows, cols, in.data, out.data, context.native),
                    out.type.dtype);
  }
  return Launched(args, LaunchGather(element_bytes, out.numel(), in.data, layout, out.data, context.native),
                  out.type.dtype);
}

// Output dim d is input dim perm[d].
absl::Status Permute(const CudaKernelContext& context, const KernelArgs& args, const std::vector<int>& perm) {
  const std::vector<int64_t> in_strides = ContiguousStrides(args.inputs[0].type.shape);
  std::vector<int64_t> strides(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) strides[d] = in_strides[perm[d]];
  return Gather(context, args, std::move(strides));
}

absl::Status TKernel(const CudaKernelContext& context, const KernelArgs& args) {
  if (args.inputs[0].type.rank() < 2) return SameBytesKernel(context, args);
  return Permute(context, args, {1, 0});
}

absl::Status TransposeKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const int rank = args.inputs[0].type.rank();
  ASSIGN_OR_RETURN(int64_t dim0, args.node->attrs.GetInt("dim0"));
  ASSIGN_OR_RETURN(int64_t dim1, args.node->attrs.GetInt("dim1"));
  ASSIGN_OR_RETURN(int d0, NormalizeDim(dim0, rank));
  ASSIGN_OR_RETURN(int d1, NormalizeDim(dim1, rank));
  if (rank == 0 || d0 == d1) return SameBytesKernel(context, args);
  std::vector<int> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return Permute(context, args, perm);
}

absl::Status PermuteKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, args.node->attrs.GetInts("dims"));
  ASSIGN_OR_RETURN(std::vector<int> perm, NormalizePermutation(dims, args.inputs[0].type.rank()));
  return Permute(context, args, perm);
}

absl::Status ExpandKernel(const CudaKernelContext& context, const KernelArgs& args) {
  return Gather(context, args, BroadcastStrides(args.inputs[0].type.shape, args.outputs[0].type.shape));
}

// ---- constants ----

absl::Status Fill(const CudaKernelContext& context, const KernelArgs& args, double value) {
  const TensorArg& out = args.outputs[0];
  // +0 of every storable dtype is all-zero bytes (-0.0 is not: it keeps its
  // sign bit through the fill kernel).
  if (value == 0.0 && !std::signbit(value)) {
    if (out.type.bytes() == 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out.data, 0, out.type.bytes(), context.native));
    return absl::OkStatus();
  }
  if (IsHalfDType(out.type.dtype)) {  // rounded through float, as the CPU kernel rounds it
    return Launched(args,
                    LaunchHalfFill(out.type.dtype, out.numel(), static_cast<float>(value), out.data, context.native),
                    out.type.dtype);
  }
  return Launched(args, LaunchFill(out.type.dtype, out.numel(), value, out.data, context.native), out.type.dtype);
}

template <int kValue>
absl::Status ConstantKernel(const CudaKernelContext& context, const KernelArgs& args) {
  return Fill(context, args, kValue);
}

template <const char* kAttr>
absl::Status FillFromAttrKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(double value, args.node->attrs.GetFloat(kAttr));
  return Fill(context, args, value);
}

constexpr char kFillValue[] = "fill_value";
constexpr char kValue[] = "value";
constexpr char kS[] = "s";

}  // namespace

void AddShapeKernels(CudaKernelTable& table) {
  for (const char* op : {"view", "unsqueeze", "squeeze.dim", "alias", "clone"}) {
    table[op] = SameBytesKernel;
  }
  table["t"] = TKernel;
  table["transpose.int"] = TransposeKernel;
  table["permute"] = PermuteKernel;
  table["expand"] = ExpandKernel;
}

void AddFactoryKernels(CudaKernelTable& table) {
  table["zeros"] = ConstantKernel<0>;
  table["zeros_like"] = ConstantKernel<0>;
  table["ones"] = ConstantKernel<1>;
  table["ones_like"] = ConstantKernel<1>;
  table["full"] = FillFromAttrKernel<kFillValue>;
  table["full_like"] = FillFromAttrKernel<kFillValue>;
  table["fill.Scalar"] = FillFromAttrKernel<kValue>;
  table["scalar_tensor"] = FillFromAttrKernel<kS>;
}

}  // namespace tandem::cuda
