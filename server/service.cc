#include "server/service.h"

#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "codegen/job_kernels.h"
#include "device/conv_workspace.h"
#include "device/cpu_device.h"
#include "device/cuda_device.h"
#include "memory/byte_format.h"
#include "proto/status_convert.h"
#include "server/standby.h"

namespace tandem::server {
namespace {

// PACK's probe turn (sched::SchedulerOptions::probe_turn_fraction); for
// measuring it, TANDEM_PROBE_TURN_FRACTION sets another.
double ProbeTurnFraction() {
  const char* v = std::getenv("TANDEM_PROBE_TURN_FRACTION");
  double fraction = 0;
  if (v != nullptr && absl::SimpleAtod(v, &fraction) && fraction > 0) return fraction;
  return sched::SchedulerOptions{}.probe_turn_fraction;
}

// Generated kernels on or off for the process (the CUDA backend reads it),
// and the folder compiled ones are kept in (options.h: kernel_cache_dir).
void ConfigureCodegen(const DaemonOptions& options, bool have_gpu) {
  codegen::SetGeneratedKernelsEnabled(options.codegen);
  std::string folder = options.kernel_cache_dir;
  if (folder == "none") {
    folder.clear();
  } else if (folder == "auto") {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    if (!options.state_dir.empty()) {
      folder = options.state_dir + "/kernels";
    } else if (xdg != nullptr && xdg[0] == '/') {
      folder = std::string(xdg) + "/tandem/kernels";
    } else if (home != nullptr && home[0] == '/') {
      folder = std::string(home) + "/.cache/tandem/kernels";
    } else {
      folder.clear();
    }
  }
  codegen::DefaultKernelCache().set_folder(folder);
  if (have_gpu && options.codegen) {
    TLOG_INFO("generated kernels on")
        .With("nvrtc", codegen::NvrtcVersion())
        .With("kernel_cache_dir", folder.empty() ? "(memory only)" : folder);
  }
}

constexpr uint64_t kMiB = uint64_t{1} << 20;

// The request_id of a serialized Request whose first field is request_id
// (field 1, varint; protobuf writes fields in order); 0 when it is not.
uint64_t LeadingRequestId(const std::string& payload) {
  if (payload.empty() || static_cast<uint8_t>(payload[0]) != 0x08) return 0;
  uint64_t value = 0;
  for (size_t i = 1; i < payload.size() && i < 11; ++i) {
    const uint8_t byte = static_cast<uint8_t>(payload[i]);
    value |= static_cast<uint64_t>(byte & 0x7f) << (7 * (i - 1));
    if ((byte & 0x80) == 0) return value;
  }
  return 0;
}

absl::StatusOr<std::vector<std::unique_ptr<device::Device>>> OpenDevices(const DaemonOptions& options) {
  std::vector<std::unique_ptr<device::Device>> devices;
  std::string kind = options.device;
  if (kind == "auto") kind = device::CudaDeviceCount() > 0 ? "cuda" : "cpu";
  if (kind == "cpu") {
    ASSIGN_OR_RETURN(auto cpu, device::CreateCpuDevice({.capacity_bytes = options.cpu_memory_bytes}));
    devices.push_back(std::move(cpu));
  } else if (kind == "cuda") {
    if (device::CudaDeviceCount() == 0) {
      return absl::FailedPreconditionError(
          "--device=cuda but no GPU is usable (no driver, no GPU, or a build without CUDA); use "
          "--device=cpu or --device=auto");
    }
    ASSIGN_OR_RETURN(devices, device::CreateCudaDevices({.ordinals = options.gpus}));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--device=", options.device, ": expected auto, cpu or cuda"));
  }
  return devices;
}

}  // namespace

Service::Service(const DaemonOptions& options, EventLoop& loop, SendFn send)
    : options_(options), loop_(loop), send_(std::move(send)), probe_timer_(loop.context()) {}

Service::~Service() = default;

absl::StatusOr<std::unique_ptr<Service>> Service::Create(const DaemonOptions& options, EventLoop& loop, SendFn send) {
  std::unique_ptr<Service> service(new Service(options, loop, std::move(send)));
  if (!options.admin_group.empty()) {
    struct group* g = ::getgrnam(options.admin_group.c_str());
    if (g == nullptr) {
      return absl::NotFoundError(absl::StrCat("admin_group '", options.admin_group, "' does not exist"));
    }
    service->admin_gid_ = g->gr_gid;
  }
  const auto opening = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto devices, OpenDevices(options));
  const double open_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - opening).count();
  for (auto& dev : devices) {
    const auto preparing = std::chrono::steady_clock::now();
    auto rt = std::make_unique<DeviceRuntime>();
    rt->index = static_cast<int>(service->devices_.size());
    const device::DeviceInfo& info = dev->info();
    memory::DeviceMemoryOptions mem;
    mem.max_lanes = options.max_lanes;
    mem.max_job_bytes = options.max_job_bytes;
    mem.lane_slack_bytes = options.lane_slack_bytes;
    if (options.reserve_bytes > 0) {
      mem.reserve_bytes = options.reserve_bytes;
    } else if (info.backend == device::Backend::kCuda) {
      // What the context and other processes already hold, plus what the
      // libraries allocate per lane stream on first use: cuBLAS(Lt)'s 32 MiB
      // workspace, cuDNN's convolution workspace (device::ConvWorkspaceLimitBytes:
      // 2 GiB on an H200, which the algorithm search takes when it can; it
      // settles for less when it cannot) and 64 MiB for handles, and 512 MiB
      // of slack for cuDNN's own allocations. Measured on an H200: two
      // ResNet-50 lanes ran out with 64 MiB per lane.
      uint64_t in_use = info.capacity_bytes - std::min(info.capacity_bytes, dev->FreeBytes());
      const uint64_t per_lane = device::ConvWorkspaceLimitBytes(info.capacity_bytes) + 96 * kMiB;
      mem.reserve_bytes = in_use + static_cast<uint64_t>(options.max_lanes) * per_lane + 512 * kMiB;
    }
    ASSIGN_OR_RETURN(rt->memory, memory::DeviceMemory::Create(*dev, mem));
    // One iteration per lane runs; max_inflight_per_lane - 1 more may wait
    // behind it on the lane's stream (the scheduler's lookahead).
    // A job's first iteration runs op by op and captures its graph (cuDNN's
    // choices, NVRTC loads): not a measurement, and not a solo probe that
    // would hold every other lane up for it.
    ASSIGN_OR_RETURN(rt->scheduler, sched::CreateScheduler({.policy = options.policy,
                                                            .preemption = options.preemption,
                                                            .max_lanes = options.max_lanes,
                                                            .lookahead = options.max_inflight_per_lane - 1,
                                                            .first_iteration_captures = true,
                                                            .probe_spacing_seconds = 0.25,
                                                            .probe_turn_fraction = ProbeTurnFraction()}));
    rt->device = std::move(dev);
    TLOG_INFO("device ready")
        .With("device", info.name)
        .With("description", info.description)
        .With("capacity_mib", info.capacity_bytes / kMiB)
        .With("reserve_mib", mem.reserve_bytes / kMiB)
        .With("open_seconds", open_seconds)  // every device's; then this one's memory pools and scheduler
        .With("setup_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - preparing).count())
        .With("policy", options.policy)
        .With("preemption", options.preemption);
    service->has_cuda_ = service->has_cuda_ || info.backend == device::Backend::kCuda;
    if (options.codegen && info.backend == device::Backend::kCuda) {
      const codegen::CompileTarget target{info.compute_capability, info.driver_version};
      bool known = false;
      for (const codegen::CompileTarget& t : service->codegen_targets_) {
        known = known || (t.compute_capability == target.compute_capability);
      }
      if (!known) service->codegen_targets_.push_back(target);
    }
    DispatcherHost& host = *service;
    service->devices_.push_back(std::make_unique<DeviceDispatcher>(std::move(rt), host, loop));
  }
  ConfigureCodegen(options, !service->codegen_targets_.empty());
  return service;
}

