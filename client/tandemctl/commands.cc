#include "client/tandemctl/commands.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include <google/protobuf/util/json_util.h>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/endpoint.h"
#include "base/socket_probe.h"
#include "base/status_macros.h"
#include "client/client.h"
#include "client/tandemctl/format.h"
#include "proto/loop_names.h"

namespace tandem::ctl {
namespace {

using client::Client;

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = true;
  print.always_print_primitive_fields = true;
  print.preserve_proto_field_names = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json, print);
  return json;
}

absl::StatusOr<std::unique_ptr<Client>> Connect(const CtlOptions& options, bool heartbeat) {
  std::string endpoint = options.endpoint;
  if (endpoint.empty()) {
    ASSIGN_OR_RETURN(endpoint, ClientDefaultEndpoint());
  }
  RETURN_IF_ERROR(CheckClientEndpoint(endpoint));
  client::ClientOptions co;
  co.endpoint = endpoint;
  co.name = "tandemctl";
  co.connect_timeout = absl::Seconds(options.timeout_seconds);
  // kill answers once the job's running iteration has finished.
  co.call_timeout = absl::Seconds(std::max(options.timeout_seconds, 600.0));
  co.heartbeat = heartbeat;
  return Client::Connect(co);
}

absl::Status Usage(absl::string_view message) { return absl::InvalidArgumentError(message); }

absl::StatusOr<uint64_t> ParseJobId(const std::string& text) {
  uint64_t id;
  if (!absl::SimpleAtoi(text, &id) || id == 0) {
    return Usage(absl::StrCat("'", text, "' is not a job id (tandemctl jobs lists them)"));
  }
  return id;
}

std::vector<const v1::JobInfo*> AllJobs(const v1::ListSessionsResponse& list,
                                        std::map<uint64_t, const v1::SessionInfo*>* session_of = nullptr) {
  std::vector<const v1::JobInfo*> jobs;
  for (const v1::SessionInfo& s : list.sessions()) {
    for (const v1::JobInfo& j : s.jobs()) {
      jobs.push_back(&j);
      if (session_of != nullptr) (*session_of)[j.job_id()] = &s;
    }
  }
  std::sort(jobs.begin(), jobs.end(),
            [](const v1::JobInfo* a, const v1::JobInfo* b) { return a->job_id() < b->job_id(); });
  return jobs;
}

std::string DaemonSummary(const v1::StatsResponse& stats, const std::string& endpoint) {
  const std::string worker = stats.worker_pid() != 0 && stats.worker_pid() != stats.pid()
                                 ? absl::StrCat(" (serving: ", stats.worker_pid(), ")")
                                 : "";
  return absl::StrCat("tandemd ", stats.daemon_version(), " at ", endpoint, "  pid ", stats.pid(), worker, "  up ",
                      HumanDuration(stats.uptime_seconds()), "\npolicy ", stats.policy(), "  sessions ",
                      stats.sessions(), "  jobs ", stats.jobs(), "  iterations ", stats.iterations(), "  requests ",
                      stats.requests(), "  errors ", stats.errors(), "  config reloads ", stats.config_reloads(),
                      stats.draining() ? "  DRAINING (new jobs refused)" : "", "\n");
}

std::string DeviceTable(const v1::StatsResponse& stats) {
  TextTable table({"DEVICE", ">CAPACITY", ">RESERVE", ">PERSISTENT", ">LANES", ">FREE", ">#LANES", ">ITERATIONS",
                   ">BUSY", ">ADMITTED", ">REFUSED"});
  for (const v1::DeviceStats& d : stats.devices()) {
    table.AddRow({d.name(), HumanBytes(d.capacity_bytes()), HumanBytes(d.reserve_bytes()),
                  HumanBytes(d.persistent_bytes()), HumanBytes(d.lane_bytes()), HumanBytes(d.free_bytes()),
                  absl::StrCat(d.lanes()), absl::StrCat(d.iterations()), HumanDuration(d.busy_seconds()),
                  absl::StrCat(d.jobs_admitted()), absl::StrCat(d.jobs_refused())});
  }
  return table.Render();
}

// "120/1000 (12%)" of a job that said how many iterations it runs, else the
// count.
std::string Progress(const v1::JobInfo& j) {
  if (j.expected_iterations() <= 0) return absl::StrCat(j.iterations_done());
  const double percent =
      100.0 * static_cast<double>(j.iterations_done()) / static_cast<double>(j.expected_iterations());
  return absl::StrFormat("%d/%d (%.0f%%)", j.iterations_done(), j.expected_iterations(), std::min(percent, 100.0));
}

