// CUDA kernels of the comparisons, where.self, masked_fill, logical_not and
// any, with the CPU kernels' type rules. All of them also take bfloat16 and
// float16 (half_launch.h, comparison_kernels.cu): compared as float32
// values, with a rank-0 operand of another dtype or a .Scalar number (a
// comparison's other, masked_fill's value) rounded to the 16-bit type first.
#include <variant>
#include <vector>

#include "base/status_macros.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/operand_layout.h"
#include "kernels/cuda/sequence_launch.h"
#include "kernels/half.h"

namespace tandem::cuda {
namespace {

bool IsStorable(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kInt64 || dtype == DType::kInt32 ||
         dtype == DType::kBool;
}

// As the CPU kernels: equal dtypes, else the one that is not rank-0 (of two
// rank-0 operands, the float / wider one).
DType CompareDType(const TensorType& a, const TensorType& b) {
  if (a.dtype == b.dtype) return a.dtype;
  if (a.rank() == 0 && b.rank() != 0) return b.dtype;
  if (b.rank() == 0 && a.rank() != 0) return a.dtype;
  if (IsFloating(a.dtype) != IsFloating(b.dtype)) return IsFloating(a.dtype) ? a.dtype : b.dtype;
  return DTypeSize(a.dtype) >= DTypeSize(b.dtype) ? a.dtype : b.dtype;
}

template <CompareOp kOp>
absl::Status CompareTensorKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  const DType dtype = CompareDType(args.inputs[0].type, args.inputs[1].type);
  if (!IsStorable(dtype) && !IsHalfDType(dtype)) return UnsupportedDType(args, dtype);
  ASSIGN_OR_RETURN(std::vector<BinaryOperand> operands,
                   BroadcastOperands({&args.inputs[0], &args.inputs[1]}, {dtype, dtype}, out.type.shape));
  if (IsHalfDType(dtype)) {
    return Launched(
        args, LaunchHalfCompare(kOp, dtype, out.numel(), operands[0], operands[1], out.as<bool>(), context.native),
        dtype);
  }
  return Launched(
      args, LaunchCompare(kOp, dtype, out.numel(), operands[0], operands[1], out.as<bool>(), context.native), dtype);
}

template <CompareOp kOp>
absl::Status CompareScalarKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const Attrs& attrs = args.node->attrs;
  const TensorArg& in = args.inputs[0];
  ASSIGN_OR_RETURN(double other, attrs.GetFloat("other"));
  if (IsHalfDType(in.type.dtype)) {
    const float rounded = in.type.dtype == DType::kBFloat16 ? BFloat16(other).ToFloat() : Float16(other).ToFloat();
    return Launched(args,
                    LaunchHalfCompareScalar(kOp, in.type.dtype, in.numel(), in.data, rounded,
                                            args.outputs[0].as<bool>(), context.native),
                    in.type.dtype);
  }
  if (!IsStorable(in.type.dtype)) return UnsupportedDType(args, in.type.dtype);
  auto it = attrs.values().find("other");
  const bool int_number = it != attrs.values().end() && std::holds_alternative<int64_t>(it->second);
  ScalarParam param;
  param.f = other;
  param.i = int_number ? std::get<int64_t>(it->second) : 0;
  return Launched(args,
                  LaunchCompareScalar(kOp, in.type.dtype, in.numel(), in.data, param, int_number,
                                      args.outputs[0].as<bool>(), context.native),
                  in.type.dtype);
}

absl::Status WhereKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  const DType dtype = out.type.dtype;
  if (!IsStorable(dtype) && !IsHalfDType(dtype)) return UnsupportedDType(args, dtype);
  ASSIGN_OR_RETURN(std::vector<BinaryOperand> operands,
                   BroadcastOperands({&args.inputs[0], &args.inputs[1], &args.inputs[2]}, {DType::kBool, dtype, dtype},
                                     out.type.shape));
  if (IsHalfDType(dtype)) {
    return Launched(
        args, LaunchHalfWhere(dtype, out.numel(), operands[0], operands[1], operands[2], out.data, context.native),
        dtype);
  }
  return Launched(
      args, LaunchWhere(dtype, out.numel(), operands[0], operands[1], operands[2], out.data, context.native), dtype);
}

template <bool kTensorValue>
absl::Status MaskedFillKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  const DType dtype = out.type.dtype;
  if (!IsStorable(dtype) && !IsHalfDType(dtype)) return UnsupportedDType(args, dtype);
  double number = 0.0;
  if constexpr (!kTensorValue) {
    ASSIGN_OR_RETURN(number, args.node->attrs.GetFloat("value"));
  }
  ASSIGN_OR_RETURN(std::vector<BinaryOperand> mask,
                   BroadcastOperands({&args.inputs[1]}, {DType::kBool}, out.type.shape));
  const void* value = kTensorValue ? args.inputs[2].data : nullptr;
  const DType value_dtype = kTensorValue ? args.inputs[2].type.dtype : dtype;
  return Launched(args,
                  LaunchMaskedFill(dtype, out.numel(), args.inputs[0].data, mask[0], value, value_dtype, number,
                                   out.data, context.native),
                  dtype);
}

