// Registry entries of group normalization: native_group_norm and
// native_group_norm_backward (geometry in spatial_rules.h). float32,
// float64, bfloat16 and float16.
//
// Dtypes (PyTorch's rule, CPU and CUDA alike): weight, bias, mean and rstd
// have the input's dtype, 16-bit inputs too (PyTorch's group norm kernels
// compute in float32 and store the statistics in the input's dtype, unlike
// its layer norm, whose CUDA kernel keeps them in float32). PyTorch's mixed
// form (a 16-bit input with float32 weight) is refused: its CUDA kernels do
// not take it.
//
// Optional tensors (weight and bias) follow the registry's rule that an
// absent one is left out and the inputs after it move up: a bias without a
// weight needs a weight of ones. Masked-off backward outputs (output_mask)
// have the shape [0] and are not computed.
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/cnn_rules.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/spatial_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

// A per-channel parameter: the input's dtype, [C].
absl::Status CheckAffine(absl::string_view name, const TensorType& t, const TensorType& input, int64_t c) {
  const TensorType expected{input.dtype, {c}};
  if (t == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, " is ", t.ToString(), " but input is ", input.ToString(), "; expected ", expected.ToString()));
}

// native_group_norm(input[, weight[, bias]]; N, C, HxW, group, eps):
// (out, mean [N, group], rstd [N, group]).
absl::StatusOr<TypeList> GroupNormInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("input", in[0], ops::kFloatAndHalfTypes));
  ASSIGN_OR_RETURN(GroupNormGeometry g, ParseGroupNorm(attrs, in[0].shape));
  const char* names[] = {"weight", "bias"};
  for (size_t i = 1; i < in.size(); ++i) RETURN_IF_ERROR(CheckAffine(names[i - 1], in[i], in[0], g.c));
  ASSIGN_OR_RETURN(double eps, attrs.GetFloat("eps"));
  if (!(eps >= 0.0)) return absl::InvalidArgumentError(absl::StrCat("attribute 'eps' is ", eps, "; must be >= 0"));
  const TensorType stats{in[0].dtype, {g.n, g.groups}};
  return TypeList{in[0], stats, stats};
}

// native_group_norm_backward(grad_out, input, mean, rstd[, weight]; N, C,
// HxW, group, output_mask): (grad_input, grad_weight [C], grad_bias [C]).
absl::StatusOr<TypeList> GroupNormBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  const TensorType& input = in[1];
  RETURN_IF_ERROR(ops::RequireDType("input", input, ops::kFloatAndHalfTypes));
  if (!(in[0] == input)) {
    return absl::InvalidArgumentError(absl::StrCat("grad_out is ", in[0].ToString(), " but input is ", input.ToString(),
                                                   "; they must have the same type"));
  }
  ASSIGN_OR_RETURN(GroupNormGeometry g, ParseGroupNorm(attrs, input.shape));
  const TensorType stats{input.dtype, {g.n, g.groups}};
  for (int k : {2, 3}) {
    if (!(in[k] == stats)) {
      return absl::InvalidArgumentError(
          absl::StrCat(k == 2 ? "mean" : "rstd", " is ", in[k].ToString(), "; expected ", stats.ToString()));
    }
  }
  if (in.size() > 4) RETURN_IF_ERROR(CheckAffine("weight", in[4], input, g.c));
  ASSIGN_OR_RETURN(auto mask, ParseOutputMask(attrs));
  const DType dtype = input.dtype;
  return TypeList{TensorType{dtype, mask[0] ? input.shape : Shape{0}},
                  TensorType{dtype, mask[1] ? Shape{g.c} : Shape{0}},
                  TensorType{dtype, mask[2] ? Shape{g.c} : Shape{0}}};
}

}  // namespace

void RegisterGroupNormOps(OpRegistry& registry) {
  ops::RegisterOp(registry, "native_group_norm", 1, 3, 3, AliasKind::kNone, GroupNormInfer);
  ops::RegisterOp(registry, "native_group_norm_backward", 4, 5, 3, AliasKind::kNone, GroupNormBackwardInfer);
}

}  // namespace tandem
