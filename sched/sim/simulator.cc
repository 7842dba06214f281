#include "sched/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tandem::sched::sim {
namespace {

enum class EventKind { kArrival, kSubmit, kIterationEnd, kOpBoundary };

struct Event {
  double time = 0;
  uint64_t seq = 0;  // ties: the earlier scheduled first
  EventKind kind = EventKind::kArrival;
  int index = 0;  // job index (arrival, submit) or lane (end, op boundary)
  uint64_t version = 0;
};

struct EventAfter {
  bool operator()(const Event& a, const Event& b) const {
    return a.time > b.time || (a.time == b.time && a.seq > b.seq);
  }
};

struct SimJob {
  const TraceJob* trace = nullptr;
  const ModelSpec* model = nullptr;
  int model_index = 0;
  JobResult result;
  int lane = -1;
  bool admitted = false;
  bool finished = false;
  bool running = false;
  bool moved = false;  // its next iteration pays SimOptions::move_capture_factor
  bool first = true;   // its next iteration is its first: SimOptions::first_iteration_factor
  int64_t submitted = 0;
};

struct SimLane {
  bool busy = false;
  bool paused = false;
  bool pause_requested = false;
  // Dispatch::segmented: ShouldYield is asked at every op boundary (the
  // daemon asks at every segment's end).
  bool segmented = false;
  int job = -1;
  double work_total = 0;  // solo seconds of work of the running iteration
  double work_done = 0;
  double rate = 1;
  double last_update = 0;
  double start = 0;
  double paused_since = 0;
  double paused_total = 0;
  uint64_t version = 0;
  int last_job = -1;
};

// One simulation: the state of a Run.
class SimRun {
 public:
  SimRun(const SimOptions& options, const ModelCatalog& catalog, const InterferenceTable& interference,
         const std::vector<TraceJob>& trace)
      : options_(options), catalog_(catalog), interference_(interference), trace_(trace) {}

  absl::StatusOr<SimResult> Run();

 private:
  absl::Status Init();
  void Push(double time, EventKind kind, int index, uint64_t version = 0) {
    events_.push(Event{time, next_seq_++, kind, index, version});
  }
  // Credits progress and utilization up to now.
  void AdvanceAll();
  void RecomputeRates();
  // Dispatches free lanes and applies yields until nothing changes.
  void Settle();
  void Start(int lane, const Dispatch& dispatch);
  void EndIteration(int lane);
  void OpBoundary(int lane);
  void TryAdmit();
  void Submit(SimJob& job);
  void Rebalance();
  SimLane& Lane(int lane) {
    if (lane >= static_cast<int>(lanes_.size())) lanes_.resize(lane + 1);
    return lanes_[lane];
  }
  void Fail(absl::Status status) {
    if (error_.ok()) error_ = std::move(status);
  }
  SimResult Collect();

  const SimOptions& options_;
  const ModelCatalog& catalog_;
  const InterferenceTable& interference_;
  const std::vector<TraceJob>& trace_;

