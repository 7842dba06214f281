// Service::RenderMetrics: every metric of the daemon in the Prometheus text
// format. Rendered on the control loop, so it reads the state directly; the
// HTTP thread only ever sees the finished text (metrics_http.h).
// docs/deploy.md lists the metrics.
#include <algorithm>
#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "proto/loop_names.h"
#include "server/service.h"

namespace tandem::server {
namespace {

using Labels = PrometheusWriter::Labels;

}  // namespace

std::string Service::RenderMetrics() {
  absl::flat_hash_set<uint64_t> live;
  for (const auto& [id, job] : jobs_) live.insert(id);
  measurements_.RetainJobs(live);
  const double now = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  const Histogram empty(SecondsBuckets());
  PrometheusWriter w;

  // --- the daemon -----------------------------------------------------------
  w.Family("tandem_build_info", "gauge", "tandemd's version and policy (value 1)");
  w.Sample("tandem_build_info", {{"version", kDaemonVersion}, {"policy", options_.policy}}, 1);
  w.Family("tandem_uptime_seconds", "gauge", "seconds since tandemd started");
  w.Sample("tandem_uptime_seconds", {}, SecondsSince(started_));
  w.Family("tandem_sessions", "gauge", "open client sessions");
  w.Sample("tandem_sessions", {}, static_cast<double>(sessions_.size()));
  w.Family("tandem_jobs", "gauge", "jobs by state");
  uint64_t by_state[4] = {0, 0, 0, 0};
  for (const auto& [id, job] : jobs_) by_state[static_cast<int>(job->state.get())]++;
  by_state[static_cast<int>(JobState::kWaitingForMemory)] += waiting_for_memory_.size();
  for (JobState s : {JobState::kWaitingForMemory, JobState::kUploading, JobState::kRunning, JobState::kClosing}) {
    w.Sample("tandem_jobs", {{"state", JobStateName(s)}}, static_cast<double>(by_state[static_cast<int>(s)]));
  }
  w.Family("tandem_draining", "gauge", "1 while new jobs are refused (tandemctl drain)");
  w.Sample("tandem_draining", {}, draining_ ? 1 : 0);
  w.Family("tandem_requests_total", "counter", "requests received");
  w.Sample("tandem_requests_total", {}, static_cast<double>(requests_));
  w.Family("tandem_errors_total", "counter", "error replies by status code");
  for (const auto& [code, count] : measurements_.errors_by_code()) {
    w.Sample("tandem_errors_total", {{"code", absl::StatusCodeToString(code)}}, static_cast<double>(count));
  }
  w.Family("tandem_iterations_total", "counter", "iterations completed successfully on every device");
  w.Sample("tandem_iterations_total", {}, static_cast<double>(iterations_));
  w.Family("tandem_iteration_yields_total", "counter",
           "pauses of a lower-priority iteration at a segment boundary for a higher-priority one (preemption=op)");
  uint64_t yields = 0;
  for (const auto& dev : devices_) yields += dev->runtime().yields;
  w.Sample("tandem_iteration_yields_total", {}, static_cast<double>(yields));
  w.Family("tandem_config_reloads_total", "counter", "config reloads (SIGHUP) by result");
  w.Sample("tandem_config_reloads_total", {{"result", "ok"}}, static_cast<double>(measurements_.reloads_ok()));
  w.Sample("tandem_config_reloads_total", {{"result", "error"}}, static_cast<double>(measurements_.reloads_failed()));
  // The control loop is one thread: its busy time per second is how close
  // the daemon is to its own limit (many small requests), and the handlers
  // say where that time goes.
  // Sections are parts of a handler's time, so they get a family of their
  // own (summing the busy family stays the loop's busy time).
  const auto loop = loop_.Stats();
  w.Family("tandem_loop_busy_seconds_total", "counter", "time the control loop spent in work items, by kind");
  for (const auto& [name, h] : loop) {
    if (!IsLoopSection(name)) w.Sample("tandem_loop_busy_seconds_total", {{"handler", name}}, h.total_seconds);
  }
  w.Family("tandem_loop_handled_total", "counter", "work items the control loop ran, by kind");
  for (const auto& [name, h] : loop) {
    if (!IsLoopSection(name)) {
      w.Sample("tandem_loop_handled_total", {{"handler", name}}, static_cast<double>(h.count));
    }
  }
  w.Family("tandem_loop_wait_seconds_total", "counter",
           "time work items waited in the control loop's queue before they ran, by kind");
  for (const auto& [name, h] : loop) {
    if (!IsLoopSection(name)) w.Sample("tandem_loop_wait_seconds_total", {{"handler", name}}, h.wait_seconds);
  }
  w.Family("tandem_loop_section_seconds_total", "counter",
           "time the control loop spent in parts of its work items (inside the handlers' time)");
  for (const auto& [name, h] : loop) {
    if (IsLoopSection(name)) w.Sample("tandem_loop_section_seconds_total", {{"section", name}}, h.total_seconds);
  }

  // --- per device -------------------------------------------------------------
  // A family's samples must be contiguous: one pass over the devices per family.
  std::vector<memory::DeviceMemoryStats> memory;
  for (const auto& dev : devices_) memory.push_back(dev->runtime().memory->Stats());
  // A GPU's UUID identifies it across hosts and reboots (a CUDA ordinal
  // does neither); the CPU device has none.
  auto device_labels = [&](size_t i) {
    const device::DeviceInfo& info = devices_[i]->runtime().device->info();
    Labels labels{{"device", info.name}};
    if (!info.uuid.empty()) labels.emplace_back("gpu_uuid", info.uuid);
    return labels;
  };
  auto device_measured = [&](size_t i) { return measurements_.Device(devices_[i]->runtime().index); };

  w.Family("tandem_device_iterations_total", "counter", "iterations completed on the device");
  for (size_t i = 0; i < devices_.size(); ++i) {
    w.Sample("tandem_device_iterations_total", device_labels(i),
             static_cast<double>(devices_[i]->runtime().iterations));
  }
  w.Family("tandem_device_busy_seconds_total", "counter", "device time of the iterations completed on the device");
  for (size_t i = 0; i < devices_.size(); ++i) {
    const DeviceMeasurements* d = device_measured(i);
    w.Sample("tandem_device_busy_seconds_total", device_labels(i), d == nullptr ? 0 : d->busy_seconds);
  }
  w.Family("tandem_device_iteration_seconds", "histogram", "device time of one iteration");
  for (size_t i = 0; i < devices_.size(); ++i) {
    const DeviceMeasurements* d = device_measured(i);
    w.HistogramSamples("tandem_device_iteration_seconds", device_labels(i),
                       d == nullptr ? empty : d->iteration_seconds);
  }
  w.Family("tandem_device_queue_wait_seconds", "histogram", "time an iteration waited for its turn");
  for (size_t i = 0; i < devices_.size(); ++i) {
    const DeviceMeasurements* d = device_measured(i);
    w.HistogramSamples("tandem_device_queue_wait_seconds", device_labels(i), d == nullptr ? empty : d->queue_seconds);
  }
  const Histogram empty_gap(GapBuckets());
  w.Family("tandem_lane_switch_gap_seconds", "histogram",
           "idle device time on a lane between two different jobs' iterations, the second already waiting");
  for (size_t i = 0; i < devices_.size(); ++i) {
    const DeviceMeasurements* d = device_measured(i);
    w.HistogramSamples("tandem_lane_switch_gap_seconds", device_labels(i),
                       d == nullptr ? empty_gap : d->switch_gap_seconds);
  }
  w.Family("tandem_lane_same_job_gap_seconds", "histogram",
           "idle device time on a lane between two iterations of one job, the second already waiting");
  for (size_t i = 0; i < devices_.size(); ++i) {
    const DeviceMeasurements* d = device_measured(i);
    w.HistogramSamples("tandem_lane_same_job_gap_seconds", device_labels(i),
                       d == nullptr ? empty_gap : d->same_job_gap_seconds);
  }
  w.Family("tandem_lane_busy_seconds_total", "counter", "device time of the iterations completed on the lane");
  for (size_t i = 0; i < devices_.size(); ++i) {
    for (size_t lane = 0; lane < devices_[i]->runtime().lanes.size(); ++lane) {
      Labels labels = device_labels(i);
      labels.push_back({"lane", absl::StrCat(lane)});
      w.Sample("tandem_lane_busy_seconds_total", labels, devices_[i]->runtime().lanes[lane].busy_seconds);
    }
  }
  w.Family("tandem_lane_occupied_seconds_total", "counter",
           "wall time with an iteration enqueued or running on the lane");
  const Clock::time_point now_point = Clock::now();
  for (size_t i = 0; i < devices_.size(); ++i) {
    for (size_t lane = 0; lane < devices_[i]->runtime().lanes.size(); ++lane) {
      Labels labels = device_labels(i);
      labels.push_back({"lane", absl::StrCat(lane)});
      w.Sample("tandem_lane_occupied_seconds_total", labels,
               devices_[i]->runtime().lanes[lane].OccupiedSeconds(now_point));
    }
  }
  // The enqueuing threads (server/executor.h): busy seconds near the
  // uptime's rate make a thread the limit of its lanes.
  const struct {
    const char* name;
    const char* help;
    double (*value)(const HandlerStats&);
  } executor_families[] = {
      {"tandem_executor_busy_seconds_total", "time a thread enqueuing lanes' device work spent running work items",
       [](const HandlerStats& e) { return e.total_seconds; }},
      {"tandem_executor_wait_seconds_total", "summed time work items waited for that thread",
       [](const HandlerStats& e) { return e.wait_seconds; }},
      {"tandem_executor_items_total", "work items that thread ran",
       [](const HandlerStats& e) { return static_cast<double>(e.count); }},
  };
  for (const auto& family : executor_families) {
    w.Family(family.name, "counter", family.help);
    for (size_t i = 0; i < devices_.size(); ++i) {
      for (const auto& executor : devices_[i]->runtime().executors) {
        Labels labels = device_labels(i);
        labels.push_back({"executor", executor->name()});
        w.Sample(family.name, labels, family.value(executor->Stats()));
      }
    }
  }
  w.Family("tandem_device_lane_moves_total", "counter", "jobs the scheduling policy moved to another lane");
  for (size_t i = 0; i < devices_.size(); ++i) {
    w.Sample("tandem_device_lane_moves_total", device_labels(i),
             static_cast<double>(devices_[i]->runtime().lane_moves));
  }
  w.Family("tandem_device_segments_total", "counter",
           "segments of preemptible iterations enqueued on the device (preemption=op)");
  for (size_t i = 0; i < devices_.size(); ++i) {
    w.Sample("tandem_device_segments_total", device_labels(i), static_cast<double>(devices_[i]->runtime().segments));
  }
  w.Family("tandem_device_segment_gap_seconds_total", "counter",
           "idle device time between consecutive segments of an iteration, pauses excluded (preemption=op)");
  for (size_t i = 0; i < devices_.size(); ++i) {
    w.Sample("tandem_device_segment_gap_seconds_total", device_labels(i), devices_[i]->runtime().segment_gap_seconds);
  }
  w.Family("tandem_device_memory_bytes", "gauge",
           "device memory by kind: capacity, reserve, persistent, lanes, retired, free");
  for (size_t i = 0; i < devices_.size(); ++i) {
    const memory::DeviceMemoryStats& m = memory[i];
    const std::pair<const char*, uint64_t> kinds[] = {{"capacity", m.capacity_bytes},     {"reserve", m.reserve_bytes},
                                                      {"persistent", m.persistent_bytes}, {"lanes", m.lane_bytes},
                                                      {"retired", m.retired_bytes},       {"free", m.free_bytes}};
    for (const auto& [kind, bytes] : kinds) {
      Labels labels = device_labels(i);
      labels.emplace_back("kind", kind);
      w.Sample("tandem_device_memory_bytes", labels, static_cast<double>(bytes));
    }
  }
  w.Family("tandem_device_lanes", "gauge", "open lanes (concurrent arenas) on the device");
  for (size_t i = 0; i < devices_.size(); ++i) {
    w.Sample("tandem_device_lanes", device_labels(i), static_cast<double>(memory[i].lanes.size()));
  }
  w.Family("tandem_device_admissions_total", "counter", "jobs admitted into the device's memory");
  for (size_t i = 0; i < devices_.size(); ++i) {
    w.Sample("tandem_device_admissions_total", device_labels(i), static_cast<double>(memory[i].jobs_admitted));
  }
  w.Family("tandem_device_refusals_total", "counter",
           "admissions the device's memory refused (a job waiting for memory counts every try)");
  for (size_t i = 0; i < devices_.size(); ++i) {
    w.Sample("tandem_device_refusals_total", device_labels(i), static_cast<double>(memory[i].jobs_refused));
  }

  // --- per job ----------------------------------------------------------------
  std::vector<const Job*> jobs;
  for (const auto& [id, job] : jobs_) jobs.push_back(job.get());
  std::sort(jobs.begin(), jobs.end(), [](const Job* a, const Job* b) { return a->id < b->id; });
  auto job_labels = [](const Job& job) {
    // Not "job": Prometheus sets that label on every series it scrapes (the
    // scrape job's name).
    return Labels{{"job_id", absl::StrCat(job.id)}, {"name", job.name}, {"device", job.device->device->info().name}};
  };
  auto job_sample = [&](const char* name, const char* type, const char* help, auto value) {
    w.Family(name, type, help);
    for (const Job* job : jobs) w.Sample(name, job_labels(*job), static_cast<double>(value(*job)));
  };
  job_sample("tandem_job_iterations_total", "counter", "iterations of the job completed successfully",
             [](const Job& j) { return j.done; });
  job_sample("tandem_job_failed_iterations_total", "counter", "iterations of the job that failed",
             [](const Job& j) { return j.failed; });
  job_sample("tandem_job_queued_iterations", "gauge", "iterations of the job waiting for their turn",
             [](const Job& j) { return j.queued.size(); });
  job_sample("tandem_job_device_seconds_total", "counter", "device time of the job's iterations",
             [](const Job& j) { return j.device_seconds; });
  job_sample("tandem_job_priority", "gauge", "the job's priority", [](const Job& j) { return j.hints.priority(); });
  job_sample("tandem_job_iteration_yields_total", "counter",
             "pauses of the job's iterations for a higher-priority one (preemption=op)",
             [](const Job& j) { return j.yields; });
  job_sample("tandem_job_gpu_time_share", "gauge",
             "the job's share of its device's iteration time over the last ~30 s (0..1)",
             [&](const Job& j) { return measurements_.GpuTimeShare(j.device->index, j.id, now); });
  w.Family("tandem_job_iteration_seconds", "histogram", "device time of one iteration of the job");
  for (const Job* job : jobs) {
    const JobMeasurements* m = measurements_.Job(job->id);
    w.HistogramSamples("tandem_job_iteration_seconds", job_labels(*job), m == nullptr ? empty : m->iteration_seconds);
  }
  w.Family("tandem_job_queue_wait_seconds", "histogram", "time an iteration of the job waited for its turn");
  for (const Job* job : jobs) {
    const JobMeasurements* m = measurements_.Job(job->id);
    w.HistogramSamples("tandem_job_queue_wait_seconds", job_labels(*job), m == nullptr ? empty : m->queue_seconds);
  }
  w.Family("tandem_job_memory_bytes", "gauge", "the job's memory by kind: persistent, ephemeral (planned peak)");
  for (const Job* job : jobs) {
    Labels persistent = job_labels(*job), ephemeral = job_labels(*job);
    persistent.emplace_back("kind", "persistent");
    ephemeral.emplace_back("kind", "ephemeral");
    w.Sample("tandem_job_memory_bytes", persistent, static_cast<double>(job->persistent_bytes));
    w.Sample("tandem_job_memory_bytes", ephemeral, static_cast<double>(job->ArenaBytes()));
  }
  // Slowdown needs the scheduler's solo-time estimate; jobs without one are left out.
  w.Family("tandem_job_slowdown", "gauge", "mean iteration time / iteration time alone (1: as fast as alone)");
  for (const auto& dev : devices_) {
    for (const sched::JobSchedStats& s : dev->runtime().scheduler->Stats()) {
      auto it = jobs_.find(s.job);
      if (it == jobs_.end() || !(s.solo_iteration_seconds > 0) || !(s.mean_iteration_seconds > 0)) continue;
      w.Sample("tandem_job_slowdown", job_labels(*it->second), s.mean_iteration_seconds / s.solo_iteration_seconds);
    }
  }
  return w.text();
}

}  // namespace tandem::server
