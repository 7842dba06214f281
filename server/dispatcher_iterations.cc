// Iterations and reads on the device: dispatch onto lane streams, lane
// moves (RebalanceLanes), completion. Iterations that run in segments
// (op-granularity preemption): dispatcher_segments.cc. The run and read
// requests are checked and queued by Service (service_iterations.cc).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "device/device.h"
#include "ir/graph_builder.h"
#include "server/device_dispatcher.h"
#include "server/lane_work.h"
#include "server/tensor_frames.h"

namespace tandem::server {
namespace {

// Least time between two RebalanceLanes proposals on a device, and how many
// times a proposal's own duration must pass before the next one (so that
// proposals take at most about 1/kRebalanceSpacing of the control loop).
constexpr auto kRebalanceInterval = std::chrono::milliseconds(2);
constexpr int kRebalanceSpacing = 20;

// How recently another job must have ended an iteration for the device to
// count as shared (OthersActive): longer than a training loop's pause
// between iterations.
constexpr auto kActiveWindow = std::chrono::seconds(1);

size_t Align(size_t n) {
  return (n + device::kDeviceAlignment - 1) / device::kDeviceAlignment * device::kDeviceAlignment;
}

// Where one iteration's bytes sit in its staging slot: the inline and framed feeds in
// request order, then the requested fetches. Feeds in shared memory take no
// room (they are copied from there directly).
struct StagingLayout {
  std::vector<size_t> feed_offsets;   // per feed; unused for shared feeds
  std::vector<size_t> fetch_offsets;  // per requested fetch
  size_t bytes = 0;
};

StagingLayout LayOutStaging(const Graph& g, const v1::RunIterationRequest& run) {
  StagingLayout layout;
  for (const auto& feed : run.feeds()) {
    layout.feed_offsets.push_back(layout.bytes);
    // A framed feed's bytes are its type's (ValidateRun checked them).
    const size_t bytes = feed.has_shared()           ? 0
                         : FramesOf(feed).count == 0 ? feed.data().size()
                                                     : g.values[g.Find(feed.spec().name())].type.bytes();
    layout.bytes += Align(bytes);
  }
  for (const auto& name : run.fetches()) {
    layout.fetch_offsets.push_back(layout.bytes);
    layout.bytes += Align(g.values[g.Find(name)].type.bytes());
  }
  return layout;
}

}  // namespace

std::vector<void*> DeviceDispatcher::AddressTable(const Job& job, int variant) const {
  // Every graph of the job lists its persistent tensors in the
  // registration's order (PrepareJob checks it).
  const GraphView view = job.View(variant);
  const Graph& g = *view.graph;
  const IterationLayout& layout = *view.layout;
  std::vector<void*> table(g.values.size(), nullptr);
  for (size_t i = 0; i < g.persistents.size(); ++i) table[g.persistents[i]] = job.persistent[i];
  char* arena = static_cast<char*>(job.device->memory->LaneArena(job.lane));
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (layout.offset[v] >= 0) table[v] = arena + layout.offset[v];
    if (layout.stored_in[v] >= 0) table[v] = table[layout.stored_in[v]];
  }
  return table;
}

