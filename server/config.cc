#include "server/config.h"

#include <arpa/inet.h>
#include <grp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "sched/scheduler.h"

namespace tandem::server {
namespace {

constexpr int kMiBShift = 20;

absl::Status Expected(absl::string_view what) { return absl::InvalidArgumentError(absl::StrCat("expected ", what)); }

absl::Status ParseUint(absl::string_view value, uint64_t min, uint64_t max, uint64_t* out) {
  uint64_t v;
  if (!absl::SimpleAtoi(value, &v) || v < min || v > max) {
    return Expected(absl::StrCat("an integer in [", min, ", ", max, "]"));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ParseInt(absl::string_view value, int min, int max, int* out) {
  int v;
  if (!absl::SimpleAtoi(value, &v) || v < min || v > max) {
    return Expected(absl::StrCat("an integer in [", min, ", ", max, "]"));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ParseBool(absl::string_view value, bool* out) {
  if (value != "true" && value != "false") return Expected("true or false");
  *out = value == "true";
  return absl::OkStatus();
}

std::string BoolText(bool value) { return value ? "true" : "false"; }

absl::Status ParseMiB(absl::string_view value, uint64_t min, uint64_t* bytes) {
  uint64_t mib = 0;
  RETURN_IF_ERROR(ParseUint(value, min, std::numeric_limits<uint64_t>::max() >> kMiBShift, &mib));
  *bytes = mib << kMiBShift;
  return absl::OkStatus();
}

absl::Status OneOf(absl::string_view value, const std::vector<std::string>& choices, std::string* out) {
  for (const std::string& c : choices) {
    if (value == c) {
      *out = c;
      return absl::OkStatus();
    }
  }
  return Expected(absl::StrCat("one of ", absl::StrJoin(choices, ", ")));
}

std::string FormatDouble(double v) { return absl::StrCat(v); }

const std::vector<ConfigKey>& BuildKeys() {
  static const auto* keys = new std::vector<ConfigKey>{
      {"endpoint", "ipc://PATH|tcp://HOST:PORT",
       "ZeroMQ endpoint to listen on; empty: ipc:///run/tandem/tandemd.sock, or a per-user runtime dir when "
       "/run/tandem is not writable",
       false,
       [](absl::string_view v, DaemonOptions* o) {
         if (!v.empty() && !absl::StartsWith(v, "ipc://") && !absl::StartsWith(v, "tcp://")) {
           return Expected("ipc://PATH or tcp://HOST:PORT (or nothing for the default socket)");
         }
         if (v == "ipc://" || v == "tcp://") return Expected("a path or address after the scheme");
         o->endpoint = std::string(v);
         return absl::OkStatus();
       },
       [](const DaemonOptions& o) { return o.endpoint; }},
      {"device", "auto|cpu|cuda", "devices to serve: auto (every GPU, else the CPU), cpu, or cuda", false,
       [](absl::string_view v, DaemonOptions* o) {
         return OneOf(v, {"auto", "cpu", "cuda"}, &o->device);
       },
       [](const DaemonOptions& o) { return o.device; }},
      {"gpus", "N[,N...]", "CUDA ordinals to use with device=cuda or auto; empty: all", false,
       [](absl::string_view v, DaemonOptions* o) {
         std::vector<int> gpus;
         for (absl::string_view part : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
           int ordinal;
           if (!absl::SimpleAtoi(part, &ordinal) || ordinal < 0 || ordinal > 1023) {
             return Expected(absl::StrCat("comma-separated GPU ordinals ('", part, "' is not one)"));
           }
           if (std::find(gpus.begin(), gpus.end(), ordinal) != gpus.end()) {
             return Expected(absl::StrCat("each GPU once (", ordinal, " is listed twice)"));
           }
           gpus.push_back(ordinal);
         }
         o->gpus = std::move(gpus);
         return absl::OkStatus();
       },
       [](const DaemonOptions& o) { return absl::StrJoin(o.gpus, ","); }},
      {"policy", "fifo|pack|fair|srtf|priority|srtf_pack", "scheduling policy of every device", true,
       [](absl::string_view v, DaemonOptions* o) { return OneOf(v, sched::PolicyNames(), &o->policy); },
       [](const DaemonOptions& o) { return o.policy; }},
      {"log_level", "debug|info|warning|error", "least severe log lines written", true,
       [](absl::string_view v, DaemonOptions* o) {
         return OneOf(v, {"debug", "info", "warning", "error"}, &o->log_level);
       },
       [](const DaemonOptions& o) { return o.log_level; }},
      {"session_timeout", "SECONDS", "an idle session that sends nothing for this long ends", true,
       [](absl::string_view v, DaemonOptions* o) {
         double seconds;
         if (!absl::SimpleAtod(v, &seconds) || !(seconds > 0) || seconds > 86400 * 365) {
           return Expected("seconds > 0");
         }
         o->session_timeout_seconds = seconds;
         return absl::OkStatus();
       },
       [](const DaemonOptions& o) { return FormatDouble(o.session_timeout_seconds); }},
      {"max_message_bytes", "BYTES", "largest request accepted", false,
       [](absl::string_view v, DaemonOptions* o) {
         return ParseUint(v, 1024, uint64_t{1} << 40, &o->max_message_bytes);
       },
       [](const DaemonOptions& o) { return absl::StrCat(o.max_message_bytes); }},
      {"cpu_memory_mib", "MIB", "memory the CPU device offers", false,
       [](absl::string_view v, DaemonOptions* o) { return ParseMiB(v, 1, &o->cpu_memory_bytes); },
       [](const DaemonOptions& o) { return absl::StrCat(o.cpu_memory_bytes >> kMiBShift); }},
      {"reserve_mib", "MIB", "device memory kept back per device (context, libraries); 0: measured at start", false,
       [](absl::string_view v, DaemonOptions* o) { return ParseMiB(v, 0, &o->reserve_bytes); },
       [](const DaemonOptions& o) { return absl::StrCat(o.reserve_bytes >> kMiBShift); }},
      {"max_lanes", "N", "most lanes (concurrent arenas and streams) per device", false,
       [](absl::string_view v, DaemonOptions* o) { return ParseInt(v, 1, 64, &o->max_lanes); },
       [](const DaemonOptions& o) { return absl::StrCat(o.max_lanes); }},
      {"lane_slack_mib", "MIB",
       "lane arena bytes per device kept beyond the jobs' needs, so that moves between lanes rarely relocate "
       "an arena (at most 1/16 of the device's memory); 0: none",
       false, [](absl::string_view v, DaemonOptions* o) { return ParseMiB(v, 0, &o->lane_slack_bytes); },
       [](const DaemonOptions& o) { return absl::StrCat(o.lane_slack_bytes >> kMiBShift); }},
      {"max_job_memory_mib", "MIB", "per-job memory quota (persistent + ephemeral); 0: none", true,
       [](absl::string_view v, DaemonOptions* o) { return ParseMiB(v, 0, &o->max_job_bytes); },
       [](const DaemonOptions& o) { return absl::StrCat(o.max_job_bytes >> kMiBShift); }},
      {"max_queued_per_job", "N", "iterations one job may have waiting", true,
       [](absl::string_view v, DaemonOptions* o) { return ParseInt(v, 1, 1 << 20, &o->max_queued_per_job); },
       [](const DaemonOptions& o) { return absl::StrCat(o.max_queued_per_job); }},
      {"max_jobs_per_session", "N", "jobs one client session may hold (running, waiting for memory, registering)", true,
       [](absl::string_view v, DaemonOptions* o) { return ParseInt(v, 1, 1 << 20, &o->max_jobs_per_session); },
       [](const DaemonOptions& o) { return absl::StrCat(o.max_jobs_per_session); }},
      {"max_unread_reply_mib", "MIB",
       "reply bytes held for one session whose client has not read them; past it its requests are refused", true,
       [](absl::string_view v, DaemonOptions* o) { return ParseMiB(v, 1, &o->max_unread_reply_bytes); },
       [](const DaemonOptions& o) { return absl::StrCat(o.max_unread_reply_bytes >> kMiBShift); }},
      {"max_inflight_per_lane", "N", "iterations enqueued ahead on one lane's stream", false,
       [](absl::string_view v, DaemonOptions* o) { return ParseInt(v, 1, 16, &o->max_inflight_per_lane); },
       [](const DaemonOptions& o) { return absl::StrCat(o.max_inflight_per_lane); }},
      {"executor_threads", "N",
       "threads per device enqueuing the lanes' work (lane k: thread k mod N); 0: one per lane", false,
       [](absl::string_view v, DaemonOptions* o) { return ParseInt(v, 0, 64, &o->executor_threads); },
       [](const DaemonOptions& o) { return absl::StrCat(o.executor_threads); }},
      {"socket_group", "GROUP", "group that owns an ipc socket (mode 0660); empty: the daemon's group", false,
       [](absl::string_view v, DaemonOptions* o) {
         if (!v.empty() && ::getgrnam(std::string(v).c_str()) == nullptr) {
           return Expected(absl::StrCat("a group of this host ('", v, "' does not exist)"));
         }
         o->socket_group = std::string(v);
         return absl::OkStatus();
       },
       [](const DaemonOptions& o) { return o.socket_group; }},
      {"admin_group", "GROUP",
       "members of this group administer tandemd (kill or reprioritize anyone's job, set the policy, drain, "
       "exceed the user ceilings); root and the daemon's own user always do; empty: nobody else",
       false,
       [](absl::string_view v, DaemonOptions* o) {
         if (!v.empty() && ::getgrnam(std::string(v).c_str()) == nullptr) {
           return Expected(absl::StrCat("a group of this host ('", v, "' does not exist)"));
         }
         o->admin_group = std::string(v);
         return absl::OkStatus();
       },
       [](const DaemonOptions& o) { return o.admin_group; }},
      {"max_user_priority", "N", "highest job priority a non-administrator may ask for (hints or set-priority)", true,
       [](absl::string_view v, DaemonOptions* o) { return ParseInt(v, -1000000, 1000000, &o->max_user_priority); },
       [](const DaemonOptions& o) { return absl::StrCat(o.max_user_priority); }},
      {"max_user_weight", "W", "largest FAIR weight a non-administrator may ask for", true,
       [](absl::string_view v, DaemonOptions* o) {
         double w;
         if (!absl::SimpleAtod(v, &w) || !(w > 0) || w > 1e6) return Expected("a number in (0, 1e6]");
         o->max_user_weight = w;
         return absl::OkStatus();
       },
       [](const DaemonOptions& o) { return FormatDouble(o.max_user_weight); }},
      {"metrics_port", "PORT", "TCP port of the Prometheus endpoint (GET /metrics); 0: off", false,
       [](absl::string_view v, DaemonOptions* o) { return ParseInt(v, 0, 65535, &o->metrics_port); },
       [](const DaemonOptions& o) { return absl::StrCat(o.metrics_port); }},
      {"metrics_address", "IP", "address the Prometheus endpoint binds (0.0.0.0: every interface)", false,
       [](absl::string_view v, DaemonOptions* o) {
         unsigned char buf[16];
         std::string s(v);
         if (::inet_pton(AF_INET, s.c_str(), buf) != 1 && ::inet_pton(AF_INET6, s.c_str(), buf) != 1) {
           return Expected("an IPv4 or IPv6 address");
         }
         o->metrics_address = s;
         return absl::OkStatus();
       },
       [](const DaemonOptions& o) { return o.metrics_address; }},
      {"restart_on_fault", "true|false",
       "after a device fault that leaves the GPU unusable to this process (a kernel's illegal address, an ECC "
       "error), answer every request and start again (exec), so that clients re-attach their jobs from their "
       "checkpoints; false: exit with status 75 and leave the restart to the service manager",
       false, [](absl::string_view v, DaemonOptions* o) { return ParseBool(v, &o->restart_on_fault); },
       [](const DaemonOptions& o) { return BoolText(o.restart_on_fault); }},
      {"standby", "true|false",
       "with restart_on_fault: the process started stays a keeper that never opens a device; it runs the daemon "
       "in a child, with a second child forked before any device is open (libraries loaded) waiting to take over "
       "after a device fault, which saves loading and initializing the libraries again (0.45 s on 2 CPU cores); "
       "false: the daemon restarts itself in place (exec)",
       false, [](absl::string_view v, DaemonOptions* o) { return ParseBool(v, &o->standby); },
       [](const DaemonOptions& o) { return BoolText(o.standby); }},
      {"test_faults", "true|false",
       "accept graphs with the op test_fault, which faults its device on demand (recovery tests only)", false,
       [](absl::string_view v, DaemonOptions* o) { return ParseBool(v, &o->test_faults); },
       [](const DaemonOptions& o) { return BoolText(o.test_faults); }},
      {"fuse_elementwise", "true|false", "run each chain of elementwise ops of a job's graph as one kernel", false,
       [](absl::string_view v, DaemonOptions* o) { return ParseBool(v, &o->fuse_elementwise); },
       [](const DaemonOptions& o) { return BoolText(o.fuse_elementwise); }},
      {"channels_last", "auto|true|false",
       "store a convolution network's activations channels-last (NHWC), as cuDNN's fastest kernels take them: "
       "auto on GPUs, for networks whose own channel moves cost the layout less than a tenth of their "
       "convolutions' traffic; true on every device and network (the CPU runs it through copies: for tests); "
       "false never (docs/codegen.md)",
       false,
       [](absl::string_view v, DaemonOptions* o) {
         return OneOf(v, {"auto", "true", "false"}, &o->channels_last);
       },
       [](const DaemonOptions& o) { return o.channels_last; }},
      {"preemption", "iteration|op",
       "how policy=priority preempts a lower-priority iteration when a higher-priority one arrives: iteration "
       "(never mid-iteration) or op (it pauses at the next segment boundary)",
       false,
       [](absl::string_view v, DaemonOptions* o) {
         return OneOf(v, {"iteration", "op"}, &o->preemption);
       },
       [](const DaemonOptions& o) { return o.preemption; }},
      {"stream_priorities", "true|false",
       "with policy=priority: give the lanes of higher-priority jobs higher GPU stream priorities, so their "
       "kernels' thread blocks are dispatched ahead of best-effort work running beside them",
       false, [](absl::string_view v, DaemonOptions* o) { return ParseBool(v, &o->stream_priorities); },
       [](const DaemonOptions& o) { return BoolText(o.stream_priorities); }},
      {"warm_lanes", "true|false",
       "after a job's first iteration, ready every other lane's stream for it between that lane's iterations "
       "(cuDNN plans), so that a later move of the job to another lane does not hold that lane up",
       false, [](absl::string_view v, DaemonOptions* o) { return ParseBool(v, &o->warm_lanes); },
       [](const DaemonOptions& o) { return BoolText(o.warm_lanes); }},
      {"preemption_segment_nodes", "N",
       "with preemption=op: nodes of a preemptible iteration enqueued per segment (smaller: quicker yields, more "
       "round trips)",
       false,
       [](absl::string_view v, DaemonOptions* o) { return ParseInt(v, 1, 1 << 20, &o->preemption_segment_nodes); },
       [](const DaemonOptions& o) { return absl::StrCat(o.preemption_segment_nodes); }},
      {"preemption_segments_in_flight", "N",
       "with preemption=op: segments of one iteration enqueued at once (1: a yield takes effect after the running "
       "segment, but the device idles for a round trip between segments; 2 hides that round trip)",
       false,
       [](absl::string_view v, DaemonOptions* o) { return ParseInt(v, 1, 4, &o->preemption_segments_in_flight); },
       [](const DaemonOptions& o) { return absl::StrCat(o.preemption_segments_in_flight); }},
      {"state_dir", "DIR",
       "where jobs that train are checkpointed (made mode 0700 if missing), so that a restarted daemon or client "
       "resumes them by name and token; empty: no checkpoints",
       false,
       [](absl::string_view v, DaemonOptions* o) {
         if (!v.empty() && v.front() != '/') return Expected("an absolute path");
         o->state_dir = std::string(v);
         return absl::OkStatus();
       },
       [](const DaemonOptions& o) { return o.state_dir; }},
      {"checkpoint_interval", "SECONDS",
       "with state_dir: the least time between two checkpoints of a job (also written on SIGTERM and when its "
       "client goes away); 0: after every iteration",
       true,
       [](absl::string_view v, DaemonOptions* o) {
         double seconds;
         if (!absl::SimpleAtod(v, &seconds) || !(seconds >= 0) || seconds > 86400 * 365) {
           return Expected("seconds >= 0");
         }
         o->checkpoint_interval_seconds = seconds;
         return absl::OkStatus();
       },
       [](const DaemonOptions& o) { return FormatDouble(o.checkpoint_interval_seconds); }},
      {"checkpoint_ttl", "SECONDS",
       "with state_dir: a checkpoint that nobody resumed within this long of its last write is deleted (checked "
       "at start and every ttl/4, at most hourly); 0: kept until its job is resumed and closed",
       true,
       [](absl::string_view v, DaemonOptions* o) {
         double seconds;
         if (!absl::SimpleAtod(v, &seconds) || !(seconds >= 0) || seconds > 86400.0 * 365 * 10) {
           return Expected("seconds >= 0");
         }
         o->checkpoint_ttl_seconds = seconds;
         return absl::OkStatus();
       },
       [](const DaemonOptions& o) { return FormatDouble(o.checkpoint_ttl_seconds); }},
      {"codegen", "true|false",
       "on a GPU, run each fused chain of a job's graph as a kernel generated and compiled for it at registration "
       "(false: the interpreting kernel)",
       false, [](absl::string_view v, DaemonOptions* o) { return ParseBool(v, &o->codegen); },
       [](const DaemonOptions& o) { return BoolText(o.codegen); }},
      {"kernel_cache_dir", "DIR|auto|none",
       "where generated kernels, once compiled, are kept for later jobs and restarts (auto: <state_dir>/kernels, "
       "else ~/.cache/tandem/kernels; none: in memory only)",
       false,
       [](absl::string_view v, DaemonOptions* o) {
         if (v != "auto" && v != "none" && (v.empty() || v.front() != '/')) {
           return Expected("an absolute path, auto or none");
         }
         o->kernel_cache_dir = std::string(v);
         return absl::OkStatus();
       },
       [](const DaemonOptions& o) { return o.kernel_cache_dir; }},
  };
  return *keys;
}

// Edit distance, for "did you mean".
size_t Distance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The part of a config line before its comment: '#' at the start or after
// whitespace.
absl::string_view StripComment(absl::string_view line) {
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '#' && (i == 0 || absl::ascii_isspace(static_cast<unsigned char>(line[i - 1])))) {
      return line.substr(0, i);
    }
  }
  return line;
}

}  // namespace

const std::vector<ConfigKey>& ConfigKeys() { return BuildKeys(); }

const ConfigKey* FindConfigKey(absl::string_view name) {
  for (const ConfigKey& key : ConfigKeys()) {
    if (name == key.name) return &key;
  }
  return nullptr;
}

std::string SuggestConfigKey(absl::string_view unknown) {
  std::string lower = absl::AsciiStrToLower(unknown);
  absl::StrReplaceAll({{"-", "_"}}, &lower);
  std::string best;
  size_t best_distance = std::max<size_t>(2, lower.size() / 3) + 1;
  for (const ConfigKey& key : ConfigKeys()) {
    size_t d = Distance(lower, key.name);
    if (d < best_distance) {
      best_distance = d;
      best = key.name;
    }
  }
  return best;
}

absl::StatusOr<DaemonCommandLine> ParseDaemonCommandLine(int argc, const char* const* argv) {
  DaemonCommandLine out;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "-h") arg = "--help";
    if (!absl::ConsumePrefix(&arg, "--")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "'; settings are given as --key=value (see --help)"));
    }
    absl::string_view name = arg;
    std::string value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = std::string(arg.substr(eq + 1));
      has_value = true;
    }
    if (name == "help" || name == "version" || name == "check_config" || name == "list_ops") {
      if (has_value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      if (name == "help") out.help = true;
      if (name == "version") out.version = true;
      if (name == "check_config") out.check_config = true;
      if (name == "list_ops") out.list_ops = true;
      continue;
    }
    if (name != "config" && FindConfigKey(name) == nullptr) {
      std::string suggestion = SuggestConfigKey(name);
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": unknown flag",
                       suggestion.empty() ? "" : absl::StrCat(" (did you mean --", suggestion, "?)"), "; see --help"));
    }
    if (!has_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    if (name == "config") {
      if (value.empty()) return absl::InvalidArgumentError("--config needs a file name");
      out.config_files.push_back(value);
    } else {
      out.settings.emplace_back(std::string(name), value);
    }
  }
  return out;
}