std::vector<std::string> Service::DeviceNames() const {
  std::vector<std::string> names;
  for (const auto& d : devices_) names.push_back(d->runtime().device->info().name);
  return names;
}

Job* Service::JobById(uint64_t id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

void Service::ForEachJob(absl::FunctionRef<bool(Job&)> fn) {
  for (const auto& [id, job] : jobs_) {
    if (!fn(*job)) return;
  }
}

void Service::Reply(const PendingReply& to, v1::Response response) {
  response.set_request_id(to.request_id);
  send_(to.peer, response.SerializeAsString());
}

void Service::ReplyBuiltOffLoop(const PendingReply& to, std::function<v1::Response()> build,
                                std::function<void()> then) {
  messages_->Post([this, to, build = std::move(build), then = std::move(then)]() {
    v1::Response response = build();
    response.set_request_id(to.request_id);
    auto bytes = std::make_shared<std::string>(response.SerializeAsString());
    loop_.Post("Service.OnReplyBuilt", [this, to, bytes, then]() {
      send_(to.peer, std::move(*bytes));
      then();
    });
  });
}

void Service::ReplyError(const PendingReply& to, const absl::Status& given) {
  const std::optional<DeviceFault> fault = CurrentFault();
  const absl::Status status = fault.has_value() ? AfterFault(*fault, given) : given;
  ++errors_;
  measurements_.OnError(status.code());
  v1::Response response;
  StatusToProto(status, response.mutable_status());
  TLOG_DEBUG("request failed").With("request", to.request_id).With("status", status.ToString());
  Reply(to, std::move(response));
}

absl::StatusOr<Job*> Service::FindJob(const Session& session, uint64_t job_id) {
  // A job of another session is reported exactly like a missing one.
  if (!session.jobs.contains(job_id)) {
    return absl::NotFoundError(absl::StrCat("no job ", job_id, " in this session"));
  }
  Job* job = jobs_.at(job_id).get();
  if (job->state != JobState::kRunning) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is ", JobStateName(job->state)));
  }
  return job;
}

