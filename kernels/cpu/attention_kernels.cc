// Reference CPU kernels of bmm and the scaled-dot-product attention ops (the
// memory-efficient kernel's forms and the CPU flash kernel's forms, with
// their backwards). Everything accumulates in double; bmm and the efficient
// kernel's forms take bfloat16 and float16 through half_kernels.h.
//
// Attention, per batch entry b and query row i (E = head dim):
//   s_ij = scale * q_i . k_j + mask_ij   (-inf where causal or a bool mask hides j)
//   lse_i = log(sum_j exp(s_ij)),  p_ij = exp(s_ij - lse_i),  o_i = sum_j p_ij v_j
// and the backward recomputes p from the given logsumexp:
//   D_i = dO_i . o_i,  dS_ij = p_ij (dO_i . v_j - D_i)
//   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,  dv_j = sum_i p_ij dO_i
// and the bias gradient is dS summed over the bias's broadcast dims.
#include <cmath>
#include <limits>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

// out[b] = a[b] @ c[b]; each row accumulates in double (i-k-j order).
absl::Status BmmKernel(const KernelArgs& args) {
  const TensorArg& a = args.inputs[0];
  const TensorArg& c = args.inputs[1];
  const TensorArg& out = args.outputs[0];
  const int64_t batch = a.type.shape[0], n = a.type.shape[1], k = a.type.shape[2], m = c.type.shape[2];
  return DispatchFloat(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<double> acc(static_cast<size_t>(m));
    for (int64_t b = 0; b < batch; ++b) {
      const T* pa = a.as<const T>() + b * n * k;
      const T* pc = c.as<const T>() + b * k * m;
      T* po = out.as<T>() + b * n * m;
      for (int64_t i = 0; i < n; ++i) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t p = 0; p < k; ++p) {
          const double x = static_cast<double>(pa[i * k + p]);
          for (int64_t j = 0; j < m; ++j) acc[j] += x * static_cast<double>(pc[p * m + j]);
        }
        for (int64_t j = 0; j < m; ++j) po[i * m + j] = static_cast<T>(acc[j]);
      }
    }
    return absl::OkStatus();
  });
}

struct AttentionShape {
  int64_t batch = 1, rows = 0, keys = 0, head = 0, value_head = 0;
  double scale = 1.0;
  bool causal = false;
  // The mask, when present: its offset per batch entry and its strides over
  // (row, key); bool masks hide where false, float masks add.
  const TensorArg* mask = nullptr;
  std::vector<int64_t> mask_batch_offset;
  int64_t mask_row_stride = 0, mask_key_stride = 0;
};

absl::StatusOr<AttentionShape> GetShape(const KernelArgs& args, const TensorArg& q, const TensorArg& k,
                                        const TensorArg& v, const TensorArg* mask) {
  AttentionShape s;
  const int r = q.type.rank();
  s.rows = q.type.shape[r - 2];
  s.head = q.type.shape[r - 1];
  s.keys = k.type.shape[r - 2];
  s.value_head = v.type.shape[r - 1];
  for (int d = 0; d < r - 2; ++d) s.batch *= q.type.shape[d];
  ASSIGN_OR_RETURN(s.causal, args.node->attrs.GetBool("is_causal", false));
  s.scale = 1.0 / std::sqrt(static_cast<double>(s.head));
  if (args.node->attrs.Has("scale")) {
    ASSIGN_OR_RETURN(s.scale, args.node->attrs.GetFloat("scale"));
  }
  if (mask != nullptr) {
    s.mask = mask;
    Shape scores = q.type.shape;
    scores[r - 1] = s.keys;
    const std::vector<int64_t> strides = BroadcastStrides(mask->type.shape, scores);
    s.mask_row_stride = strides[r - 2];
    s.mask_key_stride = strides[r - 1];
    const Shape batch_shape(scores.begin(), scores.end() - 2);
    const std::vector<int64_t> batch_strides(strides.begin(), strides.end() - 2);
    s.mask_batch_offset.resize(static_cast<size_t>(s.batch));
    ForEachIndex<1>(batch_shape, {batch_strides},
                    [&](int64_t b, const std::array<int64_t, 1>& off) { s.mask_batch_offset[b] = off[0]; });
  }
  return s;
}

