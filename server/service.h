// The daemon's service: sessions, jobs, admission, and the replies; the
// dispatch of iterations on each device is that device's DeviceDispatcher's
// (server/device_dispatcher.h), which Service owns and serves as its
// DispatcherHost.
//
// Service lives on the control loop. Requests arrive through
// HandleMessage (posted by the transport), device completions through work
// items posted by device callbacks; both run on the loop thread, so the
// state in server/state.h needs no locks. Every request gets exactly one
// reply. A bad request ends at most its own session; the daemon keeps
// serving everyone else.
#ifndef TANDEM_SERVER_SERVICE_H_
#define TANDEM_SERVER_SERVICE_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/steady_timer.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "codegen/kernel_cache.h"
#include "compiler/compile_job.h"
#include "server/access_control.h"
#include "server/device_dispatcher.h"
#include "server/event_loop.h"
#include "server/executor.h"
#include "server/fd_socket.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/request_frames.h"
#include "server/session_table.h"
#include "server/state.h"
#include "server/waiting_jobs.h"
#include "tandem.pb.h"

namespace tandem::server {

inline constexpr char kDaemonVersion[] = "0.1.0";

class Service : private DispatcherHost {
 public:
  using SendFn = std::function<void(std::string peer, std::string payload)>;

  // Opens the devices named by options.device ("auto": every GPU, else the
  // CPU) and their memory, scheduler and executor.
  static absl::StatusOr<std::unique_ptr<Service>> Create(const DaemonOptions& options, EventLoop& loop, SendFn send);
  ~Service() override;

  // Loop thread. A message from `peer` on a connection of `identity`, with
  // the frames that followed its first (null: none); only a job
  // registration (its persistent tensors' bytes, Tensor.frame) and an
  // iteration (its feeds') may have such frames, any other is malformed. A message whose identity is not
  // that of the session its routing id names is refused (PERMISSION_DENIED)
  // and leaves the session alone. A message of kParseOnLoopBytes or more is
  // parsed on a thread of its own (a DenseNet-121 registration's 16 ms held
  // every job's iterations up on the loop), and its peer's later messages
  // wait for it: each client's requests are handled in the order sent.
  void HandleMessage(const std::string& peer, const PeerIdentity& identity, std::string payload,
                     std::shared_ptr<const RequestFrames> frames = nullptr);
  static constexpr size_t kParseOnLoopBytes = 256 << 10;
  // Loop thread. A descriptor from the side socket: kept for the session
  // whose token it carries if the sender is that session's user, else
  // closed.
  void OnFdReceived(ReceivedFd received);
  // Before the loop runs: the side socket's path, given to clients at hello
  // ("" when there is none).
  void SetFdSocketPath(std::string path) { fd_socket_path_ = std::move(path); }
  // Before the loop runs: how many reply bytes the transport holds for a
  // peer, unread by its client (max_unread_reply_bytes).
  using QueuedBytesFn = std::function<uint64_t(const std::string& peer)>;
  void SetQueuedReplyBytes(QueuedBytesFn fn) { queued_reply_bytes_ = std::move(fn); }
  // Loop thread. The transport could not reach `peer`: its session ends.
  void HandlePeerGone(const std::string& peer);
  // Loop thread. A client connection closed, whose is not known: every
  // session's peer is probed now and again 10 ms, 50 ms, 250 ms and 1 s later (the
  // router forgets a closed connection's routing id a moment after the
  // event), so a dead or stopped client's session ends, and its jobs and
  // memory are freed, within about a second (docs/deploy.md).
  void HandleConnectionClosed();
  // Loop thread. Ends sessions idle for longer than the session timeout.
  void ExpireIdleSessions();
  // Loop thread. With state_dir and checkpoint_ttl: the persist thread
  // deletes the checkpoints nobody resumed within the ttl of their last
  // write, other than running jobs'.
  void SweepCheckpoints();
  // Loop thread, every second: a snapshot, when one is due, of each job
  // that has nothing in flight and finished iterations its last snapshot
  // does not hold (they ended while that one was being taken), so that a
  // job that pauses loses at most checkpoint_interval of work.
  void CheckpointPausedJobs();
  // Loop thread. Ends every session (queued iterations get CANCELLED) and
  // waits for all device work; the completions that posts to the loop
  // answer the iterations that were running. Then, in a later work item
  // (after those completions), FinishShutdown frees every job.
  void Shutdown();
  void FinishShutdown();

