// CUDA kernels of mm and addmm (blas.h). addmm's `self` joins the product
// the cheapest way its shape allows: a [m] or [1, m] bias with beta 1 as
// cuBLASLt's bias epilogue (no extra pass), a full [n, m] self as the C
// operand (beta * C), anything else broadcast into the output first. The
// transpose_a / transpose_b attributes become the library's transpose
// flags: an operand stored transposed is read in place, never copied.
#include "base/status_macros.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/strided_layout.h"

namespace tandem::cuda {
namespace {

// The dtypes Matmul takes (blas.h): 16-bit floats accumulate in float32.
bool IsFloat(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kBFloat16 || dtype == DType::kFloat16;
}

// A spec with the product's dims, transpose flags and operands: op(a) [n, k]
// @ op(b) [k, m] -> out [n, m], where a is stored [k, n] under transpose_a
// and b is stored [m, k] under transpose_b.
absl::StatusOr<MatmulSpec> ProductSpec(const KernelArgs& args, const TensorArg& a, const TensorArg& b,
                                       const TensorArg& out) {
  MatmulSpec spec;
  ASSIGN_OR_RETURN(spec.trans_a, args.node->attrs.GetBool("transpose_a", false));
  ASSIGN_OR_RETURN(spec.trans_b, args.node->attrs.GetBool("transpose_b", false));
  spec.dtype = out.type.dtype;
  spec.n = a.type.shape[spec.trans_a ? 1 : 0];
  spec.k = a.type.shape[spec.trans_a ? 0 : 1];
  spec.m = b.type.shape[spec.trans_b ? 0 : 1];
  spec.a = a.data;
  spec.b = b.data;
  spec.out = out.data;
  return spec;
}

absl::Status MmKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& a = args.inputs[0];
  const TensorArg& b = args.inputs[1];
  const TensorArg& out = args.outputs[0];
  if (!IsFloat(out.type.dtype)) return UnsupportedDType(args, out.type.dtype);
  if (out.numel() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(MatmulSpec spec, ProductSpec(args, a, b, out));
  if (spec.k == 0) {  // an empty sum
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out.data, 0, out.type.bytes(), context.native));
    return absl::OkStatus();
  }
  return Matmul(*context.stream, spec);
}

// out = beta * self broadcast to out's shape.
absl::Status BroadcastScaled(const CudaKernelContext& context, const KernelArgs& args, const TensorArg& self,
                             const TensorArg& out, double beta) {
  ASSIGN_OR_RETURN(StridedOperand layout, BroadcastLayout(self.type.shape, out.type.shape));
  if (IsHalfDType(out.type.dtype)) {
    BinaryOperand operand;
    operand.data = self.data;
    operand.layout = layout;
    return Launched(args,
                    LaunchHalfPointwise(HalfPointwiseOp::kMulConst, out.type.dtype, out.numel(), operand,
                                        BinaryOperand{}, static_cast<float>(beta), out.data, context.native),
                    out.type.dtype);
  }
  ScalarParam param;
  param.f = beta;
  return Launched(
      args,
      LaunchUnary(UnaryOp::kMulConst, out.type.dtype, out.numel(), self.data, layout, out.data, param, context.native),
      out.type.dtype);
}

absl::Status AddmmKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(double beta, args.node->attrs.GetFloat("beta", 1.0));
  ASSIGN_OR_RETURN(double alpha, args.node->attrs.GetFloat("alpha", 1.0));
  const TensorArg& self = args.inputs[0];
  const TensorArg& a = args.inputs[1];
  const TensorArg& b = args.inputs[2];
  const TensorArg& out = args.outputs[0];
  if (!IsFloat(out.type.dtype)) return UnsupportedDType(args, out.type.dtype);
  if (out.numel() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(MatmulSpec spec, ProductSpec(args, a, b, out));
  spec.alpha = alpha;
  if (spec.k == 0) {  // out = beta * self (NaNs in self ignored when beta == 0, as in PyTorch)
    if (beta == 0.0) {
      CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out.data, 0, out.type.bytes(), context.native));
      return absl::OkStatus();
    }
    return BroadcastScaled(context, args, self, out, beta);
  }
  if (beta != 0.0) {
    const Shape& s = self.type.shape;
    const bool row_vector = (s.size() == 1 && s[0] == spec.m) || (s.size() == 2 && s[0] == 1 && s[1] == spec.m);
    if (row_vector && beta == 1.0) {
      spec.bias = self.data;
    } else if (self.numel() == out.numel()) {
      spec.c = self.data;
      spec.beta = beta;
    } else {
      RETURN_IF_ERROR(BroadcastScaled(context, args, self, out, beta));
      spec.c = out.data;
      spec.beta = 1.0;
    }
  }
  return Matmul(*context.stream, spec);
}

}  // namespace

void AddLinalgKernels(CudaKernelTable& table) {
  table["mm"] = MmKernel;
  table["addmm"] = AddmmKernel;
}

}  // namespace tandem::cuda
