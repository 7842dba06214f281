// Fuzzing of tandemd's configuration: any text as a config file, and the
// same bytes split at newlines as a command line. A config that does not
// parse is an error, never a crash.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "server/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tandem::server::DaemonOptions options;
  (void)tandem::server::ApplyConfigText(text, "fuzz.conf", &options);
  (void)tandem::server::FormatDaemonOptions(options);
  std::vector<std::string> args = {"tandemd"};
  for (absl::string_view line : absl::StrSplit(text, '\n')) args.emplace_back(line);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  auto parsed = tandem::server::ParseDaemonCommandLine(static_cast<int>(argv.size()), argv.data());
  if (parsed.ok()) {
    parsed->config_files.clear();  // no files read
    (void)tandem::server::LoadDaemonOptions(*parsed);
  }
  return 0;
}
