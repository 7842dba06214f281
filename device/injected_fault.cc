#include "device/injected_fault.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "device/first_fault.h"

namespace tandem::device {
namespace {

FirstFault& Injected() {
  static auto* fault = new FirstFault;
  return *fault;
}

}  // namespace

void InjectDeviceFault(absl::string_view what) { Injected().Record(what); }

absl::Status InjectedDeviceFault() {
  const std::optional<std::string> what = Injected().Message();
  if (!what.has_value()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("injected device fault: ", *what, " (the context is unusable)"));
}

}  // namespace tandem::device
