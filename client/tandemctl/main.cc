// tandemctl: operates a running tandemd (status, jobs, lanes, priorities,
// policy, drain, kill, a live view). See CtlUsage() and docs/deploy.md.
//
// Exit status: 0 on success, 1 when the daemon or the connection failed
// (one line on stderr says why), 2 for a bad command line.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/tandemctl/commands.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

int UsageError(const std::string& message) {
  std::fprintf(stderr, "tandemctl: %s\n%s", message.c_str(), tandem::ctl::CtlUsage().c_str());
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  tandem::ctl::CtlOptions options;
  std::string command;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help" || arg == "help") {
      std::fputs(tandem::ctl::CtlUsage().c_str(), stdout);
      return 0;
    }
    if (!absl::StartsWith(arg, "--")) {
      if (command.empty()) {
        command = arg;
      } else {
        args.push_back(arg);
      }
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_value = true;
    }
    auto need_value = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= argc) return false;
      value = argv[++i];
      return true;
    };
    if (name == "json" || name == "resume" || name == "wait") {
      if (has_value) return UsageError(absl::StrCat("--", name, " takes no value"));
      if (name == "json") options.json = true;
      if (name == "resume") options.resume = true;
      if (name == "wait") options.wait = true;
    } else if (name == "endpoint") {
      if (!need_value()) return UsageError("--endpoint needs a value");
      options.endpoint = value;
    } else if (name == "reason") {
      if (!need_value()) return UsageError("--reason needs a value");
      options.reason = value;
    } else if (name == "timeout" || name == "interval") {
      double seconds;
      if (!need_value() || !absl::SimpleAtod(value, &seconds) || !(seconds > 0)) {
        return UsageError(absl::StrCat("--", name, " needs a number of seconds > 0"));
      }
      (name == "timeout" ? options.timeout_seconds : options.interval_seconds) = seconds;
    } else if (name == "iterations") {
      if (!need_value() || !absl::SimpleAtoi(value, &options.iterations) || options.iterations < 0) {
        return UsageError("--iterations needs a count >= 0 (0: until interrupted)");
      }
    } else {
      return UsageError(absl::StrCat("unknown option --", name));
    }
  }
  if (command.empty()) return UsageError("no command given");
  if (absl::Status valid = tandem::ctl::ValidateCommand(command, args, options); !valid.ok()) {
    return UsageError(std::string(valid.message()));
  }
  absl::Status status = tandem::ctl::RunCommand(command, args, options, std::cout);
  std::cout.flush();
  if (!status.ok()) {
    std::fprintf(stderr, "tandemctl: %s\n", std::string(status.message()).c_str());
    return kExitFailure;
  }
  return 0;
}
