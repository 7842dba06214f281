// Reference CPU kernels of batch normalization over [N, C, *], channel by
// channel, with statistics in double:
//   training: mean and biased variance of the channel (two passes),
//     invstd = 1 / sqrt(var + eps); the running statistics, where returned,
//     are (1 - momentum) * old + momentum * new, with the unbiased variance
//     (var * n / (n - 1)) for running_var, as ATen;
//   eval: mean = running_mean, invstd = 1 / sqrt(running_var + eps); the
//     saved statistics are [0] and the returned running statistics copies;
//   out = (x - mean) * invstd * weight + bias.
// Backward, with sum_dy and sum_dy_xmu = sum(dy * (x - mean)) per channel:
//   train: grad_input = (dy - sum_dy / n - (x - mean) * invstd^2 *
//          sum_dy_xmu / n) * invstd * weight;
//   eval:  grad_input = dy * invstd * weight;
//   grad_weight = sum_dy_xmu * invstd, grad_bias = sum_dy.
// bfloat16 and float16 inputs run these kernels on float32 copies
// (half_kernels.h's WithHalf): weight, bias and running statistics of the
// input's 16-bit dtype are widened too (float32 ones, PyTorch's mixed batch
// norm, pass as they are), save_mean and save_invstd are float32 (the
// registry's rule), and every 16-bit result is rounded once at the end.
// Folded activations (compiler/fold_activations.h) run as the unfused ops
// would, in the tensors' own dtype: a forward with residual = true adds its
// last input to the stored output as add.Tensor would (AddResidual), then
// with relu = true applies relu's rule (x < 0 ? 0 : x) to it; a backward with
// mask_threshold = t runs on a copy of grad_out masked by threshold_backward's
// rule (mask > t ? grad : 0, compared in float32 for 16-bit tensors).
#include <cmath>
#include <cstring>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/cnn_rules.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/half.h"

namespace tandem::cpu {
namespace {

struct BatchNormAttrs {
  bool training = false;
  double momentum = 0.1;
  double eps = 1e-5;
};

absl::StatusOr<BatchNormAttrs> GetForwardAttrs(const KernelArgs& args) {
  BatchNormAttrs a;
  ASSIGN_OR_RETURN(a.training, args.node->attrs.GetBool("training"));
  ASSIGN_OR_RETURN(a.momentum, args.node->attrs.GetFloat("momentum"));
  ASSIGN_OR_RETURN(a.eps, args.node->attrs.GetFloat("eps"));
  return a;
}

// Calls f(c, offset of (n, c, 0)) for every n of channel c; the inner
// elements follow contiguously.
template <typename F>
void ForEachRow(const ChannelSplit& s, int64_t c, F&& f) {
  for (int64_t n = 0; n < s.outer; ++n) f((n * s.channels + c) * s.inner);
}

// Pointers of the forward's operands; null where absent.
template <typename T>
struct ForwardOperands {
  const T* x = nullptr;
  const T* weight = nullptr;
  const T* bias = nullptr;
  const T* running_mean = nullptr;
  const T* running_var = nullptr;
  T* out = nullptr;
  T* save_mean = nullptr;
  T* save_invstd = nullptr;
  T* new_running_mean = nullptr;  // the functional form's outputs
  T* new_running_var = nullptr;
};

template <typename T>
void BatchNormForward(const ChannelSplit& s, const BatchNormAttrs& a, const ForwardOperands<T>& op) {
  const double count = static_cast<double>(s.per_channel());
  for (int64_t c = 0; c < s.channels; ++c) {
    double mean, invstd;
    if (a.training) {
      double sum = 0.0;
      ForEachRow(s, c, [&](int64_t base) {
        for (int64_t i = 0; i < s.inner; ++i) sum += static_cast<double>(op.x[base + i]);
      });
      mean = sum / count;
      double var_sum = 0.0;
      ForEachRow(s, c, [&](int64_t base) {
        for (int64_t i = 0; i < s.inner; ++i) {
          const double d = static_cast<double>(op.x[base + i]) - mean;
          var_sum += d * d;
        }
      });
      invstd = 1.0 / std::sqrt(var_sum / count + a.eps);
      op.save_mean[c] = static_cast<T>(mean);
      op.save_invstd[c] = static_cast<T>(invstd);
      if (op.new_running_mean != nullptr) {
        op.new_running_mean[c] =
            static_cast<T>((1.0 - a.momentum) * static_cast<double>(op.running_mean[c]) + a.momentum * mean);
        op.new_running_var[c] = static_cast<T>((1.0 - a.momentum) * static_cast<double>(op.running_var[c]) +
                                               a.momentum * var_sum / (count - 1.0));
      }
    } else {
      mean = static_cast<double>(op.running_mean[c]);
      invstd = 1.0 / std::sqrt(static_cast<double>(op.running_var[c]) + a.eps);
      if (op.new_running_mean != nullptr) {
        op.new_running_mean[c] = op.running_mean[c];
        op.new_running_var[c] = op.running_var[c];
      }
    }
    const double scale = invstd * static_cast<double>(op.weight[c]);
    const double shift = static_cast<double>(op.bias[c]) - mean * scale;
    ForEachRow(s, c, [&](int64_t base) {
      for (int64_t i = 0; i < s.inner; ++i) {
        op.out[base + i] = static_cast<T>(static_cast<double>(op.x[base + i]) * scale + shift);
      }
    });
  }
}

// native_batch_norm: input, weight, bias[, running_mean, running_var] ->
// out, save_mean, save_invstd. The running statistics are read (eval mode)
// but never written. _native_batch_norm_legit_functional: all five inputs,
// and the running statistics as outputs 3 and 4.
absl::Status BatchNormForwardKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(BatchNormAttrs a, GetForwardAttrs(args));
  const TensorArg& input = args.inputs[0];
  ASSIGN_OR_RETURN(bool channels_last, args.node->attrs.GetBool("channels_last", false));
  const ChannelSplit s = SplitChannels(input.type.shape, channels_last);
  return DispatchFloat(args, input.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    ForwardOperands<T> op;
    op.x = input.as<const T>();
    op.weight = args.inputs[1].as<const T>();
    op.bias = args.inputs[2].as<const T>();
    if (args.inputs.size() == 5) {
      op.running_mean = args.inputs[3].as<const T>();
      op.running_var = args.inputs[4].as<const T>();
    }
    op.out = args.outputs[0].as<T>();
    op.save_mean = args.outputs[1].as<T>();
    op.save_invstd = args.outputs[2].as<T>();
    if (args.outputs.size() == 5) {
      op.new_running_mean = args.outputs[3].as<T>();
      op.new_running_var = args.outputs[4].as<T>();
    }
    BatchNormForward<T>(s, a, op);
    return absl::OkStatus();
  });
}

