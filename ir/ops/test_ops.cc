// Registry entry of `test_fault`, the op of fault-recovery tests: tandemd
// refuses a graph that uses it unless started with --test_faults
// (server/service_jobs.cc).
//
// test_fault(x, trigger) -> a copy of x. When the int64 rank-0 `trigger` is
// not 0, the node also faults its device as a kernel bug would: the CUDA
// kernel writes to an address mapped nowhere (a sticky illegal-address
// error), the CPU kernel injects the CPU backend's stand-in for one
// (device/injected_fault.h). Either way the device's context is unusable
// afterwards and tandemd restarts (docs/deploy.md, Faults).
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::StatusOr<TypeList> TestFaultInfer(const Attrs&, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("x", in[0], ops::kStorableAndHalfTypes));
  if (!(in[1] == TensorType{DType::kInt64, {}})) {
    return absl::InvalidArgumentError(
        absl::StrCat("trigger is ", in[1].ToString(), "; expected an int64 rank-0 tensor"));
  }
  return TypeList{in[0]};
}

}  // namespace

void RegisterTestOps(OpRegistry& registry) {
  ops::RegisterOp(registry, "test_fault", 2, 2, 1, AliasKind::kNone, TestFaultInfer);
}

}  // namespace tandem
