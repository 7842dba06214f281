// CUDA kernels of the reductions, scans and sorts: sum, sum.dim_IntList,
// mean, mean.dim (reduce_kernels.cu, half_row_kernels.cu), and prod, var,
// linalg_vector_norm, amax / amin, argmax / argmin, max.dim / min.dim,
// cumsum, sort and topk (reduce_launch.h). The input's dims are grouped into
// runs of kept and reduced dims (size-1 dims dropped, adjacent dims of one
// kind merged); one reduced run becomes [outer, size, inner] for the row and
// column kernels, anything else the general kernels.
#include <cmath>
#include <limits>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/reduction_rules.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/reduce_launch.h"

namespace tandem::cuda {
namespace {

bool IsNumeric(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kInt64; }

struct Run {
  int64_t size = 1;
  bool reduced = false;
};

absl::Status Reduce(const CudaKernelContext& context, const KernelArgs& args, const std::vector<bool>& mask,
                    bool mean) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  // 16-bit floats (on either side) take the 16-bit kernels, whose empty
  // sums are 0 (mean: NaN) without a separate fill.
  const bool half = IsHalfDType(in.type.dtype) || IsHalfDType(out.type.dtype);
  if (!IsNumeric(in.type.dtype) && !IsHalfDType(in.type.dtype)) return UnsupportedDType(args, in.type.dtype);
  if (!IsNumeric(out.type.dtype) && !IsHalfDType(out.type.dtype)) return UnsupportedDType(args, out.type.dtype);
  if (out.numel() == 0) return absl::OkStatus();
  if (half && in.numel() == 0) {
    return Launched(args,
                    LaunchHalfReduceMiddle(out.type.dtype, in.type.dtype, out.numel(), 0, 1, mean, in.data, out.data,
                                           context.native),
                    in.type.dtype);
  }
  if (in.numel() == 0) {
    // Every output sums an empty slice: 0, or 0 / 0 for a mean.
    const double value = mean ? std::numeric_limits<double>::quiet_NaN() : 0.0;
    return Launched(args, LaunchFill(out.type.dtype, out.numel(), value, out.data, context.native), out.type.dtype);
  }
  const Shape& shape = in.type.shape;
  std::vector<Run> runs;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!runs.empty() && runs.back().reduced == mask[d]) {
      runs.back().size *= shape[d];
    } else {
      runs.push_back(Run{shape[d], static_cast<bool>(mask[d])});
    }
  }
  int reduced_runs = 0;
  int reduced_at = -1;
  for (size_t r = 0; r < runs.size(); ++r) {
    if (runs[r].reduced) {
      ++reduced_runs;
      reduced_at = static_cast<int>(r);
    }
  }
  if (reduced_runs <= 1) {
    int64_t outer = 1, size = 1, inner = 1;
    for (int r = 0; r < static_cast<int>(runs.size()); ++r) {
      if (r < reduced_at) {
        outer *= runs[r].size;
      } else if (r == reduced_at) {
        size = runs[r].size;
      } else if (reduced_at >= 0) {
        inner *= runs[r].size;
      } else {
        outer *= runs[r].size;  // nothing reduced: a converting copy through the row kernel
      }
    }
    if (half) {
      return Launched(args,
                      LaunchHalfReduceMiddle(out.type.dtype, in.type.dtype, outer, size, inner, mean, in.data, out.data,
                                             context.native),
                      in.type.dtype);
    }
    return Launched(
        args,
        LaunchReduceMiddle(out.type.dtype, in.type.dtype, outer, size, inner, mean, in.data, out.data, context.native),
        in.type.dtype);
  }
  // Several reduced runs: index kept and reduced runs separately.
  std::vector<int64_t> sizes;
  for (const Run& run : runs) sizes.push_back(run.size);
  const std::vector<int64_t> strides = ContiguousStrides(sizes);
  StridedOperand kept, reduced;
  for (size_t r = 0; r < runs.size(); ++r) {
    StridedOperand& target = runs[r].reduced ? reduced : kept;
    target.sizes[target.rank] = runs[r].size;
    target.strides[target.rank] = strides[r];
    ++target.rank;
  }
  if (half) {
    return Launched(args,
                    LaunchHalfReduceGeneral(out.type.dtype, in.type.dtype, out.numel(), kept, reduced, mean, in.data,
                                            out.data, context.native),
                    in.type.dtype);
  }
  return Launched(args,
                  LaunchReduceGeneral(out.type.dtype, in.type.dtype, out.numel(), kept, reduced, mean, in.data,
                                      out.data, context.native),
                  in.type.dtype);
}