AccessOptions Service::AccessOptionsNow() const {
  return AccessOptions{.daemon_uid = ::geteuid(),
                       .admin_gid = admin_gid_,
                       .max_user_priority = options_.max_user_priority,
                       .max_user_weight = options_.max_user_weight,
                       .max_job_bytes = options_.max_job_bytes};
}

bool Service::RefusedUnparsed(const std::string& peer, const std::string& payload, const RequestFrames* frames) {
  PendingReply to{peer, 0};
  if (shutting_down_ || fault_.has_value()) {
    // Under the request's own id, so that a client connecting meanwhile (a
    // re-attach racing the stop after a fault) hears it at once and tries
    // again; nothing more runs on a faulted device.
    to.request_id = LeadingRequestId(payload);
    ReplyError(to, absl::UnavailableError("tandemd is shutting down"));
    return true;
  }
  const uint64_t message_bytes = payload.size() + (frames != nullptr ? frames->total_bytes() : 0);
  if (message_bytes > options_.max_message_bytes) {
    // Answer under the request's own id so the client can match the error:
    // request_id is field 1, serialized first.
    to.request_id = LeadingRequestId(payload);
    ReplyError(to, absl::ResourceExhaustedError(absl::StrCat(
                       "message of ", message_bytes, " bytes exceeds the limit of ", options_.max_message_bytes,
                       " bytes (--max-message-bytes); send large feeds in smaller pieces")));
    return true;
  }
  return false;
}

void Service::HandleMessage(const std::string& peer, const PeerIdentity& identity, std::string payload,
                            std::shared_ptr<const RequestFrames> frames) {
  ++requests_;
  if (RefusedUnparsed(peer, payload, frames.get())) return;
  auto queued = unparsed_.find(peer);
  if (payload.size() < kParseOnLoopBytes && queued == unparsed_.end()) {
    ParseOnLoop(peer, identity, payload, std::move(frames));
    return;
  }
  std::deque<Unparsed>& queue = unparsed_[peer];
  queue.push_back({identity, std::make_shared<const std::string>(std::move(payload)), std::move(frames)});
  if (queue.size() == 1) ParseOffLoop(peer);
}