absl::Status LogicalNotKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  if (!IsStorable(in.type.dtype) && !IsHalfDType(in.type.dtype)) return UnsupportedDType(args, in.type.dtype);
  return Launched(args,
                  LaunchLogicalNot(in.type.dtype, in.numel(), in.data, args.outputs[0].as<bool>(), context.native),
                  in.type.dtype);
}

// Reduced dims grouped as the sum kernels do: one reduced run becomes
// [outer, size, inner]; several use the general kernel.
template <bool kAllDims>
absl::Status AnyKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  if (!IsStorable(in.type.dtype) && !IsHalfDType(in.type.dtype)) return UnsupportedDType(args, in.type.dtype);
  std::vector<int64_t> dims;
  if constexpr (!kAllDims) {
    ASSIGN_OR_RETURN(dims, args.node->attrs.GetInts("dim", std::vector<int64_t>{}));
  }
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReductionMask(dims, in.type.rank()));
  if (out.numel() == 0) return absl::OkStatus();
  struct Run {
    int64_t size;
    bool reduced;
  };
  std::vector<Run> runs;
  const Shape& shape = in.type.shape;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!runs.empty() && runs.back().reduced == mask[d]) {
      runs.back().size *= shape[d];
    } else {
      runs.push_back(Run{shape[d], static_cast<bool>(mask[d])});
    }
  }
  int reduced_runs = 0, reduced_at = -1;
  for (size_t r = 0; r < runs.size(); ++r) {
    if (runs[r].reduced) ++reduced_runs, reduced_at = static_cast<int>(r);
  }
  StridedOperand kept, reduced;
  int64_t outer = 1, size = 1, inner = 1;
  if (reduced_runs <= 1) {
    for (int r = 0; r < static_cast<int>(runs.size()); ++r) {
      if (reduced_at < 0 || r < reduced_at) {
        outer *= runs[r].size;
      } else if (r == reduced_at) {
        size = runs[r].size;
      } else {
        inner *= runs[r].size;
      }
    }
  } else {
    std::vector<int64_t> sizes;
    for (const Run& run : runs) sizes.push_back(run.size);
    const std::vector<int64_t> strides = ContiguousStrides(sizes);
    for (size_t r = 0; r < runs.size(); ++r) {
      StridedOperand& target = runs[r].reduced ? reduced : kept;
      if (target.rank >= kMaxDims) return absl::UnimplementedError("any: too many separate runs of dims");
      target.sizes[target.rank] = runs[r].size;
      target.strides[target.rank] = strides[r];
      ++target.rank;
    }
  }
  return Launched(
      args,
      LaunchAny(in.type.dtype, outer, size, inner, kept, reduced, out.numel(), in.data, out.as<bool>(), context.native),
      in.type.dtype);
}

}  // namespace

void AddComparisonKernels(CudaKernelTable& table) {
  table["eq.Tensor"] = CompareTensorKernel<CompareOp::kEq>;
  table["ne.Tensor"] = CompareTensorKernel<CompareOp::kNe>;
  table["lt.Tensor"] = CompareTensorKernel<CompareOp::kLt>;
  table["le.Tensor"] = CompareTensorKernel<CompareOp::kLe>;
  table["gt.Tensor"] = CompareTensorKernel<CompareOp::kGt>;
  table["ge.Tensor"] = CompareTensorKernel<CompareOp::kGe>;
  table["eq.Scalar"] = CompareScalarKernel<CompareOp::kEq>;
  table["ne.Scalar"] = CompareScalarKernel<CompareOp::kNe>;
  table["lt.Scalar"] = CompareScalarKernel<CompareOp::kLt>;
  table["le.Scalar"] = CompareScalarKernel<CompareOp::kLe>;
  table["gt.Scalar"] = CompareScalarKernel<CompareOp::kGt>;
  table["ge.Scalar"] = CompareScalarKernel<CompareOp::kGe>;
  table["where.self"] = WhereKernel;
  table["masked_fill.Scalar"] = MaskedFillKernel<false>;
  table["masked_fill.Tensor"] = MaskedFillKernel<true>;
  table["logical_not"] = LogicalNotKernel;
  table["any"] = AnyKernel<true>;
  table["any.dim"] = AnyKernel<false>;
}

}  // namespace tandem::cuda