// The scores of row i of batch entry b: scale * q_i . k_j plus the mask.
template <typename T>
void Scores(const AttentionShape& s, const T* q, const T* k, int64_t b, int64_t i, std::vector<double>& out) {
  const T* qi = q + (b * s.rows + i) * s.head;
  for (int64_t j = 0; j < s.keys; ++j) {
    if (s.causal && j > i) {
      out[j] = -std::numeric_limits<double>::infinity();
      continue;
    }
    const T* kj = k + (b * s.keys + j) * s.head;
    double dot = 0.0;
    for (int64_t e = 0; e < s.head; ++e) dot += static_cast<double>(qi[e]) * static_cast<double>(kj[e]);
    double score = s.scale * dot;
    if (s.mask != nullptr) {
      const int64_t at = s.mask_batch_offset[b] + i * s.mask_row_stride + j * s.mask_key_stride;
      if (s.mask->type.dtype == DType::kBool) {
        if (!s.mask->as<const bool>()[at]) score = -std::numeric_limits<double>::infinity();
      } else {
        score += static_cast<double>(s.mask->as<const T>()[at]);
      }
    }
    out[j] = score;
  }
}

// Inputs q, k, v (and mask); outputs out and lse (row stride lse_row; rows
// past `rows` in a padded lse are written 0).
template <typename T>
void AttentionForward(const AttentionShape& s, const T* q, const T* k, const T* v, T* out, T* lse, int64_t lse_row) {
  std::vector<double> scores(static_cast<size_t>(s.keys)), acc(static_cast<size_t>(s.value_head));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t i = 0; i < s.rows; ++i) {
      Scores(s, q, k, b, i, scores);
      double max = -std::numeric_limits<double>::infinity();
      for (double x : scores) max = std::max(max, x);
      double sum = 0.0;
      for (double x : scores) sum += std::exp(x - max);
      const double log_sum = max + std::log(sum);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < s.keys; ++j) {
        const double p = std::exp(scores[j] - log_sum);
        const T* vj = v + (b * s.keys + j) * s.value_head;
        for (int64_t e = 0; e < s.value_head; ++e) acc[e] += p * static_cast<double>(vj[e]);
      }
      T* oi = out + (b * s.rows + i) * s.value_head;
      for (int64_t e = 0; e < s.value_head; ++e) oi[e] = static_cast<T>(acc[e]);
      if (lse != nullptr) lse[b * lse_row + i] = static_cast<T>(log_sum);
    }
    if (lse != nullptr) {
      for (int64_t i = s.rows; i < lse_row; ++i) lse[b * lse_row + i] = T(0);
    }
  }
}

struct AttentionGrads {
  const TensorArg* dq;
  const TensorArg* dk;
  const TensorArg* dv;
  const TensorArg* dbias;  // null: no bias gradient
};

template <typename T>
void AttentionBackward(const AttentionShape& s, const T* dout, const T* q, const T* k, const T* v, const T* out,
                       const T* lse, int64_t lse_row, const AttentionGrads& grads) {
  std::vector<double> dq(grads.dq->numel(), 0.0), dk(grads.dk->numel(), 0.0), dv(grads.dv->numel(), 0.0);
  std::vector<double> dbias(grads.dbias != nullptr ? grads.dbias->numel() : 0, 0.0);
  std::vector<double> scores(static_cast<size_t>(s.keys));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t i = 0; i < s.rows; ++i) {
      Scores(s, q, k, b, i, scores);
      const T* doi = dout + (b * s.rows + i) * s.value_head;
      const T* oi = out + (b * s.rows + i) * s.value_head;
      const T* qi = q + (b * s.rows + i) * s.head;
      double d = 0.0;
      for (int64_t e = 0; e < s.value_head; ++e) d += static_cast<double>(doi[e]) * static_cast<double>(oi[e]);
      const double log_sum = static_cast<double>(lse[b * lse_row + i]);
      for (int64_t j = 0; j < s.keys; ++j) {
        const double p = std::exp(scores[j] - log_sum);
        const T* vj = v + (b * s.keys + j) * s.value_head;
        const T* kj = k + (b * s.keys + j) * s.head;
        double dp = 0.0;
        for (int64_t e = 0; e < s.value_head; ++e) {
          dp += static_cast<double>(doi[e]) * static_cast<double>(vj[e]);
          dv[(b * s.keys + j) * s.value_head + e] += p * static_cast<double>(doi[e]);
        }
        const double ds = p * (dp - d);
        for (int64_t e = 0; e < s.head; ++e) {
          dq[(b * s.rows + i) * s.head + e] += s.scale * ds * static_cast<double>(kj[e]);
          dk[(b * s.keys + j) * s.head + e] += s.scale * ds * static_cast<double>(qi[e]);
        }
        if (grads.dbias != nullptr) {
          dbias[s.mask_batch_offset[b] + i * s.mask_row_stride + j * s.mask_key_stride] += ds;
        }
      }
    }
  }
  auto store = [](const std::vector<double>& from, const TensorArg* to) {
    T* p = to->as<T>();
    for (size_t i = 0; i < from.size(); ++i) p[i] = static_cast<T>(from[i]);
  };
  store(dq, grads.dq);
  store(dk, grads.dk);
  store(dv, grads.dv);
  if (grads.dbias != nullptr) store(dbias, grads.dbias);
}

