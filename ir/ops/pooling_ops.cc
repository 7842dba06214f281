// Registry entries of 2-D pooling over [N, C, H, W] or [C, H, W] (max and
// average pooling also over [N, H, W, C] with channels_last = true, the
// layout pass's; their indices and gradients are stored alike):
// max_pool2d_with_indices and its backward, avg_pool2d and its backward,
// _adaptive_avg_pool2d (also as adaptive_avg_pool2d) and its backward.
// float32, float64, bfloat16 and float16 (16-bit pooling computes in
// float32 and rounds when it stores); max pooling's indices are int64.
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/cnn_rules.h"
#include "ir/ops/infer_util.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::StatusOr<Pool2dGeometry> CheckPool(const Attrs& attrs, const TensorType& self, PoolKind kind) {
  RETURN_IF_ERROR(ops::RequireDType("self", self, ops::kFloatAndHalfTypes));
  ASSIGN_OR_RETURN(Pool2dParams params, ParsePool2dParams(attrs, kind));
  return Pool2dShape(params, self.shape);
}

// grad_output must have the type of the forward's output.
absl::Status CheckGradOutput(const TensorType& grad, const TensorType& self, const Shape& output) {
  if (grad.dtype == self.dtype && grad.shape == output) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("grad_output is ", grad.ToString(), " but pooling self ",
                                                 self.ToString(), " gives ", DTypeName(self.dtype),
                                                 ShapeString(output)));
}

// self -> (out, indices int64): indices are flat h * W + w within a plane.
absl::StatusOr<TypeList> MaxPoolInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(Pool2dGeometry g, CheckPool(attrs, in[0], PoolKind::kMax));
  const Shape out = g.output_shape(in[0].shape);
  return TypeList{TensorType{in[0].dtype, out}, TensorType{DType::kInt64, out}};
}

// grad_output, self, indices -> grad_input.
absl::StatusOr<TypeList> MaxPoolBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(Pool2dGeometry g, CheckPool(attrs, in[1], PoolKind::kMax));
  const Shape out = g.output_shape(in[1].shape);
  RETURN_IF_ERROR(CheckGradOutput(in[0], in[1], out));
  if (in[2].dtype != DType::kInt64 || in[2].shape != out) {
    return absl::InvalidArgumentError(
        absl::StrCat("indices is ", in[2].ToString(), "; expected int64", ShapeString(out)));
  }
  return TypeList{in[1]};
}

absl::StatusOr<TypeList> AvgPoolInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(Pool2dGeometry g, CheckPool(attrs, in[0], PoolKind::kAvg));
  return TypeList{TensorType{in[0].dtype, g.output_shape(in[0].shape)}};
}

// grad_output, self -> grad_input.
absl::StatusOr<TypeList> AvgPoolBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(Pool2dGeometry g, CheckPool(attrs, in[1], PoolKind::kAvg));
  RETURN_IF_ERROR(CheckGradOutput(in[0], in[1], g.output_shape(in[1].shape)));
  return TypeList{in[1]};
}

absl::Status CheckAdaptiveSelf(const TensorType& self) {
  RETURN_IF_ERROR(ops::RequireDType("self", self, ops::kFloatAndHalfTypes));
  if ((self.rank() != 3 && self.rank() != 4) || self.shape[self.rank() - 1] < 1 || self.shape[self.rank() - 2] < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("self is ", self.ToString(), "; expected [N, C, H, W] or [C, H, W] with non-empty H and W"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TypeList> AdaptiveAvgPoolInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(CheckAdaptiveSelf(in[0]));
  ASSIGN_OR_RETURN(auto size, ParseAdaptiveOutputSize(attrs));
  return TypeList{TensorType{in[0].dtype, PooledShape(in[0].shape, size[0], size[1])}};
}

// grad_output, self -> grad_input; the output size is grad_output's.
absl::StatusOr<TypeList> AdaptiveAvgPoolBackwardInfer(const Attrs&, absl::Span<const TensorType> in) {
  const TensorType& grad = in[0];
  const TensorType& self = in[1];
  RETURN_IF_ERROR(CheckAdaptiveSelf(self));
  const int r = self.rank();
  if (grad.dtype != self.dtype || grad.rank() != r || grad.shape[r - 1] < 1 || grad.shape[r - 2] < 1 ||
      PooledShape(self.shape, grad.shape[r - 2], grad.shape[r - 1]) != grad.shape) {
    return absl::InvalidArgumentError(absl::StrCat("grad_output is ", grad.ToString(), " but self is ", self.ToString(),
                                                   "; expected self's dtype and leading dims"));
  }
  return TypeList{self};
}

}  // namespace

void RegisterPoolingOps(OpRegistry& registry) {
  ops::RegisterOp(registry, "max_pool2d_with_indices", 1, 1, 2, AliasKind::kNone, MaxPoolInfer);
  ops::RegisterOp(registry, "max_pool2d_with_indices_backward", 3, 3, 1, AliasKind::kNone, MaxPoolBackwardInfer);
  ops::RegisterOp(registry, "avg_pool2d", 1, 1, 1, AliasKind::kNone, AvgPoolInfer);
  ops::RegisterOp(registry, "avg_pool2d_backward", 2, 2, 1, AliasKind::kNone, AvgPoolBackwardInfer);
  ops::RegisterOp(registry, "_adaptive_avg_pool2d", 1, 1, 1, AliasKind::kNone, AdaptiveAvgPoolInfer,
                  {"adaptive_avg_pool2d"});
  ops::RegisterOp(registry, "_adaptive_avg_pool2d_backward", 2, 2, 1, AliasKind::kNone, AdaptiveAvgPoolBackwardInfer);
}

}  // namespace tandem
