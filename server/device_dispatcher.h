// One device's dispatcher: its lanes and their streams, lane warm-up, the
// dispatch of iterations onto the lanes, their completion, op-granularity
// preemption (segmented iterations), and the device's journal and details.
//
// Service owns one DeviceDispatcher per device and keeps what spans the
// devices: sessions, registration and admission, the requests, admin. A
// dispatcher owns its device's state (DeviceRuntime, server/state.h) and
// reaches the rest of the daemon only through DispatcherHost, which Service
// implements. Everything here runs on the control loop thread (device
// completions are posted to it), like Service.
#ifndef TANDEM_SERVER_DEVICE_DISPATCHER_H_
#define TANDEM_SERVER_DEVICE_DISPATCHER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "server/event_loop.h"
#include "server/executor.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/state.h"
#include "tandem.pb.h"

namespace tandem::server {

// What a dispatcher needs from the service that owns it. Every member is
// called on the control loop thread only.
class DispatcherHost {
 public:
  virtual ~DispatcherHost() = default;

  // The daemon's options now: the live keys (policy, ...) change on reload,
  // so a dispatcher reads them at each use and keeps no copy.
  virtual const DaemonOptions& Options() const = 0;
  // True once the daemon began shutting down: the executors are going, so
  // nothing more is dispatched or warmed up.
  virtual bool ShuttingDown() const = 0;
  // The running, uploading or closing job `id` of any device, or null when
  // there is none (gone, or still waiting for memory). The pointer is good
  // until the next call that may end a job (MaybeFinishClose).
  virtual Job* JobById(uint64_t id) = 0;
  // Calls `fn` on every such job, of every device (a dispatcher checks
  // Job::device), in the service's order of its jobs, until `fn` returns
  // false. `fn` must not end a job.
  virtual void ForEachJob(absl::FunctionRef<bool(Job&)> fn) = 0;
  // A lane warm-up step of `job` ended (Job::warm_steps went down): a
  // closing job with nothing left on the device is freed and erased, and
  // the device's lanes offered work again (re-entering the dispatcher).
  // `job` may be gone after the call.
  virtual void MaybeFinishClose(Job& job) = 0;
  // One unit of the job's device work (an iteration, a read; counted in
  // Job::device_work by the dispatcher) completed: a closing job with
  // nothing left is freed and erased, as in MaybeFinishClose. The job may
  // be gone already (then nothing happens), and is gone after the call.
  virtual void OnDeviceWorkDone(uint64_t job_id) = 0;
  // An iteration of `job` succeeded and was answered: counted in the
  // daemon's totals, and the job's checkpoint taken when one is due (work
  // posted to its lane; the job stays).
  virtual void OnIterationReplied(Job& job) = 0;
  // Answers the request `to` (an iteration's or a read's); exactly one
  // reply per request, errors counted by code.
  virtual void Reply(const PendingReply& to, v1::Response response) = 0;
  virtual void ReplyError(const PendingReply& to, const absl::Status& status) = 0;
  // Answers `to` with the response `build` makes, built and serialized on
  // the service's message thread (a read's tensor of many megabytes held
  // every job's iterations up on the loop for its copies), then sent from
  // the loop, where `then` runs after the send. `build` may run on any
  // thread and must not touch the loop's state.
  virtual void ReplyBuiltOffLoop(const PendingReply& to, std::function<v1::Response()> build,
                                 std::function<void()> then) = 0;
  // An iteration of `job` failed with `status` on a device whose context is
  // lost (Device::Fault): the daemon restarts. The host answers `to` once
  // it knows which job's iteration faulted (server/service_faults.cc).
  virtual void OnDeviceFault(Job& job, const PendingReply& to, uint64_t iteration, const absl::Status& status) = 0;
  // The daemon's measurements (queue waits, lane gaps, GPU time shares),
  // keyed by DeviceRuntime::index.
  virtual ServiceMeasurements& Measurements() = 0;
};

class DeviceDispatcher {
 public:
  // `runtime`: the device's opened device, memory and scheduler (index set,
  // no lanes yet). `host` and `loop` outlive the dispatcher.
  DeviceDispatcher(std::unique_ptr<DeviceRuntime> runtime, DispatcherHost& host, EventLoop& loop);

  // The device's state. Service reads it (stats, metrics, admission,
  // checkpoints), posts uploads and checkpoint copies to a lane's executor,
  // and changes the memory and scheduler (admission, closing, priorities),
  // lane_levels_stale and spare_snapshots; the lanes themselves change only
  // through the dispatcher.
  DeviceRuntime& runtime() { return dev_; }
  const DeviceRuntime& runtime() const { return dev_; }

  // Offers every free lane of the device to the policy and starts what it
  // picks; resumes a parked segmented iteration that may go on. The
  // scheduler's contract: called after every event that may free a lane or
  // queue work (a request, a completion, an admission or a departure, a
  // priority or policy change). Nothing while shutting down.
  void DispatchAll();
  // Starts the job's pending reads whose iterations have been dispatched,
  // in order, on its lane's stream (none while one of its iterations runs
  // in segments, so that a read never sees half an iteration's updates).
  void StartReads(Job& job);
  // Whether one of `job`'s iterations runs in segments now (its reads wait
  // for its end, so that they never see half an iteration's updates).
  bool HasSegmentedIteration(const Job& job) const;
  // `job` began closing: its segmented iteration, if any, enqueues nothing
  // more and ends with CANCELLED once no segment is in flight (a parked one
  // on the next turn of the loop), so the job's memory and lane are freed.
  void StopSegmentedIteration(Job& job, const char* reason);

