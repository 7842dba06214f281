// The control loop's state: sessions, jobs, devices and lanes.
//
// Everything here is owned by Service (a device's DeviceRuntime by its
// DeviceDispatcher, server/device_dispatcher.h) and touched only on the
// control loop thread, except where a field says otherwise.
#ifndef TANDEM_SERVER_STATE_H_
#define TANDEM_SERVER_STATE_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "base/unique_fd.h"
#include "compiler/iteration_layout.h"
#include "device/device.h"
#include "ir/graph.h"
#include "kernels/program.h"
#include "memory/device_memory.h"
#include "sched/scheduler.h"
#include "server/device_journal.h"
#include "server/executor.h"
#include "server/job_state.h"
#include "server/peer_identity.h"
#include "server/request_frames.h"
#include "server/shared_region.h"
#include "tandem.pb.h"

namespace tandem::server {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Session {
  uint64_t id = 0;
  std::string peer;  // ZeroMQ routing id
  // The connection that said hello: every later message must come from the
  // same client (a routing id reused by another connection gets nothing).
  PeerIdentity identity;
  bool admin = false;  // server/access_control.h, decided at hello
  // 16 random bytes given to the client at hello: it proves the session
  // where the routing id cannot (file descriptors passed on the side socket).
  std::string token;
  std::string client_name;
  uint32_t client_pid = 0;
  Clock::time_point last_seen;
  absl::btree_set<uint64_t> jobs;
  int registering = 0;  // registrations on the preparation thread (max_jobs_per_session counts them)
  absl::flat_hash_map<uint64_t, std::shared_ptr<SharedRegion>> regions;
  int regions_mapping = 0;  // map requests on the preparation thread
  // Descriptors passed on the side socket (server/fd_socket.h) under this
  // session's token, by nonce, until a request names them.
  absl::flat_hash_map<uint64_t, std::shared_ptr<UniqueFd>> received_fds;
};

// A request that waits for device work, with what is needed to answer it.
struct PendingReply {
  std::string peer;
  uint64_t request_id = 0;
};

struct QueuedIteration {
  PendingReply reply;
  std::shared_ptr<const v1::Request> request;  // holds the inline feed bytes
  // Per feed (in request order): its shared-memory region, or null when
  // the bytes are inline. Keeps the regions mapped until the copies ran.
  std::vector<std::shared_ptr<SharedRegion>> regions;
  // The frames after the request, for the feeds that name them
  // (Tensor.frame); null when none does.
  std::shared_ptr<const RequestFrames> frames;
  Clock::time_point enqueued;
  int variant = 0;  // which of the job's graphs runs (Job::View)
};

struct PendingRead {
  PendingReply reply;
  int value = -1;                 // persistent value id
  uint64_t after_dispatched = 0;  // dispatch this many iterations first
};

struct PendingRegistration {
  PendingReply reply;
  std::shared_ptr<const v1::Request> request;   // holds the initial values (inline ones)
  std::shared_ptr<const RequestFrames> frames;  // those sent as frames (Tensor.frame); may be null
};

struct DeviceRuntime;

// One of a job's graphs besides the one it registered with
// (RegisterJobRequest.variants): another batch shape, an evaluation pass. It
// has the job's persistent tensors, in the registration's order, and its own
// feeds, fetches, updates and memory plan.
struct GraphVariant {
  std::string name;
  std::unique_ptr<Graph> graph;  // stable address: the program points into it
  IterationLayout layout;
  std::unique_ptr<Program> program;
};

// What an iteration of one of a job's graphs uses.
struct GraphView {
  const Graph* graph = nullptr;
  const IterationLayout* layout = nullptr;
  Program* program = nullptr;
};

struct Job {
  uint64_t id = 0;
  uint64_t session = 0;
  PeerIdentity owner;        // the identity of the session that registered it
  bool admin_owner = false;  // that session was an administrator's
  std::string name;
  JobStateMachine state;  // server/job_state.h: changes only through state.MoveTo
  DeviceRuntime* device = nullptr;
  int lane = 0;
  v1::JobHints hints;
  std::string interference_key;
  PendingRegistration registration;  // until the registration is answered