// Inputs: grad_out, input, weight[, running_mean, running_var], save_mean,
// save_invstd. Outputs of 0 elements (output_mask) are skipped.
absl::Status BatchNormBackwardKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(bool train, args.node->attrs.GetBool("train"));
  ASSIGN_OR_RETURN(double eps, args.node->attrs.GetFloat("eps"));
  const TensorArg& grad = args.inputs[0];
  const TensorArg& input = args.inputs[1];
  const bool has_running = args.inputs.size() == 7;
  const TensorArg* running_mean = has_running ? &args.inputs[3] : nullptr;
  const TensorArg* running_var = has_running ? &args.inputs[4] : nullptr;
  const TensorArg& save_mean = args.inputs[has_running ? 5 : 3];
  const TensorArg& save_invstd = args.inputs[has_running ? 6 : 4];
  ASSIGN_OR_RETURN(bool channels_last, args.node->attrs.GetBool("channels_last", false));
  const ChannelSplit s = SplitChannels(input.type.shape, channels_last);
  return DispatchFloat(args, input.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = grad.as<const T>();
    const T* x = input.as<const T>();
    const T* weight = args.inputs[2].as<const T>();
    auto out = [&](int i) { return args.outputs[i].numel() > 0 ? args.outputs[i].as<T>() : nullptr; };
    T* grad_input = out(0);
    T* grad_weight = out(1);
    T* grad_bias = out(2);
    const double count = static_cast<double>(s.per_channel());
    for (int64_t c = 0; c < s.channels; ++c) {
      double mean, invstd;
      if (train) {
        mean = static_cast<double>(save_mean.as<const T>()[c]);
        invstd = static_cast<double>(save_invstd.as<const T>()[c]);
      } else {
        mean = static_cast<double>(running_mean->as<const T>()[c]);
        invstd = 1.0 / std::sqrt(static_cast<double>(running_var->as<const T>()[c]) + eps);
      }
      double sum_dy = 0.0, sum_dy_xmu = 0.0;
      ForEachRow(s, c, [&](int64_t base) {
        for (int64_t i = 0; i < s.inner; ++i) {
          const double g = static_cast<double>(dy[base + i]);
          sum_dy += g;
          sum_dy_xmu += g * (static_cast<double>(x[base + i]) - mean);
        }
      });
      if (grad_weight != nullptr) grad_weight[c] = static_cast<T>(sum_dy_xmu * invstd);
      if (grad_bias != nullptr) grad_bias[c] = static_cast<T>(sum_dy);
      if (grad_input == nullptr) continue;
      const double w = static_cast<double>(weight[c]);
      if (train) {
        const double mean_dy = sum_dy / count;
        const double k = sum_dy_xmu / count * invstd * invstd;
        ForEachRow(s, c, [&](int64_t base) {
          for (int64_t i = 0; i < s.inner; ++i) {
            const double xmu = static_cast<double>(x[base + i]) - mean;
            grad_input[base + i] = static_cast<T>((static_cast<double>(dy[base + i]) - mean_dy - xmu * k) * invstd * w);
          }
        });
      } else {
        ForEachRow(s, c, [&](int64_t base) {
          for (int64_t i = 0; i < s.inner; ++i) {
            grad_input[base + i] = static_cast<T>(static_cast<double>(dy[base + i]) * invstd * w);
          }
        });
      }
    }
    return absl::OkStatus();
  });
}

