// Reference CPU kernels of mm and addmm.
//
// Loop order i-k-j: for each output row i, row k of mat2 is streamed and
// scaled by mat1[i, k] into a row accumulator, so every inner loop runs over
// contiguous memory and vectorizes. The accumulator is double for every
// dtype (one row of m doubles): the CPU result is the oracle, so it rounds
// once, at the end. No zero skipping: inf * 0 gives NaN as in PyTorch.
#include <algorithm>
#include <vector>

#include "adaptor/cpu/kernel_util.h"
#include "adaptor/ops/shape_rules.h"
#include "base/status_macros.h"

namespace tandem::cpu {
namespace {

// out[n, m] = alpha * (a[n, k] @ b[k, m]) + beta * bias, with bias (when not
// null) of a shape that broadcasts to [n, m]. beta == 0 ignores bias (NaNs
// in it do not propagate), as in PyTorch.
template <typename T>
void Matmul(const T* a, const T* b, T* out, int64_t n, int64_t k, int64_t m, double alpha, double beta,
            const TensorArg* bias) {
  std::vector<double> acc(static_cast<size_t>(m));
  const T* bias_data = bias != nullptr ? bias->as<const T>() : nullptr;
  std::vector<int64_t> bias_strides = {0, 0};
  if (bias != nullptr) bias_strides = BroadcastStrides(bias->type.shape, {n, m});
  for (int64_t i = 0; i < n; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    const T* a_row = a + i * k;
    for (int64_t p = 0; p < k; ++p) {
      const double a_ip = static_cast<double>(a_row[p]);
      const T* b_row = b + p * m;
      for (int64_t j = 0; j < m; ++j) acc[j] += a_ip * static_cast<double>(b_row[j]);
    }
    T* out_row = out + i * m;
    if (bias_data != nullptr && beta != 0.0) {
      const T* bias_row = bias_data + i * bias_strides[0];
      const int64_t step = bias_strides[1];
      for (int64_t j = 0; j < m; ++j) {
        out_row[j] = static_cast<T>(beta * static_cast<double>(bias_row[j * step]) + alpha * acc[j]);
      }
    } else if (alpha == 1.0) {
      for (int64_t j = 0; j < m; ++j) out_row[j] = static_cast<T>(acc[j]);
    } else {
      for (int64_t j = 0; j < m; ++j) out_row[j] = static_cast<T>(alpha * acc[j]);
    }
  }
}

absl::Status MmKernel(const KernelArgs& args) {
  const TensorArg& a = args.inputs[0];
  const TensorArg& b = args.inputs[1];
  const TensorArg& out = args.outputs[0];
  return DispatchFloat(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    Matmul<T>(a.as<const T>(), b.as<const T>(), out.as<T>(), a.type.shape[0], a.type.shape[1], b.type.shape[1],
              1.0, 0.0, nullptr);
    return absl::OkStatus();
  });
}

absl::Status AddmmKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(double beta, args.node->attrs.GetFloat("beta", 1.0));
  ASSIGN_OR_RETURN(double alpha, args.node->attrs.GetFloat("alpha", 1.0));
  const TensorArg& bias = args.inputs[0];
  const TensorArg& a = args.inputs[1];
  const TensorArg& b = args.inputs[2];
  const TensorArg& out = args.outputs[0];
  return DispatchFloat(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    Matmul<T>(a.as<const T>(), b.as<const T>(), out.as<T>(), a.type.shape[0], a.type.shape[1], b.type.shape[1],
              alpha, beta, &bias);
    return absl::OkStatus();
  });
}

}  // namespace

void AddLinalgKernels(CpuKernelTable& table) {
  table["mm"] = MmKernel;
  table["addmm"] = AddmmKernel;
}

}  // namespace tandem::cpu