  std::unique_ptr<Graph> graph;  // stable address: the program points into it
  IterationLayout layout;
  // Used by its lane's executor thread only; a job moves to another lane
  // only with nothing of it in flight (DeviceDispatcher::RebalanceLanes), whose
  // completions reached the loop after the old thread's last use.
  std::unique_ptr<Program> program;
  std::vector<GraphVariant> variants;
  ProgramCounters counters_seen;  // Counters() when its last iteration ended (journal)
  std::vector<void*> persistent;  // per graph.persistents entry
  uint64_t persistent_bytes = 0;

  absl::flat_hash_map<uint64_t, QueuedIteration> queued;  // by scheduler ticket
  std::deque<PendingRead> reads;
  int device_work = 0;      // uploads, iterations and reads enqueued, not completed
  int warm_steps = 0;       // lane warm-up steps posted, not done (dispatcher_warm.cc); the job stays until 0
  int inflight = 0;         // iterations enqueued, not completed
  uint64_t received = 0;    // iterations accepted
  uint64_t dispatched = 0;  // iterations handed to the device
  uint64_t done = 0;        // iterations completed successfully
  // Wall time between completed iterations, exponentially weighted (the
  // progress rate of tandemctl jobs), and the last completion.
  double done_interval_seconds = 0;
  Clock::time_point last_done_at{};
  uint64_t failed = 0;
  // Resumed after a device fault that it may have caused (it had work on
  // the device then, beside other jobs): its device runs one iteration at a
  // time until this job completes one, so that a second fault names it
  // (server/service_faults.cc).
  bool suspect = false;
  double device_seconds = 0;
  uint64_t yields = 0;                      // pauses of its iterations for a higher priority (op preemption)
  std::vector<PendingReply> close_replies;  // answered when the job is gone

  // Checkpoints (server/service_checkpoints.cc). Empty path: none (no
  // state_dir, an unnamed job, a job that updates nothing, an owner without
  // a principal).
  std::string checkpoint_path;
  std::string checkpoint_owner;
  std::string resume_token;
  uint64_t resumed_iterations = 0;    // the checkpoint it started from had done these
  uint64_t snapshot_iterations = 0;   // the iterations the last periodic snapshot holds
  bool checkpoint_in_flight = false;  // a periodic snapshot copying or writing
  bool discard_checkpoint = false;    // closed by its client: the file goes
  Clock::time_point next_checkpoint{};
  // The periodic snapshot's page-locked buffer (persistent_bytes), kept
  // while the job lives; then it goes to its device's spares.
  void* snapshot_host = nullptr;

