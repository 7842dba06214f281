// Reference CPU kernels of mm and addmm.
//
// Each output row i is accumulated in double, one term per p = 0..k-1 in
// order, and rounded once at the end (the CPU result is the oracle). Row i
// of op(a) is first read into a row of doubles (through the transposed
// index when transpose_a). Then, when b is stored [k, m], loop order i-k-j:
// row k of b is streamed and scaled by a[i, k] into a row accumulator, so
// the inner loop runs over contiguous memory and vectorizes; when b is
// stored transposed ([m, k], transpose_b), each output element is the dot
// product of that row with row j of b, also contiguous. Both orders add the
// same terms in the same order to each element, so a product of a
// transposed operand equals, bit for bit, the product of its materialized
// transpose. No zero skipping: inf * 0 gives NaN as in PyTorch.
#include <algorithm>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

// The operands of out[n, m] = alpha * (op(a) @ op(b)) + beta * bias.
struct MatmulDims {
  int64_t n = 0, k = 0, m = 0;
  bool trans_a = false;  // a is stored [k, n]; else [n, k]
  bool trans_b = false;  // b is stored [m, k]; else [k, m]
};

// bias (when not null) has a shape that broadcasts to [n, m]. beta == 0
// ignores bias (NaNs in it do not propagate), as in PyTorch.
template <typename T>
void Matmul(const T* a, const T* b, T* out, const MatmulDims& d, double alpha, double beta, const TensorArg* bias) {
  const int64_t n = d.n, k = d.k, m = d.m;
  std::vector<double> a_row(static_cast<size_t>(k));
  std::vector<double> acc(static_cast<size_t>(m));
  const T* bias_data = bias != nullptr ? bias->as<const T>() : nullptr;
  std::vector<int64_t> bias_strides = {0, 0};
  if (bias != nullptr) bias_strides = BroadcastStrides(bias->type.shape, {n, m});
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < k; ++p) a_row[p] = static_cast<double>(d.trans_a ? a[p * n + i] : a[i * k + p]);
    if (d.trans_b) {
      for (int64_t j = 0; j < m; ++j) {
        const T* b_row = b + j * k;  // column j of op(b)
        double sum = 0.0;
        for (int64_t p = 0; p < k; ++p) sum += a_row[p] * static_cast<double>(b_row[p]);
        acc[j] = sum;
      }
    } else {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t p = 0; p < k; ++p) {
        const double a_ip = a_row[p];
        const T* b_row = b + p * m;
        for (int64_t j = 0; j < m; ++j) acc[j] += a_ip * static_cast<double>(b_row[j]);
      }
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

// The product's dims from the stored operands and the node's transpose_a /
// transpose_b attributes.
absl::StatusOr<MatmulDims> DimsOf(const KernelArgs& args, const TensorArg& a, const TensorArg& b) {
  MatmulDims d;
  ASSIGN_OR_RETURN(d.trans_a, args.node->attrs.GetBool("transpose_a", false));
  ASSIGN_OR_RETURN(d.trans_b, args.node->attrs.GetBool("transpose_b", false));
  d.n = a.type.shape[d.trans_a ? 1 : 0];
  d.k = a.type.shape[d.trans_a ? 0 : 1];
  d.m = b.type.shape[d.trans_b ? 0 : 1];
  return d;
}

absl::Status MmKernel(const KernelArgs& args) {
  const TensorArg& a = args.inputs[0];
  const TensorArg& b = args.inputs[1];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(MatmulDims dims, DimsOf(args, a, b));
  return DispatchFloat(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    Matmul<T>(a.as<const T>(), b.as<const T>(), out.as<T>(), dims, 1.0, 0.0, nullptr);
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
  ASSIGN_OR_RETURN(MatmulDims dims, DimsOf(args, a, b));
  return DispatchFloat(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    Matmul<T>(a.as<const T>(), b.as<const T>(), out.as<T>(), dims, alpha, beta, &bias);
    return absl::OkStatus();
  });
}

}  // namespace

void AddLinalgKernels(CpuKernelTable& table) {
  table["mm"] = WithHalf<MmKernel>;
  table["addmm"] = WithHalf<AddmmKernel>;
}

}  // namespace tandem::cpu
