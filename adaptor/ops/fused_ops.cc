// Registry entry of `fused_elementwise` (adaptor/ops/fused_program.h): a
// chain of elementwise ops run as one node.
//
// Type rule: every input has one float dtype; inputs are of one shape S
// except rank-0 inputs, which are read as one element at every index (a
// learning rate). Every output is dtype[S] (a rank-0 S when all inputs are
// rank 0). The program is validated here, so a malformed one from a client
// is refused at registration.
#include "absl/strings/str_cat.h"
#include "adaptor/op_registry.h"
#include "adaptor/ops/fused_program.h"
#include "adaptor/ops/infer_util.h"
#include "base/status_macros.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::StatusOr<TypeList> FusedElementwiseInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(FusedProgram program, DecodeFusedProgram(attrs, static_cast<int>(in.size())));
  RETURN_IF_ERROR(ops::RequireDType("input 0", in[0], ops::kFloatTypes));
  TensorType common{in[0].dtype, {}};
  int shaped = -1;  // the first input of rank > 0
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k].dtype != common.dtype) {
      return absl::InvalidArgumentError(absl::StrCat("input ", k, " is ", in[k].ToString(), " but input 0 is ",
                                                     in[0].ToString(), "; every input must have one dtype"));
    }
    if (in[k].rank() == 0) continue;
    if (shaped < 0) {
      shaped = static_cast<int>(k);
      common.shape = in[k].shape;
    } else if (in[k].shape != common.shape) {
      return absl::InvalidArgumentError(absl::StrCat("input ", k, " is ", in[k].ToString(), " but input ", shaped,
                                                     " is ", in[shaped].ToString(),
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
