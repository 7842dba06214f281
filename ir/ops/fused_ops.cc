// Registry entry of `fused_elementwise` (ir/ops/fused_program.h): a
// chain of elementwise ops run as one node.
//
// Type rule: the inputs of rank > 0 share one type D[S], D a float dtype
// (float32, float64, bfloat16, float16); a rank-0 input is read as one
// element at every index (a learning rate) and has dtype D, or, where D is
// 16-bit, any float dtype (rounded to D, as a binary op converts a rank-0
// operand of another dtype). With no input of rank > 0, all inputs share
// one dtype D and S is rank 0. Every output is D[S]. The program is
// validated here, so a malformed one from a client is refused at
// registration.
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/fused_program.h"
#include "ir/ops/infer_util.h"

namespace tandem {
namespace {

using ops::TypeList;

bool IsHalfDType(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

absl::StatusOr<TypeList> FusedElementwiseInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(FusedProgram program, DecodeFusedProgram(attrs, static_cast<int>(in.size())));
  // The program's type: that of the first input of rank > 0, else input 0's.
  int shaped = -1;
  for (size_t k = 0; k < in.size() && shaped < 0; ++k) {
    if (in[k].rank() > 0) shaped = static_cast<int>(k);
  }
  const int first = shaped >= 0 ? shaped : 0;
  const TensorType common = in[first];
  RETURN_IF_ERROR(ops::RequireDType(absl::StrCat("input ", first), common, ops::kFloatAndHalfTypes));
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k].rank() == 0 && shaped >= 0) {
      if (in[k].dtype == common.dtype) continue;
      if (IsHalfDType(common.dtype) && IsFloating(in[k].dtype)) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("input ", k, " is ", in[k].ToString(), " but input ", shaped, " is ", common.ToString(),
                       "; every input must have one dtype (a rank-0 input of a 16-bit program may be any float)"));
    }
    if (in[k].dtype != common.dtype) {
      return absl::InvalidArgumentError(absl::StrCat("input ", k, " is ", in[k].ToString(), " but input ", first,
                                                     " is ", common.ToString(), "; every input must have one dtype"));
    }
    if (in[k].shape != common.shape) {
      return absl::InvalidArgumentError(absl::StrCat("input ", k, " is ", in[k].ToString(), " but input ", first,
                                                     " is ", common.ToString(),
                                                     "; inputs must have one shape or rank 0"));
    }
  }
  return TypeList(program.outputs.size(), common);
}

}  // namespace

void RegisterFusedOps(OpRegistry& registry) {
  // In place: each output element is written after every input element at
  // its index is read, so output 0 may take input 0's buffer.
  ops::RegisterOp(registry, kFusedElementwiseOp, 1, kFusedMaxInputs, kVariableOutputs, AliasKind::kInPlace,
                  FusedElementwiseInfer);
}

}  // namespace tandem