void DeviceDispatcher::RebalanceLanes() {
  // The policy proposes moves (PACK folds jobs that slow each other down
  // into one lane and spreads jobs that run well side by side); a move
  // happens between two iterations of the job, when memory allows it.
  // Asked at most every kRebalanceInterval, and later while a proposal took
  // long: a proposal weighs every job and every pair of the jobs' distinct
  // interference keys (with hundreds of unlike jobs, a millisecond), and
  // under a crowd of small inference models (thousands of iteration ends a
  // second) asking at every end was half of the control loop's time, its
  // whole limit; a training job's iterations end further apart than that,
  // so it still gets a decision at every boundary.
  const Clock::time_point now = Clock::now();
  if (now < dev_.next_rebalance) return;
  const std::vector<sched::LaneChange> changes = dev_.scheduler->Rebalance(dev_.memory->NumLanes());
  const Clock::time_point proposed = Clock::now();
  dev_.next_rebalance = proposed + std::max<Clock::duration>(kRebalanceInterval, (proposed - now) * kRebalanceSpacing);
  for (const sched::LaneChange& change : changes) {
    Job* j = host_.JobById(change.job);
    if (j == nullptr) continue;
    Job& job = *j;
    // Nothing of the job may be on the old lane's stream (an iteration or a
    // read), so that its next work on the new stream cannot overtake it.
    if (job.device_work > 0 || job.state != JobState::kRunning || job.lane != change.from_lane) continue;
    if (!dev_.memory->MoveJob(job.id, change.to_lane).ok()) continue;
    const bool moved = EnsureLane(change.to_lane).ok() && dev_.scheduler->MoveJob(job.id, change.to_lane).ok();
    if (!moved) (void)dev_.memory->MoveJob(job.id, change.from_lane);
    JournalArenaMoves(job.id);
    if (!moved) continue;
    TLOG_INFO("job moved to another lane")
        .With("job", job.id)
        .With("name", job.name)
        .With("from", change.from_lane)
        .With("to", change.to_lane);
    job.lane = change.to_lane;
    dev_.lane_moves++;
    dev_.journal.Add({.unix_seconds = DeviceJournal::UnixNow(),
                      .kind = JournalKind::kMove,
                      .job = job.id,
                      .lane = change.to_lane,
                      .from_lane = change.from_lane});
    dev_.lane_levels_stale = true;
  }
  if (!changes.empty()) ReleaseIdleRetired();
}

void DeviceDispatcher::DispatchAll() {
  // The scheduler's contract: after every event, offer every free lane.
  if (host_.ShuttingDown()) return;
  MatchLaneStreamLevels();
  // After a fault several jobs could have caused, the device runs one
  // iteration at a time while one of them has not completed an iteration
  // since (Job::suspect): should it fault again, it is alone.
  bool serialize = false;
  host_.ForEachJob([&](Job& job) {
    serialize = serialize || (job.device == &dev_ && job.suspect);
    return !serialize;
  });
  int outstanding = 0;
  for (const Lane& l : dev_.lanes) outstanding += l.outstanding;
  for (int lane = 0; lane < static_cast<int>(dev_.lanes.size()); ++lane) {
    Lane& l = dev_.lanes[lane];
    // A segmented iteration owns its lane until it ends: a parked one may
    // go on now, and nothing is staged behind it.
    if (l.segmented != nullptr) {
      MaybeResumeSegments(lane);
      continue;
    }
    while (l.outstanding < static_cast<int>(l.slots.size()) && l.segmented == nullptr) {
      if (serialize && outstanding > 0) return;
      // Old arena ranges are released when the lane drains: stage nothing
      // more behind a running iteration until then.
      if (l.outstanding > 0 && dev_.memory->HasRetired(lane)) break;
      std::optional<sched::Dispatch> next = dev_.scheduler->Next(lane);
      if (!next) break;
      Job* job = host_.JobById(next->job);
      auto q = job == nullptr ? decltype(job->queued)::iterator() : job->queued.find(next->ticket);
      if (job == nullptr || q == job->queued.end() || job->state != JobState::kRunning) {
        // Nothing to run for that ticket: give the dispatch back.
        dev_.scheduler->CancelDispatch(next->job, lane);
        continue;
      }
      QueuedIteration it = std::move(q->second);
      job->queued.erase(q);
      const int before = l.outstanding;
      StartIteration(lane, *job, *next, std::move(it));
      outstanding += l.outstanding - before;
    }
  }
}

bool DeviceDispatcher::OthersActive(const Job& job) {
  const Clock::time_point recent = Clock::now() - kActiveWindow;
  bool active = false;
  host_.ForEachJob([&](Job& other) {
    active = other.device == &dev_ && other.id != job.id && (other.inflight > 0 || other.last_done_at > recent);
    return !active;
  });
  return active;
}