  // dispatcher_lanes.cc: lanes and their streams.
  // Opens lanes up to `lane` (streams, events, staging slots, executor),
  // each warmed up for the device's jobs (--warm_lanes).
  absl::Status EnsureLane(int lane);
  // Frees the retired arena ranges of every lane with nothing in flight (no
  // iteration, no warm-up step): a lane that closed, shrank or moved while
  // idle gives its memory back now, not when a later iteration ends there.
  void ReleaseIdleRetired();
  // Shutdown: stops the executors (their queued work runs first) and waits
  // for every lane's stream.
  void StopExecutors();
  // Shutdown, after the last completions: frees the page-locked buffers
  // (slots, retired slot buffers, spare snapshots).
  void FreeHostBuffers();

  // dispatcher_stats.cc: the device's details and journal.
  // The admin fields of the device's DeviceStats (lanes, admissions).
  void FillDeviceDetails(v1::DeviceStats* stats) const;
  // Journals (and counts) each lane whose arena moved since the last call;
  // `job`: the job whose admission, move or departure came just before.
  void JournalArenaMoves(uint64_t job);

 private:
  // dispatcher_lanes.cc.
  // Gives `slot` of `lane` a page-locked buffer of `capacity` bytes; its old
  // one is kept in lane.retired_host until shutdown (freeing page-locked
  // memory synchronizes the whole device).
  absl::Status GiveSlotBuffer(Lane& lane, StagingSlot& slot, size_t capacity);
  // The executor of a new lane: a new thread, or with --executor_threads N
  // once N exist, thread lane mod N.
  Executor* LaneExecutor(int lane);
  // Under PRIORITY (and stream_priorities), each lane's stream priority
  // level follows its jobs (server/lane_priority.h). Called by DispatchAll:
  // recomputes the wanted levels when jobs or priorities changed, and
  // replaces a lane's stream by one of its wanted level only while the lane
  // is idle (nothing of any of its jobs on the stream), so no work is
  // reordered. The old stream is destroyed on the executor thread.
  void MatchLaneStreamLevels();

  // dispatcher_warm.cc: lane warm-up (--warm_lanes). Queues `job` on every
  // other lane of the device (after its first iteration).
  void WarmLanesFor(const Job& job);
  // Queues, on the new `lane`, every running job of the device in another
  // lane that has finished an iteration.
  void WarmNewLane(int lane);
  // Posts the lane's next warm-up step unless one is in flight.
  void PumpWarmUp(int lane);
  void OnWarmStep(int lane, WarmTask task, const absl::StatusOr<int>& next);

  // dispatcher_stats.cc.
  // A successful iteration, for the measurements.
  void MeasureIteration(uint64_t job_id, double run_seconds, Clock::time_point enqueued);
  // Journals an iteration that captured a graph or waited long in the
  // daemon (DeviceRuntime::journal).
  void JournalIteration(int lane, Job& job, double queue_seconds);

  // dispatcher_iterations.cc: iterations and reads.
  // The policy's lane moves (between two iterations of a job), at most
  // every few milliseconds.
  void RebalanceLanes();
  void StartIteration(int lane, Job& job, const sched::Dispatch& dispatch, QueuedIteration it);
  // Whether another job on the device has an iteration in flight or ended
  // one within the last second (device::Stream::device_shared, set on the
  // lane's stream before each iteration).
  bool OthersActive(const Job& job);
  void OnIterationDone(int lane, int slot, uint64_t job_id, const LaneGapProbe& probe, QueuedIteration it,
                       absl::Status status);
  // The end of any iteration, whole or segmented, that ran `run_seconds` on
  // the device: the reply, the measurements, the scheduler's report (with
  // no time when not `measured`), and the slot and lane freed.
  void FinishIteration(int lane, int slot, uint64_t job_id, const LaneGapProbe& probe, QueuedIteration it,
                       absl::Status status, double run_seconds, bool measured = true);
  std::vector<void*> AddressTable(const Job& job, int variant) const;

  // dispatcher_segments.cc: op-granularity preemption. An iteration that may
  // have to yield runs in segments (state.h, SegmentedIteration); before
  // each one the loop asks the scheduler whether to pause.
  // Whether an iteration of `job` starting now on lane `l` runs in segments:
  // more nodes than a segment, nothing else on the lane's stream, and either
  // the scheduler `asked` (Dispatch::segmented: PACK's solo probe beside
  // running jobs) or preemption=op under PRIORITY with a job of higher
  // priority on the device.
  bool RunsInSegments(const Job& job, const Graph& graph, const Lane& l, bool asked) const;
  absl::Status EnsureSegmentEvents(Lane& l);
  // Enqueues segments of the lane's segmented iteration until enough are in
  // flight, it is done, or the scheduler says yield (then it parks).
  void AdvanceSegments(int lane);
  void EnqueueSegment(int lane, SegmentedIteration& run);
  void OnSegmentDone(int lane, uint64_t seq, int segment, absl::Status status);
  // Resumes a parked segmented iteration once ShouldYield turned false
  // (DispatchAll, after every event).
  void MaybeResumeSegments(int lane);
  void FinishSegmentedIteration(int lane);

  DispatcherHost& host_;
  EventLoop& loop_;
  // Owned; a stable address (Job::device points to it).
  const std::unique_ptr<DeviceRuntime> runtime_;
  DeviceRuntime& dev_;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_DEVICE_DISPATCHER_H_
