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
// and execs /proc/self/exe with `argv`. Returns only on failure.
absl::Status ExecSelf(char** argv, const std::vector<std::string>& suspects);

// How many times this process restarted itself ($TANDEM_FAULT_RESTARTS).
int SelfRestarts();

// The suspects the process before the restart handed on, taken out of the
// environment (so that they do not reach a later restart).
std::vector<std::string> TakeFaultSuspects();

}  // namespace tandem::server

#endif  // TANDEM_SERVER_SELF_RESTART_H_