  // service_faults.cc: restarting after a device fault (docs/deploy.md,
  // Faults). Before the loop runs: what starts the daemon's stop once a
  // device faulted (main's shutdown, as for SIGTERM), called on the loop.
  void SetOnDeviceFault(std::function<void()> fn) { on_device_fault_ = std::move(fn); }
  // Whether a device faulted: the daemon is stopping to start again.
  bool DeviceFaulted() const { return fault_.has_value(); }
  // After a fault that no single job can be blamed for: the checkpoint
  // paths of the jobs that had work on the device (for the next process).
  // Before the loop runs, in that process: the same list, whose jobs run
  // one iteration at a time when they come back (Job::suspect).
  const std::vector<std::string>& FaultSuspects() const { return suspects_out_; }
  void SetFaultSuspects(const std::vector<std::string>& paths) { fault_suspects_.insert(paths.begin(), paths.end()); }

  std::vector<std::string> DeviceNames() const;

  // service_admin.cc: operating the daemon (tandemctl, SIGHUP, systemd).
  // Loop thread. Applies the live keys among `changed` (policy, log_level,
  // session_timeout, max_job_memory_mib, max_queued_per_job) from `fresh`.
  void ApplyLiveOptions(const DaemonOptions& fresh, const std::vector<std::string>& changed);
  // Loop thread. Counts a config reload for the stats and metrics.
  void OnConfigReload(bool ok);
  // Loop thread. One line for systemd's STATUS=: sessions, jobs, policy.
  // Also forgets the measurements of jobs that are gone.
  std::string StatusLine();
  // Loop thread. Every metric in the Prometheus text format (metrics_export.cc).
  std::string RenderMetrics();
  const DaemonOptions& options() const { return options_; }

 private:
  // A device's context that has faulted: its name, and the fault.
  struct DeviceFault {
    std::string device;
    absl::Status status;
  };
  Service(const DaemonOptions& options, EventLoop& loop, SendFn send);

  // service_admin.cc: the admin requests, which act on other sessions' jobs
  // under the rules of server/access_control.h. True (and answered) when
  // the request was an admin request.
  bool HandleAdminRequest(const PendingReply& to, const Session& session, const v1::Request& request);
  void OnSetPriority(const PendingReply& to, const Session& session, const v1::SetPriorityRequest& set);
  void OnSetPolicy(const PendingReply& to, const v1::SetPolicyRequest& set);
  void OnDrain(const PendingReply& to, const v1::DrainRequest& drain);
  void OnKillJob(const PendingReply& to, const Session& session, const v1::KillJobRequest& kill);
  // The rules' settings now (the ceilings may change on reload).
  AccessOptions AccessOptionsNow() const;
  // OK when `session` may kill or reprioritize `job`; NOT_FOUND otherwise,
  // exactly as for a job that does not exist.
  absl::Status CheckMayManage(const Session& session, const Job& job) const;
  // UNAVAILABLE while draining (registrations are refused).
  absl::Status CheckAdmitting() const;
  // The measured fields of a job's JobInfo (queue wait, share, slowdown).
  // `sched_stats`: its device scheduler's Stats(), taken once per listing
  // (asking per job made a listing quadratic in the jobs).
  void FillJobMeasurements(const Job& job, const std::vector<sched::JobSchedStats>& sched_stats,
                           v1::JobInfo* info) const;