template <bool kMean, bool kAllDims>
absl::Status ReduceKernel(const CudaKernelContext& context, const KernelArgs& args) {
  std::vector<int64_t> dims;
  if constexpr (!kAllDims) {
    ASSIGN_OR_RETURN(dims, args.node->attrs.GetInts("dim", std::vector<int64_t>{}));
  }
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReductionMask(dims, args.inputs[0].type.rank()));
  return Reduce(context, args, mask, kMean);
}

// ---- prod, var, linalg_vector_norm, the extrema, cumsum (reduce_launch.h) ----

// What a reduction of `shape` over the dims in `mask` reads per output.
ReduceLayout LayoutOf(const Shape& shape, const std::vector<bool>& mask) {
  ReduceLayout layout;
  layout.out_n = 1;
  layout.count = 1;
  std::vector<Run> runs;
  for (size_t d = 0; d < shape.size(); ++d) {
    (mask[d] ? layout.count : layout.out_n) *= shape[d];
    if (shape[d] == 1) continue;
    if (!runs.empty() && runs.back().reduced == mask[d]) {
      runs.back().size *= shape[d];
    } else {
      runs.push_back(Run{shape[d], static_cast<bool>(mask[d])});
    }
  }
  int reduced_runs = 0;
  int reduced_at = -1;
  for (size_t r = 0; r < runs.size(); ++r) {
    if (runs[r].reduced) {
      ++reduced_runs;
      reduced_at = static_cast<int>(r);
    }
  }
  if (reduced_runs <= 1) {
    // [outer, count, inner]: the kept runs after the reduced one are inner.
    for (int r = reduced_at + 1; reduced_at >= 0 && r < static_cast<int>(runs.size()); ++r) {
      layout.inner *= runs[r].size;
    }
    return layout;
  }
  layout.general = true;
  std::vector<int64_t> sizes;
  for (const Run& run : runs) sizes.push_back(run.size);
  const std::vector<int64_t> strides = ContiguousStrides(sizes);
  for (size_t r = 0; r < runs.size(); ++r) {
    StridedOperand& target = runs[r].reduced ? layout.reduced : layout.kept;
    target.sizes[target.rank] = runs[r].size;
    target.strides[target.rank] = strides[r];
    ++target.rank;
  }
  return layout;
}

// The layout of a single-dim op (SingleDimOf's dim; -1: the flattened tensor).
ReduceLayout LayoutForDim(const Shape& shape, int dim) {
  const DimSplit s = SplitForDim(shape, dim);
  ReduceLayout layout;
  layout.out_n = s.outer * s.inner;
  layout.count = s.size;
  layout.inner = s.inner;
  return layout;
}

bool IsReduceType(DType dtype) { return IsNumeric(dtype) || IsHalfDType(dtype); }

template <bool kAllDims>
absl::Status ProdKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  int dim = -1;
  if constexpr (!kAllDims) {
    ASSIGN_OR_RETURN(dim, SingleDimOf(args.node->attrs, in.type));
  }
  if (!IsReduceType(in.type.dtype)) return UnsupportedDType(args, in.type.dtype);
  return Launched(
      args,
      LaunchProd(out.type.dtype, in.type.dtype, LayoutForDim(in.type.shape, dim), in.data, out.data, context.native),
      in.type.dtype);
}

absl::Status VarKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReducedDimsOf(args.node->attrs, in.type));
  ASSIGN_OR_RETURN(double correction, VarianceCorrectionOf(args.node->op, args.node->attrs));
  return Launched(args,
                  LaunchVar(in.type.dtype, LayoutOf(in.type.shape, mask), correction, in.data, args.outputs[0].data,
                            context.native),
                  in.type.dtype);
}

