#include "device/cuda/cuda_status.h"

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace tandem::device {
namespace {

// The first sticky error the process saw (StickyCudaFault).
std::atomic<bool> sticky_seen{false};

absl::Mutex& StickyMutex() {
  static auto* mu = new absl::Mutex;  // never destroyed: device threads may report at exit
  return *mu;
}

std::string& StickyText() {
  static auto* text = new std::string;
  return *text;
}

void RecordSticky(const std::string& message) {
  absl::MutexLock lock(&StickyMutex());
  if (sticky_seen.load()) return;
  StickyText() = message;
  sticky_seen.store(true);
}

}  // namespace

absl::Status CudaStatus(cudaError_t error, absl::string_view call) {
  if (error == cudaSuccess) return absl::OkStatus();
  // A failed call also leaves its error as the thread's "last error", which
  // the next kernel launch check would then report as its own. Clear it
  // (sticky errors cannot be cleared, and every later call reports them).
  if (!IsStickyCudaError(error)) cudaGetLastError();
  std::string message = absl::StrCat(call, ": ", cudaGetErrorString(error), " (", cudaGetErrorName(error), ")");
  if (IsStickyCudaError(error)) RecordSticky(message);
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInvalidDevice:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status StickyCudaFault() {
  if (!sticky_seen.load(std::memory_order_acquire)) return absl::OkStatus();
  absl::MutexLock lock(&StickyMutex());
  return absl::InternalError(absl::StrCat(StickyText(), "; the CUDA context is unusable"));
}

bool IsStickyCudaError(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

}  // namespace tandem::device
