// Reference CPU kernels of the comparisons (bool results), where.self,
// masked_fill, logical_not and any.
//
// A comparison with a number converts the number the way PyTorch's type
// promotion would: to the tensor's float dtype for a float tensor; for an
// integer (or bool) tensor, exactly in int64 when the number is an integer
// and in float32 otherwise.
//
// The comparisons, where.self, masked_fill, logical_not and any take
// bfloat16 and float16 through half_kernels.h: widened to float32, with a
// rank-0 operand or a number rounded to the 16-bit dtype they compare (or
// select, or fill with) in first. Selections and fills round back exactly;
// logical_not and any test the widened value against zero (-0 is zero, NaN
// is not).
#include <type_traits>
#include <variant>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/broadcast_map.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

enum class Cmp { kEq, kNe, kLt, kLe, kGt, kGe };

template <Cmp kOp, typename T>
bool Compare(T a, T b) {
  if constexpr (kOp == Cmp::kEq) return a == b;
  if constexpr (kOp == Cmp::kNe) return a != b;
  if constexpr (kOp == Cmp::kLt) return a < b;
  if constexpr (kOp == Cmp::kLe) return a <= b;
  if constexpr (kOp == Cmp::kGt) return a > b;
  if constexpr (kOp == Cmp::kGe) return a >= b;
}

// The dtype two operands are compared in: theirs when equal, else the one
// that is not rank-0 (or, of two rank-0 operands, the float / wider one).
DType CompareDType(const TensorType& a, const TensorType& b) {
  if (a.dtype == b.dtype) return a.dtype;
  if (a.rank() == 0 && b.rank() != 0) return b.dtype;
  if (b.rank() == 0 && a.rank() != 0) return a.dtype;
  if (IsFloating(a.dtype) != IsFloating(b.dtype)) return IsFloating(a.dtype) ? a.dtype : b.dtype;
  return DTypeSize(a.dtype) >= DTypeSize(b.dtype) ? a.dtype : b.dtype;
}

template <Cmp kOp>
absl::Status CompareTensorKernel(const KernelArgs& args) {
  const DType compute = CompareDType(args.inputs[0].type, args.inputs[1].type);
  return DispatchStorable(args, compute, [&](auto tag) {
    using T = decltype(tag);
    MapBroadcast<T, bool, 2>({&args.inputs[0], &args.inputs[1]}, compute, args.outputs[0],
                             [](const std::array<T, 2>& v) { return Compare<kOp>(v[0], v[1]); });
    return absl::OkStatus();
  });
}

bool IsIntAttr(const Attrs& attrs, const char* name) {
  auto it = attrs.values().find(name);
  return it != attrs.values().end() && std::holds_alternative<int64_t>(it->second);
}

template <Cmp kOp, typename C, typename T>
void CompareWith(const TensorArg& in, const TensorArg& out, C other) {
  const T* x = in.as<const T>();
  bool* y = out.as<bool>();
  for (int64_t i = 0; i < out.numel(); ++i) y[i] = Compare<kOp>(static_cast<C>(x[i]), other);
}

template <Cmp kOp>
absl::Status CompareScalarKernel(const KernelArgs& args) {
  const Attrs& attrs = args.node->attrs;
  ASSIGN_OR_RETURN(double other, attrs.GetFloat("other"));
  const bool int_other = IsIntAttr(attrs, "other");
  int64_t int_value = 0;
  if (int_other) {
    ASSIGN_OR_RETURN(int_value, attrs.GetInt("other"));
  }
  const TensorArg& in = args.inputs[0];
  return DispatchStorable(args, in.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      CompareWith<kOp, T, T>(in, args.outputs[0], static_cast<T>(other));
    } else if (int_other) {
      CompareWith<kOp, int64_t, T>(in, args.outputs[0], int_value);
    } else {
      CompareWith<kOp, float, T>(in, args.outputs[0], static_cast<float>(other));
    }
    return absl::OkStatus();
  });
}

// where(condition, self, other) over the broadcast of all three.
absl::Status WhereKernel(const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  const DType dtype = out.type.dtype;
  return DispatchStorable(args, dtype, [&](auto tag) {
    using T = decltype(tag);
    const Shape& shape = out.type.shape;
    std::array<std::vector<int64_t>, 3> strides;
    strides[0] = BroadcastStrides(args.inputs[0].type.shape, shape);
    std::array<const T*, 2> data;
    std::array<T, 2> scalars{};
    for (int k = 0; k < 2; ++k) {
      const TensorArg& in = args.inputs[1 + k];
      if (in.type.dtype != dtype) {
        scalars[k] = LoadScalar<T>(in);
        data[k] = &scalars[k];
        strides[1 + k].assign(shape.size(), 0);
      } else {
        data[k] = in.as<const T>();
        strides[1 + k] = BroadcastStrides(in.type.shape, shape);
      }
    }
    const bool* c = args.inputs[0].as<const bool>();
    T* o = out.as<T>();
    ForEachIndex<3>(shape, strides, [&](int64_t i, const std::array<int64_t, 3>& off) {
      o[i] = c[off[0]] ? data[0][off[1]] : data[1][off[2]];
    });
    return absl::OkStatus();
  });
}