absl::Status VectorNormKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(VectorNorm norm, VectorNormOf(args.node->attrs));
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReducedDimsOf(args.node->attrs, in.type));
  VectorNormOp op = VectorNormOp::kSumPow;
  switch (norm.kind) {
    case NormKind::kSumSquares:
      op = VectorNormOp::kSumSquares;
      break;
    case NormKind::kSumAbs:
      op = VectorNormOp::kSumAbs;
      break;
    case NormKind::kMaxAbs:
      op = VectorNormOp::kMaxAbs;
      break;
    case NormKind::kMinAbs:
      op = VectorNormOp::kMinAbs;
      break;
    case NormKind::kCountNonZero:
      op = VectorNormOp::kCountNonZero;
      break;
    case NormKind::kSumPow:
      op = VectorNormOp::kSumPow;
      break;
  }
  return Launched(args,
                  LaunchVectorNorm(op, norm.p, out.type.dtype, in.type.dtype, LayoutOf(in.type.shape, mask), in.data,
                                   out.data, context.native),
                  in.type.dtype);
}

template <bool kMax>
absl::Status ExtremumKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReducedDimsOf(args.node->attrs, in.type));
  return Launched(
      args,
      LaunchExtremum(kMax, in.type.dtype, LayoutOf(in.type.shape, mask), in.data, args.outputs[0].data, context.native),
      in.type.dtype);
}

// argmax / argmin (kValues false: `dim` optional, indices only) and max.dim /
// min.dim (values and indices).
template <bool kMax, bool kValues>
absl::Status ArgExtremumKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  ASSIGN_OR_RETURN(int dim, SingleDimOf(args.node->attrs, in.type, /*optional=*/!kValues));
  void* values = kValues ? args.outputs[0].data : nullptr;
  int64_t* indices = args.outputs[kValues ? 1 : 0].as<int64_t>();
  return Launched(args,
                  LaunchArgExtremum(kMax, in.type.dtype, LayoutForDim(in.type.shape, dim), in.data, values, indices,
                                    context.native),
                  in.type.dtype);
}

absl::Status CumsumKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(int dim, SingleDimOf(args.node->attrs, in.type));
  const DimSplit s = SplitAtDim(in.type.shape, dim);
  return Launched(
      args, LaunchCumsum(out.type.dtype, in.type.dtype, s.outer, s.size, s.inner, in.data, out.data, context.native),
      in.type.dtype);
}

// sort (kTopk false) and topk along `dim` (default -1).
template <bool kTopk>
absl::Status SortKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const Attrs& attrs = args.node->attrs;
  Attrs with_dim = attrs;
  if (!attrs.Has("dim")) with_dim.Set("dim", int64_t{-1});
  ASSIGN_OR_RETURN(int dim, SingleDimOf(with_dim, in.type));
  const DimSplit s = SplitAtDim(in.type.shape, dim);
  void* values = args.outputs[0].data;
  int64_t* indices = args.outputs[1].as<int64_t>();
  if constexpr (kTopk) {
    ASSIGN_OR_RETURN(int64_t k, attrs.GetInt("k"));
    ASSIGN_OR_RETURN(bool largest, attrs.GetBool("largest", true));
    return Launched(
        args, LaunchTopk(in.type.dtype, s.outer, s.size, s.inner, k, largest, in.data, values, indices, context.native),
        in.type.dtype);
  } else {
    ASSIGN_OR_RETURN(bool descending, attrs.GetBool("descending", false));
    return Launched(
        args, LaunchSort(in.type.dtype, s.outer, s.size, s.inner, descending, in.data, values, indices, context.native),
        in.type.dtype);
  }
}

}  // namespace

void AddReductionKernels(CudaKernelTable& table) {
  table["sum"] = ReduceKernel<false, true>;
  table["sum.dim_IntList"] = ReduceKernel<false, false>;
  table["mean"] = ReduceKernel<true, true>;
  table["mean.dim"] = ReduceKernel<true, false>;
  table["prod"] = ProdKernel<true>;
  table["prod.dim_int"] = ProdKernel<false>;
  table["var.correction"] = VarKernel;
  table["var.dim"] = VarKernel;
  table["linalg_vector_norm"] = VectorNormKernel;
  table["amax"] = ExtremumKernel<true>;
  table["amin"] = ExtremumKernel<false>;
  table["argmax"] = ArgExtremumKernel<true, false>;
  table["argmin"] = ArgExtremumKernel<false, false>;
  table["max.dim"] = ArgExtremumKernel<true, true>;
  table["min.dim"] = ArgExtremumKernel<false, true>;
  table["cumsum"] = CumsumKernel;
  table["sort"] = SortKernel<false>;
  table["topk"] = SortKernel<true>;
}

}  // namespace tandem::cuda