void DeviceDispatcher::StartIteration(int lane, Job& job, const sched::Dispatch& dispatch, QueuedIteration it) {
  Lane& l = dev_.lanes[lane];
  l.stream->set_device_shared(OthersActive(job));
  int slot_index = 0;
  while (l.slots[slot_index].busy) ++slot_index;
  StagingSlot& slot = l.slots[slot_index];
  const v1::RunIterationRequest& run = it.request->run_iteration();
  const GraphView view = job.View(it.variant);
  const Graph& g = *view.graph;

  const StagingLayout layout = LayOutStaging(g, run);
  const size_t bytes = layout.bytes;
  if (slot.capacity < bytes) {
    // At least twice the old size, so that a slot grows a few times in its life.
    const size_t capacity = std::max({bytes, kMinStagingBytes, 2 * slot.capacity});
    LoopSection timed(loop_, "StartIteration/staging growth");
    if (absl::Status s = GiveSlotBuffer(l, slot, capacity); !s.ok()) {
      host_.ReplyError(it.reply, s);
      dev_.scheduler->CancelDispatch(job.id, lane);
      return;
    }
  }
  bool segmented = RunsInSegments(job, g, l, dispatch.segmented);
  if (segmented) {
    if (absl::Status s = EnsureSegmentEvents(l); !s.ok()) {
      // Still correct as a whole iteration, only not preemptible.
      TLOG_WARNING("iteration runs whole: no events for its segments").With("job", job.id).With("status", s.ToString());
      segmented = false;
    }
  }
  slot.busy = true;
  LaneGapProbe probe;
  probe.seq = l.next_seq++;
  probe.was_waiting = l.outstanding > 0 || it.enqueued <= l.last_done_at;
  probe.switched_job = probe.seq > 0 && l.last_started_job != job.id;
  l.last_started_job = job.id;
  if (l.outstanding == 0) l.occupied_since = Clock::now();
  l.outstanding++;
  job.device_work++;
  job.inflight++;
  job.dispatched++;

  std::vector<StagedCopy> feeds_in, fetches_out;
  std::vector<void*> table = AddressTable(job, it.variant);
  char* staging = static_cast<char*>(slot.host);
  for (int i = 0; i < run.feeds_size(); ++i) {
    const v1::Tensor& feed = run.feeds(i);
    void* dst = table[g.Find(feed.spec().name())];
    if (const SharedRegion* region = it.regions[i].get()) {
      feeds_in.push_back({dst, region->base() + feed.shared().offset(), feed.shared().bytes()});
      continue;
    }
    char* at = staging + layout.feed_offsets[i];
    uint64_t bytes = feed.data().size();
    if (FramesOf(feed).count > 0) {
      bytes = CopyTensorFrames(feed, *it.frames, at);  // ValidateRun checked them
    } else {
      std::memcpy(at, feed.data().data(), bytes);
    }
    feeds_in.push_back({dst, at, bytes});
  }
  for (int i = 0; i < run.fetches_size(); ++i) {
    int v = g.Find(run.fetches(i));
    fetches_out.push_back({staging + layout.fetch_offsets[i], table[v], g.values[v].type.bytes()});
  }

  if (segmented) {
    auto segments = std::make_unique<SegmentedIteration>();
    segments->job = job.id;
    segments->slot = slot_index;
    segments->probe = probe;
    segments->it = std::move(it);
    segments->table = std::make_shared<const std::vector<void*>>(std::move(table));
    segments->feeds = std::move(feeds_in);
    segments->fetches = std::move(fetches_out);
    segments->num_nodes = static_cast<int>(g.nodes.size());
    segments->segment_nodes = host_.Options().preemption_segment_nodes;
    segments->op_by_op_before = view.program->Counters().op_by_op_runs;
    segments->started = Clock::now();
    l.segmented = std::move(segments);
    AdvanceSegments(lane);
    return;
  }

  const IterationEvents& events = l.events[probe.seq % l.events.size()];
  LaneWork work;
  work.device = dev_.device.get();
  work.stream = l.stream.get();
  work.program = view.program;
  work.table = std::make_shared<const std::vector<void*>>(std::move(table));
  work.feeds = std::move(feeds_in);
  work.fetches = std::move(fetches_out);
  work.begin = events.begin.get();
  work.start = events.start.get();
  work.end = events.end.get();
  uint64_t job_id = job.id;
  l.executor->Post([this, lane, slot_index, job_id, probe, work = std::move(work), it = std::move(it)]() mutable {
    absl::Status status = EnqueueLaneWork(work);
    auto done = [this, lane, slot_index, job_id, probe, it = std::move(it)](absl::Status s) mutable {
      loop_.Post("Executor.OnIterationDone", [this, lane, slot_index, job_id, probe, it = std::move(it), s]() mutable {
        OnIterationDone(lane, slot_index, job_id, probe, std::move(it), s);
      });
    };
    if (status.ok()) status = work.device->OnComplete(*work.stream, done);
    if (!status.ok()) done(status);
  });
}