// masked_fill.Scalar / .Tensor: self where the mask is false, else value.
template <bool kTensorValue>
absl::Status MaskedFillKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  double attr_value = 0;
  if constexpr (!kTensorValue) {
    ASSIGN_OR_RETURN(attr_value, args.node->attrs.GetFloat("value"));
  }
  return DispatchStorable(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T value = kTensorValue ? LoadScalar<T>(args.inputs[2]) : Convert<T>(attr_value);
    const T* x = self.as<const T>();
    const bool* m = args.inputs[1].as<const bool>();
    T* o = out.as<T>();
    ForEachIndex<1>(out.type.shape, {BroadcastStrides(args.inputs[1].type.shape, out.type.shape)},
                    [&](int64_t i, const std::array<int64_t, 1>& off) { o[i] = m[off[0]] ? value : x[i]; });
    return absl::OkStatus();
  });
}

absl::Status LogicalNotKernel(const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  return DispatchStorable(args, in.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = in.as<const T>();
    bool* y = args.outputs[0].as<bool>();
    for (int64_t i = 0; i < in.numel(); ++i) y[i] = x[i] == T(0);
    return absl::OkStatus();
  });
}

// any over the dims in the mask (all for `any`): true iff some element is
// nonzero (NaN counts as nonzero).
template <bool kAllDims>
absl::Status AnyKernel(const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  std::vector<int64_t> dims;
  if constexpr (!kAllDims) {
    ASSIGN_OR_RETURN(dims, args.node->attrs.GetInts("dim", std::vector<int64_t>{}));
  }
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReductionMask(dims, in.type.rank()));
  const Shape& shape = in.type.shape;
  std::vector<int64_t> out_strides = ContiguousStrides(ReducedShape(shape, mask, /*keepdim=*/true));
  for (size_t d = 0; d < shape.size(); ++d) {
    if (mask[d]) out_strides[d] = 0;
  }
  bool* y = args.outputs[0].as<bool>();
  for (int64_t j = 0; j < args.outputs[0].numel(); ++j) y[j] = false;
  return DispatchStorable(args, in.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = in.as<const T>();
    ForEachIndex<1>(shape, {out_strides}, [&](int64_t i, const std::array<int64_t, 1>& off) {
      if (x[i] != T(0)) y[off[0]] = true;
    });
    return absl::OkStatus();
  });
}

}  // namespace

void AddComparisonKernels(CpuKernelTable& table) {
  table["eq.Tensor"] = WithHalfComparison<CompareTensorKernel<Cmp::kEq>>;
  table["ne.Tensor"] = WithHalfComparison<CompareTensorKernel<Cmp::kNe>>;
  table["lt.Tensor"] = WithHalfComparison<CompareTensorKernel<Cmp::kLt>>;
  table["le.Tensor"] = WithHalfComparison<CompareTensorKernel<Cmp::kLe>>;
  table["gt.Tensor"] = WithHalfComparison<CompareTensorKernel<Cmp::kGt>>;
  table["ge.Tensor"] = WithHalfComparison<CompareTensorKernel<Cmp::kGe>>;
  table["eq.Scalar"] = WithHalfComparisonScalar<CompareScalarKernel<Cmp::kEq>>;
  table["ne.Scalar"] = WithHalfComparisonScalar<CompareScalarKernel<Cmp::kNe>>;
  table["lt.Scalar"] = WithHalfComparisonScalar<CompareScalarKernel<Cmp::kLt>>;
  table["le.Scalar"] = WithHalfComparisonScalar<CompareScalarKernel<Cmp::kLe>>;
  table["gt.Scalar"] = WithHalfComparisonScalar<CompareScalarKernel<Cmp::kGt>>;
  table["ge.Scalar"] = WithHalfComparisonScalar<CompareScalarKernel<Cmp::kGe>>;
  table["where.self"] = WithHalfWhere<WhereKernel>;
  table["masked_fill.Scalar"] = WithHalfMaskedFillScalar<MaskedFillKernel<false>>;
  table["masked_fill.Tensor"] = WithHalfMaskedFillTensor<MaskedFillKernel<true>>;
  table["logical_not"] = WithHalf<LogicalNotKernel>;
  table["any"] = WithHalf<AnyKernel<true>>;
  table["any.dim"] = WithHalf<AnyKernel<false>>;
}

}  // namespace tandem::cpu