  // service.cc: sessions and the small requests.
  void Reply(const PendingReply& to, v1::Response response) override;
  void ReplyError(const PendingReply& to, const absl::Status& status) override;
  void ReplyBuiltOffLoop(const PendingReply& to, std::function<v1::Response()> build,
                         std::function<void()> then) override;
  void OnHello(const PendingReply& to, const PeerIdentity& identity, const v1::HelloRequest& hello);
  // Administrators see every session; others see their own principal's.
  void OnListSessions(const PendingReply& to, const Session& session);
  // HandleMessage's parts: a message refused before it is parsed (the
  // daemon stops, or it is too large); a small message parsed and handled
  // on the loop; the front of `peer`'s queue parsed on messages_; a queued
  // message that messages_ has parsed, then the next ones of the queue
  // (those below kParseOnLoopBytes at once); and a parsed message (`parsed`
  // false: malformed).
  bool RefusedUnparsed(const std::string& peer, const std::string& payload, const RequestFrames* frames);
  void ParseOnLoop(const std::string& peer, const PeerIdentity& identity, const std::string& payload,
                   std::shared_ptr<const RequestFrames> frames);
  void ParseOffLoop(const std::string& peer);
  void OnParsed(const std::string& peer, std::shared_ptr<v1::Request> request, bool parsed);
  void HandleParsed(const std::string& peer, const PeerIdentity& identity, size_t payload_bytes,
                    std::shared_ptr<const RequestFrames> frames, std::shared_ptr<v1::Request> request, bool parsed);
  // Parses `payload` into `request`; false when it is not a Request. For
  // tests, a payload of 256 KiB or more first sleeps
  // $TANDEM_TEST_PARSE_DELAY_MS (read once).
  static bool ParseRequest(const std::string& payload, v1::Request& request);
  void OnStats(const PendingReply& to);
  void OnMapSharedMemory(const PendingReply& to, Session& session, const v1::MapSharedMemoryRequest& map);
  void EndSession(uint64_t session_id, const char* reason);
  // The descriptor passed under `nonce` for `session`, taken out of it;
  // NOT_FOUND saying what to do when there is none.
  absl::StatusOr<std::shared_ptr<UniqueFd>> TakeReceivedFd(Session& session, uint64_t nonce);
  absl::StatusOr<Job*> FindJob(const Session& session, uint64_t job_id);

  // service_admission.cc: the device a job goes to, admission into its
  // memory and scheduler, and the registrations waiting for memory
  // (waiting_for_memory_, a WaitingJobs).
  DeviceRuntime* ChooseDevice(const v1::JobHints& hints, absl::Status* error);
  // The device ChooseDevice will give a job of `hints` whatever memory then
  // holds (the daemon's only device, or the one the hints name), else null.
  device::Device* KnownDevice(const v1::JobHints& hints);
  // The device a job asking for `want` (a device's name, or "cuda": the
  // first GPU) gets, else null.
  DeviceRuntime* NamedDevice(const std::string& want);
  // Admits a prepared job into memory and the scheduler (the policy picks
  // the lane); FAILED_PRECONDITION when it could fit once others leave.
  absl::Status Admit(Job& job);
  sched::JobParams SchedParams(const Job& job) const;
  // Admits the waiting jobs that fit now, in arrival order, and starts them.
  void AdmitWaitingJobs();

  // service_jobs.cc: registration and closing.
  // A registration runs in two steps: what depends on its request alone
  // (the graph built, its transposes folded and elementwise chains fused,
  // shared frames mapped and checked, the iteration's memory layout, the
  // interference key) on the preparation thread (prep_), so that a large
  // model's tens of milliseconds never hold the control loop; then, back on
  // the loop, the device, the program, admission and the upload.
  struct PreparedJob {
    std::unique_ptr<Graph> graph;
    IterationLayout layout;
    std::vector<GraphVariant> variants;  // compiled, without their programs yet
    std::string interference_key;
    std::shared_ptr<const RequestFrames> frames;  // the request's, or its mapped shared frames
    double seconds = 0;                           // the preparation's wall time
    // Made for program_device (KnownDevice) when the registration knew it:
    // the graph's program, and each variant's in `variants`.
    const device::Device* program_device = nullptr;
    std::unique_ptr<Program> program;
    uint64_t resumed_iterations = 0;  // resumed from a checkpoint that had done these
  };
  void OnRegisterJob(const PendingReply& to, Session& session, std::shared_ptr<const v1::Request> request,
                     std::shared_ptr<const RequestFrames> frames);
  // Preparation thread: no Service state is touched.
  static absl::StatusOr<PreparedJob> PrepareJob(const v1::RegisterJobRequest& reg,
                                                std::shared_ptr<const RequestFrames> frames,
                                                std::shared_ptr<UniqueFd> frames_fd, const CompileOptions& compile,
                                                uint64_t max_message_bytes, uint64_t session_id,
                                                const std::vector<codegen::CompileTarget>& codegen_targets,
                                                device::Device* program_device);
  // Preparation thread: the registration's graph variants, compiled and
  // checked against the job's graph `main`.
  static absl::StatusOr<std::vector<GraphVariant>> CompileVariants(const v1::RegisterJobRequest& reg, const Graph& main,
                                                                   const CompileOptions& compile);
  // The graph passes a job registering now gets (the options, and the
  // channels-last layout where a device is a GPU).
  CompileOptions CompileOptionsFor() const;
  // Preparation thread: sleeps $TANDEM_TEST_PREPARE_DELAY_MS first (tests
  // only; read once), before a registration's or a map's work.
  static void TestPrepareDelay();
  // Loop thread: the second step (the session may have ended meanwhile).
  void FinishRegistration(const PendingReply& to, uint64_t job_id, uint64_t session_id, std::string name,
                          std::shared_ptr<const v1::Request> request, absl::StatusOr<PreparedJob> prepared);
  // Uploads the initial values of an admitted job and answers its
  // registration.
  void StartJob(std::unique_ptr<Job> job);
  void OnCloseJob(const PendingReply& to, Session& session, uint64_t job_id);
  void BeginCloseJob(Job& job, const char* reason);
  void MaybeFinishClose(Job& job) override;
  // job.state.MoveTo(next), logged as a bug when the machine refuses it.
  void MoveJob(Job& job, JobState next);

