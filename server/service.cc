#include "server/service.h"

#include <grp.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <string>

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

namespace tandem::server {
namespace {

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

// 16 bytes from the kernel's random source.
std::string RandomToken() {
  std::string token(16, '\0');
  size_t filled = 0;
  while (filled < token.size()) {
    ssize_t got = ::getrandom(token.data() + filled, token.size() - filled, 0);
    if (got > 0) filled += static_cast<size_t>(got);
  }
  return token;
}

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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
  ASSIGN_OR_RETURN(auto devices, OpenDevices(options));
  for (auto& dev : devices) {
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
                                                            .probe_spacing_seconds = 0.25}));
    rt->device = std::move(dev);
    TLOG_INFO("device ready")
        .With("device", info.name)
        .With("description", info.description)
        .With("capacity_mib", info.capacity_bytes / kMiB)
        .With("reserve_mib", mem.reserve_bytes / kMiB)
        .With("policy", options.policy)
        .With("preemption", options.preemption);
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

void Service::ReplyError(const PendingReply& to, const absl::Status& status) {
  ++errors_;
  measurements_.OnError(status.code());
  v1::Response response;
  StatusToProto(status, response.mutable_status());
  TLOG_DEBUG("request failed").With("request", to.request_id).With("status", status.ToString());
  Reply(to, std::move(response));
}

