// The CPU kernel of `test_fault` (ir/ops/test_ops.cc): a copy of x, and,
// when trigger is not 0, the injected stand-in for a sticky device fault.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "device/injected_fault.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

absl::Status TestFaultKernel(const KernelArgs& args) {
  const TensorArg& x = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  if (out.data != x.data && out.type.bytes() > 0) std::memcpy(out.data, x.data, out.type.bytes());
  if (*args.inputs[1].as<const int64_t>() == 0) return absl::OkStatus();
  const std::string& label = args.node->label;
  device::InjectDeviceFault(label.empty() ? "test_fault triggered"
                                          : absl::StrCat("test_fault triggered in '", label, "'"));
  return device::InjectedDeviceFault();
}

}  // namespace

void AddTestKernels(CpuKernelTable& table) { table["test_fault"] = TestFaultKernel; }

}  // namespace tandem::cpu