// Iterations per second: top's own measurement over its interval where it
// has one, else the daemon's recent rate.
std::string Rate(const v1::JobInfo& j, const std::map<uint64_t, double>* rates) {
  if (rates != nullptr) {
    if (auto it = rates->find(j.job_id()); it != rates->end()) return absl::StrFormat("%.1f", it->second);
  }
  return j.iterations_per_second() > 0 ? absl::StrFormat("%.1f", j.iterations_per_second()) : "-";
}

// `rates`: iterations per second by job (top), or null.
std::string JobTable(const v1::ListSessionsResponse& list, const std::map<uint64_t, double>* rates) {
  std::map<uint64_t, const v1::SessionInfo*> session_of;
  std::vector<const v1::JobInfo*> jobs = AllJobs(list, &session_of);
  if (jobs.empty()) return "no jobs\n";
  std::vector<std::string> headers = {
      ">JOB", "NAME",       "CLIENT",      "STATE",      "DEVICE",    ">LANE",       ">PRIO",      ">ITERS", ">IT/S",
      ">ETA", ">ITER-TIME", ">QUEUE-WAIT", ">GPU-SHARE", ">SLOWDOWN", ">PERSISTENT", ">EPHEMERAL", ">QUEUED"};
  TextTable table(headers);
  for (const v1::JobInfo* j : jobs) {
    const v1::SessionInfo* s = session_of[j->job_id()];
    std::vector<std::string> row = {absl::StrCat(j->job_id()),
                                    j->name(),
                                    absl::StrCat(s->client_name(), "[", s->client_pid(), "]"),
                                    j->state(),
                                    j->device(),
                                    absl::StrCat(j->lane()),
                                    absl::StrCat(j->priority()),
                                    Progress(*j),
                                    Rate(*j, rates),
                                    j->eta_seconds() > 0 ? HumanDuration(j->eta_seconds()) : "-",
                                    HumanSeconds(j->mean_iteration_seconds()),
                                    HumanSeconds(j->mean_queue_seconds()),
                                    Percent(j->gpu_time_share()),
                                    Factor(j->slowdown()),
                                    HumanBytes(j->persistent_bytes()),
                                    HumanBytes(j->ephemeral_peak_bytes()),
                                    absl::StrCat(j->queued_iterations())};
    table.AddRow(std::move(row));
  }
  return table.Render();
}

absl::Status Status(Client& c, const CtlOptions& options, std::ostream& out) {
  ASSIGN_OR_RETURN(v1::StatsResponse stats, c.Stats());
  if (options.json) {
    out << ToJson(stats);
    return absl::OkStatus();
  }
  out << DaemonSummary(stats, c.endpoint()) << "\n" << DeviceTable(stats);
  return absl::OkStatus();
}

absl::Status Jobs(Client& c, const CtlOptions& options, std::ostream& out) {
  ASSIGN_OR_RETURN(v1::ListSessionsResponse list, c.ListSessions());
  if (options.json) {
    out << ToJson(list);
    return absl::OkStatus();
  }
  out << JobTable(list, nullptr);
  return absl::OkStatus();
}

// Every job's name by id, for labelling ids in the tables.
using JobNameMap = std::map<uint64_t, std::string>;
absl::StatusOr<JobNameMap> JobNames(Client& c) {
  ASSIGN_OR_RETURN(v1::ListSessionsResponse list, c.ListSessions());
  JobNameMap names;
  for (const v1::JobInfo* j : AllJobs(list)) names[j->job_id()] = j->name();
  return names;
}

// "7:alpha", or "7" for a job no longer listed.
std::string JobLabel(const JobNameMap& names, uint64_t id) {
  auto it = names.find(id);
  return it == names.end() ? absl::StrCat(id) : absl::StrCat(id, ":", it->second);
}

// A device's journal into `to` (the JSON views of lanes and events).
void CopyJournal(const v1::DeviceStats& from, v1::DeviceStats* to) {
  *to->mutable_events() = from.events();
  to->set_events_dropped(from.events_dropped());
}

