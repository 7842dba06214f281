// tandemd's configuration: the command line and the config file, one set of
// keys for both.
//
// Every setting has one key (ConfigKeys()), used as `--key=value` on the
// command line and as `key = value` in a config file:
//
//   # /etc/tandem/tandemd.conf
//   policy = fair          # comments run to the end of the line
//   max_job_memory_mib = 20480
//
// The effective settings are the defaults, then each --config file in order,
// then the command line's --key=value settings (flags win). Values are
// validated as they are read; an error names where the bad value came from
// ("/etc/tandem/tandemd.conf:7: unknown key 'polcy' (did you mean
// 'policy'?)", "--max_lanes=0: expected an integer in [1, 64]"). On SIGHUP
// the daemon loads again and applies the keys marked live.
//
// Thread-safety: stateless functions over values; the key table is constant.
#ifndef TANDEM_SERVER_CONFIG_H_
#define TANDEM_SERVER_CONFIG_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/options.h"

namespace tandem::server {

struct ConfigKey {
  const char* name;        // the flag and config-file key
  const char* value_help;  // what the value looks like ("fifo|pack|...")
  const char* help;
  // Applied by a reload (SIGHUP) while the daemon runs; the others need a
  // restart.
  bool live;
  // Parses `value` into `options`; INVALID_ARGUMENT says what was expected.
  absl::Status (*set)(absl::string_view value, DaemonOptions* options);
  // The value in `options`, in the form `set` reads.
  std::string (*get)(const DaemonOptions& options);
};

// Every key, in the order the documentation lists them.
const std::vector<ConfigKey>& ConfigKeys();
// Null for an unknown key.
const ConfigKey* FindConfigKey(absl::string_view name);
// The known key closest to `unknown` (a likely typo), or "" when none is close.
std::string SuggestConfigKey(absl::string_view unknown);

// tandemd's command line, parsed but not yet applied.
struct DaemonCommandLine {
  std::vector<std::string> config_files;                      // --config, in order
  std::vector<std::pair<std::string, std::string>> settings;  // --key=value, in order
  bool help = false;                                          // --help: print the keys and exit
  bool version = false;                                       // --version
  bool check_config = false;                                  // --check_config: validate, print the settings, exit
  bool list_ops = false;                                      // --list_ops: print the op registry, exit
};

// Accepts --key=value and --key value for every key, --config=PATH (may
// repeat), --help, --version and --check_config. INVALID_ARGUMENT for an
// unknown flag (with the nearest key), a missing value or a positional
// argument. Values are checked by LoadDaemonOptions.
absl::StatusOr<DaemonCommandLine> ParseDaemonCommandLine(int argc, const char* const* argv);

// Applies the `key = value` lines of a config file's text; `path` names it in
// errors ("PATH:LINE: ..."). A key set twice in one file is an error.
absl::Status ApplyConfigText(absl::string_view text, const std::string& path, DaemonOptions* options);
// Reads `path` and applies it; NOT_FOUND / PERMISSION_DENIED when it cannot be read.
absl::Status ApplyConfigFile(const std::string& path, DaemonOptions* options);

// Defaults, then the config files, then the command line's settings.
absl::StatusOr<DaemonOptions> LoadDaemonOptions(const DaemonCommandLine& command_line);

// Keys whose values differ between `before` and `after`, in ConfigKeys() order.
std::vector<std::string> ChangedConfigKeys(const DaemonOptions& before, const DaemonOptions& after);

// Every setting as `key = value` lines (what --check_config prints).
std::string FormatDaemonOptions(const DaemonOptions& options);
// The --help text: usage and every key with its default.
std::string DaemonUsage();

}  // namespace tandem::server

#endif  // TANDEM_SERVER_CONFIG_H_
