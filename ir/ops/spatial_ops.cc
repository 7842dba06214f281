// Registry entries of the resampling, padding and 3-D pooling ops
// (geometry in spatial_rules.h):
//   - upsample_nearest2d and upsample_bilinear2d, their .vec forms and the
//     backward ops of both forms, over [N, C, H, W];
//   - constant_pad_nd (any rank and dtype); reflection_pad1d/2d/3d and
//     replication_pad1d/2d/3d and their backward ops;
//   - avg_pool3d, max_pool3d_with_indices, _adaptive_avg_pool3d (also as
//     adaptive_avg_pool3d) and their backward ops, over [N, C, D, H, W] or
//     [C, D, H, W]; max pooling's indices are int64, flat (d * H + h) * W +
//     w within a volume, as ATen's.
// Float ops take float32, float64, bfloat16 and float16 (16-bit ones
// compute in float32 and round once when they store).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/cnn_rules.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/spatial_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

// grad_output must have the type of the forward's output.
absl::Status CheckGradOutput(const TensorType& grad, const TensorType& self, const Shape& output) {
  if (grad.dtype == self.dtype && grad.shape == output) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("grad_output is ", grad.ToString(), " but self ", self.ToString(),
                                                 " gives ", DTypeName(self.dtype), ShapeString(output)));
}

// ---- resampling ----

template <ResampleMode kMode, ResampleForm kForm>
absl::StatusOr<TypeList> UpsampleInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("input", in[0], ops::kFloatAndHalfTypes));
  ASSIGN_OR_RETURN(ResampleGeometry g, ParseUpsample(attrs, in[0].shape, kMode, kForm));
  return TypeList{TensorType{in[0].dtype, g.output_shape()}};
}

// grad_output -> grad_input of the attribute input_size.
template <ResampleMode kMode, ResampleForm kForm>
absl::StatusOr<TypeList> UpsampleBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("grad_output", in[0], ops::kFloatAndHalfTypes));
  ASSIGN_OR_RETURN(ResampleGeometry g, ParseUpsampleBackward(attrs, in[0].shape, kMode, kForm));
  return TypeList{TensorType{in[0].dtype, g.input_shape()}};
}

// ---- padding ----

// constant_pad_nd's value attribute must be storable in self's dtype: a
// finite value within an integer dtype's range (truncated toward zero, as
// ATen converts it); bool takes any number (nonzero is true).
absl::Status CheckPadValue(const Attrs& attrs, DType dtype) {
  ASSIGN_OR_RETURN(double value, attrs.GetFloat("value", 0.0));
  double bound = 0;  // the type holds [-bound, bound)
  switch (dtype) {
    case DType::kInt64:
      bound = 9223372036854775808.0;
      break;
    case DType::kInt32:
      bound = 2147483648.0;
      break;
    default:
      return absl::OkStatus();
  }
  const double truncated = std::trunc(value);
  if (truncated >= -bound && truncated < bound) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("attribute 'value' is ", value, "; it does not fit self's dtype ", DTypeName(dtype)));
}

absl::StatusOr<TypeList> ConstantPadInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableAndHalfTypes));
  ASSIGN_OR_RETURN(ConstantPadGeometry g, ParseConstantPad(attrs, in[0].shape));
  RETURN_IF_ERROR(CheckPadValue(attrs, in[0].dtype));
  return TypeList{TensorType{in[0].dtype, g.out}};
}

template <PadMode kMode, int kDims>
absl::StatusOr<TypeList> PadInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kFloatAndHalfTypes));
  ASSIGN_OR_RETURN(PadGeometry g, ParsePad(attrs, in[0].shape, kDims, kMode));
  return TypeList{TensorType{in[0].dtype, PaddedShape(in[0].shape, g)}};
}

// grad_output, self -> grad_input.
template <PadMode kMode, int kDims>
absl::StatusOr<TypeList> PadBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[1], ops::kFloatAndHalfTypes));
  ASSIGN_OR_RETURN(PadGeometry g, ParsePad(attrs, in[1].shape, kDims, kMode));
  RETURN_IF_ERROR(CheckGradOutput(in[0], in[1], PaddedShape(in[1].shape, g)));
  return TypeList{in[1]};
}