absl::Status Lanes(Client& c, const CtlOptions& options, std::ostream& out) {
  ASSIGN_OR_RETURN(v1::StatsResponse stats, c.Stats());
  if (options.json) {
    v1::StatsResponse lanes;
    for (const v1::DeviceStats& d : stats.devices()) {
      v1::DeviceStats* l = lanes.add_devices();
      l->set_name(d.name());
      *l->mutable_lane_info() = d.lane_info();
      l->set_iterations(d.iterations());
      l->set_lane_moves(d.lane_moves());
      l->set_graph_launches(d.graph_launches());
      l->set_op_by_op_runs(d.op_by_op_runs());
      l->set_graph_captures(d.graph_captures());
      CopyJournal(d, l);
    }
    out << ToJson(lanes);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const JobNameMap names, JobNames(c));
  TextTable table({"DEVICE", ">LANE", ">ARENA", ">RETIRED", ">RUNNING", ">ITERATIONS", ">BUSY S", ">OCCUPIED S",
                   ">STREAM PRIO", "JOBS"});
  for (const v1::DeviceStats& d : stats.devices()) {
    for (const v1::LaneInfo& l : d.lane_info()) {
      std::vector<std::string> jobs;
      for (uint64_t id : l.jobs()) jobs.push_back(JobLabel(names, id));
      table.AddRow({d.name(), absl::StrCat(l.lane()), HumanBytes(l.arena_bytes()), HumanBytes(l.retired_bytes()),
                    absl::StrCat(l.running_iterations()), absl::StrCat(l.iterations()),
                    absl::StrFormat("%.2f", l.busy_seconds()), absl::StrFormat("%.2f", l.occupied_seconds()),
                    absl::StrCat(l.stream_level()), jobs.empty() ? "-" : absl::StrJoin(jobs, ", ")});
    }
  }
  out << (table.rows() == 0 ? "no lanes open (no jobs)\n" : table.Render());
  return absl::OkStatus();
}

// Each device's journal (server/device_journal.h): lane moves, iterations
// that captured a graph and iterations that waited 5 ms or more in the
// daemon, oldest first, with how long ago each was.
absl::Status Events(Client& c, const CtlOptions& options, std::ostream& out) {
  ASSIGN_OR_RETURN(v1::StatsResponse stats, c.Stats());
  if (options.json) {
    v1::StatsResponse events;
    for (const v1::DeviceStats& d : stats.devices()) {
      v1::DeviceStats* e = events.add_devices();
      e->set_name(d.name());
      CopyJournal(d, e);
    }
    out << ToJson(events);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const JobNameMap names, JobNames(c));
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  TextTable table({"DEVICE", ">AGO S", "KIND", "JOB", ">LANE", ">FROM", ">MS"});
  uint64_t dropped = 0;
  for (const v1::DeviceStats& d : stats.devices()) {
    dropped += d.events_dropped();
    for (const v1::DeviceEvent& e : d.events()) {
      table.AddRow({d.name(), absl::StrFormat("%.3f", now - e.unix_seconds()), e.kind(), JobLabel(names, e.job()),
                    absl::StrCat(e.lane()), e.kind() == "move" ? absl::StrCat(e.from_lane()) : "-",
                    e.kind() == "move" || e.kind() == "arena" ? "-" : absl::StrFormat("%.3f", e.seconds() * 1e3)});
    }
  }
  out << (table.rows() == 0 ? "no events (no lane moves, arena moves, captures or waits of 5 ms or more)\n"
                            : table.Render());
  if (dropped > 0) out << dropped << " older events dropped\n";
  return absl::OkStatus();
}

// The control loop's time per kind of work item, then per part of one
// (names "Handler/part", whose time lies inside their handler's).
absl::Status Loop(Client& c, const CtlOptions& options, std::ostream& out) {
  ASSIGN_OR_RETURN(v1::StatsResponse stats, c.Stats());
  if (options.json) {
    v1::StatsResponse loop;
    loop.set_uptime_seconds(stats.uptime_seconds());
    *loop.mutable_loop_handlers() = stats.loop_handlers();
    out << ToJson(loop);
    return absl::OkStatus();
  }
  std::vector<const v1::LoopHandlerStats*> items(stats.loop_handlers().pointer_begin(),
                                                 stats.loop_handlers().pointer_end());
  auto is_section = [](const v1::LoopHandlerStats* h) { return IsLoopSection(h->name()); };
  std::sort(items.begin(), items.end(), [&](const v1::LoopHandlerStats* a, const v1::LoopHandlerStats* b) {
    if (is_section(a) != is_section(b)) return !is_section(a);
    return a->total_seconds() > b->total_seconds();
  });
  double busy = 0;
  for (const v1::LoopHandlerStats* h : items) busy += is_section(h) ? 0 : h->total_seconds();
  const double up = stats.uptime_seconds();
  out << absl::StrFormat("control loop: busy %.3f s of %s up (%s); parts of a work item are named Handler/part\n", busy,
                         HumanDuration(up), Percent(up > 0 ? busy / up : 0));
  // WAIT: from being posted to starting, behind the items ahead of it
  // (parts of a work item have none: "-").
  TextTable table(
      {"WORK ITEM", ">COUNT", ">TOTAL S", ">MEAN US", ">MAX MS", ">OF UPTIME", ">MEAN WAIT US", ">MAX WAIT MS"});
  for (const v1::LoopHandlerStats* h : items) {
    const double per = h->count() > 0 ? 1.0 / h->count() : 0.0;
    const bool section = is_section(h);
    table.AddRow({h->name(), absl::StrCat(h->count()), absl::StrFormat("%.3f", h->total_seconds()),
                  absl::StrFormat("%.1f", 1e6 * h->total_seconds() * per),
                  absl::StrFormat("%.3f", 1e3 * h->max_seconds()), Percent(up > 0 ? h->total_seconds() / up : 0),
                  section ? "-" : absl::StrFormat("%.1f", 1e6 * h->wait_seconds() * per),
                  section ? "-" : absl::StrFormat("%.3f", 1e3 * h->max_wait_seconds())});
  }
  out << (table.rows() == 0 ? "no work items yet\n" : table.Render());
  return absl::OkStatus();
}