absl::Status ApplyConfigText(absl::string_view text, const std::string& path, DaemonOptions* options) {
  absl::flat_hash_map<std::string, int> first_line;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    absl::string_view content = absl::StripAsciiWhitespace(StripComment(line));
    if (content.empty()) continue;
    auto where = [&](absl::string_view message) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ", message));
    };
    size_t eq = content.find('=');
    if (eq == absl::string_view::npos) {
      return where(absl::StrCat("expected 'key = value', got '", content, "'"));
    }
    std::string key(absl::StripAsciiWhitespace(content.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(content.substr(eq + 1)));
    if (key.empty()) return where(absl::StrCat("expected 'key = value', got '", content, "'"));
    const ConfigKey* known = FindConfigKey(key);
    if (known == nullptr) {
      std::string suggestion = SuggestConfigKey(key);
      return where(absl::StrCat("unknown key '", key, "'",
                                suggestion.empty() ? "" : absl::StrCat(" (did you mean '", suggestion, "'?)")));
    }
    auto [it, inserted] = first_line.emplace(key, number);
    if (!inserted) return where(absl::StrCat("'", key, "' is already set on line ", it->second));
    if (absl::Status s = known->set(value, options); !s.ok()) {
      return where(absl::StrCat(key, " = ", value, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyConfigFile(const std::string& path, DaemonOptions* options) {
  std::ifstream in(path);
  if (!in) {
    int error = errno;
    std::string why = absl::StrCat("cannot read config file ", path, ": ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(why);
    if (error == EACCES) return absl::PermissionDeniedError(why);
    return absl::FailedPreconditionError(why);
  }
  std::stringstream text;
  text << in.rdbuf();
  return ApplyConfigText(text.str(), path, options);
}

absl::StatusOr<DaemonOptions> LoadDaemonOptions(const DaemonCommandLine& command_line) {
  DaemonOptions options;
  for (const std::string& path : command_line.config_files) RETURN_IF_ERROR(ApplyConfigFile(path, &options));
  for (const auto& [name, value] : command_line.settings) {
    const ConfigKey* key = FindConfigKey(name);
    if (key == nullptr) return absl::InvalidArgumentError(absl::StrCat("--", name, ": unknown flag"));
    if (absl::Status s = key->set(value, &options); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": ", s.message()));
    }
  }
  return options;
}

std::vector<std::string> ChangedConfigKeys(const DaemonOptions& before, const DaemonOptions& after) {
  std::vector<std::string> changed;
  for (const ConfigKey& key : ConfigKeys()) {
    if (key.get(before) != key.get(after)) changed.push_back(key.name);
  }
  return changed;
}

std::string FormatDaemonOptions(const DaemonOptions& options) {
  std::string out;
  for (const ConfigKey& key : ConfigKeys()) absl::StrAppend(&out, key.name, " = ", key.get(options), "\n");
  return out;
}

std::string DaemonUsage() {
  std::string out =
      "tandemd: shares GPUs among deep-learning jobs at iteration granularity.\n\n"
      "usage: tandemd [--config=FILE]... [--key=value]...\n\n"
      "Settings come from the defaults, then each --config file (key = value lines, # comments),\n"
      "then the command line. SIGHUP reloads the files; keys marked (live) apply at once,\n"
      "the others at the next start.\n\n"
      "  --config=FILE        a config file (may repeat; later files win)\n"
      "  --check_config       validate the settings, print them and exit\n"
      "  --list_ops           print every op a job may use (one per line: name, then its aliases) and exit\n"
      "  --version            print the version and exit\n\n";
  DaemonOptions defaults;
  for (const ConfigKey& key : ConfigKeys()) {
    std::string value = key.get(defaults);
    absl::StrAppend(&out, "  --", key.name, "=", key.value_help, key.live ? "  (live)" : "", "\n      ", key.help,
                    value.empty() ? "" : absl::StrCat(" [default: ", value, "]"), "\n");
  }
  return out;
}

}  // namespace tandem::server
