// The sessions: hello, the end of a session, death detection (probes after a
// connection closed, idle expiry), descriptors from the side socket, and the
// shared-memory regions a session maps. The table itself: SessionTable.
#include <chrono>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "server/service.h"

namespace tandem::server {

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
  Session* session = sessions_.FindByPeer(to.peer);
  if (session == nullptr) {
    session = &sessions_.Open(to.peer, identity);
    session->admin = IsAdministrator(identity, AccessOptionsNow(), identity.curve_admin);
    session->client_name = hello.client_name();
    session->client_pid = hello.client_pid();
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
  Session* found = sessions_.Find(session_id);
  if (found == nullptr) return;
  Session& session = *found;
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
  waiting_for_memory_.DropSession(session_id);
  sessions_.Close(session_id);
}

void Service::HandlePeerGone(const std::string& peer) {
  if (const Session* session = sessions_.FindByPeer(peer)) EndSession(session->id, "client disconnected");
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
  Session* session = sessions_.FindByToken(received.message.token);
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
      Session* found = sessions_.Find(session_id);
      if (found == nullptr) {
        ReplyError(to, absl::CancelledError("the session ended while its shared memory was being mapped"));
        return;  // the region, if mapped, is unmapped with the last reference
      }
      Session& session = *found;
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

}  // namespace tandem::server