void Service::ParseOnLoop(const std::string& peer, const PeerIdentity& identity, const std::string& payload,
                          std::shared_ptr<const RequestFrames> frames) {
  auto request = std::make_shared<v1::Request>();
  bool parsed;
  {
    LoopSection timed(loop_, "Message/parse");
    parsed = ParseRequest(payload, *request);
  }
  HandleParsed(peer, identity, payload.size(), std::move(frames), std::move(request), parsed);
}

bool Service::ParseRequest(const std::string& payload, v1::Request& request) {
  static const int delay_ms = [] {
    const char* v = std::getenv("TANDEM_TEST_PARSE_DELAY_MS");
    return v != nullptr ? std::atoi(v) : 0;
  }();
  // Wherever it is parsed: on the loop, a test's other sessions would wait.
  if (delay_ms > 0 && payload.size() >= (256 << 10)) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  return request.ParseFromString(payload);
}

void Service::ParseOffLoop(const std::string& peer) {
  std::shared_ptr<const std::string> payload = unparsed_.at(peer).front().payload;
  messages_->Post([this, peer, payload = std::move(payload)]() {
    auto request = std::make_shared<v1::Request>();
    const bool parsed = ParseRequest(*payload, *request);
    loop_.Post("Service.OnParsed", [this, peer, request, parsed]() { OnParsed(peer, request, parsed); });
  });
}

void Service::OnParsed(const std::string& peer, std::shared_ptr<v1::Request> request, bool parsed) {
  auto queued = unparsed_.find(peer);
  if (queued == unparsed_.end() || queued->second.empty()) return;  // answered by Shutdown meanwhile
  Unparsed done = std::move(queued->second.front());
  queued->second.pop_front();
  HandleParsed(peer, done.identity, done.payload->size(), std::move(done.frames), std::move(request), parsed);
  // Then the peer's messages that came meanwhile, in order: the small ones
  // here, up to the next large one.
  while (true) {
    queued = unparsed_.find(peer);
    if (queued == unparsed_.end()) return;
    if (queued->second.empty()) {
      unparsed_.erase(queued);
      return;
    }
    Unparsed& next = queued->second.front();
    if (next.payload->size() >= kParseOnLoopBytes) {
      ParseOffLoop(peer);
      return;
    }
    Unparsed small = std::move(next);
    queued->second.pop_front();
    ParseOnLoop(peer, small.identity, *small.payload, std::move(small.frames));
  }
}