  // Graph 0 is the registered one, graph k > 0 variants[k - 1].
  GraphView View(int variant) const {
    if (variant == 0) return {graph.get(), &layout, program.get()};
    const GraphVariant& v = variants[variant - 1];
    return {v.graph.get(), &v.layout, v.program.get()};
  }
  // The index of the graph named `name` ("" the registered one), or -1.
  int FindVariant(const std::string& name) const {
    if (name.empty()) return 0;
    for (size_t i = 0; i < variants.size(); ++i) {
      if (variants[i].name == name) return static_cast<int>(i) + 1;
    }
    return -1;
  }
  // Its lane arena's share: the largest of its graphs' plans.
  uint64_t ArenaBytes() const {
    uint64_t bytes = layout.arena_bytes;
    for (const GraphVariant& v : variants) bytes = std::max<uint64_t>(bytes, v.layout.arena_bytes);
    return bytes;
  }
  // Its graphs' programs' counters, summed.
  ProgramCounters Counters() const {
    ProgramCounters sum;
    for (int i = 0; i <= static_cast<int>(variants.size()); ++i) {
      const Program* p = View(i).program;
      if (p == nullptr) continue;
      const ProgramCounters c = p->Counters();
      sum.graph_launches += c.graph_launches;
      sum.op_by_op_runs += c.op_by_op_runs;
      sum.captures += c.captures;
      sum.recapture_seconds += c.recapture_seconds;
      sum.recapture_run_seconds += c.recapture_run_seconds;
      sum.recapture_graph_seconds += c.recapture_graph_seconds;
      sum.warmed_nodes += c.warmed_nodes;
    }
    return sum;
  }
};

// A slot's smallest buffer, allocated with its lane: a feed-and-fetch
// staging area of the small models of inference hosting never grows, so
// serving allocates no page-locked memory (an allocation, like a free, is a
// device-wide synchronization point).
inline constexpr size_t kMinStagingBytes = size_t{1} << 20;

// A host staging area for one in-flight iteration of a lane: feeds are
// copied in before the iteration, fetches land here after it.
struct StagingSlot {
  void* host = nullptr;
  size_t capacity = 0;
  bool busy = false;
};

// The events one iteration records on its lane's stream: before its first
// feed copy (begin), before its first kernel (start) and after its last
// kernel (end). start..end is its device time; the previous iteration's end
// to its begin is the lane's idle time between the two.
struct IterationEvents {
  std::unique_ptr<device::Event> begin;
  std::unique_ptr<device::Event> start;
  std::unique_ptr<device::Event> end;
};

// What an iteration needs at completion to measure the gap before it.
struct LaneGapProbe {
  uint64_t seq = 0;
  // It was already waiting when the previous one finished: enqueued behind
  // it on the stream, or queued in the daemon before its completion was
  // seen. Only then is the gap the runtime's cost rather than a wait for work.
  bool was_waiting = false;
  bool switched_job = false;  // the previous one was another job's
};

// A copy between host staging memory (a slot, a shared region) and the
// device: a feed before an iteration's first node, a fetch after its last.
struct StagedCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

// An iteration enqueued in segments of nodes, so that it can pause between
// two of them while a higher-priority iteration runs (op-granularity
// preemption, docs/scheduling.md). It owns its lane from start to end: the
// lane's arena holds its ephemeral tensors the whole time, so nothing else
// starts or is staged on the lane meanwhile. Owned by the lane; loop only.
struct SegmentedIteration {
  uint64_t job = 0;
  int slot = 0;
  LaneGapProbe probe;
  QueuedIteration it;
  // One address table for every segment (the lane's arena may be replaced
  // while the iteration runs; the old one stays until the lane drains).
  std::shared_ptr<const std::vector<void*>> table;
  std::vector<StagedCopy> feeds;    // made by the first segment
  std::vector<StagedCopy> fetches;  // made by the last segment
  int num_nodes = 0;
  int segment_nodes = 1;
  int next_node = 0;          // the first node not enqueued yet
  int next_segment = 0;       // index of the next segment to enqueue
  int in_flight = 0;          // segments enqueued whose completion was not seen
  bool parked = false;        // yielded: no segment is enqueued until ShouldYield turns false
  bool resumed = false;       // the next segment follows a pause (its gap is not idle time)
  int pauses = 0;             // times it yielded
  Clock::time_point started;  // when its first segment was enqueued (the journal's "segmented" entry)
  double run_seconds = 0;     // the completed segments' device time
  // The program's op-by-op runs when it started (ProgramCounters): a
  // segmented iteration whose node ranges ran op by op (their first run on
  // the lane, before their graphs are captured) is not a measurement.
  int64_t op_by_op_before = 0;
  // The first failure (a segment's, or the job closing); no segment is
  // enqueued after it, and the iteration ends once none is in flight.
  absl::Status status;
};

// Per segment: events around its nodes, for its device time and the idle
// time before it.
struct SegmentEvents {
  std::unique_ptr<device::Event> start;
  std::unique_ptr<device::Event> end;
  bool follows_pause = false;  // the segment was enqueued on a resume
};

// A job's lane warm-up on one lane: the node to continue from
// (Program::WarmStream).
struct WarmTask {
  uint64_t job = 0;
  int node = 0;
};

struct Lane {
  std::unique_ptr<device::Stream> stream;
  // Enqueues everything of this lane's stream, in the loop's order (one of
  // DeviceRuntime::executors).
  Executor* executor = nullptr;
  int stream_level = 0;         // the stream's priority level (device.h)
  int wanted_stream_level = 0;  // what its jobs call for (lane_priority.h)
  std::vector<StagingSlot> slots;
  // Staging buffers a slot outgrew, freed at shutdown: freeing page-locked
  // memory synchronizes the whole device (every lane's queued work), and
  // slots grow on the control loop, in the middle of serving.
  std::vector<void*> retired_host;
  int outstanding = 0;  // iterations enqueued, not completed
  // Lane warm-up (dispatcher_warm.cc): jobs to ready this lane's stream for,
  // one step in flight at a time.
  std::deque<WarmTask> warm_tasks;
  bool warm_in_flight = false;
  // Each iteration started on the lane gets a sequence number and records
  // its events in events[seq % size]. There is one entry more than slots,
  // so an iteration's entry is still its own when the next one completes.
  std::vector<IterationEvents> events;
  uint64_t next_seq = 0;
  uint64_t last_started_job = 0;
  bool last_done_ok = false;  // the last completed iteration recorded its end
  uint64_t last_done_seq = 0;
  std::chrono::steady_clock::time_point last_done_at{};  // when the loop saw it complete
  // The iteration running in segments, or null.
  std::unique_ptr<SegmentedIteration> segmented;
  // Segment k of an iteration records its events in segment_events[k % size]
  // (segments in flight + 1 entries, made on first use): the entry of the
  // segment before a completing one is still intact.
  std::vector<SegmentEvents> segment_events;
  uint64_t iterations = 0;  // completed here
  double busy_seconds = 0;  // their summed iteration time
  // Wall time with an iteration enqueued or running here (OccupiedSeconds):
  // a lane occupied all the time while its busy_seconds (the programs'
  // kernels) are far less is bounded by its copies and round trips, not by
  // the GPU.
  double occupied_seconds = 0;       // closed stretches
  Clock::time_point occupied_since;  // start of the open one (outstanding > 0)

