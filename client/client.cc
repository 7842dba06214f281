#include "client/client.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/endpoint.h"
#include "base/socket_probe.h"
#include "base/status_macros.h"
#include "client/parallel_copy.h"
#include "client/sealed_memfd.h"
#include "proto/status_convert.h"

namespace tandem::client {
namespace {

using SteadyClock = std::chrono::steady_clock;

// A blocking send of one frame that a signal handled by the process (a
// profiler's timer, Python's SIGINT handler) interrupts fails with EINTR
// and queues nothing: send it again. Other errors propagate.
template <typename Frame>
void SendFrame(zmq::socket_t& socket, Frame&& frame, zmq::send_flags flags) {
  while (true) {
    try {
      socket.send(frame, flags);
      return;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

absl::Status Unexpected(const v1::Response& response, const char* want) {
  return absl::InternalError(absl::StrCat("tandemd answered with the wrong body (wanted ", want, ", got case ",
                                          static_cast<int>(response.body_case()), ")"));
}

}  // namespace

Client::Client(const ClientOptions& options, std::string endpoint)
    : options_(options), endpoint_(std::move(endpoint)), context_(1), socket_(context_, zmq::socket_type::dealer) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::sndhwm, 0);
  socket_.set(zmq::sockopt::rcvhwm, 0);
  last_heard_ = SteadyClock::now();
  if (!IpcPath(endpoint_).empty()) {
    const std::string address = absl::StrCat("inproc://tandem-client-monitor-", reinterpret_cast<uintptr_t>(this));
    if (zmq_socket_monitor(socket_.handle(), address.c_str(), ZMQ_EVENT_DISCONNECTED) == 0) {
      monitor_ = zmq::socket_t(context_, zmq::socket_type::pair);
      monitor_.set(zmq::sockopt::linger, 0);
      monitor_.connect(address);
    }
  }
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  std::string endpoint = options.endpoint;
  if (endpoint.empty()) {
    ASSIGN_OR_RETURN(endpoint, ClientDefaultEndpoint());
  }
  // A missing socket, or one a daemon left when it died, fails here at once
  // rather than at the handshake's deadline.
  RETURN_IF_ERROR(CheckClientEndpoint(endpoint));
  std::unique_ptr<Client> client(new Client(options, endpoint));
  try {
    client->socket_.connect(endpoint);
  } catch (const zmq::error_t& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot connect to ", endpoint, ": ", e.what()));
  }
  v1::Request request;
  v1::HelloRequest* hello = request.mutable_hello();
  hello->set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
  hello->set_client_name(options.name);
  hello->set_client_pid(static_cast<uint32_t>(::getpid()));
  auto id = client->Send(std::move(request));
  if (!id.ok()) return id.status();
  // The handshake has its own, short deadline. A daemon that was dying
  // when the socket was probed (a SIGKILLed process still holds its
  // listener until it is scheduled to exit) is found gone by probing again.
  auto deadline = SteadyClock::now() + absl::ToChronoMilliseconds(options.connect_timeout);
  auto next_probe = SteadyClock::now() + std::chrono::milliseconds(250);
  {
    std::unique_lock<std::mutex> lock(client->mu_);
    while (!client->arrived_.contains(*id)) {
      if (SteadyClock::now() > deadline) {
        return absl::UnavailableError(absl::StrCat("no answer from tandemd at ", endpoint, " within ",
                                                   absl::FormatDuration(options.connect_timeout), "; is it running?"));
      }
      if (SteadyClock::now() > next_probe) {
        RETURN_IF_ERROR(CheckClientEndpoint(endpoint));
        next_probe = SteadyClock::now() + std::chrono::milliseconds(250);
      }
      client->ReceiveLocked(std::chrono::milliseconds(20));
    }
  }
  auto response = client->Wait(*id);
  if (!response.ok()) return response.status();
  if (!response->has_hello()) return Unexpected(*response, "hello");
  client->hello_ = response->hello();
  if (options.heartbeat) client->heartbeat_ = std::thread([raw = client.get()] { raw->HeartbeatLoop(); });
  return client;
}

absl::Status Client::EnsureSharedMemoryFor(uint64_t iteration_bytes) {
  // Room for three iterations' large feeds: one being written while two are
  // in flight.
  constexpr uint64_t kIterations = 3;
  constexpr uint64_t kRound = uint64_t{2} << 20;
  std::lock_guard<std::mutex> setup(shm_setup_mu_);
  uint64_t current = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shm_tried_ && (!shm_status_.ok() || shm_regions_.empty())) return shm_status_;
    if (!shm_regions_.empty()) current = shm_regions_.back().bytes;
  }
  const uint64_t want = iteration_bytes > UINT64_MAX / kIterations ? UINT64_MAX : kIterations * iteration_bytes;
  if (current > 0 && (current >= want || shm_mapped_ >= kMaxSharedMemoryRegions)) return absl::OkStatus();
  uint64_t bytes = std::max({options_.shared_memory_bytes, want, current > UINT64_MAX / 2 ? current : 2 * current});
  bytes = bytes > UINT64_MAX - kRound ? bytes : (bytes + kRound - 1) / kRound * kRound;
  absl::Status status = SetUpSharedMemory(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (!shm_tried_) {
    shm_tried_ = true;
    shm_status_ = status;
  }
  // A failed growth keeps the region there is (the feeds that do not fit
  // travel inline); the first failure turns shared memory off.
  return status;
}

absl::StatusOr<uint64_t> Client::PassDescriptor(const SealedMemfd& object) {
  if (hello_.fd_socket().empty()) {
    return absl::UnavailableError(
        absl::StrCat("tandemd at ", endpoint_, " takes no shared memory from this client (not a local ipc client)"));
  }
  const uint64_t nonce = next_nonce_.fetch_add(1);
  RETURN_IF_ERROR(object.PassTo(hello_.fd_socket(), hello_.session_token(), nonce));
  return nonce;
}

absl::Status Client::SetUpSharedMemory(uint64_t bytes) {
  if (options_.shared_memory_bytes == 0) return absl::UnavailableError("shared memory is off (shared_memory_bytes 0)");
  ASSIGN_OR_RETURN(SealedMemfd object, SealedMemfd::Create(bytes));
  ASSIGN_OR_RETURN(uint64_t nonce, PassDescriptor(object));
  v1::Request request;
  request.mutable_map_shared_memory()->set_fd_nonce(nonce);
  request.mutable_map_shared_memory()->set_bytes(object.bytes());
  auto response = Call(std::move(request));
  if (!response.ok()) return response.status();
  std::lock_guard<std::mutex> lock(mu_);
  ShmRegion region;
  region.id = response->map_shared_memory().region_id();
  region.bytes = object.bytes();
  region.base = object.ReleaseMapping();
  region.ring = std::make_unique<ShmRing>(region.bytes);
  shm_pinned_ = response->map_shared_memory().pinned();
  shm_regions_.push_back(std::move(region));
  ++shm_mapped_;
  return absl::OkStatus();
}

void Client::ReleaseSharedLocked(uint64_t ticket) {
  for (ShmRegion& region : shm_regions_) region.ring->Release(ticket);
  // Outgrown regions unmap here once drained; the daemon keeps its mapping
  // until the session ends.
  for (size_t k = 0; k + 1 < shm_regions_.size();) {
    if (shm_regions_[k].ring->in_use() == 0) {
      ::munmap(shm_regions_[k].base, shm_regions_[k].bytes);
      shm_regions_.erase(shm_regions_.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      ++k;
    }
  }
}

Client::~Client() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  bool gone = false;  // the daemon closed the connection: no session to close
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (monitor_) DrainMonitorLocked();
    gone = peer_closed_;
  }
  if (hello_.session_id() != 0 && !gone) {
    // Best effort: the daemon also ends sessions that go quiet.
    v1::Request request;
    request.mutable_close_session();
    auto id = Send(std::move(request));
    if (id.ok()) {
      std::unique_lock<std::mutex> lock(mu_);
      auto deadline = SteadyClock::now() + std::chrono::milliseconds(500);
      while (!arrived_.contains(*id) && SteadyClock::now() < deadline) ReceiveLocked(std::chrono::milliseconds(20));
    }
  }
  for (ShmRegion& region : shm_regions_) ::munmap(region.base, region.bytes);
}