// Element i set to +0 in its dtype.
void SetZero(const TensorArg& t, int64_t i) {
  const size_t size = DTypeSize(t.type.dtype);
  std::memset(static_cast<char*>(t.data) + i * size, 0, size);
}

// Whether `value` is above `threshold` compared as threshold_backward's
// kernel compares: in float32 for float32 and 16-bit tensors.
bool Above(DType dtype, double value, double threshold) {
  if (dtype == DType::kFloat64) return value > threshold;
  return static_cast<float>(value) > static_cast<float>(threshold);
}

// out = round(out + residual), as add.Tensor computes it: in double for
// float64, else in float32, rounded to out's dtype.
void AddResidual(const TensorArg& out, const TensorArg& residual) {
  for (int64_t i = 0; i < out.numel(); ++i) {
    switch (out.type.dtype) {
      case DType::kFloat64:
        out.as<double>()[i] += residual.as<const double>()[i];
        break;
      case DType::kBFloat16:
        out.as<uint16_t>()[i] = FloatToBFloat16Bits(static_cast<float>(FloatElement(out, i)) +
                                                    static_cast<float>(FloatElement(residual, i)));
        break;
      case DType::kFloat16:
        out.as<uint16_t>()[i] = FloatToFloat16Bits(static_cast<float>(FloatElement(out, i)) +
                                                   static_cast<float>(FloatElement(residual, i)));
        break;
      default:
        out.as<float>()[i] += residual.as<const float>()[i];
    }
  }
}

absl::Status ForwardKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(bool residual, args.node->attrs.GetBool("residual", false));
  if (residual) {
    KernelArgs plain = args;
    plain.inputs.pop_back();
    RETURN_IF_ERROR(WithHalf<BatchNormForwardKernel>(plain));
    AddResidual(args.outputs[0], args.inputs.back());
  } else {
    RETURN_IF_ERROR(WithHalf<BatchNormForwardKernel>(args));
  }
  ASSIGN_OR_RETURN(bool relu, args.node->attrs.GetBool("relu", false));
  if (!relu) return absl::OkStatus();
  const TensorArg& out = args.outputs[0];
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (FloatElement(out, i) < 0.0) SetZero(out, i);
  }
  return absl::OkStatus();
}

absl::Status BackwardKernel(const KernelArgs& args) {
  if (!args.node->attrs.Has("mask_threshold")) return WithHalf<BatchNormBackwardKernel>(args);
  ASSIGN_OR_RETURN(double threshold, args.node->attrs.GetFloat("mask_threshold"));
  const TensorArg& grad = args.inputs[0];
  const TensorArg& mask = args.inputs.back();
  std::vector<char> masked(grad.type.bytes());
  std::memcpy(masked.data(), grad.data, masked.size());
  const TensorArg masked_grad{masked.data(), grad.type};
  for (int64_t i = 0; i < grad.numel(); ++i) {
    if (!Above(mask.type.dtype, FloatElement(mask, i), threshold)) SetZero(masked_grad, i);
  }
  KernelArgs unmasked = args;
  unmasked.inputs[0] = masked_grad;
  unmasked.inputs.pop_back();
  return WithHalf<BatchNormBackwardKernel>(unmasked);
}

}  // namespace

void AddBatchNormKernels(CpuKernelTable& table) {
  table["native_batch_norm"] = ForwardKernel;
  table["_native_batch_norm_legit_functional"] = ForwardKernel;
  table["native_batch_norm_backward"] = BackwardKernel;
}

}  // namespace tandem::cpu