  double OccupiedSeconds(Clock::time_point now) const {
    return occupied_seconds + (outstanding > 0 ? std::chrono::duration<double>(now - occupied_since).count() : 0.0);
  }
};

// One device's state, owned by its DeviceDispatcher (server/device_dispatcher.h).
struct DeviceRuntime {
  int index = 0;  // its place among Service's dispatchers (Service::DispatcherOf, the measurements)
  std::unique_ptr<device::Device> device;
  std::unique_ptr<memory::DeviceMemory> memory;
  std::unique_ptr<sched::Scheduler> scheduler;
  std::vector<Lane> lanes;  // by lane index; grows as memory opens lanes
  uint64_t iterations = 0;
  uint64_t lane_moves = 0;           // jobs the policy moved to another lane
  uint64_t staging_allocations = 0;  // page-locked staging buffers allocated (lanes' slots)
  uint64_t arena_moves = 0;          // times a lane's arena moved to other addresses
  uint64_t warm_steps = 0;           // lane warm-up steps run (dispatcher_warm.cc)
  std::vector<void*> arenas_seen;    // each lane's arena as last seen (JournalArenaMoves)
  // Recent moves, captures and long waits, with wall-clock times.
  DeviceJournal journal;
  // When the policy may next be asked for moves (RebalanceLanes: at least
  // kRebalanceInterval apart, more while a proposal takes long).
  Clock::time_point next_rebalance;
  // Jobs, lanes or priorities changed since the lanes' wanted stream levels
  // were computed.
  bool lane_levels_stale = true;
  // Op-granularity preemption: pauses of a segmented iteration, segments
  // run, and the device's idle time between consecutive segments of an
  // iteration (pauses excluded): what running in segments costs.
  uint64_t yields = 0;
  uint64_t segments = 0;
  double segment_gap_seconds = 0;
  // Page-locked snapshot buffers of jobs that left (Job::snapshot_host),
  // with their sizes, for later jobs' snapshots: freeing page-locked memory
  // would synchronize the whole device. Freed at shutdown.
  std::vector<std::pair<void*, size_t>> spare_snapshots;
  // The threads that enqueue the lanes' device work (Lane::executor): one
  // per lane, or --executor_threads shared round robin. Last: destroyed
  // first, so their threads stop before the streams go.
  std::vector<std::unique_ptr<Executor>> executors;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_STATE_H_
