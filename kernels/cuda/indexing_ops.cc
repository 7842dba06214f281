// CUDA kernels of the ops that index with data (embedding and its backward,
// gather, scatter, index_select; index_put is with index.Tensor in
// advanced_index_ops.cc), arange and the "empty" constructors. Index tensors
// are int64 or int32; their values are checked on the GPU through the error
// word, and DescribeBadIndex turns a reported value into the iteration's
// message (for advanced_index_ops.cc's ops too).
#include <cstring>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/sequence_launch.h"
#include "kernels/cuda/strided_layout.h"

namespace tandem::cuda {
namespace {

bool IsFloat(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }

int ElementBytes(DType dtype) { return static_cast<int>(DTypeSize(dtype)); }

IndexOperand Indices(const TensorArg& index) { return IndexOperand{index.data, index.type.dtype}; }

absl::Status CopySelf(const CudaKernelContext& context, const TensorArg& self, const TensorArg& out) {
  return CopyBytes(context, out.data, self.data, out.type.bytes());
}

absl::Status EmbeddingKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& weight = args.inputs[0];
  const TensorArg& ids = args.inputs[1];
  return Launched(
      args,
      LaunchEmbedding(ElementBytes(weight.type.dtype), ids.numel(), weight.type.shape[0], weight.type.shape[1],
                      weight.data, Indices(ids), args.outputs[0].data, context.error, context.native),
      weight.type.dtype);
}

absl::Status EmbeddingBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& ids = args.inputs[1];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(int64_t padding_idx, args.node->attrs.GetInt("padding_idx", -1));
  if (IsHalfDType(out.type.dtype)) {  // float32 sums without atomics (half_launch.h)
    return Launched(args,
                    LaunchHalfEmbeddingBackward(out.type.dtype, ids.numel(), out.type.shape[0], out.type.shape[1],
                                                padding_idx < 0 ? -1 : padding_idx, grad.data, Indices(ids), out.data,
                                                context.error, context.native),
                    out.type.dtype);
  }
  if (!IsFloat(out.type.dtype)) return UnsupportedDType(args, out.type.dtype);
  return Launched(args,
                  LaunchEmbeddingBackward(out.type.dtype, ids.numel(), out.type.shape[0], out.type.shape[1],
                                          padding_idx < 0 ? -1 : padding_idx, grad.data, Indices(ids), out.data,
                                          context.error, context.native),
                  out.type.dtype);
}

// gather / scatter: where element i of index lands in self (without dim),
// and in src.
absl::StatusOr<DimIndexing> DimIndexingOf(const KernelArgs& args, const TensorArg& self, const TensorArg& index,
                                          const TensorArg* src) {
  ASSIGN_OR_RETURN(int64_t dim_attr, args.node->attrs.GetInt("dim"));
  ASSIGN_OR_RETURN(int dim, NormalizeDim(dim_attr, self.type.rank()));
  DimIndexing dims;
  std::vector<int64_t> self_strides = ContiguousStrides(self.type.shape);
  dims.dim_size = self.type.rank() == 0 ? 1 : self.type.shape[dim];
  dims.dim_stride = self.type.rank() == 0 ? 0 : self_strides[dim];
  if (!self_strides.empty()) self_strides[dim] = 0;
  std::vector<std::vector<int64_t>> strides = {self_strides};
  if (src != nullptr) strides.push_back(ContiguousStrides(src->type.shape));
  // Uncollapsed (dims of size 1 kept), so both layouts index index's shape.
  if (index.type.rank() > kMaxDims) return absl::UnimplementedError("index has more dims than the kernels handle");
  for (int d = 0; d < index.type.rank(); ++d) {
    dims.self_offset.sizes[d] = dims.src_offset.sizes[d] = index.type.shape[d];
    dims.self_offset.strides[d] = strides[0][d];
    if (src != nullptr) dims.src_offset.strides[d] = strides[1][d];
  }
  dims.self_offset.rank = dims.src_offset.rank = index.type.rank();
  return dims;
}

absl::Status GatherKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& index = args.inputs[1];
  ASSIGN_OR_RETURN(DimIndexing dims, DimIndexingOf(args, self, index, nullptr));
  return Launched(args,
                  LaunchGatherDim(ElementBytes(self.type.dtype), index.numel(), dims, self.data, Indices(index),
                                  args.outputs[0].data, context.error, context.native),
                  self.type.dtype);
}

