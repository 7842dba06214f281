// Registry entries of 2-D and 3-D convolution: convolution and
// convolution_backward (NCHW or NCDHW, not transposed; geometry in
// cnn_rules.h). float32, float64,
// bfloat16 and float16; input, weight, bias and grad_output share one dtype,
// and so do the results (PyTorch's rule; a 16-bit convolution computes in
// float32 and rounds when it stores).
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/cnn_rules.h"
#include "ir/ops/infer_util.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::Status RequireSameDType(absl::string_view a_name, const TensorType& a, absl::string_view b_name,
                              const TensorType& b) {
  if (a.dtype == b.dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(a_name, " is ", a.ToString(), " but ", b_name, " is ", b.ToString(), "; dtypes must match"));
}

// input, weight (same float or 16-bit float dtype) -> the convolution's
// geometry.
absl::StatusOr<ConvGeometry> CheckConv(const Attrs& attrs, const TensorType& input, const TensorType& weight) {
  RETURN_IF_ERROR(ops::RequireDType("input", input, ops::kFloatAndHalfTypes));
  RETURN_IF_ERROR(RequireSameDType("input", input, "weight", weight));
  return ParseConvGeometry(attrs, input.shape, weight.shape);
}

// Inputs: input, weight[, bias].
absl::StatusOr<TypeList> ConvolutionInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(ConvGeometry g, CheckConv(attrs, in[0], in[1]));
  if (in.size() > 2) {
    RETURN_IF_ERROR(RequireSameDType("input", in[0], "bias", in[2]));
    if (in[2].shape != Shape{g.o}) {
      return absl::InvalidArgumentError(
          absl::StrCat("bias is ", in[2].ToString(), "; expected ", ShapeString({g.o}), " (one per output channel)"));
    }
  }
  return TypeList{TensorType{in[0].dtype, g.output_shape()}};
}

// Inputs: grad_output, input, weight. Outputs: grad_input, grad_weight,
// grad_bias ([O]); each is [0] where output_mask is false.
absl::StatusOr<TypeList> ConvolutionBackwardInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  const TensorType& grad = in[0];
  ASSIGN_OR_RETURN(ConvGeometry g, CheckConv(attrs, in[1], in[2]));
  RETURN_IF_ERROR(RequireSameDType("input", in[1], "grad_output", grad));
  if (grad.shape != g.output_shape()) {
    return absl::InvalidArgumentError(absl::StrCat("grad_output is ", grad.ToString(), " but the convolution of ",
                                                   in[1].ToString(), " by ", in[2].ToString(), " gives ",
                                                   ShapeString(g.output_shape())));
  }
  if (attrs.Has("bias_sizes")) {
    ASSIGN_OR_RETURN(std::vector<int64_t> bias_sizes, attrs.GetInts("bias_sizes"));
    if (bias_sizes != std::vector<int64_t>{g.o}) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'bias_sizes' is ", ShapeString(bias_sizes), "; expected ", ShapeString({g.o})));
    }
  }
  ASSIGN_OR_RETURN(auto mask, ParseOutputMask(attrs));
  const DType dtype = grad.dtype;
  return TypeList{TensorType{dtype, mask[0] ? in[1].shape : Shape{0}},
                  TensorType{dtype, mask[1] ? in[2].shape : Shape{0}},
                  TensorType{dtype, mask[2] ? Shape{g.o} : Shape{0}}};
}

}  // namespace

void RegisterConvolutionOps(OpRegistry& registry) {
  ops::RegisterOp(registry, "convolution", 2, 3, 1, AliasKind::kNone, ConvolutionInfer);
  ops::RegisterOp(registry, "convolution_backward", 3, 3, 3, AliasKind::kNone, ConvolutionBackwardInfer);
}

}  // namespace tandem
