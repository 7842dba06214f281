// A standby process for the restart after a device fault.
//
// A sticky device fault leaves the process's CUDA context unusable, and
// only a new process gets a new one. Exec'ing tandemd again in place costs
// about half a second before main (loading the CUDA libraries and running
// their static initializers) on top of the device's own start. With
// `standby = true` the process that was started (the keeper: its pid is the
// one the service manager, a shell or a test watches) never opens a device:
// it forks the daemon proper (the worker), and a spare, a second fork made
// before any device is open, with every library loaded and initialized,
// waiting. When the worker stops after a device fault it hands the fault's
// suspects to the keeper and exits; the keeper reaps it (its context is gone
// with it), wakes the spare, which becomes the worker (opens the devices,
// binds the sockets, resumes the jobs), and forks a new spare.
//
// The keeper forwards SIGTERM, SIGINT and SIGHUP to the worker and exits
// with the worker's status (or dies of its signal) when the worker ends for
// any other reason. Children die with the keeper (PR_SET_PDEATHSIG).
#ifndef TANDEM_SERVER_STANDBY_H_
#define TANDEM_SERVER_STANDBY_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace tandem::server {

// In the process that was started: becomes the keeper and returns only in a
// worker: the first one at once, a spare once it takes over (with
// SelfRestarts() and TakeFaultSuspects() set as after an exec). The keeper
// itself never returns: it exits with the worker's status.
void RunUnderKeeper();

// True in a worker that RunUnderKeeper started.
bool UnderKeeper();

// In a worker, once its handlers for SIGTERM, SIGINT and SIGHUP are
// installed: lets those signals in (a worker starts with them blocked, so
// that one its keeper forwards during the start waits for the handler).
void AcceptSignals();

// The daemon's pid as the world knows it: the keeper's under a keeper (the
// process that was started, which a service manager watches and signals),
// else this process's.
pid_t DaemonPid();

// In a worker under a keeper, after a device fault: tells the keeper to wake
// the spare when this process has exited, handing it `suspects`
// (Service::FaultSuspects). The caller then exits with status 75.
void HandOverToSpare(const std::vector<std::string>& suspects);

}  // namespace tandem::server

#endif  // TANDEM_SERVER_STANDBY_H_