  // Sends every session's peer a probe (HandleConnectionClosed).
  void ProbeSessions();
  void ArmReprobe();

  // service_faults.cc. DispatcherHost: the first report of a device fault
  // starts the stop (on_device_fault_); every report waits for
  // AnswerFaultReports.
  void OnDeviceFault(Job& job, const PendingReply& to, uint64_t iteration, const absl::Status& status) override;
  // FinishShutdown, after a fault: blames the job whose iteration faulted
  // when it was the only one on the device (its client gets the fault,
  // INTERNAL), and answers the other reports as every other request during
  // the stop (UNAVAILABLE: re-attach).
  void AnswerFaultReports();
  // The fault the daemon stops for, else the first device whose context
  // has faulted although no iteration has reported it yet (work that met
  // the fault first, such as a registration's upload); nullopt: none.
  std::optional<DeviceFault> CurrentFault() const;
  // ReplyError's status once a device has faulted: UNAVAILABLE, saying so,
  // whatever the request's own error was (the request failed for the fault,
  // and the client re-attaches once tandemd is back).
  static absl::Status AfterFault(const DeviceFault& fault, const absl::Status& status);

  // service_checkpoints.cc: jobs' checkpoints in state_dir (server/checkpoint_file.h).
  // Loop thread, after an iteration of `job` succeeded: a snapshot when the
  // interval has passed and none is in flight.
  void MaybeCheckpoint(Job& job);
  // When a checkpoint taken now is next due (checkpoint_interval on).
  Clock::time_point NextCheckpointTime() const;
  // Copies the job's persistent tensors to the host on its lane's stream,
  // after the iterations dispatched so far, then writes them on the persist
  // thread. `final` (its client went away, shutdown): into a buffer of its
  // own, even while a periodic snapshot is in flight, written after it.
  void CheckpointJob(Job& job, bool final);
  // Loop thread: the snapshot's copies are done; hand it to the writer.
  void OnSnapshotCopied(uint64_t job_id, std::shared_ptr<std::string> owned, absl::Status status);
  // The job left: its checkpoint goes if its client closed it, its snapshot
  // buffer to the device's spares.
  void ReleaseCheckpointState(Job& job);
  // The header of the job's checkpoint now.
  v1::JobCheckpoint CheckpointHeader(const Job& job) const;
  // Preparation thread: the registration `reg` resumed from the checkpoint
  // its token opens (persistent values replaced by the checkpoint's frames).
  struct Resumed {
    std::shared_ptr<const v1::Request> request;
    std::shared_ptr<const RequestFrames> frames;
    uint64_t iterations = 0;
  };
  static absl::StatusOr<Resumed> LoadResume(const v1::Request& request, const std::string& path, uint64_t max_bytes);

  // DispatcherHost (server/device_dispatcher.h), for the devices' dispatchers.
  const DaemonOptions& Options() const override { return options_; }
  bool ShuttingDown() const override { return shutting_down_; }
  Job* JobById(uint64_t id) override;
  void ForEachJob(absl::FunctionRef<bool(Job&)> fn) override;
  ServiceMeasurements& Measurements() override { return measurements_; }
  // service_jobs.cc: the job's device work went down by one (MaybeFinishClose).
  void OnDeviceWorkDone(uint64_t job_id) override;
  // service_checkpoints.cc: counts the iteration, then MaybeCheckpoint.
  void OnIterationReplied(Job& job) override;
  // The dispatcher of the device `dev` (DeviceRuntime::index).
  DeviceDispatcher& DispatcherOf(const DeviceRuntime& dev) { return *devices_[dev.index]; }

