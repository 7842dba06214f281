// A device fault injected by a test: the CPU backend's stand-in for CUDA's
// sticky errors, so that the daemon's recovery from them runs in CI.
//
// The test-only op `test_fault` (tandemd --test_faults) calls
// InjectDeviceFault from its CPU kernel; from then on every CPU device of
// the process behaves as a CUDA context after a kernel fault: Fault()
// reports it, work enqueued later is skipped and every completion reports
// it. Process-wide, as a context fault ends the process's use of the GPU.
// Thread-safe.
#ifndef TANDEM_DEVICE_INJECTED_FAULT_H_
#define TANDEM_DEVICE_INJECTED_FAULT_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tandem::device {

// Records the fault (the first one wins).
void InjectDeviceFault(absl::string_view what);

// OK, or INTERNAL naming the injected fault.
absl::Status InjectedDeviceFault();

}  // namespace tandem::device

#endif  // TANDEM_DEVICE_INJECTED_FAULT_H_