// ---- 3-D pooling ----

absl::StatusOr<Pool3dGeometry> CheckPool(const Attrs& attrs, const TensorType& self, PoolKind kind) {
  RETURN_IF_ERROR(ops::RequireDType("self", self, ops::kFloatAndHalfTypes));
  ASSIGN_OR_RETURN(Pool3dParams params, ParsePool3dParams(attrs, kind));
  return Pool3dShape(params, self.shape);
}

// self -> (out, indices int64).
absl::StatusOr<TypeList> MaxPoolInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(Pool3dGeometry g, CheckPool(attrs, in[0], PoolKind::kMax));
  const Shape out = Pooled3dShape(in[0].shape, g.out);
  return TypeList{TensorType{in[0].dtype, out}, TensorType{DType::kInt64, out}};
}

// grad_output, self, indices -> grad_input.
absl::StatusOr<TypeList> MaxPoolBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(Pool3dGeometry g, CheckPool(attrs, in[1], PoolKind::kMax));
  const Shape out = Pooled3dShape(in[1].shape, g.out);
  RETURN_IF_ERROR(CheckGradOutput(in[0], in[1], out));
  if (in[2].dtype != DType::kInt64 || in[2].shape != out) {
    return absl::InvalidArgumentError(
        absl::StrCat("indices is ", in[2].ToString(), "; expected int64", ShapeString(out)));
  }
  return TypeList{in[1]};
}

absl::StatusOr<TypeList> AvgPoolInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(Pool3dGeometry g, CheckPool(attrs, in[0], PoolKind::kAvg));
  return TypeList{TensorType{in[0].dtype, Pooled3dShape(in[0].shape, g.out)}};
}

// grad_output, self -> grad_input.
absl::StatusOr<TypeList> AvgPoolBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(Pool3dGeometry g, CheckPool(attrs, in[1], PoolKind::kAvg));
  RETURN_IF_ERROR(CheckGradOutput(in[0], in[1], Pooled3dShape(in[1].shape, g.out)));
  return TypeList{in[1]};
}

absl::StatusOr<TypeList> AdaptiveAvgPoolInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kFloatAndHalfTypes));
  RETURN_IF_ERROR(Adaptive3dShape(in[0].shape, in[0].shape).status());
  ASSIGN_OR_RETURN(auto size, ParseAdaptive3dOutputSize(attrs));
  return TypeList{TensorType{in[0].dtype, Pooled3dShape(in[0].shape, size.data())}};
}

// grad_output, self -> grad_input; the output size is grad_output's.
absl::StatusOr<TypeList> AdaptiveAvgPoolBackwardInfer(const Attrs&, absl::Span<const TensorType> in) {
  const TensorType& grad = in[0];
  const TensorType& self = in[1];
  RETURN_IF_ERROR(ops::RequireDType("self", self, ops::kFloatAndHalfTypes));
  RETURN_IF_ERROR(Adaptive3dShape(self.shape, self.shape).status());
  const int r = self.rank();
  bool ok = grad.dtype == self.dtype && grad.rank() == r;
  for (int d = 0; ok && d < r; ++d) ok = d < r - 3 ? grad.shape[d] == self.shape[d] : grad.shape[d] >= 1;
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat("grad_output is ", grad.ToString(), " but self is ", self.ToString(),
                                                   "; expected self's dtype and leading dims"));
  }
  return TypeList{self};
}

}  // namespace