Session* Service::FindSession(const std::string& peer) {
  auto it = session_by_peer_.find(peer);
  if (it == session_by_peer_.end()) return nullptr;
  auto s = sessions_.find(it->second);
  return s == sessions_.end() ? nullptr : s->second.get();
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

void Service::HandleMessage(const std::string& peer, const PeerIdentity& identity, const std::string& payload,
                            std::shared_ptr<const RequestFrames> frames) {
  ++requests_;
  PendingReply to{peer, 0};
  if (shutting_down_) {
    ReplyError(to, absl::UnavailableError("tandemd is shutting down"));
    return;
  }
  const uint64_t message_bytes = payload.size() + (frames != nullptr ? frames->total_bytes() : 0);
  if (message_bytes > options_.max_message_bytes) {
    // Answer under the request's own id so the client can match the error:
    // request_id is field 1, serialized first.
    to.request_id = LeadingRequestId(payload);
    ReplyError(to, absl::ResourceExhaustedError(absl::StrCat(
                       "message of ", message_bytes, " bytes exceeds the limit of ", options_.max_message_bytes,
                       " bytes (--max-message-bytes); send large feeds in smaller pieces")));
    return;
  }
  auto request = std::make_shared<v1::Request>();
  bool parsed;
  {
    LoopSection timed(loop_, "Message/parse");
    parsed = request->ParseFromString(payload);
  }
  if (!parsed) {
    ReplyError(to, absl::InvalidArgumentError(absl::StrCat(
                       "malformed request (", payload.size(),
                       " bytes): not a tandem.v1.Request in its first ZeroMQ frame; is the client speaking "
                       "protocol v1?")));
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

  Session* session = FindSession(peer);
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
    ReplyError(to, absl::FailedPreconditionError("no session: send hello first"));
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

void Service::OnHello(const PendingReply& to, const PeerIdentity& identity, const v1::HelloRequest& hello) {
  if (hello.protocol_version() != v1::PROTOCOL_VERSION_CURRENT) {
    ReplyError(to, absl::FailedPreconditionError(absl::StrCat(
                       "protocol version ", hello.protocol_version(), " is not supported; tandemd ", kDaemonVersion,
                       " speaks version ", static_cast<int>(v1::PROTOCOL_VERSION_CURRENT))));
    return;
  }
  if (identity.kind == PeerIdentity::Kind::kUnknown) {
    ReplyError(to, absl::PermissionDeniedError(
                       "tandemd cannot tell who this connection belongs to (no peer credentials); connect over "
                       "ipc or tcp"));
    return;
  }
  Session* session = FindSession(to.peer);
  if (session == nullptr) {
    auto s = std::make_unique<Session>();
    s->id = next_session_++;
    s->peer = to.peer;
    s->identity = identity;
    s->admin = IsAdministrator(identity, AccessOptionsNow(), identity.curve_admin);
    s->token = RandomToken();
    session_by_token_[s->token] = s->id;
    s->client_name = hello.client_name();
    s->client_pid = hello.client_pid();
    session = s.get();
    session_by_peer_[to.peer] = s->id;
    sessions_[s->id] = std::move(s);
    TLOG_INFO("session opened")
        .With("session", session->id)
        .With("client", session->client_name)
        .With("pid", session->client_pid)
        .With("peer", identity.ToString())
        .With("admin", session->admin ? "yes" : "no");
  }
  session->last_seen = Clock::now();
  v1::Response response;
  v1::HelloResponse* h = response.mutable_hello();
  h->set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
  h->set_session_id(session->id);
  h->set_daemon_version(kDaemonVersion);
  h->set_session_timeout_seconds(options_.session_timeout_seconds);
  h->set_max_message_bytes(options_.max_message_bytes);
  h->set_session_token(session->token);
  // The side socket takes descriptors of local clients only.
  if (identity.kind == PeerIdentity::Kind::kLocal) h->set_fd_socket(fd_socket_path_);
  for (const auto& name : DeviceNames()) h->add_devices(name);
  Reply(to, std::move(response));
}

void Service::EndSession(uint64_t session_id, const char* reason) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  Session& session = *it->second;
  TLOG_INFO("session ended")
      .With("session", session.id)
      .With("client", session.client_name)
      .With("jobs", session.jobs.size())
      .With("reason", reason);
  std::vector<uint64_t> jobs(session.jobs.begin(), session.jobs.end());
  for (uint64_t id : jobs) {
    auto j = jobs_.find(id);
    if (j == jobs_.end()) continue;
    CheckpointJob(*j->second, /*final=*/true);  // its client may resume it (state_dir)
    BeginCloseJob(*j->second, reason);
  }
  waiting_for_memory_.remove_if([&](const std::unique_ptr<Job>& job) { return job->session == session_id; });
  session_by_peer_.erase(session.peer);
  session_by_token_.erase(session.token);
  sessions_.erase(it);
}

void Service::HandlePeerGone(const std::string& peer) {
  auto it = session_by_peer_.find(peer);
  if (it != session_by_peer_.end()) EndSession(it->second, "client disconnected");
}

namespace {
// HandleConnectionClosed's re-probes, each after the one before.
constexpr std::chrono::milliseconds kReprobeAfter[] = {std::chrono::milliseconds(10), std::chrono::milliseconds(40),
                                                       std::chrono::milliseconds(200), std::chrono::milliseconds(750)};
}  // namespace

void Service::ProbeSessions() {
  // A probe is a response no request asked for (request_id 0, a heartbeat
  // body): clients drop it; to a routing id the router no longer knows, it
  // fails, and the transport calls HandlePeerGone.
  if (sessions_.empty()) return;
  v1::Response probe;
  probe.mutable_heartbeat();
  const std::string bytes = probe.SerializeAsString();
  for (const auto& [id, session] : sessions_) send_(session->peer, bytes);
}

void Service::HandleConnectionClosed() {
  ProbeSessions();
  const bool running = probe_round_ > 0;
  probe_round_ = 1;  // a running chain starts over
  if (!running) ArmReprobe();
}

void Service::ArmReprobe() {
  probe_timer_.expires_after(kReprobeAfter[probe_round_ - 1]);
  probe_timer_.async_wait([this](const boost::system::error_code& error) {
    if (error) return;
    ProbeSessions();
    if (++probe_round_ > static_cast<int>(std::size(kReprobeAfter))) {
      probe_round_ = 0;
      return;
    }
    ArmReprobe();
  });
}

void Service::ExpireIdleSessions() {
  std::vector<uint64_t> expired;
  for (const auto& [id, session] : sessions_) {
    bool busy = false;
    for (uint64_t job_id : session->jobs) {
      const Job& job = *jobs_.at(job_id);
      if (!job.queued.empty() || job.device_work > 0) busy = true;
    }
    if (!busy && SecondsSince(session->last_seen) > options_.session_timeout_seconds) expired.push_back(id);
  }
  for (uint64_t id : expired) EndSession(id, "session timed out (no message from the client)");
}

void Service::OnFdReceived(ReceivedFd received) {
  auto it = session_by_token_.find(received.message.token);
  Session* session = nullptr;
  if (it != session_by_token_.end()) {
    if (auto s = sessions_.find(it->second); s != sessions_.end()) session = s->second.get();
  }
  // Only the session's own user may hand it a descriptor (the token alone,
  // if it leaked, is not enough).
  if (session == nullptr || session->identity.kind != PeerIdentity::Kind::kLocal ||
      session->identity.uid != received.sender.uid) {
    TLOG_WARNING("descriptor from the fd socket refused: no session of the sender's with that token")
        .With("sender", received.sender.ToString());
    return;  // the descriptor closes
  }
  constexpr size_t kMaxReceivedFds = 16;
  if (session->received_fds.size() >= kMaxReceivedFds) {
    TLOG_WARNING("descriptor from the fd socket refused: too many unclaimed")
        .With("session", session->id)
        .With("unclaimed", session->received_fds.size());
    return;
  }
  session->received_fds[received.message.nonce] = std::move(received.fd);
}

absl::StatusOr<std::shared_ptr<UniqueFd>> Service::TakeReceivedFd(Session& session, uint64_t nonce) {
  auto it = session.received_fds.find(nonce);
  if (it == session.received_fds.end()) {
    return absl::NotFoundError(absl::StrCat(
        "no file descriptor was passed to this session under nonce ", nonce, " (pass a sealed memfd on ",
        fd_socket_path_.empty() ? "the daemon's fd socket, which this endpoint has none of" : fd_socket_path_,
        " with the session token from hello, then name its nonce)"));
  }
  std::shared_ptr<UniqueFd> fd = std::move(it->second);
  session.received_fds.erase(it);
  return fd;
}

void Service::OnMapSharedMemory(const PendingReply& to, Session& session, const v1::MapSharedMemoryRequest& map) {
  constexpr size_t kMaxRegionsPerSession = 16;
  if (session.regions.size() + session.regions_mapping >= kMaxRegionsPerSession) {
    ReplyError(to, absl::ResourceExhaustedError(
                       absl::StrCat("a session may map at most ", kMaxRegionsPerSession, " shared-memory regions")));
    return;
  }
  std::vector<device::Device*> devices;
  for (auto& d : devices_) devices.push_back(d->runtime().device.get());
  // Mapping and pinning a region (cudaHostRegister of a client's 64 MiB
  // ring takes tens of ms) happen on the preparation thread, as a
  // registration's graph does, so the loop serves others meanwhile.
  absl::StatusOr<std::shared_ptr<UniqueFd>> fd = TakeReceivedFd(session, map.fd_nonce());
  if (!fd.ok()) {
    ReplyError(to, fd.status());
    return;
  }
  const uint64_t id = next_region_++;
  const uint64_t session_id = session.id;
  // A region may hold a few full-size messages' worth of feeds.
  const uint64_t limit = 4 * options_.max_message_bytes;
  session.regions_mapping++;
  prep_->Post([this, to, id, session_id, fd = *std::move(fd), bytes = map.bytes(), devices, limit]() {
    TestPrepareDelay();
    absl::StatusOr<std::shared_ptr<SharedRegion>> mapped = SharedRegion::Map(id, *fd, bytes, devices, limit);
    {
      absl::MutexLock lock(&mapped_mu_);
      mapped_regions_.emplace(id, std::move(mapped));
    }
    loop_.Post("Service.OnRegionMapped", [this, to, id, session_id, bytes]() {
      absl::StatusOr<std::shared_ptr<SharedRegion>> region = absl::InternalError("shared memory not mapped");
      {
        absl::MutexLock lock(&mapped_mu_);
        auto taken = mapped_regions_.find(id);
        if (taken == mapped_regions_.end()) return;
        region = std::move(taken->second);
        mapped_regions_.erase(taken);
      }
      auto it = sessions_.find(session_id);
      if (it == sessions_.end()) {
        ReplyError(to, absl::CancelledError("the session ended while its shared memory was being mapped"));
        return;  // the region, if mapped, is unmapped with the last reference
      }
      Session& session = *it->second;
      session.regions_mapping--;
      if (!region.ok()) {
        ReplyError(to, region.status());
        return;
      }
      std::shared_ptr<SharedRegion> mapped = *std::move(region);
      TLOG_INFO("shared memory mapped")
          .With("session", session.id)
          .With("region", mapped->id())
          .With("bytes", bytes)
          .With("pinned", mapped->pinned() ? "yes" : "no");
      v1::Response response;
      response.mutable_map_shared_memory()->set_region_id(mapped->id());
      response.mutable_map_shared_memory()->set_pinned(mapped->pinned());
      session.regions[mapped->id()] = std::move(mapped);
      Reply(to, std::move(response));
    });
  });
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
  stats->set_pid(static_cast<uint32_t>(::getpid()));
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
  std::vector<uint64_t> ids;
  for (const auto& [id, s] : sessions_) ids.push_back(id);
  for (uint64_t id : ids) EndSession(id, "daemon shutting down");
  // Drain the executors, then wait for every lane's work. The completions
  // posted meanwhile run on the loop after this (they answer their
  // iterations and reads), then FinishShutdown frees what is left.
  for (auto& dev : devices_) dev->StopExecutors();
}

void Service::FinishShutdown() {
  persist_ = nullptr;  // every checkpoint taken is on disk now
  for (auto& [id, job] : jobs_) {
    job->device->memory->Release(id);
    if (job->snapshot_host != nullptr) job->device->device->FreeHost(job->snapshot_host);
  }
  jobs_.clear();
  for (auto& dev : devices_) dev->FreeHostBuffers();
}

}  // namespace tandem::server