absl::Status SetPriority(Client& c, const std::vector<std::string>& args, const CtlOptions& options,
                         std::ostream& out) {
  ASSIGN_OR_RETURN(uint64_t job, ParseJobId(args[0]));
  int priority = 0;
  (void)absl::SimpleAtoi(args[1], &priority);  // checked by ValidateCommand
  v1::Request request;
  request.mutable_set_priority()->set_job_id(job);
  request.mutable_set_priority()->set_priority(priority);
  ASSIGN_OR_RETURN(v1::Response response, c.Call(std::move(request)));
  if (options.json) {
    out << ToJson(response.set_priority());
  } else {
    out << "job " << job << ": priority " << priority << " (was " << response.set_priority().previous() << ")\n";
  }
  return absl::OkStatus();
}

absl::Status SetPolicy(Client& c, const std::vector<std::string>& args, const CtlOptions& options, std::ostream& out) {
  v1::Request request;
  request.mutable_set_policy()->set_policy(args[0]);
  ASSIGN_OR_RETURN(v1::Response response, c.Call(std::move(request)));
  if (options.json) {
    out << ToJson(response.set_policy());
  } else {
    out << "policy " << args[0] << " (was " << response.set_policy().previous() << ")\n";
  }
  return absl::OkStatus();
}

absl::Status Drain(Client& c, const CtlOptions& options, std::ostream& out) {
  v1::Request request;
  request.mutable_drain()->set_resume(options.resume);
  ASSIGN_OR_RETURN(v1::Response response, c.Call(std::move(request)));
  uint64_t jobs = response.drain().jobs();
  if (options.wait && !options.resume) {
    while (jobs > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ASSIGN_OR_RETURN(v1::StatsResponse stats, c.Stats());
      jobs = stats.jobs();
    }
    response.mutable_drain()->set_jobs(0);
  }
  if (options.json) {
    out << ToJson(response.drain());
  } else if (options.resume) {
    out << "admitting new jobs again\n";
  } else {
    out << "draining: new jobs are refused; " << jobs << " job" << (jobs == 1 ? "" : "s") << " still registered\n";
  }
  return absl::OkStatus();
}

absl::Status Kill(Client& c, const std::vector<std::string>& args, const CtlOptions& options, std::ostream& out) {
  ASSIGN_OR_RETURN(uint64_t job, ParseJobId(args[0]));
  v1::Request request;
  request.mutable_kill_job()->set_job_id(job);
  request.mutable_kill_job()->set_reason(options.reason);
  ASSIGN_OR_RETURN(v1::Response response, c.Call(std::move(request)));
  if (options.json) {
    out << ToJson(response.kill_job());
  } else {
    out << "job " << job << " killed; its memory is free\n";
  }
  return absl::OkStatus();
}