void Service::HandleParsed(const std::string& peer, const PeerIdentity& identity, size_t payload_bytes,
                           std::shared_ptr<const RequestFrames> frames, std::shared_ptr<v1::Request> request,
                           bool parsed) {
  PendingReply to{peer, 0};
  if (!parsed) {
    ReplyError(to, absl::InvalidArgumentError(absl::StrCat(
                       "malformed request (", payload_bytes,
                       " bytes): not a tandem.v1.Request in its first ZeroMQ frame; is the client speaking "
                       "protocol v1?")));
    return;
  }
  if (shutting_down_ || fault_.has_value()) {  // began while it was parsed off the loop
    to.request_id = request->request_id();
    ReplyError(to, absl::UnavailableError("tandemd is shutting down"));
    return;
  }
  to.request_id = request->request_id();
  if (frames != nullptr && request->body_case() != v1::Request::kRegisterJob &&
      request->body_case() != v1::Request::kRunIteration) {
    ReplyError(to, absl::InvalidArgumentError(absl::StrCat(
                       "malformed request: ", frames->size(),
                       " frame(s) followed the request, but only a job registration (its persistent tensors' "
                       "bytes) or an iteration (its feeds' bytes) may carry frames")));
    return;
  }

  Session* session = sessions_.FindByPeer(peer);
  if (session != nullptr && !session->identity.SameClient(identity)) {
    // Another connection took this routing id (the session's own client
    // disconnected, or never had it): it gets nothing of the session.
    TLOG_WARNING("message refused: routing id of another client's session")
        .With("session", session->id)
        .With("owner", session->identity.ToString())
        .With("sender", identity.ToString());
    ReplyError(to, absl::PermissionDeniedError(
                       "this connection's ZeroMQ routing id belongs to another client's session; connect without "
                       "setting a routing id"));
    return;
  }
  if (request->body_case() == v1::Request::kHello) {
    OnHello(to, identity, request->hello());
    return;
  }
  if (session == nullptr) {
    // UNAVAILABLE, as from a daemon that went away: most often this
    // connection's session was in a tandemd that restarted since (after a
    // device fault, a crash, an upgrade), and its client re-attaches.
    ReplyError(to, absl::UnavailableError(
                       "no session on this connection (tandemd restarted, or the session ended): connect again "
                       "(hello first), then register the job again, with its resume token to continue it"));
    return;
  }
  session->last_seen = Clock::now();
  if (queued_reply_bytes_ && request->body_case() != v1::Request::kCloseJob &&
      request->body_case() != v1::Request::kCloseSession && request->body_case() != v1::Request::kHeartbeat) {
    // A client that sends without reading would have the daemon buffer its
    // replies without end.
    if (const uint64_t unread = queued_reply_bytes_(peer); unread > options_.max_unread_reply_bytes) {
      ReplyError(to, absl::ResourceExhaustedError(
                         absl::StrCat(memory::FormatBytes(unread),
                                      " of this session's replies are waiting for the client to read them, "
                                      "more than tandemd's max_unread_reply_mib (",
                                      memory::FormatBytes(options_.max_unread_reply_bytes),
                                      "); read the replies before sending more requests")));
      return;
    }
  }
  if (HandleAdminRequest(to, *session, *request)) return;
  switch (request->body_case()) {
    case v1::Request::kRegisterJob:
      OnRegisterJob(to, *session, request, std::move(frames));
      return;
    case v1::Request::kRunIteration:
      OnRunIteration(to, *session, request, std::move(frames));
      return;
    case v1::Request::kReadTensor:
      OnReadTensor(to, *session, request->read_tensor());
      return;
    case v1::Request::kCloseJob:
      OnCloseJob(to, *session, request->close_job().job_id());
      return;
    case v1::Request::kCloseSession: {
      v1::Response response;
      response.mutable_close_session();
      EndSession(session->id, "closed by client");
      Reply(to, std::move(response));
      return;
    }
    case v1::Request::kHeartbeat: {
      v1::Response response;
      response.mutable_heartbeat();
      Reply(to, std::move(response));
      return;
    }
    case v1::Request::kListSessions:
      OnListSessions(to, *session);
      return;
    case v1::Request::kStats:
      OnStats(to);
      return;
    case v1::Request::kMapSharedMemory:
      OnMapSharedMemory(to, *session, request->map_shared_memory());
      return;
    default:
      break;
  }
  ReplyError(to, absl::InvalidArgumentError("request has no body this daemon knows (protocol v1)"));
}

void Service::OnListSessions(const PendingReply& to, const Session& asking) {
  v1::Response response;
  auto* list = response.mutable_list_sessions();
  // Each device scheduler's stats, once (by device index).
  std::vector<std::optional<std::vector<sched::JobSchedStats>>> sched_stats(devices_.size());
  auto stats_of = [&](const Job& job) -> const std::vector<sched::JobSchedStats>& {
    static const std::vector<sched::JobSchedStats> kNone;
    if (job.device == nullptr) return kNone;
    std::optional<std::vector<sched::JobSchedStats>>& s = sched_stats[job.device->index];
    if (!s.has_value()) s = job.device->scheduler->Stats();
    return *s;
  };
  for (const auto& [id, session] : sessions_) {
    // Others' sessions (their names, pids and jobs) are an administrator's
    // to see.
    if (!asking.admin && id != asking.id && !asking.identity.SamePrincipal(session->identity)) continue;
    v1::SessionInfo* s = list->add_sessions();
    s->set_session_id(id);
    s->set_client_name(session->client_name);
    s->set_client_pid(session->client_pid);
    s->set_idle_seconds(SecondsSince(session->last_seen));
    for (uint64_t job_id : session->jobs) {
      const Job& job = *jobs_.at(job_id);
      v1::JobInfo* j = s->add_jobs();
      j->set_job_id(job.id);
      j->set_name(job.name);
      j->set_state(JobStateName(job.state));
      j->set_iterations_done(job.done);
      j->set_mean_iteration_seconds(job.done > 0 ? job.device_seconds / job.done : 0);
      j->set_persistent_bytes(job.persistent_bytes);
      j->set_ephemeral_peak_bytes(job.ArenaBytes());
      j->set_priority(job.hints.priority());
      j->set_device(job.device->device->info().name);
      j->set_lane(job.lane);
      FillJobMeasurements(job, stats_of(job), j);
    }
  }
  Reply(to, std::move(response));
}

