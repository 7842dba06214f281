// Registry entries of the attention path: bmm, and the scaled-dot-product
// attention ops that PyTorch's traces produce (the memory-efficient kernel's
// on CUDA, the flash kernel's on the CPU) with their backwards.
//
// Attention operands: query [..., L, E], key [..., S, E], value [..., S, Ev]
// with equal leading (batch) dims; output [..., L, Ev]. An optional mask or
// bias (float: added to the scores; bool: true keeps a score) broadcasts to
// [..., L, S]. `scale` defaults to 1 / sqrt(E); `is_causal` hides key j from
// query i when j > i (top-left aligned, as PyTorch). Dropout inside attention
// is not supported (dropout_p must be 0). The philox seed and offset outputs
// of the efficient kernel are int64 rank-0 zeros (there is no dropout).
//
// bmm and the efficient kernel's ops also take bfloat16 and float16 (the
// flash kernel's stay float32/float64). The efficient kernel's log-sum-exp
// is then float32, as PyTorch's: its softmax statistics stay in float32.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::StatusOr<TypeList> BmmInfer(const Attrs&, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kFloatAndHalfTypes));
  RETURN_IF_ERROR(ops::RequireRank("self", in[0], 3));
  RETURN_IF_ERROR(ops::RequireRank("mat2", in[1], 3));
  if (in[0].dtype != in[1].dtype || in[0].shape[0] != in[1].shape[0] || in[0].shape[2] != in[1].shape[1]) {
    return absl::InvalidArgumentError(absl::StrCat("self is ", in[0].ToString(), " but mat2 is ", in[1].ToString(),
                                                   "; expected [b, n, k] @ [b, k, m] of one dtype"));
  }
  return TypeList{{in[0].dtype, {in[0].shape[0], in[0].shape[1], in[1].shape[2]}}};
}

// Checks query (of an `allowed` dtype), key, value (and the mask, when
// given) and returns the output's type.
absl::StatusOr<TensorType> AttentionOutput(const TensorType& q, const TensorType& k, const TensorType& v,
                                           const TensorType* mask, bool float_mask_only,
                                           absl::Span<const DType> allowed = ops::kFloatTypes) {
  RETURN_IF_ERROR(ops::RequireDType("query", q, allowed));
  if (q.rank() < 2 || k.rank() != q.rank() || v.rank() != q.rank() || k.dtype != q.dtype || v.dtype != q.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("query is ", q.ToString(), ", key ", k.ToString(), ", value ",
                                                   v.ToString(), "; expected one dtype and one rank >= 2"));
  }
  const int r = q.rank();
  const bool batch_equal = std::equal(q.shape.begin(), q.shape.end() - 2, k.shape.begin()) &&
                           std::equal(q.shape.begin(), q.shape.end() - 2, v.shape.begin());
  if (!batch_equal || q.shape[r - 1] != k.shape[r - 1] || k.shape[r - 2] != v.shape[r - 2]) {
    return absl::InvalidArgumentError(absl::StrCat("query is ", q.ToString(), ", key ", k.ToString(), ", value ",
                                                   v.ToString(),
                                                   "; expected [..., L, E], [..., S, E] and [..., S, Ev] with equal "
                                                   "leading dims"));
  }
  Shape out = q.shape;
  out[r - 1] = v.shape[r - 1];
  if (mask != nullptr) {
    Shape scores = q.shape;
    scores[r - 1] = k.shape[r - 2];
    const bool dtype_ok = mask->dtype == q.dtype || (!float_mask_only && mask->dtype == DType::kBool);
    if (!dtype_ok || !BroadcastsTo(mask->shape, scores)) {
      return absl::InvalidArgumentError(absl::StrCat("the mask is ", mask->ToString(), "; expected ",
                                                     DTypeName(q.dtype), float_mask_only ? "" : " or bool",
                                                     " broadcasting to the scores ", ShapeString(scores)));
    }
  }
  return TensorType{q.dtype, out};
}

absl::Status CheckNoDropout(const Attrs& attrs) {
  ASSIGN_OR_RETURN(double p, attrs.GetFloat("dropout_p", 0.0));
  if (p != 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'dropout_p' is ", p, "; dropout inside attention is not supported (use 0)"));
  }
  RETURN_IF_ERROR(attrs.GetBool("is_causal", false).status());
  if (attrs.Has("scale")) RETURN_IF_ERROR(attrs.GetFloat("scale").status());
  return absl::OkStatus();
}

// The batch dims of query (all but the last two) followed by `last`.
Shape BatchShape(const TensorType& q, int64_t last) {
  Shape shape(q.shape.begin(), q.shape.end() - 2);
  shape.push_back(last);
  return shape;
}

// The efficient kernel pads its log-sum-exp rows to a multiple of 32.
int64_t PaddedRows(int64_t rows) { return (rows + 31) / 32 * 32; }

// The efficient kernel's log-sum-exp dtype: the query's, except float32 for
// a 16-bit query.
DType LogSumExpDType(DType query) {
  return query == DType::kBFloat16 || query == DType::kFloat16 ? DType::kFloat32 : query;
}

