// The C++ client SDK (libtandem): a session with tandemd.
//
//   ASSIGN_OR_RETURN(auto client, Client::Connect({.name = "trainer"}));
//   ASSIGN_OR_RETURN(auto job, client->RegisterJob(std::move(builder).Build()));
//   ASSIGN_OR_RETURN(auto result, client->RunIteration(job.job_id(), feeds, {"loss"}));
//
// Calls are synchronous (RunIteration) or pipelined: SubmitIteration returns
// a ticket at once, so several iterations can be in flight, and
// WaitIteration collects each. While connected, a background thread sends
// heartbeats so an idle session is not ended by the daemon, and a call
// fails with UNAVAILABLE when the daemon stops answering (even heartbeats)
// instead of hanging.
//
// Thread-safety: all methods may be called from several threads.
// Destroying the client closes its session (the daemon frees its jobs).
#ifndef TANDEM_CLIENT_CLIENT_H_
#define TANDEM_CLIENT_CLIENT_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/host_tensor.h"
#include "client/sealed_memfd.h"
#include "client/shm_ring.h"
#include "tandem.pb.h"

namespace tandem::client {

struct ClientOptions {
  std::string endpoint;  // empty: $TANDEM_ENDPOINT, else the default socket
  std::string name = "tandem-client";
  // How long the handshake may wait for a busy daemon (a missing ipc socket
  // fails at once). 5 s was too short when 200 clients started at once on
  // 2 cores (bench/soak/soak.py).
  absl::Duration connect_timeout = absl::Seconds(30);
  absl::Duration call_timeout = absl::Hours(24);  // bound on one call
  bool heartbeat = true;
  // Feeds of at least `shared_memory_threshold` bytes travel through a
  // shared-memory region that the daemon maps (ipc endpoints only; 0 turns
  // it off): at first of this size, or of three iterations' large feeds if
  // that is more. When a job's iterations outgrow it (a larger batch), the
  // client maps a region of twice the size or three iterations' feeds,
  // whichever is larger, for the iterations that follow, up to
  // kMaxSharedMemoryRegions regions a session. When no region has room or
  // the daemon cannot map one, feeds travel inline.
  uint64_t shared_memory_bytes = uint64_t{64} << 20;
  uint64_t shared_memory_threshold = uint64_t{64} << 10;
  // A registration whose initial values total at least this many bytes
  // hands them over in a shared-memory object of its own, which the daemon
  // reads once and unmaps (when the session's region is set up: the daemon
  // is on this host); smaller ones, or when the object cannot be made, send
  // them as ZeroMQ frames. UINT64_MAX: always frames.
  uint64_t shared_frames_threshold = uint64_t{1} << 20;
  // Initial values sent as ZeroMQ frames go in frames of at most this many
  // bytes (Tensor.frame_count): libzmq counts a connection as alive only
  // when a whole frame has arrived, and the daemon closes one that shows no
  // sign of life for 3 s, so over a slow tcp link one large frame would cut
  // the registration short.
  uint64_t frame_bytes = uint64_t{4} << 20;
  // Feeds of at least this many bytes that do not go through shared memory
  // (a tcp endpoint, a full region) travel as ZeroMQ frames of at most
  // `frame_bytes` after the request, not inline in it, for the same reason;
  // smaller ones inline. UINT64_MAX: always inline.
  uint64_t frame_threshold = uint64_t{64} << 10;
};

// A feed by reference: the bytes are read during SubmitIteration only.
struct FeedView {
  std::string name;
  v1::DType dtype = v1::FLOAT32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
};

struct IterationResult {
  uint64_t iteration = 0;
  std::map<std::string, HostTensor> fetches;
  double run_seconds = 0;    // on the device
  double queue_seconds = 0;  // waiting for its turn in the daemon
};

// The per-job memory quota $TANDEM_MEMORY_QUOTA_MIB asks for, in bytes: 0
// (the daemon's default) when it is unset, empty or 0; INVALID_ARGUMENT, naming
// the variable, when it is not a whole number of MiB (a typo must not lift
// the quota unnoticed). Client::RegisterJob applies it to requests that set
// no quota of their own; a batch system sets it per job (cluster/slurm/).
absl::StatusOr<uint64_t> MemoryQuotaFromEnvironment();

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  uint64_t session_id() const { return hello_.session_id(); }
  // The daemon's answer to hello (its session token, fd socket, limits).
  const v1::HelloResponse& hello() const { return hello_; }
  const std::string& endpoint() const { return endpoint_; }
  // Sets up the shared-memory region for large feeds now, if it is not yet
  // (otherwise the first feed of at least shared_memory_threshold bytes
  // does); its status, which later calls return without trying again.
  absl::Status EnsureSharedMemory() { return EnsureSharedMemoryFor(0); }
  // The most shared-memory regions a session maps (the first and its
  // growths; the daemon takes 16).
  static constexpr int kMaxSharedMemoryRegions = 6;
  // The bytes of the region that takes new feeds (0 without one).
  uint64_t shared_memory_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return shm_regions_.empty() ? 0 : shm_regions_.back().bytes;
  }
  // Whether feeds go through shared memory, and if not, why
  // (FAILED_PRECONDITION until the region was first wanted).
  absl::Status shared_memory_status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return shm_status_;
  }
  // Whether the daemon registered the region with its devices (pinned for
  // asynchronous copies on a GPU); false without a region.
  bool shared_memory_pinned() const {
    std::lock_guard<std::mutex> lock(mu_);
    return shm_pinned_;
  }

  // The persistent tensors' initial values travel outside the request
  // (Tensor.frame), not inside it. `persistent` values (by reference, read
  // during the call only) replace or extend request.persistent by name and
  // are copied once: into a shared-memory object the daemon reads (local
  // daemon, at least shared_frames_threshold bytes), else into ZeroMQ
  // frames after the request. Inline data of `request` is moved into a
  // frame without a copy (or stays inline beside a shared-memory object).
  //
  // A request whose hints set no memory quota takes $TANDEM_MEMORY_QUOTA_MIB
  // (MemoryQuotaFromEnvironment); a bad value of it fails the call.
  absl::StatusOr<v1::RegisterJobResponse> RegisterJob(v1::RegisterJobRequest request,
                                                      const std::vector<FeedView>& persistent = {});
  // `variant`: which of the job's graphs runs (a GraphVariant's name from
  // the registration; empty: the registered graph).
  absl::StatusOr<uint64_t> SubmitIteration(uint64_t job_id, const NamedTensors& feeds,
                                           const std::vector<std::string>& fetches, uint64_t iteration = 0,
                                           const std::string& variant = "");
  absl::StatusOr<uint64_t> SubmitIteration(uint64_t job_id, const std::vector<FeedView>& feeds,
                                           const std::vector<std::string>& fetches, uint64_t iteration = 0,
                                           const std::string& variant = "");
  absl::StatusOr<IterationResult> WaitIteration(uint64_t ticket);
  absl::StatusOr<IterationResult> RunIteration(uint64_t job_id, const NamedTensors& feeds,
                                               const std::vector<std::string>& fetches, uint64_t iteration = 0,
                                               const std::string& variant = "");
  absl::StatusOr<HostTensor> ReadTensor(uint64_t job_id, const std::string& name);
  absl::Status CloseJob(uint64_t job_id);
  absl::StatusOr<v1::ListSessionsResponse> ListSessions();
  absl::StatusOr<v1::StatsResponse> Stats();

  // The raw protocol: Send assigns the request id and returns it; Wait
  // returns that request's response, its status mapped to absl::Status.
  absl::StatusOr<uint64_t> Send(v1::Request request);
  absl::StatusOr<v1::Response> Wait(uint64_t request_id);
  absl::StatusOr<v1::Response> Call(v1::Request request);
  // Send with `frames` after the request's own frame (one multipart message).
  absl::StatusOr<uint64_t> SendWithFrames(v1::Request request, std::vector<zmq::message_t> frames);
  // Sends bytes as they are (tests of malformed input use it).
  absl::StatusOr<v1::Response> CallRaw(const std::string& bytes, uint64_t expect_request_id);

 private:
  Client(const ClientOptions& options, std::string endpoint);
  void HeartbeatLoop();
  // RESOURCE_EXHAUSTED, saying what to do, for a message over the daemon's limit.
  absl::Status CheckSize(size_t bytes) const;
  // Sends `request` (its id set) and `frames` after it, in one multipart
  // message; mu_ held.
  absl::Status SendLocked(const v1::Request& request, std::vector<zmq::message_t>& frames);
  // Passes `object`'s descriptor on the daemon's fd socket; the nonce that
  // names it.
  absl::StatusOr<uint64_t> PassDescriptor(const SealedMemfd& object);
  // Copies `persistent` into a new shared-memory object and names it in
  // `request` (shared_frames; tensor k is frame k + 1); nullopt when the
  // object cannot be made (the caller sends frames instead).
  std::optional<SealedMemfd> PutInSharedFrames(const std::vector<FeedView>& persistent,
                                               v1::RegisterJobRequest* request);
  std::chrono::milliseconds HeartbeatPeriod() const;
  // Sends a heartbeat when one is due; mu_ held.
  void MaybeHeartbeatLocked();
  // Receives whatever is readable within `timeout`; mu_ held.
  void ReceiveLocked(std::chrono::milliseconds timeout);
  // Reads the monitor's pending events; mu_ held.
  void DrainMonitorLocked();

  const ClientOptions options_;
  const std::string endpoint_;
  v1::HelloResponse hello_;  // constant after Connect

  mutable std::mutex mu_;
  zmq::context_t context_;
  zmq::socket_t socket_;  // guarded by mu_
  // On an ipc endpoint, the socket's disconnect events (zmq_socket_monitor):
  // the daemon's end of a local socket closes only when it exits, so a
  // disconnect after the handshake ends every call at once (UNAVAILABLE)
  // instead of after the heartbeat silence limit.
  zmq::socket_t monitor_;                                 // guarded by mu_; not connected on tcp
  bool peer_closed_ = false;                              // guarded by mu_
  uint64_t next_id_ = 1;                                  // guarded by mu_
  absl::flat_hash_map<uint64_t, v1::Response> arrived_;   // guarded by mu_
  absl::flat_hash_set<uint64_t> discard_;                 // heartbeat ids; guarded by mu_
  std::chrono::steady_clock::time_point last_heard_;      // guarded by mu_
  std::chrono::steady_clock::time_point last_heartbeat_;  // guarded by mu_

  // Shared memory for large feeds: set up at the first need and grown when
  // an iteration's feeds outgrow it (EnsureSharedMemoryFor, serialized by
  // shm_setup_mu_); guarded by mu_.
  struct ShmRegion {
    uint64_t id = 0;  // the daemon's region id
    char* base = nullptr;
    uint64_t bytes = 0;
    std::unique_ptr<ShmRing> ring;
  };
  absl::Status EnsureSharedMemoryFor(uint64_t iteration_bytes);
  // Creates a shared-memory region of `bytes`, has the daemon map it, and
  // makes it the one that takes new feeds.
  absl::Status SetUpSharedMemory(uint64_t bytes);
  // Gives back `ticket`'s slices and unmaps the outgrown regions nothing
  // uses any more. Requires mu_.
  void ReleaseSharedLocked(uint64_t ticket);
  std::mutex shm_setup_mu_;
  bool shm_tried_ = false;
  int shm_mapped_ = 0;  // regions mapped this session
  absl::Status shm_status_ = absl::FailedPreconditionError("not set up yet (the first large feed sets it up)");
  bool shm_pinned_ = false;
  // The last region takes new feeds; earlier (outgrown) ones only drain.
  std::vector<ShmRegion> shm_regions_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by stop_mu_
  std::thread heartbeat_;
  std::atomic<uint64_t> next_nonce_{1};  // names descriptors passed on the fd socket
};

}  // namespace tandem::client

#endif  // TANDEM_CLIENT_CLIENT_H_