void DeviceDispatcher::OnIterationDone(int lane, int slot_index, uint64_t job_id, const LaneGapProbe& probe,
                                       QueuedIteration it, absl::Status status) {
  double seconds = 0;
  if (status.ok()) {
    LoopSection timed(loop_, "IterationEnd/event reads");
    const Lane& l = dev_.lanes[lane];
    const IterationEvents& events = l.events[probe.seq % l.events.size()];
    auto elapsed = dev_.device->ElapsedSeconds(*events.start, *events.end);
    if (elapsed.ok()) seconds = *elapsed;
  }
  FinishIteration(lane, slot_index, job_id, probe, std::move(it), std::move(status), seconds);
}

void DeviceDispatcher::FinishIteration(int lane, int slot_index, uint64_t job_id, const LaneGapProbe& probe,
                                       QueuedIteration it, absl::Status status, double seconds, bool measured) {
  Lane& l = dev_.lanes[lane];
  StagingSlot& slot = l.slots[slot_index];
  if (status.ok()) {
    LoopSection timed(loop_, "IterationEnd/event reads");
    // The lane's idle time since the previous iteration, when this one was
    // already waiting behind it.
    const IterationEvents& events = l.events[probe.seq % l.events.size()];
    if (probe.was_waiting && probe.seq > 0 && l.last_done_ok && l.last_done_seq == probe.seq - 1) {
      const IterationEvents& previous = l.events[(probe.seq - 1) % l.events.size()];
      auto gap = dev_.device->ElapsedSeconds(*previous.end, *events.begin);
      if (gap.ok()) host_.Measurements().OnLaneGap(dev_.index, probe.switched_job, *gap);
    }
  }
  l.last_done_ok = status.ok();
  l.last_done_seq = probe.seq;
  l.last_done_at = Clock::now();
  Job* job = host_.JobById(job_id);
  if (job != nullptr) {
    LoopSection timed(loop_, "IterationEnd/reply");
    job->inflight--;
    const v1::RunIterationRequest& run = it.request->run_iteration();
    if (status.ok()) {
      v1::Response response;
      v1::RunIterationResponse* r = response.mutable_run_iteration();
      r->set_job_id(job_id);
      r->set_iteration(run.iteration());
      r->set_run_seconds(seconds);
      r->set_queue_seconds(std::chrono::duration<double>(Clock::now() - it.enqueued).count() - seconds);
      const Graph& g = *job->View(it.variant).graph;
      const StagingLayout layout = LayOutStaging(g, run);
      for (int i = 0; i < run.fetches_size(); ++i) {
        const std::string& name = run.fetches(i);
        int v = g.Find(name);
        v1::Tensor* t = r->add_fetches();
        t->mutable_spec()->set_name(name);
        TensorTypeToProto(g.values[v].type, t->mutable_spec());
        t->set_data(static_cast<const char*>(slot.host) + layout.fetch_offsets[i], g.values[v].type.bytes());
      }
      job->done++;
      job->suspect = false;
      {
        const Clock::time_point now = Clock::now();
        if (job->done > 1) {
          const double interval = std::chrono::duration<double>(now - job->last_done_at).count();
          constexpr double kWeight = 0.05;  // about the last 20 iterations
          job->done_interval_seconds =
              job->done == 2 ? interval : (1 - kWeight) * job->done_interval_seconds + kWeight * interval;
        }
        job->last_done_at = now;
      }
      if (job->done == 1) WarmLanesFor(*job);  // its shapes' choices are made now
      job->device_seconds += seconds;
      dev_.iterations++;
      l.iterations++;
      l.busy_seconds += seconds;
      MeasureIteration(job_id, seconds, it.enqueued);
      JournalIteration(lane, *job, r->queue_seconds());
      host_.Reply(it.reply, std::move(response));
      host_.OnIterationReplied(*job);
    } else {
      job->failed++;
      if (!dev_.device->Fault().ok()) {
        host_.OnDeviceFault(*job, it.reply, run.iteration(), status);
      } else {
        TLOG_WARNING("iteration failed").With("job", job_id).With("name", job->name).With("status", status.ToString());
        host_.ReplyError(it.reply, absl::Status(status.code(), absl::StrCat("job '", job->name, "' iteration ",
                                                                            run.iteration(), ": ", status.message())));
      }
    }
  }
  {
    LoopSection timed(loop_, "IterationEnd/scheduler");
    if (status.ok()) {
      // Not measured: the scheduler takes a time of 0 as no measurement.
      dev_.scheduler->OnIterationDone(job_id, lane, measured ? seconds : 0.0);
    } else {
      dev_.scheduler->OnIterationAborted(job_id, lane);
    }
  }
  slot.busy = false;
  l.outstanding--;
  if (l.outstanding == 0) {
    l.occupied_seconds += std::chrono::duration<double>(Clock::now() - l.occupied_since).count();
    dev_.memory->ReleaseRetired(lane);
  }
  if (job != nullptr) {
    StartReads(*job);
    host_.OnDeviceWorkDone(job_id);  // may finish a close and erase the job
  }
  {
    LoopSection timed(loop_, "IterationEnd/rebalance");
    RebalanceLanes();
  }
  LoopSection timed(loop_, "IterationEnd/dispatch");
  DispatchAll();
}

