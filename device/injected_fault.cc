#include "device/injected_fault.h"

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace tandem::device {
namespace {

std::atomic<bool> injected{false};

absl::Mutex& FaultMutex() {
  static auto* mu = new absl::Mutex;  // never destroyed: stream threads may read it at exit
  return *mu;
}

std::string& FaultText() {
  static auto* text = new std::string;
  return *text;
}

}  // namespace

void InjectDeviceFault(absl::string_view what) {
  absl::MutexLock lock(&FaultMutex());
  if (injected.load()) return;
  FaultText() = std::string(what);
  injected.store(true);
}

absl::Status InjectedDeviceFault() {
  if (!injected.load(std::memory_order_acquire)) return absl::OkStatus();
  absl::MutexLock lock(&FaultMutex());
  return absl::InternalError(absl::StrCat("injected device fault: ", FaultText(), " (the context is unusable)"));
}

}  // namespace tandem::device