  // service_iterations.cc: the run and read requests, checked and queued;
  // their device's dispatcher runs them (DeviceDispatcher::DispatchAll,
  // StartReads).
  void OnRunIteration(const PendingReply& to, Session& session, std::shared_ptr<const v1::Request> request,
                      std::shared_ptr<const RequestFrames> frames);
  void OnReadTensor(const PendingReply& to, Session& session, const v1::ReadTensorRequest& read);

  DaemonOptions options_;                     // the live keys change on reload (ApplyLiveOptions)
  gid_t admin_gid_ = static_cast<gid_t>(-1);  // options_.admin_group's, resolved at start
  EventLoop& loop_;
  const SendFn send_;
  const Clock::time_point started_ = Clock::now();
  boost::asio::steady_timer probe_timer_;
  int probe_round_ = 0;  // the next re-probe's index + 1; 0: none pending

  std::vector<std::unique_ptr<DeviceDispatcher>> devices_;  // by DeviceRuntime::index
  // The GPU architectures (and driver) of devices_, which registration
  // compiles a job's generated kernels for; empty with codegen off or no GPU.
  std::vector<codegen::CompileTarget> codegen_targets_;
  bool has_cuda_ = false;  // a device is a GPU
  std::string fd_socket_path_;
  QueuedBytesFn queued_reply_bytes_;
  SessionTable sessions_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Job>> jobs_;
  WaitingJobs waiting_for_memory_;
  uint64_t next_job_ = 1;
  uint64_t next_ticket_ = 1;
  uint64_t next_region_ = 1;
  uint64_t requests_ = 0;
  uint64_t errors_ = 0;
  uint64_t iterations_ = 0;
  bool shutting_down_ = false;
  // The device fault the daemon stops for (DeviceFaulted), and the failed
  // iterations that reported it, in order, unanswered until
  // AnswerFaultReports.
  std::optional<DeviceFault> fault_;
  struct FaultReport {
    uint64_t job_id;
    std::string job_name;
    PendingReply to;
    uint64_t iteration;
    absl::Status status;
  };
  std::vector<FaultReport> fault_reports_;
  // The fault's suspects when there are several: the jobs with work in
  // flight on the device at the first report.
  std::vector<uint64_t> suspects_;
  std::vector<std::string> suspects_out_;
  // Checkpoint paths of the previous process's suspects not back yet.
  absl::flat_hash_set<std::string> fault_suspects_;
  std::function<void()> on_device_fault_;
  bool draining_ = false;  // registrations refused (admin drain)
  uint64_t config_reloads_ = 0;
  ServiceMeasurements measurements_;
  // Regions mapped (and pinned) on the preparation thread, until the loop
  // takes them: here rather than in a posted work item, so that one the loop
  // never ran (shutdown) is unpinned while the devices still exist.
  absl::Mutex mapped_mu_;
  std::map<uint64_t, absl::StatusOr<std::shared_ptr<SharedRegion>>> mapped_regions_ ABSL_GUARDED_BY(mapped_mu_);
  // Writes checkpoints to disk, in the order they were taken.
  std::unique_ptr<Executor> persist_ = std::make_unique<Executor>("persist");
  // Messages of a peer while one of them is parsed off the loop, in arrival
  // order (HandleMessage).
  struct Unparsed {
    PeerIdentity identity;
    std::shared_ptr<const std::string> payload;
    std::shared_ptr<const RequestFrames> frames;
  };
  absl::flat_hash_map<std::string, std::deque<Unparsed>> unparsed_;
  // Last: destroyed first, so their threads (which post back to the loop)
  // have ended before any other member goes. messages_ parses large
  // messages and builds large replies, prep_ prepares registrations and
  // maps shared memory.
  std::unique_ptr<Executor> messages_ = std::make_unique<Executor>("messages");
  std::unique_ptr<Executor> prep_ = std::make_unique<Executor>("prep");
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_SERVICE_H_
