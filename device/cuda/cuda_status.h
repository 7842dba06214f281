// CUDA runtime errors as absl::Status.
//
// Every CUDA call of the project goes through CudaStatus (or the
// CUDA_RETURN_IF_ERROR macro), so an error names the call that failed and
// the runtime's own description. Codes: out of memory is RESOURCE_EXHAUSTED;
// no driver or no usable device is UNAVAILABLE; anything else (a bad launch,
// a kernel fault, which leaves the context unusable) is INTERNAL.
// Converting a non-sticky error also clears the calling thread's "last
// error", so that the next launch check does not report it again.
// Plain functions; thread-safe.
#ifndef TANDEM_DEVICE_CUDA_CUDA_STATUS_H_
#define TANDEM_DEVICE_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tandem::device {

// OK for cudaSuccess; otherwise "<call>: <description> (<error name>)".
absl::Status CudaStatus(cudaError_t error, absl::string_view call);

// True for errors after which the context is unusable (a kernel fault, a
// lost device): every later call on it fails too.
bool IsStickyCudaError(cudaError_t error);

// OK until a sticky error went through CudaStatus; then INTERNAL with the
// first one's message. Process-wide: after it no CUDA context of the
// process can be trusted (Device::Fault).
absl::Status StickyCudaFault();

}  // namespace tandem::device

// Evaluates a CUDA runtime call and returns its error as a Status, naming
// the call by its source text up to the first '('.
#define CUDA_RETURN_IF_ERROR(call)                                                                          \
  do {                                                                                                      \
    const cudaError_t tandem_cuda_error_ = (call);                                                          \
    if (tandem_cuda_error_ != cudaSuccess) {                                                                \
      return ::tandem::device::CudaStatus(tandem_cuda_error_, ::tandem::device::internal::CallName(#call)); \
    }                                                                                                       \
  } while (0)

namespace tandem::device::internal {
// "cudaMalloc(&p, n)" -> "cudaMalloc".
inline absl::string_view CallName(absl::string_view text) {
  const size_t paren = text.find('(');
  return paren == absl::string_view::npos ? text : text.substr(0, paren);
}
}  // namespace tandem::device::internal

#endif  // TANDEM_DEVICE_CUDA_CUDA_STATUS_H_
