// Op-granularity preemption: iterations that run in segments.
//
// A segmented iteration is enqueued `preemption_segment_nodes` nodes at a
// time (Program::EnqueueNodes), with up to `preemption_segments_in_flight`
// segments on the stream at once. Each segment's completion comes back to
// the loop, which asks the scheduler whether to go on: ShouldYield(lane)
// true parks the iteration (OnIterationYielded) with its lane, arena and
// slot held; DispatchAll, which runs after every event, resumes it
// (OnIterationResumed) once ShouldYield turns false. The first segment also
// makes the feed copies and the last one the fetch copies, so the iteration
// ends like a whole one (FinishIteration), with the sum of its segments'
// device times as its run time.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "device/device.h"
#include "server/device_dispatcher.h"
#include "server/lane_work.h"

namespace tandem::server {

bool DeviceDispatcher::RunsInSegments(const Job& job, const Graph& graph, const Lane& l, bool asked) const {
  if (l.outstanding > 0) return false;
  if (static_cast<int>(graph.nodes.size()) <= host_.Options().preemption_segment_nodes) return false;
  // The scheduler asked (PACK's solo probe beside running jobs).
  if (asked) return true;
  if (host_.Options().preemption != "op" || dev_.scheduler->policy() != "priority") return false;
  // Jobs of the highest priority present never yield (and are the only
  // ones the scheduler stages behind a running iteration): they keep the
  // whole-iteration path, a captured graph's replay on CUDA.
  bool higher = false;
  host_.ForEachJob([&](Job& other) {
    higher =
        other.device == &dev_ && other.state != JobState::kClosing && other.hints.priority() > job.hints.priority();
    return !higher;
  });
  return higher;
}

absl::Status DeviceDispatcher::EnsureSegmentEvents(Lane& l) {
  if (!l.segment_events.empty()) return absl::OkStatus();
  std::vector<SegmentEvents> events(host_.Options().preemption_segments_in_flight + 1);
  for (SegmentEvents& e : events) {
    ASSIGN_OR_RETURN(e.start, dev_.device->CreateEvent());
    ASSIGN_OR_RETURN(e.end, dev_.device->CreateEvent());
  }
  l.segment_events = std::move(events);
  return absl::OkStatus();
}

bool DeviceDispatcher::HasSegmentedIteration(const Job& job) const {
  if (job.device != &dev_ || job.lane < 0 || job.lane >= static_cast<int>(dev_.lanes.size())) return false;
  const SegmentedIteration* run = dev_.lanes[job.lane].segmented.get();
  return run != nullptr && run->job == job.id;
}

void DeviceDispatcher::AdvanceSegments(int lane) {
  SegmentedIteration& run = *dev_.lanes[lane].segmented;
  while (run.status.ok() && !run.parked && run.next_node < run.num_nodes &&
         run.in_flight < host_.Options().preemption_segments_in_flight) {
    if (dev_.scheduler->ShouldYield(lane)) {
      dev_.scheduler->OnIterationYielded(lane);
      run.parked = true;
      run.pauses++;
      dev_.yields++;
      if (Job* j = host_.JobById(run.job); j != nullptr) j->yields++;
      TLOG_DEBUG("iteration yields")
          .With("job", run.job)
          .With("lane", lane)
          .With("next_node", run.next_node)
          .With("nodes", run.num_nodes);
      return;
    }
    EnqueueSegment(lane, run);
  }
}

void DeviceDispatcher::MaybeResumeSegments(int lane) {
  SegmentedIteration& run = *dev_.lanes[lane].segmented;
  if (!run.parked || !run.status.ok() || dev_.scheduler->ShouldYield(lane)) return;
  dev_.scheduler->OnIterationResumed(lane);
  run.parked = false;
  run.resumed = true;
  TLOG_DEBUG("iteration resumes").With("job", run.job).With("lane", lane).With("next_node", run.next_node);
  AdvanceSegments(lane);
}

void DeviceDispatcher::EnqueueSegment(int lane, SegmentedIteration& run) {
  Lane& l = dev_.lanes[lane];
  const int begin_node = run.next_node;
  const int end_node = std::min(run.num_nodes, begin_node + run.segment_nodes);
  const int segment = run.next_segment++;
  const bool first = segment == 0;
  const bool last = end_node == run.num_nodes;
  run.next_node = end_node;
  run.in_flight++;
  dev_.segments++;
  SegmentEvents& events = l.segment_events[segment % l.segment_events.size()];
  events.follows_pause = run.resumed;
  run.resumed = false;
  const IterationEvents& whole = l.events[run.probe.seq % l.events.size()];

  LaneWork work;
  work.device = dev_.device.get();
  work.stream = l.stream.get();
  // The job outlives its iteration: device_work keeps a closing job.
  work.program = host_.JobById(run.job)->View(run.it.variant).program;
  work.table = run.table;
  work.whole = false;
  work.begin_node = begin_node;
  work.end_node = end_node;
  work.first = first;
  work.last = last;
  if (first) work.feeds = std::move(run.feeds);
  if (last) work.fetches = run.fetches;
  work.begin = whole.begin.get();
  work.start = whole.start.get();
  work.end = whole.end.get();
  work.segment_start = events.start.get();
  work.segment_end = events.end.get();
  const uint64_t seq = run.probe.seq;
  l.executor->Post([this, lane, seq, segment, work = std::move(work)]() {
    absl::Status status = EnqueueLaneWork(work);
    auto done = [this, lane, seq, segment](absl::Status s) {
      loop_.Post("Executor.OnSegmentDone", [this, lane, seq, segment, s]() { OnSegmentDone(lane, seq, segment, s); });
    };
    if (status.ok()) status = work.device->OnComplete(*work.stream, done);
    if (!status.ok()) done(status);
  });
}

void DeviceDispatcher::OnSegmentDone(int lane, uint64_t seq, int segment, absl::Status status) {
  // Also while shutting down: the iteration was stopped (StopSegmentedIteration
  // enqueues nothing more) and ends, answered, with its last segment.
  Lane& l = dev_.lanes[lane];
  SegmentedIteration* run = l.segmented.get();
  if (run == nullptr || run->probe.seq != seq) {
    TLOG_ERROR("a segment completed for no segmented iteration").With("lane", lane).With("seq", seq);
    return;
  }
  run->in_flight--;
  if (status.ok()) {
    const SegmentEvents& events = l.segment_events[segment % l.segment_events.size()];
    auto elapsed = dev_.device->ElapsedSeconds(*events.start, *events.end);
    if (elapsed.ok()) run->run_seconds += *elapsed;
    // The device's idle time since the previous segment: the round trip
    // through the loop that segments in flight are meant to hide.
    if (segment > 0 && !events.follows_pause) {
      const SegmentEvents& previous = l.segment_events[(segment - 1) % l.segment_events.size()];
      auto gap = dev_.device->ElapsedSeconds(*previous.end, *events.start);
      if (gap.ok() && *gap > 0) dev_.segment_gap_seconds += *gap;
    }
  } else if (run->status.ok()) {
    run->status = status;
  }
  if (run->in_flight == 0 && (!run->status.ok() || run->next_node == run->num_nodes)) {
    FinishSegmentedIteration(lane);
    return;
  }
  const bool was_parked = run->parked;
  AdvanceSegments(lane);
  // A pause is an event for the scheduler (the lane no longer counts as
  // running): offer the free lanes again.
  if (!was_parked && run->parked) DispatchAll();
}

void DeviceDispatcher::FinishSegmentedIteration(int lane) {
  std::unique_ptr<SegmentedIteration> run = std::move(dev_.lanes[lane].segmented);
  // A parked iteration that ends (its job closed) needs no resume: the
  // scheduler's done or abort report ends the pause too.
  bool measured = true;
  if (const Job* job = host_.JobById(run->job); job != nullptr) {
    measured = job->View(run->it.variant).program->Counters().op_by_op_runs == run->op_by_op_before;
  }
  // Those that paused: the others held no other lane up (and would crowd
  // the journal's other entries out under PRIORITY's op preemption).
  if (run->pauses > 0) {
    dev_.journal.Add({.unix_seconds = DeviceJournal::UnixNow(),
                      .kind = JournalKind::kSegmented,
                      .job = run->job,
                      .lane = lane,
                      .seconds = std::chrono::duration<double>(Clock::now() - run->started).count(),
                      .run_seconds = run->run_seconds,
                      .pauses = run->pauses});
  }
  FinishIteration(lane, run->slot, run->job, run->probe, std::move(run->it), run->status, run->run_seconds, measured);
}

void DeviceDispatcher::StopSegmentedIteration(Job& job, const char* reason) {
  if (!HasSegmentedIteration(job)) return;
  const int lane = job.lane;
  SegmentedIteration& run = *dev_.lanes[lane].segmented;
  if (run.status.ok()) run.status = absl::CancelledError(absl::StrCat("job ", job.id, " closed: ", reason));
  if (run.in_flight > 0) return;  // ends when its last segment in flight completes
  // Parked: nothing will complete. It ends on the next turn of the loop,
  // since the caller still uses `job`, which the end may erase.
  const uint64_t seq = run.probe.seq;
  loop_.Post("Service.EndParkedIteration", [this, lane, seq]() {
    const SegmentedIteration* parked = dev_.lanes[lane].segmented.get();
    if (parked == nullptr || parked->probe.seq != seq || parked->in_flight > 0) return;
    FinishSegmentedIteration(lane);
  });
}

}  // namespace tandem::server
