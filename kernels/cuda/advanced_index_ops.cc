// CUDA kernels of advanced indexing (index.Tensor, index_put), the reducing
// scatters (scatter_add, scatter_reduce.two) and masked_scatter: the host
// side, which resolves each node's indexing by the registry's rule
// (index_rules.h), collapses its layouts and launches
// advanced_index_kernels.cu. Index values are checked on the GPU through the
// error word; DescribeBadIndex (indexing_ops.cc) words what a node reports.
// index.Tensor and masked_scatter move bytes (every dtype); index_put takes
// every dtype, its sums too; the scatters take float32, float64, int64,
// int32 and the 16-bit floats.
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/index_rules.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cuda/index_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/strided_layout.h"

namespace tandem::cuda {
namespace {

absl::Status CopySelf(const CudaKernelContext& context, const TensorArg& self, const TensorArg& out) {
  return CopyBytes(context, out.data, self.data, out.type.bytes());
}

// The launch parameters of self[indices] (inputs 1..k), and of values read
// over its shape when `values` is given (index_put).
absl::StatusOr<AdvancedIndexParams> IndexParams(const KernelArgs& args, int k, const TensorArg* values) {
  const TensorArg& self = args.inputs[0];
  if (k > kMaxAdvancedIndices) {
    return absl::UnimplementedError(
        absl::StrCat(args.node->op, ": ", k, " index tensors; the CUDA kernel takes up to ", kMaxAdvancedIndices));
  }
  std::vector<Shape> shapes;
  for (int j = 0; j < k; ++j) shapes.push_back(args.inputs[1 + j].type.shape);
  ASSIGN_OR_RETURN(AdvancedIndex index, ResolveAdvancedIndex(args.node->attrs, self.type.shape, shapes));
  std::vector<std::vector<int64_t>> strides = {AdvancedIndexSelfStrides(index, self.type.shape)};
  for (int j = 0; j < k; ++j) strides.push_back(AdvancedIndexTensorStrides(index, shapes[j]));
  if (values != nullptr) strides.push_back(BroadcastStrides(values->type.shape, index.result));
  ASSIGN_OR_RETURN(std::vector<StridedOperand> layouts, CollapseLayouts(index.result, strides));
  AdvancedIndexParams params;
  params.k = k;
  params.n = NumElements(index.result);
  params.self_layout = layouts[0];
  const std::vector<int64_t> self_strides = ContiguousStrides(self.type.shape);
  for (int j = 0; j < k; ++j) {
    params.index[j] = IndexOperand{args.inputs[1 + j].data, args.inputs[1 + j].type.dtype};
    params.index_layout[j] = layouts[1 + j];
    params.dim_size[j] = self.type.shape[index.dims[j]];
    params.dim_stride[j] = self_strides[index.dims[j]];
  }
  if (values != nullptr) params.values_layout = layouts.back();
  return params;
}

absl::Status IndexKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  ASSIGN_OR_RETURN(AdvancedIndexParams params,
                   IndexParams(args, static_cast<int>(args.inputs.size()) - 1, /*values=*/nullptr));
  return Launched(args,
                  LaunchAdvancedIndex(static_cast<int>(DTypeSize(self.type.dtype)), params, self.data,
                                      args.outputs[0].data, context.error, context.native),
                  self.type.dtype);
}

absl::Status IndexPutKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& values = args.inputs.back();
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(AdvancedIndexParams params, IndexParams(args, static_cast<int>(args.inputs.size()) - 2, &values));
  ASSIGN_OR_RETURN(params.accumulate, args.node->attrs.GetBool("accumulate", false));
  RETURN_IF_ERROR(CopySelf(context, self, out));
  return Launched(args,
                  LaunchAdvancedIndexPut(self.type.dtype, params, values.data, out.data, context.error, context.native),
                  self.type.dtype);
}

