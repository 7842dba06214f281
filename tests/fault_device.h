// Faulting a test daemon's device (tandemd --test_faults=true): a job of its
// own runs the op test_fault, which on the CPU backend raises the stand-in
// for a sticky CUDA fault (device/injected_fault.h) and on a GPU faults it.
#ifndef TANDEM_TESTS_FAULT_DEVICE_H_
#define TANDEM_TESTS_FAULT_DEVICE_H_

#include <string>

#include "absl/status/status.h"

namespace tandem::testing {

// Faults the device of the daemon at `endpoint` (w <- test_fault(w, 1) + x);
// OK once the iteration failed as a fault makes it fail.
absl::Status FaultTheDevice(const std::string& endpoint);

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_FAULT_DEVICE_H_