  std::shared_ptr<ManualClock> clock_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<SimMemory> memory_;
  std::vector<SimJob> jobs_;
  absl::flat_hash_map<JobId, int> job_index_;
  std::vector<std::vector<double>> r_;  // by model index
  std::vector<SimLane> lanes_;
  std::vector<int> waiting_;  // arrived, not admitted; arrival order
  std::priority_queue<Event, std::vector<Event>, EventAfter> events_;
  uint64_t next_seq_ = 0;
  Ticket next_ticket_ = 1;
  double now_ = 0;
  double last_advance_ = 0;
  double last_rebalance_ = -std::numeric_limits<double>::infinity();
  bool rates_dirty_ = false;
  bool jobs_changed_ = false;
  absl::Status error_;
  SimResult result_;
};

absl::Status SimRun::Init() {
  RETURN_IF_ERROR(ValidateTrace(trace_, catalog_));
  SchedulerOptions sched_options = options_.scheduler;
  clock_ = std::make_shared<ManualClock>(0);
  sched_options.clock = clock_;
  ASSIGN_OR_RETURN(scheduler_, CreateScheduler(sched_options));
  memory_ = options_.memory_factory
                ? options_.memory_factory()
                : std::make_unique<LaneMemoryModel>(options_.capacity_bytes, options_.scheduler.max_lanes);
  if (memory_ == nullptr) return absl::InvalidArgumentError("memory_factory returned null");

  std::vector<std::string> model_names;
  absl::flat_hash_map<std::string, int> model_index;
  jobs_.resize(trace_.size());
  for (size_t i = 0; i < trace_.size(); ++i) {
    SimJob& job = jobs_[i];
    job.trace = &trace_[i];
    ASSIGN_OR_RETURN(job.model, catalog_.Find(trace_[i].model));
    auto [it, inserted] = model_index.emplace(trace_[i].model, model_names.size());
    if (inserted) model_names.push_back(trace_[i].model);
    job.model_index = it->second;
    JobResult& r = job.result;
    r.id = trace_[i].id;
    r.model = trace_[i].model;
    r.priority = trace_[i].priority;
    r.weight = trace_[i].weight;
    r.arrival = trace_[i].arrival_seconds;
    r.iterations = trace_[i].iterations;
    r.solo_seconds = job.model->solo_seconds;
    job_index_[trace_[i].id] = static_cast<int>(i);
    Push(trace_[i].arrival_seconds, EventKind::kArrival, static_cast<int>(i));
  }
  r_.assign(model_names.size(), std::vector<double>(model_names.size(), 1.0));
  for (size_t a = 0; a < model_names.size(); ++a) {
    for (size_t b = 0; b < model_names.size(); ++b) {
      r_[a][b] = interference_.R(model_names[a], model_names[b]);
    }
  }
  result_.policy = options_.scheduler.policy;
  return absl::OkStatus();
}

void SimRun::AdvanceAll() {
  const double dt = now_ - last_advance_;
  if (dt <= 0) return;
  int running = 0;
  for (SimLane& lane : lanes_) {
    if (!lane.busy || lane.paused) continue;
    ++running;
    lane.work_done += (now_ - lane.last_update) * lane.rate;
    lane.last_update = now_;
  }
  if (running > 0) result_.busy_seconds += dt;
  result_.lane_seconds += dt * running;
  last_advance_ = now_;
}

void SimRun::RecomputeRates() {
  rates_dirty_ = false;
  std::vector<int> running;
  for (int l = 0; l < static_cast<int>(lanes_.size()); ++l) {
    if (lanes_[l].busy && !lanes_[l].paused) running.push_back(l);
  }
  for (int l : running) {
    SimLane& lane = lanes_[l];
    const int a = jobs_[lane.job].model_index;
    double slowdown = 1;
    for (int other : running) {
      if (other != l) slowdown += r_[a][jobs_[lanes_[other].job].model_index] - 1;
    }
    lane.rate = 1 / slowdown;
    lane.last_update = now_;
    ++lane.version;
    const double remaining = std::max(0.0, lane.work_total - lane.work_done);
    Push(now_ + remaining * slowdown, EventKind::kIterationEnd, l, lane.version);
    if (lane.pause_requested || lane.segmented) {
      const ModelSpec& model = *jobs_[lane.job].model;
      const double op = model.solo_seconds / std::max(1, model.ops_per_iteration);
      // The next boundary strictly ahead: work_done may sit a rounding
      // error short of the one just reached.
      const double boundary = (std::floor(lane.work_done / op + 1e-6) + 1) * op;
      if (boundary < lane.work_total) {
        Push(now_ + (boundary - lane.work_done) * slowdown, EventKind::kOpBoundary, l, lane.version);
      }
    }
  }
}

void SimRun::Start(int lane_index, const Dispatch& dispatch) {
  auto it = job_index_.find(dispatch.job);
  if (it == job_index_.end()) {
    Fail(absl::InternalError(absl::StrCat("scheduler dispatched unknown job ", dispatch.job)));
    return;
  }
  SimJob& job = jobs_[it->second];
  SimLane& lane = Lane(lane_index);
  if (lane.busy || job.running || job.lane != lane_index || job.finished) {
    Fail(absl::InternalError(absl::StrCat("scheduler dispatched job ", dispatch.job, " in lane ", lane_index,
                                          " (lane busy: ", lane.busy, ", job running: ", job.running,
                                          ", job's lane: ", job.lane, ")")));
    return;
  }
  lane.busy = true;
  lane.paused = false;
  lane.pause_requested = false;
  lane.segmented = dispatch.segmented;
  lane.job = it->second;
  const double factor =
      (job.moved ? options_.move_capture_factor : 1.0) * (job.first ? options_.first_iteration_factor : 1.0);
  lane.work_total = job.model->solo_seconds * factor +
                    (lane.last_job >= 0 && lane.last_job != it->second ? options_.switch_seconds : 0.0);
  job.moved = false;
  job.first = false;
  lane.work_done = 0;
  lane.start = now_;
  lane.paused_total = 0;
  lane.last_update = now_;
  job.running = true;
  if (job.result.first_start < 0) job.result.first_start = now_;
  rates_dirty_ = true;
}

void SimRun::Settle() {
  for (int round = 0; round < 1000 && error_.ok(); ++round) {
    bool changed = false;
    for (int l = 0; l < static_cast<int>(lanes_.size()); ++l) {
      SimLane& lane = lanes_[l];
      if (!lane.busy) continue;
      const bool yield = scheduler_->ShouldYield(l);
      if (lane.paused && !yield) {
        lane.paused = false;
        lane.paused_total += now_ - lane.paused_since;
        lane.last_update = now_;
        scheduler_->OnIterationResumed(l);
        rates_dirty_ = true;
        changed = true;
      } else if (!lane.paused && yield && !lane.pause_requested) {
        lane.pause_requested = true;
        rates_dirty_ = true;  // schedules the op boundary
      } else if (!lane.paused && !yield) {
        lane.pause_requested = false;
      }
    }
    const int num_lanes = memory_->NumLanes();
    if (num_lanes > static_cast<int>(lanes_.size())) lanes_.resize(num_lanes);
    for (int l = 0; l < num_lanes; ++l) {
      if (lanes_[l].busy) continue;
      const std::optional<Dispatch> dispatch = scheduler_->Next(l);
      if (!dispatch) continue;
      Start(l, *dispatch);
      changed = true;
    }
    if (!changed) break;
  }
  result_.lanes_used = std::max(result_.lanes_used, memory_->NumLanes());
  if (rates_dirty_) RecomputeRates();
}

void SimRun::Submit(SimJob& job) {
  if (job.finished || job.submitted >= job.trace->iterations) return;
  const absl::Status status = scheduler_->Enqueue(job.trace->id, next_ticket_++);
  if (!status.ok()) {
    Fail(status);
    return;
  }
  ++job.submitted;
}

void SimRun::TryAdmit() {
  std::vector<int> still_waiting;
  for (int index : waiting_) {
    SimJob& job = jobs_[index];
    const TraceJob& t = *job.trace;
    JobParams params;
    params.priority = t.priority;
    params.weight = t.weight;
    params.expected_iterations = t.declared_iterations < 0 ? t.iterations : t.declared_iterations;
    params.interference_key = !t.interference_key.empty() ? t.interference_key
                              : options_.key_by_model     ? t.model
                                                          : std::string();
    const int wanted = scheduler_->ChooseLane(params, memory_->NumLanes());
    absl::StatusOr<int> lane = memory_->Admit(t.id, job.model->persistent_bytes, job.model->ephemeral_bytes, wanted);
    if (!lane.ok()) {
      lane = memory_->Admit(t.id, job.model->persistent_bytes, job.model->ephemeral_bytes, -1);
    }
    if (!lane.ok()) {
      still_waiting.push_back(index);
      continue;
    }
    params.lane = *lane;
    if (absl::Status added = scheduler_->AddJob(t.id, params); !added.ok()) {
      Fail(
          absl::InvalidArgumentError(absl::StrCat("trace job ", t.id, " refused by the scheduler: ", added.message())));
      return;
    }
    job.admitted = true;
    job.lane = *lane;
    job.result.admitted = now_;
    jobs_changed_ = true;
    const int64_t first = std::min<int64_t>(t.depth, t.iterations);
    for (int64_t i = 0; i < first; ++i) Submit(job);
  }
  waiting_ = std::move(still_waiting);
}

void SimRun::Rebalance() {
  last_rebalance_ = now_;
  jobs_changed_ = false;
  for (const LaneChange& change : scheduler_->Rebalance(memory_->NumLanes())) {
    auto it = job_index_.find(change.job);
    if (it == job_index_.end()) continue;
    SimJob& job = jobs_[it->second];
    if (job.running || job.finished || job.lane != change.from_lane) continue;
    const absl::StatusOr<int> lane = memory_->Move(change.job, change.to_lane);
    if (!lane.ok()) continue;  // memory says no: the job stays
    if (absl::Status moved = scheduler_->MoveJob(change.job, *lane); !moved.ok()) {
      (void)memory_->Move(change.job, job.lane);
      continue;
    }
    job.lane = *lane;
    job.moved = true;
    ++job.result.moves;
    ++result_.moves;
  }
}

void SimRun::EndIteration(int lane_index) {
  SimLane& lane = lanes_[lane_index];
  SimJob& job = jobs_[lane.job];
  const double device_seconds = now_ - lane.start - lane.paused_total;
  lane.busy = false;
  lane.paused = false;
  lane.pause_requested = false;
  lane.last_job = lane.job;
  lane.job = -1;
  job.running = false;
  rates_dirty_ = true;
  scheduler_->OnIterationDone(job.trace->id, lane_index, device_seconds);
  ++result_.iterations;
  JobResult& r = job.result;
  ++r.done;
  r.device_seconds += device_seconds;
  r.max_iteration_seconds = std::max(r.max_iteration_seconds, device_seconds);
  if (now_ >= options_.window_start_seconds && now_ <= options_.window_end_seconds) {
    r.window_device_seconds += device_seconds;
    ++r.window_iterations;
    if (options_.record_completion_gaps && r.last_completion >= options_.window_start_seconds) {
      r.window_gaps.push_back(now_ - r.last_completion);
    }
  }
  r.last_completion = now_;
  if (r.done >= job.trace->iterations) {
    job.finished = true;
    r.finish = now_;
    r.final_lane = job.lane;
    const std::vector<Ticket> dropped = scheduler_->RemoveJob(job.trace->id);
    if (!dropped.empty()) {
      Fail(absl::InternalError(
          absl::StrCat("job ", r.id, " finished with ", dropped.size(), " iterations still queued")));
    }
    memory_->Release(job.trace->id);
    jobs_changed_ = true;
    TryAdmit();
  } else if (job.submitted < job.trace->iterations) {
    if (job.trace->think_seconds > 0) {
      Push(now_ + job.trace->think_seconds, EventKind::kSubmit, lane.last_job);
    } else {
      Submit(job);
    }
  }
  if (jobs_changed_ || now_ - last_rebalance_ >= options_.rebalance_interval_seconds) {
    Rebalance();
  }
}

void SimRun::OpBoundary(int lane_index) {
  SimLane& lane = lanes_[lane_index];
  lane.pause_requested = false;
  if (!scheduler_->ShouldYield(lane_index)) {
    if (lane.segmented) rates_dirty_ = true;  // schedules the next boundary
    return;
  }
  lane.paused = true;
  lane.paused_since = now_;
  scheduler_->OnIterationYielded(lane_index);
  ++jobs_[lane.job].result.yields;
  ++result_.yields;
  rates_dirty_ = true;
}

SimResult SimRun::Collect() {
  result_.end_time = now_;
  result_.interference = scheduler_->Interference();
  std::vector<double> jcts;
  double first_arrival = std::numeric_limits<double>::infinity();
  double last_finish = 0;
  for (SimJob& job : jobs_) {
    if (!job.finished) job.result.final_lane = job.lane;
    first_arrival = std::min(first_arrival, job.result.arrival);
    if (job.result.finished()) {
      jcts.push_back(job.result.jct());
      last_finish = std::max(last_finish, job.result.finish);
    }
    result_.jobs.push_back(job.result);
  }
  result_.finished = static_cast<int>(jcts.size());
  if (!jcts.empty()) {
    double sum = 0;
    for (double j : jcts) sum += j;
    result_.mean_jct = sum / static_cast<double>(jcts.size());
    std::sort(jcts.begin(), jcts.end());
    result_.median_jct = jcts[jcts.size() / 2];
    result_.p95_jct = jcts[std::min(jcts.size() - 1, jcts.size() * 95 / 100)];
    result_.makespan = last_finish - first_arrival;
  }
  return std::move(result_);
}

absl::StatusOr<SimResult> SimRun::Run() {
  const auto cpu_start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(Init());
  while (!events_.empty() && error_.ok()) {
    const Event event = events_.top();
    if (event.time > options_.end_seconds) break;
    events_.pop();
    ++result_.events;
    now_ = std::max(now_, event.time);
    clock_->Set(now_);
    AdvanceAll();
    switch (event.kind) {
      case EventKind::kArrival:
        waiting_.push_back(event.index);
        TryAdmit();
        break;
      case EventKind::kSubmit:
        Submit(jobs_[event.index]);
        break;
      case EventKind::kIterationEnd:
        if (event.version != lanes_[event.index].version || !lanes_[event.index].busy || lanes_[event.index].paused) {
          continue;  // superseded by a rate change
        }
        EndIteration(event.index);
        break;
      case EventKind::kOpBoundary:
        if (event.version != lanes_[event.index].version || !lanes_[event.index].busy || lanes_[event.index].paused) {
          continue;
        }
        OpBoundary(event.index);
        break;
    }
    Settle();
  }
  RETURN_IF_ERROR(error_);
  SimResult result = Collect();
  result.cpu_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - cpu_start).count();
  return result;
}

}  // namespace

Simulator::Simulator(SimOptions options, ModelCatalog catalog, InterferenceTable interference)
    : options_(std::move(options)), catalog_(std::move(catalog)), interference_(std::move(interference)) {}

absl::StatusOr<SimResult> Simulator::Run(const std::vector<TraceJob>& trace) {
  SimRun run(options_, catalog_, interference_, trace);
  return run.Run();
}

}  // namespace tandem::sched::sim