void Client::HeartbeatLoop() {
  std::unique_lock<std::mutex> stop_lock(stop_mu_);
  while (!stop_cv_.wait_for(stop_lock, HeartbeatPeriod() / 2, [this] { return stopping_; })) {
    std::lock_guard<std::mutex> lock(mu_);
    ReceiveLocked(std::chrono::milliseconds(0));
  }
}

std::chrono::milliseconds Client::HeartbeatPeriod() const {
  double timeout = hello_.session_timeout_seconds() > 0 ? hello_.session_timeout_seconds() : 30;
  return std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000 / 4));
}

void Client::MaybeHeartbeatLocked() {
  if (!options_.heartbeat || hello_.session_id() == 0) return;
  auto now = SteadyClock::now();
  if (now - last_heartbeat_ < HeartbeatPeriod()) return;
  last_heartbeat_ = now;
  v1::Request request;
  request.mutable_heartbeat();
  uint64_t id = next_id_++;
  request.set_request_id(id);
  std::string bytes = request.SerializeAsString();
  try {
    if (socket_.send(zmq::buffer(bytes), zmq::send_flags::dontwait)) discard_.insert(id);
  } catch (const zmq::error_t&) {
  }
}

void Client::ReceiveLocked(std::chrono::milliseconds timeout) {
  MaybeHeartbeatLocked();
  zmq::pollitem_t items[2] = {{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0},
                              {static_cast<void*>(monitor_), 0, ZMQ_POLLIN, 0}};
  try {
    zmq::poll(items, monitor_ ? 2 : 1, timeout);
    if (monitor_) DrainMonitorLocked();
  } catch (const zmq::error_t& e) {
    // A signal handled by the process (Python's SIGINT handler, a
    // profiler's timer) interrupts the wait; the caller's loop waits again.
    if (e.num() != EINTR) throw;
    return;
  }
  while (true) {
    zmq::message_t msg;
    try {
      if (!socket_.recv(msg, zmq::recv_flags::dontwait)) break;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
      break;
    }
    last_heard_ = SteadyClock::now();
    v1::Response response;
    if (!response.ParseFromArray(msg.data(), static_cast<int>(msg.size()))) continue;
    // The daemon's liveness probe (server/service.h): request_id 0 and a
    // heartbeat body, no answer to anything. (An error with request_id 0
    // answers a request too malformed to carry its id: CallRaw waits for it.)
    const bool probe = response.request_id() == 0 && response.has_heartbeat() && response.status().code() == 0;
    if (probe || discard_.erase(response.request_id()) > 0) continue;
    arrived_[response.request_id()] = std::move(response);
  }
}

