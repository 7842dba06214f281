// Registry entries of softmax and layer normalization: _softmax,
// _safe_softmax, _softmax_backward_data, native_layer_norm,
// native_layer_norm_backward. All also take bfloat16 and float16 (layer
// norm's mean and rstd are then float32).
//
// Optional tensors (layer norm's weight and bias) follow the registry's rule
// that an absent one is left out and the inputs after it move up; since bias
// follows weight, a bias without a weight needs a weight of ones.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

// The trailing dims of `input` named by `normalized_shape`; the statistics'
// shape is input's leading dims followed by ones.
absl::StatusOr<Shape> LayerNormStatsShape(const Attrs& attrs, const TensorType& input) {
  ASSIGN_OR_RETURN(std::vector<int64_t> normalized, attrs.GetInts("normalized_shape"));
  const int k = static_cast<int>(normalized.size());
  const std::string text = absl::StrCat("[", absl::StrJoin(normalized, ", "), "]");
  if (k > input.rank() || !std::equal(normalized.begin(), normalized.end(), input.shape.end() - k)) {
    return absl::InvalidArgumentError(absl::StrCat("input is ", input.ToString(), " but normalized_shape is ", text,
                                                   "; expected the trailing dims of input"));
  }
  Shape stats(input.shape.begin(), input.shape.end() - k);
  stats.insert(stats.end(), k, 1);
  return stats;
}

absl::Status CheckAffine(const Attrs& attrs, const TensorType& input, absl::Span<const TensorType> affine,
                         std::initializer_list<const char*> names) {
  ASSIGN_OR_RETURN(std::vector<int64_t> normalized, attrs.GetInts("normalized_shape"));
  const TensorType expected{input.dtype, Shape(normalized.begin(), normalized.end())};
  const char* const* name = names.begin();
  for (size_t i = 0; i < affine.size(); ++i) {
    if (!(affine[i] == expected)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name[i], " is ", affine[i].ToString(), "; expected ", expected.ToString()));
    }
  }
  return absl::OkStatus();
}

// The dtype of layer norm's statistics (mean, rstd): the input's, except
// float32 for a 16-bit input (PyTorch's CUDA rule: statistics in the
// accumulation type).
DType LayerNormStatsDType(DType input) {
  return input == DType::kBFloat16 || input == DType::kFloat16 ? DType::kFloat32 : input;
}

// native_layer_norm(input[, weight[, bias]]; normalized_shape, eps):
// (output, mean, rstd).
absl::StatusOr<TypeList> LayerNormInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("input", in[0], ops::kFloatAndHalfTypes));
  ASSIGN_OR_RETURN(Shape stats, LayerNormStatsShape(attrs, in[0]));
  RETURN_IF_ERROR(CheckAffine(attrs, in[0], in.subspan(1), {"weight", "bias"}));
  RETURN_IF_ERROR(attrs.GetFloat("eps").status());
  const DType stats_dtype = LayerNormStatsDType(in[0].dtype);
  return TypeList{in[0], {stats_dtype, stats}, {stats_dtype, stats}};
}

// native_layer_norm_backward(grad_out, input, mean, rstd[, weight[, bias]];
// normalized_shape, output_mask): (grad_input, grad_weight, grad_bias), all
// three always computed (output_mask is accepted and not needed).
absl::StatusOr<TypeList> LayerNormBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("input", in[1], ops::kFloatAndHalfTypes));
  if (!(in[0] == in[1])) {
    return absl::InvalidArgumentError(absl::StrCat("grad_out is ", in[0].ToString(), " but input is ", in[1].ToString(),
                                                   "; they must have the same type"));
  }
  ASSIGN_OR_RETURN(Shape stats, LayerNormStatsShape(attrs, in[1]));
  const TensorType stats_type{LayerNormStatsDType(in[1].dtype), stats};
  for (int k : {2, 3}) {
    if (!(in[k] == stats_type)) {
      return absl::InvalidArgumentError(
          absl::StrCat(k == 2 ? "mean" : "rstd", " is ", in[k].ToString(), "; expected ", stats_type.ToString()));
    }
  }
  RETURN_IF_ERROR(CheckAffine(attrs, in[1], in.subspan(4), {"weight", "bias"}));
  if (attrs.Has("output_mask")) RETURN_IF_ERROR(attrs.GetInts("output_mask").status());
  ASSIGN_OR_RETURN(std::vector<int64_t> normalized, attrs.GetInts("normalized_shape"));
  const TensorType affine{in[1].dtype, Shape(normalized.begin(), normalized.end())};
  return TypeList{in[1], affine, affine};
}

// _safe_softmax(self; dim, dtype=self's): the softmax family's rules. ATen's
// dtype converts self before the softmax; only self's own dtype is taken,
// since the backward (_softmax_backward_data with input_dtype = self's dtype)
// does not mix precisions either.
absl::StatusOr<TypeList> SafeSoftmaxInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(TypeList out, ops::InferSoftmaxLike(attrs, in, ops::kFloatAndHalfTypes));
  ASSIGN_OR_RETURN(DType dtype, attrs.GetDType("dtype", in[0].dtype));
  if (dtype != in[0].dtype) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'dtype' is ", DTypeName(dtype), " but self is ",
                                                   in[0].ToString(),
                                                   "; convert self with _to_copy first (a converting softmax is "
                                                   "not supported)"));
  }
  return out;
}

}  // namespace

void RegisterNormalizationOps(OpRegistry& registry) {
  using ops::RegisterOp;
  RegisterOp(registry, "_softmax", 1, 1, 1, AliasKind::kNone, [](const Attrs& attrs, absl::Span<const TensorType> in) {
    return ops::InferSoftmaxLike(attrs, in, ops::kFloatAndHalfTypes);
  });
  RegisterOp(registry, "_safe_softmax", 1, 1, 1, AliasKind::kNone, SafeSoftmaxInfer);
  RegisterOp(registry, "_softmax_backward_data", 2, 2, 1, AliasKind::kInPlace,
             [](const Attrs& attrs, absl::Span<const TensorType> in) {
               return ops::InferSoftmaxLikeBackward(attrs, in, "softmax", ops::kFloatAndHalfTypes);
             });
  RegisterOp(registry, "native_layer_norm", 1, 3, 3, AliasKind::kNone, LayerNormInfer);
  RegisterOp(registry, "native_layer_norm_backward", 4, 6, 3, AliasKind::kNone, LayerNormBackwardInfer);
}

}  // namespace tandem
