// tandemctl's subcommands over the client SDK: status, jobs, lanes,
// set-priority, set-policy, drain, kill, top.
//
// Human tables by default; with --json each command prints the daemon's
// reply (a tandem.v1 message) in protobuf's JSON mapping, with the field
// names of proto/tandem.proto and every field present.
//
// Thread-safety: one command at a time per process.
#ifndef TANDEM_CLIENT_TANDEMCTL_COMMANDS_H_
#define TANDEM_CLIENT_TANDEMCTL_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tandem::ctl {

struct CtlOptions {
  std::string endpoint;  // empty: $TANDEM_ENDPOINT, else the default socket
  bool json = false;
  double timeout_seconds = 5;  // to connect, and for each call
  // top
  int iterations = 0;  // refreshes before exiting; 0: until interrupted
  double interval_seconds = 2;
  // drain
  bool resume = false;
  bool wait = false;  // until no job is left
  // kill
  std::string reason;
};

// Checks a command line without connecting: a known command, the right
// arguments. INVALID_ARGUMENT says what is wrong.
absl::Status ValidateCommand(const std::string& command, const std::vector<std::string>& args,
                             const CtlOptions& options);

// Runs a valid command with its positional `args`; writes its output to
// `out`. Errors are the daemon's answers or the connection's failures.
absl::Status RunCommand(const std::string& command, const std::vector<std::string>& args, const CtlOptions& options,
                        std::ostream& out);

std::string CtlUsage();

}  // namespace tandem::ctl

#endif  // TANDEM_CLIENT_TANDEMCTL_COMMANDS_H_