void Client::DrainMonitorLocked() {
  while (true) {
    // An event is two frames: 6 bytes (uint16 event, uint32 value), then the
    // endpoint.
    zmq::message_t event;
    if (!monitor_.recv(event, zmq::recv_flags::dontwait)) return;
    zmq::message_t address;
    if (event.more()) (void)monitor_.recv(address, zmq::recv_flags::dontwait);
    if (event.size() < sizeof(uint16_t)) continue;
    uint16_t id = 0;
    std::memcpy(&id, event.data(), sizeof(id));
    if (id == ZMQ_EVENT_DISCONNECTED && hello_.session_id() != 0) peer_closed_ = true;
  }
}

absl::Status Client::CheckSize(size_t bytes) const {
  const uint64_t limit = hello_.max_message_bytes();
  if (limit == 0 || bytes <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("the request is ", bytes, " bytes; tandemd at ", endpoint_, " accepts at most ", limit,
                   " bytes per message (its --max_message_bytes); large feeds go through shared memory on a local "
                   "daemon, large initial weights need a higher limit"));
}

absl::StatusOr<uint64_t> Client::Send(v1::Request request) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_id_++;
  request.set_request_id(id);
  std::string bytes = request.SerializeAsString();
  RETURN_IF_ERROR(CheckSize(bytes.size()));
  try {
    SendFrame(socket_, zmq::buffer(bytes), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("sending to tandemd at ", endpoint_, " failed: ", e.what()));
  }
  return id;
}