// Inputs: query, key, value[, attn_bias]. Outputs: output, log_sumexp
// ([..., 0] unless compute_log_sumexp), philox_seed, philox_offset (0).
absl::Status EfficientAttentionKernel(const KernelArgs& args) {
  const TensorArg* bias = args.inputs.size() > 3 ? &args.inputs[3] : nullptr;
  ASSIGN_OR_RETURN(AttentionShape s, GetShape(args, args.inputs[0], args.inputs[1], args.inputs[2], bias));
  const TensorArg& lse = args.outputs[1];
  const int64_t lse_row = lse.type.shape.back();
  *args.outputs[2].as<int64_t>() = 0;
  *args.outputs[3].as<int64_t>() = 0;
  return DispatchFloat(args, args.inputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    AttentionForward<T>(s, args.inputs[0].as<const T>(), args.inputs[1].as<const T>(), args.inputs[2].as<const T>(),
                        args.outputs[0].as<T>(), lse_row > 0 ? lse.as<T>() : nullptr, lse_row);
    return absl::OkStatus();
  });
}

// Inputs: grad_out, query, key, value[, attn_bias], out, logsumexp,
// philox_seed, philox_offset. Outputs: grad_query, grad_key, grad_value,
// grad_bias.
absl::Status EfficientAttentionBackwardKernel(const KernelArgs& args) {
  const bool has_bias = args.inputs.size() == 9;
  const TensorArg* bias = has_bias ? &args.inputs[4] : nullptr;
  const size_t after = has_bias ? 5 : 4;
  ASSIGN_OR_RETURN(AttentionShape s, GetShape(args, args.inputs[1], args.inputs[2], args.inputs[3], bias));
  const TensorArg& lse = args.inputs[after + 1];
  return DispatchFloat(args, args.inputs[1].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    AttentionBackward<T>(s, args.inputs[0].as<const T>(), args.inputs[1].as<const T>(), args.inputs[2].as<const T>(),
                         args.inputs[3].as<const T>(), args.inputs[after].as<const T>(), lse.as<const T>(),
                         lse.type.shape.back(),
                         {&args.outputs[0], &args.outputs[1], &args.outputs[2], has_bias ? &args.outputs[3] : nullptr});
    return absl::OkStatus();
  });
}

// Inputs: query, key, value[, attn_mask]. Outputs: output, logsumexp.
absl::Status FlashAttentionKernel(const KernelArgs& args) {
  const TensorArg* mask = args.inputs.size() > 3 ? &args.inputs[3] : nullptr;
  ASSIGN_OR_RETURN(AttentionShape s, GetShape(args, args.inputs[0], args.inputs[1], args.inputs[2], mask));
  return DispatchFloat(args, args.inputs[0].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    AttentionForward<T>(s, args.inputs[0].as<const T>(), args.inputs[1].as<const T>(), args.inputs[2].as<const T>(),
                        args.outputs[0].as<T>(), args.outputs[1].as<T>(), s.rows);
    return absl::OkStatus();
  });
}

// Inputs: grad_out, query, key, value, out, logsumexp[, attn_mask].
// Outputs: grad_query, grad_key, grad_value.
absl::Status FlashAttentionBackwardKernel(const KernelArgs& args) {
  const TensorArg* mask = args.inputs.size() > 6 ? &args.inputs[6] : nullptr;
  ASSIGN_OR_RETURN(AttentionShape s, GetShape(args, args.inputs[1], args.inputs[2], args.inputs[3], mask));
  return DispatchFloat(args, args.inputs[1].type.dtype, [&](auto tag) {
    using T = decltype(tag);
    AttentionBackward<T>(s, args.inputs[0].as<const T>(), args.inputs[1].as<const T>(), args.inputs[2].as<const T>(),
                         args.inputs[3].as<const T>(), args.inputs[4].as<const T>(), args.inputs[5].as<const T>(),
                         s.rows, {&args.outputs[0], &args.outputs[1], &args.outputs[2], nullptr});
    return absl::OkStatus();
  });
}

}  // namespace

void AddAttentionKernels(CpuKernelTable& table) {
  table["bmm"] = WithHalf<BmmKernel>;
  // bfloat16 / float16: the float32 kernels on widened copies (half_kernels.h);
  // the log-sum-exp is float32 then and passes through as it is.
  table["_scaled_dot_product_efficient_attention"] = WithHalf<EfficientAttentionKernel>;
  table["_scaled_dot_product_efficient_attention_backward"] = WithHalf<EfficientAttentionBackwardKernel>;
  table["_scaled_dot_product_flash_attention_for_cpu"] = FlashAttentionKernel;
  table["_scaled_dot_product_flash_attention_for_cpu_backward"] = FlashAttentionBackwardKernel;
}

}  // namespace tandem::cpu
