// The device's admin details (tandemctl stats), its iterations'
// measurements and its journal of moves, captures and long waits.
#include <chrono>

#include "server/device_dispatcher.h"

namespace tandem::server {

void DeviceDispatcher::FillDeviceDetails(v1::DeviceStats* stats) const {
  memory::DeviceMemoryStats m = dev_.memory->Stats();
  stats->set_jobs_admitted(m.jobs_admitted);
  stats->set_jobs_refused(m.jobs_refused);
  stats->set_retired_bytes(m.retired_bytes);
  stats->set_largest_free_bytes(m.largest_free_bytes);
  stats->set_stream_priority_levels(static_cast<uint32_t>(dev_.device->info().stream_priority_levels));
  for (const memory::LaneStats& lane : m.lanes) {
    v1::LaneInfo* l = stats->add_lane_info();
    l->set_lane(static_cast<uint32_t>(lane.lane));
    l->set_arena_bytes(lane.arena_bytes);
    l->set_retired_bytes(lane.retired_bytes);
    for (memory::JobId job : lane.jobs) l->add_jobs(job);
    if (lane.lane >= 0 && lane.lane < static_cast<int>(dev_.lanes.size())) {
      l->set_running_iterations(static_cast<uint32_t>(dev_.lanes[lane.lane].outstanding));
      l->set_stream_level(static_cast<uint32_t>(dev_.lanes[lane.lane].stream_level));
      l->set_iterations(dev_.lanes[lane.lane].iterations);
      l->set_busy_seconds(dev_.lanes[lane.lane].busy_seconds);
      l->set_occupied_seconds(dev_.lanes[lane.lane].OccupiedSeconds(Clock::now()));
    }
  }
  stats->set_lane_moves(dev_.lane_moves);
  for (const auto& executor : dev_.executors) {
    const HandlerStats e = executor->Stats();
    v1::ExecutorStats* x = stats->add_executors();
    x->set_name(executor->name());
    x->set_items(e.count);
    x->set_busy_seconds(e.total_seconds);
    x->set_wait_seconds(e.wait_seconds);
    x->set_max_wait_seconds(e.max_wait_seconds);
  }
  ProgramCounters programs;
  host_.ForEachJob([&](Job& job) {
    if (job.device != &dev_ || job.program == nullptr) return true;
    const ProgramCounters c = job.Counters();
    programs.graph_launches += c.graph_launches;
    programs.op_by_op_runs += c.op_by_op_runs;
    programs.captures += c.captures;
    return true;
  });
  stats->set_graph_launches(static_cast<uint64_t>(programs.graph_launches));
  stats->set_op_by_op_runs(static_cast<uint64_t>(programs.op_by_op_runs));
  stats->set_graph_captures(static_cast<uint64_t>(programs.captures));
  for (const JournalEntry& e : dev_.journal.Since(0)) {
    v1::DeviceEvent* event = stats->add_events();
    event->set_unix_seconds(e.unix_seconds);
    event->set_kind(JournalKindName(e.kind));
    event->set_job(e.job);
    event->set_lane(e.lane);
    event->set_from_lane(e.from_lane);
    event->set_seconds(e.seconds);
    event->set_run_seconds(e.run_seconds);
    event->set_graph_seconds(e.graph_seconds);
    event->set_pauses(e.pauses);
  }
  stats->set_events_dropped(dev_.journal.dropped());
  stats->set_staging_allocations(dev_.staging_allocations);
  stats->set_arena_moves(dev_.arena_moves);
  stats->set_warm_steps(dev_.warm_steps);
  if (const DeviceMeasurements* d = host_.Measurements().Device(dev_.index); d != nullptr) {
    stats->set_busy_seconds(d->busy_seconds);
  }
}

void DeviceDispatcher::MeasureIteration(uint64_t job_id, double run_seconds, Clock::time_point enqueued) {
  double waited = std::chrono::duration<double>(Clock::now() - enqueued).count() - run_seconds;
  const double now_seconds = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  host_.Measurements().OnIteration(dev_.index, job_id, run_seconds, waited, now_seconds);
}

void DeviceDispatcher::JournalArenaMoves(uint64_t job) {
  const int lanes = dev_.memory->NumLanes();
  if (static_cast<int>(dev_.arenas_seen.size()) < lanes) dev_.arenas_seen.resize(lanes, nullptr);
  for (int lane = 0; lane < static_cast<int>(dev_.arenas_seen.size()); ++lane) {
    void* arena = lane < lanes ? dev_.memory->LaneArena(lane) : nullptr;
    void*& seen = dev_.arenas_seen[lane];
    // A lane that opens or closes is no move: no job of it had a table.
    if (arena != nullptr && seen != nullptr && arena != seen) {
      dev_.arena_moves++;
      dev_.journal.Add(
          {.unix_seconds = DeviceJournal::UnixNow(), .kind = JournalKind::kArena, .job = job, .lane = lane});
    }
    seen = arena;
  }
}

void DeviceDispatcher::JournalIteration(int lane, Job& job, double queue_seconds) {
  const ProgramCounters c = job.Counters();
  const ProgramCounters& seen = job.counters_seen;
  if (c.captures > seen.captures) {
    dev_.journal.Add({.unix_seconds = DeviceJournal::UnixNow(),
                      .kind = JournalKind::kCapture,
                      .job = job.id,
                      .lane = lane,
                      .seconds = c.recapture_seconds - seen.recapture_seconds,
                      .run_seconds = c.recapture_run_seconds - seen.recapture_run_seconds,
                      .graph_seconds = c.recapture_graph_seconds - seen.recapture_graph_seconds});
  }
  job.counters_seen = c;
  if (queue_seconds >= DeviceJournal::kSlowWaitSeconds) {
    dev_.journal.Add({.unix_seconds = DeviceJournal::UnixNow(),
                      .kind = JournalKind::kSlowWait,
                      .job = job.id,
                      .lane = lane,
                      .seconds = queue_seconds});
  }
}

}  // namespace tandem::server