absl::Status Top(Client& c, const CtlOptions& options, std::ostream& out) {
  std::map<uint64_t, uint64_t> last_done;
  auto last_time = std::chrono::steady_clock::now();
  for (int frame = 0; options.iterations == 0 || frame < options.iterations; ++frame) {
    if (frame > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(options.interval_seconds * 1000)));
    }
    ASSIGN_OR_RETURN(v1::StatsResponse stats, c.Stats());
    ASSIGN_OR_RETURN(v1::ListSessionsResponse list, c.ListSessions());
    auto now = std::chrono::steady_clock::now();
    double elapsed = std::chrono::duration<double>(now - last_time).count();
    std::map<uint64_t, double> rates;
    std::map<uint64_t, uint64_t> done;
    for (const v1::JobInfo* j : AllJobs(list)) {
      done[j->job_id()] = j->iterations_done();
      auto before = last_done.find(j->job_id());
      if (frame > 0 && before != last_done.end() && elapsed > 0 && j->iterations_done() >= before->second) {
        rates[j->job_id()] = static_cast<double>(j->iterations_done() - before->second) / elapsed;
      }
    }
    last_done = std::move(done);
    last_time = now;
    // Home the cursor and clear the screen, then draw the frame.
    out << "\x1b[H\x1b[2J" << DaemonSummary(stats, c.endpoint()) << "\n"
        << DeviceTable(stats) << "\n"
        << JobTable(list, &rates) << "\n(refresh every " << options.interval_seconds << "s; Ctrl-C to quit)\n"
        << std::flush;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateCommand(const std::string& command, const std::vector<std::string>& args,
                             const CtlOptions& options) {
  static const char* const kCommands[] = {"status",       "jobs",       "lanes", "loop", "events",
                                          "set-priority", "set-policy", "drain", "kill", "top"};
  if (std::find(std::begin(kCommands), std::end(kCommands), command) == std::end(kCommands)) {
    return Usage(absl::StrCat("unknown command '", command, "'"));
  }
  if (command == "set-priority") {
    if (args.size() != 2) return Usage("set-priority takes a job id and a priority: tandemctl set-priority JOB N");
    RETURN_IF_ERROR(ParseJobId(args[0]).status());
    int priority;
    if (!absl::SimpleAtoi(args[1], &priority)) return Usage(absl::StrCat("'", args[1], "' is not an integer priority"));
  } else if (command == "set-policy") {
    if (args.size() != 1) {
      return Usage("set-policy takes a policy name: tandemctl set-policy fifo|pack|fair|srtf|priority|srtf_pack");
    }
  } else if (command == "kill") {
    RETURN_IF_ERROR(ParseJobId(args[0]).status());
  } else if (!args.empty()) {
    return Usage(absl::StrCat(command, " takes no arguments"));
  }
  if (command == "top" && options.json) {
    return Usage("top is a live view; use status --json or jobs --json for scripts");
  }
  return absl::OkStatus();
}

absl::Status RunCommand(const std::string& command, const std::vector<std::string>& args, const CtlOptions& options,
                        std::ostream& out) {
  RETURN_IF_ERROR(ValidateCommand(command, args, options));
  ASSIGN_OR_RETURN(std::unique_ptr<Client> c, Connect(options, /*heartbeat=*/command == "top"));
  if (command == "status") return Status(*c, options, out);
  if (command == "jobs") return Jobs(*c, options, out);
  if (command == "lanes") return Lanes(*c, options, out);
  if (command == "loop") return Loop(*c, options, out);
  if (command == "events") return Events(*c, options, out);
  if (command == "set-priority") return SetPriority(*c, args, options, out);
  if (command == "set-policy") return SetPolicy(*c, args, options, out);
  if (command == "drain") return Drain(*c, options, out);
  if (command == "kill") return Kill(*c, args, options, out);
  return Top(*c, options, out);
}

std::string CtlUsage() {
  return "usage: tandemctl [options] COMMAND [ARGS]\n"
         "\n"
         "commands:\n"
         "  status                 the daemon, its devices and their memory (persistent / lanes / free)\n"
         "  jobs                   every job: state, priority, iterations (done/expected), rate, time\n"
         "                         left, iteration time, queue wait, GPU-time share, slowdown, memory\n"
         "  lanes                  every lane of every device: arena, running iterations, jobs\n"
         "  loop                   the control loop's time per kind of work item and per part of an\n"
         "                         iteration's end (its one thread is the daemon's own limit)\n"
         "  events                 each device's recent lane moves, graph captures and iterations that\n"
         "                         waited 5 ms or more in the daemon (the last 1,024)\n"
         "  set-priority JOB N     change a job's priority (the priority policy runs higher first)\n"
         "  set-policy NAME        switch every device to fifo, pack, fair, srtf or priority\n"
         "  drain [--resume] [--wait]\n"
         "                         refuse new jobs and let the running ones finish (--wait: until none is\n"
         "                         left); --resume admits again\n"
         "  kill JOB [--reason=T]  close a job of any client; its queued iterations are cancelled\n"
         "  top [--interval=S] [--iterations=N]\n"
         "                         a live view, refreshed in place\n"
         "\n"
         "options:\n"
         "  --endpoint=E           the daemon's endpoint (default: $TANDEM_ENDPOINT, else the local socket)\n"
         "  --json                 print the reply as JSON (protobuf's mapping of proto/tandem.proto)\n"
         "  --timeout=S            seconds to wait for the daemon to answer the handshake (default 5)\n";
}

}  // namespace tandem::ctl
