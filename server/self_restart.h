// tandemd starting itself again in place (after a device fault,
// server/service_faults.cc): the same program, arguments and process id, so
// a service manager sees no exit.
#ifndef TANDEM_SERVER_SELF_RESTART_H_
#define TANDEM_SERVER_SELF_RESTART_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tandem::server {

// Marks every descriptor above stderr close-on-exec (the devices' driver
// files go with the process image, and with them its GPU contexts; the old
// socket lock goes too), counts the restart in $TANDEM_FAULT_RESTARTS,
// hands `suspects` (Service::FaultSuspects) on in $TANDEM_FAULT_SUSPECTS,
// opens the GPUs' device files for the next process to hold until its
// devices are open (ReleaseHeldDeviceFiles), and execs /proc/self/exe with `argv`. Returns only on failure.
absl::Status ExecSelf(char** argv, const std::vector<std::string>& suspects);

// Closes the GPUs' device files that the process before the restart held
// open across the exec (ExecSelf keeps /dev/nvidiactl and /dev/nvidia<N>
// open, so that a driver without persistence mode keeps each GPU set up
// between the two processes instead of tearing it down and setting it up
// again in the next cuInit). Called once the devices are open; returns how
// many it closed.
int ReleaseHeldDeviceFiles();

// Opens every GPU device file under /dev (the driver's control file and one
// per GPU), inheritable, and names the descriptors in
// $TANDEM_HELD_DEVICE_FILES for ReleaseHeldDeviceFiles. On a machine
// without GPUs there are none. Opening a device file creates no CUDA
// context: a faulted context still goes with its process's own descriptors.
void HoldDeviceFiles();

// The environment a restarted process reads: $TANDEM_FAULT_RESTARTS and the
// suspects (for SelfRestarts and TakeFaultSuspects).
void SetRestartEnvironment(int restarts, const std::vector<std::string>& suspects);

// How many times this process restarted itself ($TANDEM_FAULT_RESTARTS).
int SelfRestarts();

// The suspects the process before the restart handed on, taken out of the
// environment (so that they do not reach a later restart).
std::vector<std::string> TakeFaultSuspects();

}  // namespace tandem::server

#endif  // TANDEM_SERVER_SELF_RESTART_H_