void DeviceDispatcher::StartReads(Job& job) {
  while (!job.reads.empty() && job.state == JobState::kRunning &&
         job.dispatched >= job.reads.front().after_dispatched && !HasSegmentedIteration(job)) {
    PendingRead read = job.reads.front();
    job.reads.pop_front();
    int index = 0;
    while (job.graph->persistents[index] != read.value) ++index;
    void* src = job.persistent[index];
    TensorType type = job.graph->values[read.value].type;
    std::string name = job.graph->values[read.value].name;
    job.device_work++;
    device::Device* device = dev_.device.get();
    device::Stream* stream = dev_.lanes[job.lane].stream.get();
    uint64_t job_id = job.id;
    // The host buffer's allocation (pinned on a GPU: milliseconds for tens
    // of megabytes) on the lane's executor, the copy into the reply, the
    // reply's serialization and the buffer's release on the service's
    // message thread: the loop only answers.
    dev_.lanes[job.lane].executor->Post([=, this]() {
      absl::StatusOr<void*> host = device->AllocateHost(type.bytes());
      if (!host.ok()) {
        loop_.Post("Executor.OnReadDone", [=, this]() {
          host_.ReplyError(read.reply, host.status());
          host_.OnDeviceWorkDone(job_id);
        });
        return;
      }
      void* dst = *host;
      // On the device's completion thread, which must not call the device's
      // API: a failed copy's buffer is released on the loop.
      auto done = [=, this](absl::Status s) {
        loop_.Post("Executor.OnReadDone", [=, this]() {
          if (!s.ok()) {
            device->FreeHost(dst);
            host_.ReplyError(read.reply, s);
            host_.OnDeviceWorkDone(job_id);
            return;
          }
          host_.ReplyBuiltOffLoop(
              read.reply,
              [=]() {
                v1::Response response;
                v1::Tensor* t = response.mutable_read_tensor()->mutable_tensor();
                t->mutable_spec()->set_name(name);
                TensorTypeToProto(type, t->mutable_spec());
                t->set_data(static_cast<const char*>(dst), type.bytes());
                device->FreeHost(dst);
                return response;
              },
              [=, this]() { host_.OnDeviceWorkDone(job_id); });
        });
      };
      absl::Status s = device->CopyToHost(*stream, dst, src, type.bytes());
      if (s.ok()) s = device->OnComplete(*stream, done);
      if (!s.ok()) done(s);
    });
  }
}

}  // namespace tandem::server
