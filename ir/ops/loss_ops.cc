// Registry entries of the classification loss path: _log_softmax, its
// backward, nll_loss_forward and nll_loss_backward.
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

// Checks self [N, C] or [C], target [N] or [] (int64 or int32, as PyTorch
// takes class labels), optional weight [C];
// returns the shape of the unreduced loss ([N] or []).
absl::StatusOr<Shape> CheckNllInputs(const Attrs& attrs, const TensorType& self, const TensorType& target,
                                     const TensorType* weight) {
  RETURN_IF_ERROR(ops::RequireDType("self", self, ops::kFloatAndHalfTypes));
  if (self.rank() != 1 && self.rank() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("self is ", self.ToString(), "; expected [N, C] or [C] log-probabilities"));
  }
  const bool label_dtype = target.dtype == DType::kInt64 || target.dtype == DType::kInt32;
  if (!label_dtype || target.rank() != self.rank() - 1 || (self.rank() == 2 && target.shape[0] != self.shape[0])) {
    const std::string shape = self.rank() == 2 ? ShapeString({self.shape[0]}) : std::string("[]");
    return absl::InvalidArgumentError(absl::StrCat("self is ", self.ToString(), " but target is ", target.ToString(),
                                                   "; expected target int64", shape, " or int32", shape,
                                                   " (class labels)"));
  }
  const int64_t classes = self.shape.back();
  if (weight != nullptr && (weight->dtype != self.dtype || weight->shape != Shape{classes})) {
    return absl::InvalidArgumentError(absl::StrCat("self is ", self.ToString(), " but weight is ", weight->ToString(),
                                                   "; expected ", DTypeName(self.dtype), ShapeString({classes})));
  }
  ASSIGN_OR_RETURN(int64_t reduction, attrs.GetInt("reduction", 1));
  if (reduction < 0 || reduction > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'reduction' is ", reduction, "; expected 0 (none), 1 (mean) or 2 (sum)"));
  }
  RETURN_IF_ERROR(attrs.GetInt("ignore_index", -100).status());
  if (reduction == 0 && self.rank() == 2) return Shape{self.shape[0]};
  return Shape{};
}

// Inputs: self, target[, weight]. Outputs: output, total_weight.
absl::StatusOr<TypeList> NllLossForwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(Shape out, CheckNllInputs(attrs, in[0], in[1], in.size() > 2 ? &in[2] : nullptr));
  return TypeList{{in[0].dtype, out}, {in[0].dtype, {}}};
}

// Inputs: grad_output, self, target, total_weight[, weight].
absl::StatusOr<TypeList> NllLossBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(Shape out, CheckNllInputs(attrs, in[1], in[2], in.size() > 4 ? &in[4] : nullptr));
  const TensorType expected_grad{in[1].dtype, out};
  if (!(in[0] == expected_grad)) {
    return absl::InvalidArgumentError(absl::StrCat("grad_output is ", in[0].ToString(), "; expected ",
                                                   expected_grad.ToString(), " for self ", in[1].ToString()));
  }
  const TensorType expected_total{in[1].dtype, {}};
  if (!(in[3] == expected_total)) {
    return absl::InvalidArgumentError(
        absl::StrCat("total_weight is ", in[3].ToString(), "; expected ", expected_total.ToString()));
  }
  return TypeList{in[1]};
}

}  // namespace

void RegisterLossOps(OpRegistry& registry) {
  using ops::RegisterOp;
  RegisterOp(registry, "_log_softmax", 1, 1, 1, AliasKind::kNone,
             [](const Attrs& attrs, absl::Span<const TensorType> in) {
               return ops::InferSoftmaxLike(attrs, in, ops::kFloatAndHalfTypes);
             });
  RegisterOp(registry, "_log_softmax_backward_data", 2, 2, 1, AliasKind::kInPlace,
             [](const Attrs& attrs, absl::Span<const TensorType> in) {
               return ops::InferSoftmaxLikeBackward(attrs, in, "log-softmax", ops::kFloatAndHalfTypes);
             });
  RegisterOp(registry, "nll_loss_forward", 2, 3, 2, AliasKind::kNone, NllLossForwardInfer);
  RegisterOp(registry, "nll_loss_backward", 4, 5, 1, AliasKind::kNone, NllLossBackwardInfer);
}

}  // namespace tandem
