#include "device/cuda/cuda_status.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "device/first_fault.h"

namespace tandem::device {
namespace {

// The first sticky error the process saw (StickyCudaFault).
FirstFault& Sticky() {
  static auto* fault = new FirstFault;
  return *fault;
}

}  // namespace

absl::Status CudaStatus(cudaError_t error, absl::string_view call) {
  if (error == cudaSuccess) return absl::OkStatus();
  // A failed call also leaves its error as the thread's "last error", which
  // the next kernel launch check would then report as its own. Clear it
  // (sticky errors cannot be cleared, and every later call reports them).
  if (!IsStickyCudaError(error)) cudaGetLastError();
  std::string message = absl::StrCat(call, ": ", cudaGetErrorString(error), " (", cudaGetErrorName(error), ")");
  if (IsStickyCudaError(error)) Sticky().Record(message);
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
  const std::optional<std::string> message = Sticky().Message();
  if (!message.has_value()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(*message, "; the CUDA context is unusable"));
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