void RegisterSpatialOps(OpRegistry& registry) {
  using ops::RegisterOp;
  constexpr auto kNearest = ResampleMode::kNearest;
  constexpr auto kBilinear = ResampleMode::kBilinear;
  constexpr auto kDefault = ResampleForm::kDefault;
  constexpr auto kVec = ResampleForm::kVec;
  RegisterOp(registry, "upsample_nearest2d", 1, 1, 1, AliasKind::kNone, UpsampleInfer<kNearest, kDefault>);
  RegisterOp(registry, "upsample_nearest2d.vec", 1, 1, 1, AliasKind::kNone, UpsampleInfer<kNearest, kVec>);
  RegisterOp(registry, "upsample_bilinear2d", 1, 1, 1, AliasKind::kNone, UpsampleInfer<kBilinear, kDefault>);
  RegisterOp(registry, "upsample_bilinear2d.vec", 1, 1, 1, AliasKind::kNone, UpsampleInfer<kBilinear, kVec>);
  RegisterOp(registry, "upsample_nearest2d_backward", 1, 1, 1, AliasKind::kNone,
             UpsampleBackwardInfer<kNearest, kDefault>);
  RegisterOp(registry, "upsample_nearest2d_backward.vec", 1, 1, 1, AliasKind::kNone,
             UpsampleBackwardInfer<kNearest, kVec>);
  RegisterOp(registry, "upsample_bilinear2d_backward", 1, 1, 1, AliasKind::kNone,
             UpsampleBackwardInfer<kBilinear, kDefault>);
  RegisterOp(registry, "upsample_bilinear2d_backward.vec", 1, 1, 1, AliasKind::kNone,
             UpsampleBackwardInfer<kBilinear, kVec>);

  RegisterOp(registry, "constant_pad_nd", 1, 1, 1, AliasKind::kNone, ConstantPadInfer);
  constexpr auto kReflect = PadMode::kReflect;
  constexpr auto kReplicate = PadMode::kReplicate;
  RegisterOp(registry, "reflection_pad1d", 1, 1, 1, AliasKind::kNone, PadInfer<kReflect, 1>);
  RegisterOp(registry, "reflection_pad2d", 1, 1, 1, AliasKind::kNone, PadInfer<kReflect, 2>);
  RegisterOp(registry, "reflection_pad3d", 1, 1, 1, AliasKind::kNone, PadInfer<kReflect, 3>);
  RegisterOp(registry, "replication_pad1d", 1, 1, 1, AliasKind::kNone, PadInfer<kReplicate, 1>);
  RegisterOp(registry, "replication_pad2d", 1, 1, 1, AliasKind::kNone, PadInfer<kReplicate, 2>);
  RegisterOp(registry, "replication_pad3d", 1, 1, 1, AliasKind::kNone, PadInfer<kReplicate, 3>);
  RegisterOp(registry, "reflection_pad1d_backward", 2, 2, 1, AliasKind::kNone, PadBackwardInfer<kReflect, 1>);
  RegisterOp(registry, "reflection_pad2d_backward", 2, 2, 1, AliasKind::kNone, PadBackwardInfer<kReflect, 2>);
  RegisterOp(registry, "reflection_pad3d_backward", 2, 2, 1, AliasKind::kNone, PadBackwardInfer<kReflect, 3>);
  RegisterOp(registry, "replication_pad1d_backward", 2, 2, 1, AliasKind::kNone, PadBackwardInfer<kReplicate, 1>);
  RegisterOp(registry, "replication_pad2d_backward", 2, 2, 1, AliasKind::kNone, PadBackwardInfer<kReplicate, 2>);
  RegisterOp(registry, "replication_pad3d_backward", 2, 2, 1, AliasKind::kNone, PadBackwardInfer<kReplicate, 3>);

  RegisterOp(registry, "max_pool3d_with_indices", 1, 1, 2, AliasKind::kNone, MaxPoolInfer);
  RegisterOp(registry, "max_pool3d_with_indices_backward", 3, 3, 1, AliasKind::kNone, MaxPoolBackwardInfer);
  RegisterOp(registry, "avg_pool3d", 1, 1, 1, AliasKind::kNone, AvgPoolInfer);
  RegisterOp(registry, "avg_pool3d_backward", 2, 2, 1, AliasKind::kNone, AvgPoolBackwardInfer);
  RegisterOp(registry, "_adaptive_avg_pool3d", 1, 1, 1, AliasKind::kNone, AdaptiveAvgPoolInfer,
             {"adaptive_avg_pool3d"});
  RegisterOp(registry, "_adaptive_avg_pool3d_backward", 2, 2, 1, AliasKind::kNone, AdaptiveAvgPoolBackwardInfer);
}

}  // namespace tandem
