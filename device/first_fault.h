// The first fault of one kind that the process saw, kept for the process's
// life: CUDA's first sticky error (cuda_status.cc), the CPU backend's
// injected stand-in (injected_fault.cc). Thread-safe; a FirstFault is made
// once and never destroyed, since device threads may read it at exit.
#ifndef TANDEM_DEVICE_FIRST_FAULT_H_
#define TANDEM_DEVICE_FIRST_FAULT_H_

#include <atomic>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tandem::device {

class FirstFault {
 public:
  // Keeps `message` unless a fault was kept before.
  void Record(absl::string_view message) {
    absl::MutexLock lock(&mu_);
    if (seen_.load()) return;
    message_ = std::string(message);
    seen_.store(true, std::memory_order_release);
  }

  // The kept message, or nullopt (one atomic load while there is none).
  std::optional<std::string> Message() const {
    if (!seen_.load(std::memory_order_acquire)) return std::nullopt;
    absl::MutexLock lock(&mu_);
    return message_;
  }

 private:
  std::atomic<bool> seen_{false};
  mutable absl::Mutex mu_;
  std::string message_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::device

#endif  // TANDEM_DEVICE_FIRST_FAULT_H_