// _scaled_dot_product_efficient_attention(query, key, value[, attn_bias];
// compute_log_sumexp, dropout_p, is_causal, scale):
// (output, log_sumexp, philox_seed, philox_offset).
absl::StatusOr<TypeList> EfficientAttentionInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(CheckNoDropout(attrs));
  ASSIGN_OR_RETURN(bool lse, attrs.GetBool("compute_log_sumexp", false));
  ASSIGN_OR_RETURN(TensorType out, AttentionOutput(in[0], in[1], in[2], in.size() > 3 ? &in[3] : nullptr, true,
                                                   ops::kFloatAndHalfTypes));
  const int64_t rows = in[0].shape[in[0].rank() - 2];
  const TensorType seed{DType::kInt64, {}};
  return TypeList{out, {LogSumExpDType(in[0].dtype), BatchShape(in[0], lse ? PaddedRows(rows) : 0)}, seed, seed};
}

// ..._backward(grad_out, query, key, value[, attn_bias], out, logsumexp,
// philox_seed, philox_offset; dropout_p, grad_input_mask, is_causal, scale):
// (grad_query, grad_key, grad_value, grad_bias); grad_bias has attn_bias's
// type, or is [0] of query's dtype without a bias.
absl::StatusOr<TypeList> EfficientAttentionBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(CheckNoDropout(attrs));
  const bool has_bias = in.size() == 9;
  const TensorType* bias = has_bias ? &in[4] : nullptr;
  const size_t after = has_bias ? 5 : 4;
  ASSIGN_OR_RETURN(TensorType out, AttentionOutput(in[1], in[2], in[3], bias, true, ops::kFloatAndHalfTypes));
  if (!(in[0] == out) || !(in[after] == out)) {
    return absl::InvalidArgumentError(absl::StrCat("grad_out is ", in[0].ToString(), " and out ", in[after].ToString(),
                                                   "; expected ", out.ToString()));
  }
  const TensorType& lse = in[after + 1];
  const int64_t rows = in[1].shape[in[1].rank() - 2];
  const Shape batch = BatchShape(in[1], 0);
  const DType lse_dtype = LogSumExpDType(in[1].dtype);
  if (lse.dtype != lse_dtype || lse.rank() != static_cast<int>(batch.size()) ||
      !std::equal(batch.begin(), batch.end() - 1, lse.shape.begin()) || lse.shape.back() < rows) {
    return absl::InvalidArgumentError(absl::StrCat("logsumexp is ", lse.ToString(), "; expected ", DTypeName(lse_dtype),
                                                   ShapeString(BatchShape(in[1], rows)),
                                                   " or longer rows (the forward must compute it)"));
  }
  if (attrs.Has("grad_input_mask")) RETURN_IF_ERROR(attrs.GetInts("grad_input_mask").status());
  const TensorType grad_bias = has_bias ? *bias : TensorType{in[1].dtype, {0}};
  return TypeList{in[1], in[2], in[3], grad_bias};
}

// _scaled_dot_product_flash_attention_for_cpu(query, key, value[, attn_mask];
// dropout_p, is_causal, scale): (output, logsumexp [..., L]).
absl::StatusOr<TypeList> FlashAttentionInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(CheckNoDropout(attrs));
  ASSIGN_OR_RETURN(TensorType out, AttentionOutput(in[0], in[1], in[2], in.size() > 3 ? &in[3] : nullptr, false));
  const int64_t rows = in[0].shape[in[0].rank() - 2];
  return TypeList{out, {in[0].dtype, BatchShape(in[0], rows)}};
}

// ..._backward(grad_out, query, key, value, out, logsumexp[, attn_mask];
// dropout_p, is_causal, scale): (grad_query, grad_key, grad_value).
absl::StatusOr<TypeList> FlashAttentionBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(CheckNoDropout(attrs));
  ASSIGN_OR_RETURN(TensorType out, AttentionOutput(in[1], in[2], in[3], in.size() > 6 ? &in[6] : nullptr, false));
  if (!(in[0] == out) || !(in[4] == out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("grad_out is ", in[0].ToString(), " and out ", in[4].ToString(), "; expected ", out.ToString()));
  }
  const int64_t rows = in[1].shape[in[1].rank() - 2];
  const TensorType lse{in[1].dtype, BatchShape(in[1], rows)};
  if (!(in[5] == lse)) {
    return absl::InvalidArgumentError(absl::StrCat("logsumexp is ", in[5].ToString(), "; expected ", lse.ToString()));
  }
  return TypeList{in[1], in[2], in[3]};
}

}  // namespace

void RegisterAttentionOps(OpRegistry& registry) {
  using ops::RegisterOp;
  constexpr AliasKind kNone = AliasKind::kNone;
  RegisterOp(registry, "bmm", 2, 2, 1, kNone, BmmInfer);
  RegisterOp(registry, "_scaled_dot_product_efficient_attention", 3, 4, 4, kNone, EfficientAttentionInfer);
  RegisterOp(registry, "_scaled_dot_product_efficient_attention_backward", 8, 9, 4, kNone,
             EfficientAttentionBackwardInfer);
  RegisterOp(registry, "_scaled_dot_product_flash_attention_for_cpu", 3, 4, 2, kNone, FlashAttentionInfer);
  RegisterOp(registry, "_scaled_dot_product_flash_attention_for_cpu_backward", 6, 7, 3, kNone,
             FlashAttentionBackwardInfer);
}

}  // namespace tandem