absl::StatusOr<v1::Response> Client::Wait(uint64_t request_id) {
  auto deadline = SteadyClock::now() + absl::ToChronoMilliseconds(options_.call_timeout);
  // With heartbeats on, a live daemon answers at least every quarter
  // timeout, so a long silence means it is gone.
  auto silence_limit = std::max<std::chrono::milliseconds>(std::chrono::milliseconds(3000), HeartbeatPeriod() * 4);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    auto it = arrived_.find(request_id);
    if (it != arrived_.end()) {
      v1::Response response = std::move(it->second);
      arrived_.erase(it);
      absl::Status status = StatusFromProto(response.status());
      if (!status.ok()) return status;
      return response;
    }
    if (peer_closed_) {
      return absl::UnavailableError(absl::StrCat("tandemd at ", endpoint_,
                                                 " stopped answering: it closed the "
                                                 "connection (it exited or was restarted); restart it and "
                                                 "register the job again"));
    }
    auto now = SteadyClock::now();
    if (now > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("no reply from tandemd at ", endpoint_, " to request ",
                                                      request_id, " within ",
                                                      absl::FormatDuration(options_.call_timeout)));
    }
    if (options_.heartbeat && now - last_heard_ > silence_limit) {
      return absl::UnavailableError(
          absl::StrCat("tandemd at ", endpoint_, " stopped answering (nothing for ",
                       std::chrono::duration_cast<std::chrono::seconds>(now - last_heard_).count(),
                       " s); it may have exited — restart it and register the job again"));
    }
    ReceiveLocked(std::chrono::milliseconds(10));
  }
}

absl::StatusOr<v1::Response> Client::Call(v1::Request request) {
  auto id = Send(std::move(request));
  if (!id.ok()) return id.status();
  return Wait(*id);
}

absl::StatusOr<v1::Response> Client::CallRaw(const std::string& bytes, uint64_t expect_request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    SendFrame(socket_, zmq::buffer(bytes), zmq::send_flags::none);
  }
  return Wait(expect_request_id);
}

absl::StatusOr<uint64_t> Client::SendWithFrames(v1::Request request, std::vector<zmq::message_t> frames) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_id_++;
  request.set_request_id(id);
  RETURN_IF_ERROR(SendLocked(request, frames));
  return id;
}