void Service::OnStats(const PendingReply& to) {
  v1::Response response;
  auto* stats = response.mutable_stats();
  stats->set_daemon_version(kDaemonVersion);
  stats->set_uptime_seconds(SecondsSince(started_));
  stats->set_sessions(sessions_.size());
  stats->set_jobs(jobs_.size());
  stats->set_requests(requests_);
  stats->set_errors(errors_);
  stats->set_iterations(iterations_);
  stats->set_policy(options_.policy);
  for (const auto& dispatcher : devices_) {
    const DeviceRuntime* dev = &dispatcher->runtime();
    memory::DeviceMemoryStats m = dev->memory->Stats();
    v1::DeviceStats* d = stats->add_devices();
    d->set_name(dev->device->info().name);
    d->set_capacity_bytes(m.capacity_bytes);
    d->set_reserve_bytes(m.reserve_bytes);
    d->set_persistent_bytes(m.persistent_bytes);
    d->set_lane_bytes(m.lane_bytes);
    d->set_free_bytes(m.free_bytes);
    d->set_lanes(static_cast<uint32_t>(m.lanes.size()));
    d->set_iterations(dev->iterations);
    dispatcher->FillDeviceDetails(d);
  }
  stats->set_draining(draining_);
  stats->set_pid(static_cast<uint32_t>(DaemonPid()));
  stats->set_worker_pid(static_cast<uint32_t>(::getpid()));
  stats->set_config_reloads(config_reloads_);
  for (const auto& [name, h] : loop_.Stats()) {
    v1::LoopHandlerStats* l = stats->add_loop_handlers();
    l->set_name(name);
    l->set_count(h.count);
    l->set_total_seconds(h.total_seconds);
    l->set_max_seconds(h.max_seconds);
    l->set_wait_seconds(h.wait_seconds);
    l->set_max_wait_seconds(h.max_wait_seconds);
  }
  Reply(to, std::move(response));
}

void Service::Shutdown() {
  shutting_down_ = true;
  // The messages waiting for a parse off the loop, and those of their peers
  // behind them: answered now, as those that come from now on are (the loop
  // may stop before the parse ends).
  for (const auto& [peer, queue] : unparsed_) {
    for (const Unparsed& waiting : queue) {
      ReplyError({peer, LeadingRequestId(*waiting.payload)}, absl::UnavailableError("tandemd is shutting down"));
    }
  }
  unparsed_.clear();
  for (uint64_t id : sessions_.Ids()) EndSession(id, "daemon shutting down");
  // Drain the executors, then wait for every lane's work. The completions
  // posted meanwhile run on the loop after this (they answer their
  // iterations and reads), then FinishShutdown frees what is left.
  for (auto& dev : devices_) dev->StopExecutors();
  // The replies the devices' last reads posted for building: built, and
  // their sends queued on the loop, before it stops.
  std::promise<void> built;
  messages_->Post([&built]() { built.set_value(); });
  built.get_future().wait();
}

void Service::FinishShutdown() {
  AnswerFaultReports();
  persist_ = nullptr;  // every checkpoint taken is on disk now
  for (auto& [id, job] : jobs_) {
    job->device->memory->Release(id);
    if (job->snapshot_host != nullptr) job->device->device->FreeHost(job->snapshot_host);
  }
  jobs_.clear();
  for (auto& dev : devices_) dev->FreeHostBuffers();
}

}  // namespace tandem::server