// Where element i of index lands in self (without dim) and in src.
absl::StatusOr<DimIndexing> ScatterIndexing(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& index = args.inputs[1];
  const TensorArg& src = args.inputs[2];
  ASSIGN_OR_RETURN(int64_t dim_attr, args.node->attrs.GetInt("dim"));
  ASSIGN_OR_RETURN(int dim, NormalizeDim(dim_attr, self.type.rank()));
  if (index.type.rank() > kMaxDims) {
    return absl::UnimplementedError(absl::StrCat(args.node->op, ": index has more dims than the kernels handle"));
  }
  std::vector<int64_t> self_strides = ContiguousStrides(self.type.shape);
  const std::vector<int64_t> src_strides = ContiguousStrides(src.type.shape);
  DimIndexing dims;
  dims.dim_size = self.type.rank() == 0 ? 1 : self.type.shape[dim];
  dims.dim_stride = self.type.rank() == 0 ? 0 : self_strides[dim];
  if (!self_strides.empty()) self_strides[dim] = 0;
  // Uncollapsed, so both layouts index index's shape.
  for (int d = 0; d < index.type.rank(); ++d) {
    dims.self_offset.sizes[d] = dims.src_offset.sizes[d] = index.type.shape[d];
    dims.self_offset.strides[d] = self_strides[d];
    dims.src_offset.strides[d] = src_strides[d];
  }
  dims.self_offset.rank = dims.src_offset.rank = index.type.rank();
  return dims;
}

absl::StatusOr<ScatterReduceOp> ReduceOp(const Attrs& attrs) {
  ASSIGN_OR_RETURN(std::string reduce, attrs.GetString("reduce"));
  if (reduce == "sum") return ScatterReduceOp::kSum;
  if (reduce == "prod") return ScatterReduceOp::kProd;
  if (reduce == "mean") return ScatterReduceOp::kMean;
  if (reduce == "amax") return ScatterReduceOp::kAmax;
  if (reduce == "amin") return ScatterReduceOp::kAmin;
  return absl::InvalidArgumentError(absl::StrCat("attribute 'reduce' is \"", reduce, "\""));
}

template <bool kReduce>
absl::Status ScatterKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& index = args.inputs[1];
  const TensorArg& out = args.outputs[0];
  ScatterReduceOp op = ScatterReduceOp::kSum;
  bool include_self = true;
  if constexpr (kReduce) {
    ASSIGN_OR_RETURN(op, ReduceOp(args.node->attrs));
    ASSIGN_OR_RETURN(include_self, args.node->attrs.GetBool("include_self", true));
  }
  int64_t* counts = op == ScatterReduceOp::kMean ? args.outputs[1].as<int64_t>() : nullptr;
  ASSIGN_OR_RETURN(DimIndexing dims, ScatterIndexing(args));
  RETURN_IF_ERROR(CopySelf(context, self, out));
  return Launched(args,
                  LaunchScatterReduce(self.type.dtype, op, include_self, index.numel(), dims,
                                      IndexOperand{index.data, index.type.dtype}, args.inputs[2].data, out.data,
                                      out.numel(), counts, context.error, context.native),
                  self.type.dtype);
}

absl::Status MaskedScatterKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& mask = args.inputs[1];
  const TensorArg& source = args.inputs[2];
  ASSIGN_OR_RETURN(StridedOperand mask_layout, BroadcastLayout(mask.type.shape, self.type.shape));
  return Launched(args,
                  LaunchMaskedScatter(static_cast<int>(DTypeSize(self.type.dtype)), self.numel(), mask.as<const bool>(),
                                      mask_layout, self.data, source.data, source.numel(), args.outputs[0].data,
                                      context.error, context.native),
                  self.type.dtype);
}

}  // namespace

void AddAdvancedIndexKernels(CudaKernelTable& table) {
  table["index.Tensor"] = IndexKernel;
  table["index_put"] = IndexPutKernel;
  table["scatter_add"] = ScatterKernel<false>;
  table["scatter_reduce.two"] = ScatterKernel<true>;
  table["masked_scatter"] = MaskedScatterKernel;
}

}  // namespace tandem::cuda