template <bool kSrc>
absl::Status ScatterKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& index = args.inputs[1];
  const TensorArg* src = kSrc ? &args.inputs[2] : nullptr;
  double value = 0.0;
  if constexpr (!kSrc) {
    ASSIGN_OR_RETURN(value, args.node->attrs.GetFloat("value"));
  }
  ASSIGN_OR_RETURN(DimIndexing dims, DimIndexingOf(args, self, index, src));
  RETURN_IF_ERROR(CopySelf(context, self, args.outputs[0]));
  return Launched(
      args,
      LaunchScatterDim(self.type.dtype, index.numel(), dims, Indices(index), src != nullptr ? src->data : nullptr,
                       value, args.outputs[0].data, context.error, context.native),
      self.type.dtype);
}

absl::Status IndexSelectKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& index = args.inputs[1];
  ASSIGN_OR_RETURN(int64_t dim_attr, args.node->attrs.GetInt("dim"));
  ASSIGN_OR_RETURN(int dim, NormalizeDim(dim_attr, self.type.rank()));
  const DimSplit split = SplitAtDim(self.type.shape, dim);
  return Launched(args,
                  LaunchIndexSelect(ElementBytes(self.type.dtype), split.outer, split.size, split.inner, index.numel(),
                                    self.data, Indices(index), args.outputs[0].data, context.error, context.native),
                  self.type.dtype);
}

absl::Status ArangeKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const Attrs& attrs = args.node->attrs;
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(double start, attrs.GetFloat("start", 0.0));
  ASSIGN_OR_RETURN(double step, attrs.GetFloat("step", 1.0));
  auto int_start = attrs.GetInt("start", 0);
  auto int_step = attrs.GetInt("step", 1);
  const bool exact = int_start.ok() && int_step.ok();
  return Launched(args,
                  LaunchArange(out.type.dtype, out.numel(), start, step, exact ? *int_start : 0, exact ? *int_step : 0,
                               exact, out.data, context.native),
                  out.type.dtype);
}

absl::Status ZerosKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  if (out.type.bytes() == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out.data, 0, out.type.bytes(), context.native));
  return absl::OkStatus();
}

}  // namespace

std::string DescribeBadIndex(const Graph& graph, const Node& node, int64_t value) {
  auto type = [&](int input) { return graph.values[node.inputs[input]].type; };
  // The canonical name: aliases (_unsafe_index.Tensor, _unsafe_index_put) report as their ops.
  const std::string op = node.def != nullptr ? node.def->name : node.op;
  if (op == "embedding") {
    return absl::StrCat("index ", value, " is outside the rows [0, ", type(0).shape[0], ") of weight");
  }
  if (op == "embedding_dense_backward") {
    return absl::StrCat("index ", value, " is outside [0, ", node.attrs.GetInt("num_weights").value_or(0),
                        ") (num_weights)");
  }
  if (op == "index_put" || op == "index.Tensor") {
    return absl::StrCat("index ", value, " is outside its dim of self ", type(0).ToString(),
                        " (negative indices count from the end)");
  }
  if (op == "masked_scatter") {
    return absl::StrCat("mask has ", value, " true elements but source has only ", type(2).numel());
  }
  if (op == "gather" || op == "scatter.value" || op == "scatter.src" || op == "index_select" || op == "scatter_add" ||
      op == "scatter_reduce.two") {
    const TensorType self = type(0);
    const int dim = NormalizeDim(node.attrs.GetInt("dim").value_or(0), self.rank()).value_or(0);
    const int64_t size = self.rank() == 0 ? 1 : self.shape[dim];
    return absl::StrCat("index ", value, " is outside [0, ", size, ") (dim ", dim, " of self ", self.ToString(), ")");
  }
  return absl::StrCat("the kernel reported the bad value ", value);
}

void AddIndexingKernels(CudaKernelTable& table) {
  table["embedding"] = EmbeddingKernel;
  table["embedding_dense_backward"] = EmbeddingBackwardKernel;
  table["gather"] = GatherKernel;
  table["scatter.value"] = ScatterKernel<false>;
  table["scatter.src"] = ScatterKernel<true>;
  table["index_select"] = IndexSelectKernel;
  table["arange.start_step"] = ArangeKernel;
  table["empty_like"] = ZerosKernel;
  table["empty_permuted"] = ZerosKernel;
}

}  // namespace tandem::cuda