absl::Status Client::SendLocked(const v1::Request& request, std::vector<zmq::message_t>& frames) {
  std::string bytes = request.SerializeAsString();
  size_t total = bytes.size();
  for (const zmq::message_t& f : frames) total += f.size();
  RETURN_IF_ERROR(CheckSize(total));
  try {
    SendFrame(socket_, zmq::buffer(bytes), frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    for (size_t i = 0; i < frames.size(); ++i) {
      SendFrame(socket_, frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("sending to tandemd at ", endpoint_, " failed: ", e.what()));
  }
  return absl::OkStatus();
}

namespace {

// Appends `bytes` at `data` to `frames` in pieces of at most `piece` bytes
// (one empty frame for no bytes) and names them in `t` (Tensor.frame,
// frame_count).
void AppendTensorFrames(const void* data, uint64_t bytes, uint64_t piece, v1::Tensor* t,
                        std::vector<zmq::message_t>* frames) {
  piece = std::max<uint64_t>(piece, 1);
  const uint64_t count = std::max<uint64_t>(1, (bytes + piece - 1) / piece);
  t->set_frame(static_cast<uint32_t>(frames->size() + 1));
  if (count > 1) t->set_frame_count(static_cast<uint32_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t offset = i * piece;
    const uint64_t size = std::min(piece, bytes - offset);
    zmq::message_t frame(size);
    if (size > 0) ParallelCopy(frame.data(), static_cast<const char*>(data) + offset, size);
    frames->push_back(std::move(frame));
  }
}

}  // namespace

absl::StatusOr<uint64_t> MemoryQuotaFromEnvironment() {
  const char* text = std::getenv("TANDEM_MEMORY_QUOTA_MIB");
  if (text == nullptr || text[0] == '\0') return 0;
  uint64_t mib = 0;
  if (!absl::SimpleAtoi(text, &mib) || mib > (UINT64_MAX >> 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("TANDEM_MEMORY_QUOTA_MIB='", text, "' is not a whole number of MiB (unset it for no quota)"));
  }
  return mib << 20;
}

absl::StatusOr<v1::RegisterJobResponse> Client::RegisterJob(v1::RegisterJobRequest request,
                                                            const std::vector<FeedView>& persistent) {
  if (request.hints().memory_quota_bytes() == 0) {
    ASSIGN_OR_RETURN(uint64_t quota, MemoryQuotaFromEnvironment());
    if (quota != 0) request.mutable_hints()->set_memory_quota_bytes(quota);
  }
  // Initial values written into the request (a GraphBuilder's HostTensors)
  // travel as views too, so that they reach a local daemon through shared
  // memory like the others: sent inline, a large one is a single ZeroMQ
  // frame, and libzmq cancels its heartbeat timeout only once a whole frame
  // has arrived, so on a loaded machine the daemon could close the
  // connection mid-transfer.
  std::vector<FeedView> views = persistent;
  std::vector<std::string> inline_values;  // owns the moved-out bytes until sent
  {
    absl::flat_hash_set<std::string> named;
    for (const FeedView& v : persistent) named.insert(v.name);
    inline_values.reserve(request.persistent_size());
    for (v1::Tensor& t : *request.mutable_persistent()) {
      if (t.frame() != 0 || t.data().empty() || named.contains(t.spec().name())) continue;
      uint64_t expected = DTypeBytes(t.spec().dtype());
      bool overflow = false;
      for (int64_t d : t.spec().shape()) {
        overflow =
            overflow || __builtin_mul_overflow(expected, static_cast<uint64_t>(std::max<int64_t>(d, 0)), &expected);
      }
      if (overflow || t.data().size() != expected) {
        return absl::InvalidArgumentError(absl::StrCat("initial value of '", t.spec().name(), "' has ", t.data().size(),
                                                       " bytes; its shape and dtype need ", expected));
      }
      inline_values.push_back(std::move(*t.mutable_data()));
      t.clear_data();
      const std::string& bytes = inline_values.back();
      views.push_back(FeedView{t.spec().name(), t.spec().dtype(),
                               std::vector<int64_t>(t.spec().shape().begin(), t.spec().shape().end()), bytes.data(),
                               bytes.size()});
    }
  }
  // The views' bytes travel outside the protobuf message (which would copy
  // them in, serialize them and have ZeroMQ copy them again): tensor i's
  // bytes are frame i + 1.
  absl::flat_hash_map<std::string, int> by_name;
  for (int i = 0; i < request.persistent_size(); ++i) by_name.emplace(request.persistent(i).spec().name(), i);
  uint64_t total = 0;
  std::vector<v1::Tensor*> framed;  // by view
  for (size_t k = 0; k < views.size(); ++k) {
    const FeedView& v = views[k];
    auto [it, added] = by_name.emplace(v.name, request.persistent_size());
    v1::Tensor* t = added ? request.add_persistent() : request.mutable_persistent(it->second);
    t->Clear();
    v1::TensorSpec* spec = t->mutable_spec();
    spec->set_name(v.name);
    spec->set_dtype(v.dtype);
    for (int64_t d : v.shape) spec->add_shape(d);
    t->set_frame(static_cast<uint32_t>(k + 1));  // one frame each in a shared-memory object
    framed.push_back(t);
    total += v.bytes;
  }
  // A local daemon reads them from a shared-memory object: one copy here,
  // none through the socket. The object goes once the daemon has answered.
  std::optional<SealedMemfd> shared = !hello_.fd_socket().empty() && total >= options_.shared_frames_threshold
                                          ? PutInSharedFrames(views, &request)
                                          : std::nullopt;
  std::vector<zmq::message_t> frames;
  if (!shared) {
    for (size_t k = 0; k < views.size(); ++k) {
      AppendTensorFrames(views[k].data, views[k].bytes, options_.frame_bytes, framed[k], &frames);
    }
  }
  v1::Request r;
  *r.mutable_register_job() = std::move(request);
  auto id = SendWithFrames(std::move(r), std::move(frames));
  if (!id.ok()) return id.status();
  auto response = Wait(*id);
  if (!response.ok()) return response.status();
  if (!response->has_register_job()) return Unexpected(*response, "register_job");
  return response->register_job();
}

std::optional<SealedMemfd> Client::PutInSharedFrames(const std::vector<FeedView>& persistent,
                                                     v1::RegisterJobRequest* request) {
  // Each tensor at a 64-byte boundary (the device copies read whole lines).
  constexpr uint64_t kAlign = 64;
  std::vector<uint64_t> offsets;
  uint64_t end = 0;
  for (const FeedView& v : persistent) {
    offsets.push_back(end);
    end += (v.bytes + kAlign - 1) / kAlign * kAlign;
  }
  auto object = SealedMemfd::Create(std::max<uint64_t>(end, 1), /*populate=*/true);
  if (!object.ok()) return std::nullopt;  // frames instead
  for (size_t k = 0; k < persistent.size(); ++k) {
    if (persistent[k].bytes > 0) ParallelCopy(object->data() + offsets[k], persistent[k].data, persistent[k].bytes);
  }
  // Passed once written: the daemon may map it as soon as it arrives.
  absl::StatusOr<uint64_t> nonce = PassDescriptor(*object);
  if (!nonce.ok()) return std::nullopt;
  v1::SharedFrames* frames = request->mutable_shared_frames();
  frames->set_fd_nonce(*nonce);
  frames->set_bytes(object->bytes());
  for (size_t k = 0; k < persistent.size(); ++k) {
    frames->add_offsets(offsets[k]);
    frames->add_sizes(persistent[k].bytes);
  }
  return *std::move(object);
}

absl::StatusOr<uint64_t> Client::SubmitIteration(uint64_t job_id, const NamedTensors& feeds,
                                                 const std::vector<std::string>& fetches, uint64_t iteration,
                                                 const std::string& variant) {
  std::vector<FeedView> views;
  views.reserve(feeds.size());
  for (const auto& [name, t] : feeds) views.push_back(FeedView{name, t.dtype, t.shape, t.data.data(), t.data.size()});
  return SubmitIteration(job_id, views, fetches, iteration, variant);
}

absl::StatusOr<uint64_t> Client::SubmitIteration(uint64_t job_id, const std::vector<FeedView>& feeds,
                                                 const std::vector<std::string>& fetches, uint64_t iteration,
                                                 const std::string& variant) {
  // The shared-memory region is set up at the first large feed (a client
  // that never sends one, tandemctl, reserves none), and grown when an
  // iteration's large feeds outgrow it.
  uint64_t large_bytes = 0;
  for (const FeedView& f : feeds) {
    if (f.bytes >= options_.shared_memory_threshold) large_bytes += (f.bytes + 255) / 256 * 256;
  }
  if (options_.shared_memory_bytes > 0 && large_bytes > 0) {
    (void)EnsureSharedMemoryFor(large_bytes);  // on failure the feeds travel inline
  }
  v1::Request r;
  v1::RunIterationRequest* run = r.mutable_run_iteration();
  run->set_job_id(job_id);
  run->set_iteration(iteration);
  run->set_variant(variant);
  for (const auto& f : fetches) run->add_fetches(f);
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_id_++;
  r.set_request_id(id);
  std::vector<zmq::message_t> frames;  // the large feeds that go neither inline nor through shared memory
  for (const FeedView& f : feeds) {
    v1::Tensor* t = run->add_feeds();
    v1::TensorSpec* spec = t->mutable_spec();
    spec->set_name(f.name);
    spec->set_dtype(f.dtype);
    for (int64_t d : f.shape) spec->add_shape(d);
    std::optional<uint64_t> offset;
    ShmRegion* region = shm_regions_.empty() ? nullptr : &shm_regions_.back();
    if (region != nullptr && f.bytes >= options_.shared_memory_threshold) offset = region->ring->Allocate(id, f.bytes);
    if (offset) {
      ParallelCopy(region->base + *offset, f.data, f.bytes);
      v1::SharedSlice* slice = t->mutable_shared();
      slice->set_region_id(region->id);
      slice->set_offset(*offset);
      slice->set_bytes(f.bytes);
    } else if (f.bytes >= options_.frame_threshold) {
      AppendTensorFrames(f.data, f.bytes, options_.frame_bytes, t, &frames);
    } else {
      t->set_data(f.data, f.bytes);
    }
  }
  if (absl::Status s = SendLocked(r, frames); !s.ok()) {
    ReleaseSharedLocked(id);
    return s;
  }
  return id;
}

absl::StatusOr<IterationResult> Client::WaitIteration(uint64_t ticket) {
  auto response = Wait(ticket);
  {
    // The daemon has read the iteration's shared feeds (or never will).
    std::lock_guard<std::mutex> lock(mu_);
    ReleaseSharedLocked(ticket);
  }
  if (!response.ok()) return response.status();
  if (!response->has_run_iteration()) return Unexpected(*response, "run_iteration");
  IterationResult result;
  const v1::RunIterationResponse& r = response->run_iteration();
  result.iteration = r.iteration();
  result.run_seconds = r.run_seconds();
  result.queue_seconds = r.queue_seconds();
  for (const v1::Tensor& t : r.fetches()) result.fetches[t.spec().name()] = HostTensor::FromProto(t);
  return result;
}

absl::StatusOr<IterationResult> Client::RunIteration(uint64_t job_id, const NamedTensors& feeds,
                                                     const std::vector<std::string>& fetches, uint64_t iteration,
                                                     const std::string& variant) {
  auto ticket = SubmitIteration(job_id, feeds, fetches, iteration, variant);
  if (!ticket.ok()) return ticket.status();
  return WaitIteration(*ticket);
}

absl::StatusOr<HostTensor> Client::ReadTensor(uint64_t job_id, const std::string& name) {
  v1::Request r;
  r.mutable_read_tensor()->set_job_id(job_id);
  r.mutable_read_tensor()->set_name(name);
  auto response = Call(std::move(r));
  if (!response.ok()) return response.status();
  if (!response->has_read_tensor()) return Unexpected(*response, "read_tensor");
  return HostTensor::FromProto(response->read_tensor().tensor());
}

absl::Status Client::CloseJob(uint64_t job_id) {
  v1::Request r;
  r.mutable_close_job()->set_job_id(job_id);
  return Call(std::move(r)).status();
}

absl::StatusOr<v1::ListSessionsResponse> Client::ListSessions() {
  v1::Request r;
  r.mutable_list_sessions();
  auto response = Call(std::move(r));
  if (!response.ok()) return response.status();
  return response->list_sessions();
}

absl::StatusOr<v1::StatsResponse> Client::Stats() {
  v1::Request r;
  r.mutable_stats();
  auto response = Call(std::move(r));
  if (!response.ok()) return response.status();
  return response->stats();
}

}  // namespace tandem::client
