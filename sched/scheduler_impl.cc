#include "sched/scheduler_impl.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace tandem::sched {
namespace {

absl::Status ValidateWeight(double weight) {
  if (!std::isfinite(weight) || weight <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("weight must be a positive finite number, got ", weight));
  }
  return absl::OkStatus();
}

absl::Status ValidateExpectedIterations(int64_t expected) {
  if (expected < 0 || expected > kMaxExpectedIterations) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected_iterations must be in [0, ", kMaxExpectedIterations, "] (0: unknown), got ", expected));
  }
  return absl::OkStatus();
}

absl::Status ValidateLane(int lane) {
  if (lane < 0) return absl::InvalidArgumentError(absl::StrCat("lane must be >= 0, got ", lane));
  return absl::OkStatus();
}

}  // namespace

SchedulerImpl::SchedulerImpl(const SchedulerOptions& options, std::shared_ptr<Clock> clock,
                             std::unique_ptr<Policy> policy)
    : clock_(std::move(clock)), policy_(std::move(policy)), state_(options) {}

JobState* SchedulerImpl::FindJob(JobId job) {
  auto it = state_.jobs.find(job);
  return it == state_.jobs.end() ? nullptr : it->second.get();
}

absl::StatusOr<JobState*> SchedulerImpl::JobOrNotFound(JobId job, absl::string_view what) {
  JobState* state = FindJob(job);
  if (state == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot ", std::string(what), ": job ", job, " is not scheduled (never added, or closed)"));
  }
  return state;
}

LaneState& SchedulerImpl::LaneFor(int lane) {
  if (lane >= state_.LaneCount()) state_.lanes.resize(lane + 1);
  return state_.lanes[lane];
}

void SchedulerImpl::InsertIntoLane(JobState* job) {
  auto& jobs = LaneFor(job->lane()).jobs;
  auto pos = std::upper_bound(jobs.begin(), jobs.end(), job->arrival_seq,
                              [](uint64_t seq, const JobState* j) { return seq < j->arrival_seq; });
  jobs.insert(pos, job);
}

void SchedulerImpl::EraseFromLane(JobState* job) {
  auto& jobs = LaneFor(job->lane()).jobs;
  jobs.erase(std::remove(jobs.begin(), jobs.end(), job), jobs.end());
}

absl::Status SchedulerImpl::AddJob(JobId job, const JobParams& params) {
  if (FindJob(job) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("job ", job, " is already scheduled"));
  }
  RETURN_IF_ERROR(ValidateWeight(params.weight));
  RETURN_IF_ERROR(ValidateExpectedIterations(params.expected_iterations));
  RETURN_IF_ERROR(ValidateLane(params.lane));
  Tick();
  auto state = std::make_unique<JobState>();
  state->id = job;
  state->params = params;
  state->arrival_seq = state_.next_arrival_seq++;
  state->private_key = params.interference_key.empty();
  state->unmeasured_next = state_.options.first_iteration_captures;
  state->key = state_.interference.Intern(state->private_key ? absl::StrCat("job:", job) : params.interference_key);
  JobState* raw = state.get();
  state_.jobs.emplace(job, std::move(state));
  ++state_.jobs_version;
  InsertIntoLane(raw);
  policy_->OnJobAdded(state_, *raw);
  return absl::OkStatus();
}

std::vector<Ticket> SchedulerImpl::RemoveJob(JobId job) {
  auto it = state_.jobs.find(job);
  if (it == state_.jobs.end()) return {};
  Tick();
  JobState* state = it->second.get();
  std::vector<Ticket> dropped(state->queue.begin(), state->queue.end());
  EraseFromLane(state);
  if (state->private_key) state_.interference.Forget(state->key);
  state_.jobs.erase(it);
  ++state_.jobs_version;
  policy_->OnJobRemoved(state_, job);
  return dropped;
}

absl::Status SchedulerImpl::Enqueue(JobId job, Ticket ticket) {
  ASSIGN_OR_RETURN(JobState * state, JobOrNotFound(job, "enqueue an iteration"));
  Tick();
  const bool was_active = state->active();
  state->queue.push_back(ticket);
  if (!was_active) policy_->OnJobActivated(state_, *state);
  return absl::OkStatus();
}

std::optional<Dispatch> SchedulerImpl::Next(int lane) {
  if (lane < 0 || lane >= state_.LaneCount()) return std::nullopt;
  const LaneState& current = state_.lanes[lane];
  if (current.busy && (current.paused || static_cast<int>(current.staged.size()) >= state_.options.lookahead)) {
    return std::nullopt;
  }
  Tick();
  const std::optional<JobId> picked = policy_->Pick(state_, lane);
  if (!picked) return std::nullopt;
  JobState* job = FindJob(*picked);
  if (job == nullptr || job->lane() != lane || job->queue.empty()) {
    TLOG(Error, absl::StrCat("scheduling policy ", std::string(policy_->name()), " picked job ", *picked,
                             " which cannot run in lane ", lane));
    return std::nullopt;
  }
  LaneState& l = state_.lanes[lane];
  if (l.busy && !MayStage(*job)) return std::nullopt;
  Dispatch dispatch{job->id, job->queue.front()};
  dispatch.segmented = !l.busy && policy_->Segmented(state_, job->id, lane);
  job->queue.pop_front();
  job->last_start_seq = state_.next_start_seq++;
  l.has_last_job = true;
  l.last_job = job->id;
  if (l.busy) {
    ++job->staged;
    l.staged.push_back(StagedIteration{dispatch, job->key});
  } else {
    StartRunning(lane, dispatch, job, job->key);
  }
  return dispatch;
}

bool SchedulerImpl::MayStage(const JobState& job) const {
  for (const auto& [id, other] : state_.jobs) {
    if (other->params.priority > job.params.priority) return false;
  }
  return true;
}

void SchedulerImpl::StartRunning(int lane, const Dispatch& dispatch, const JobState* job, int key) {
  LaneState& l = state_.lanes[lane];
  if (JobState* j = FindJob(dispatch.job)) j->running = true;
  l.busy = true;
  l.paused = false;
  l.run_since = state_.now;
  l.running_job = dispatch.job;
  l.running_priority = job != nullptr ? job->params.priority : 0;
  state_.overlap.Start(lane, key, state_.now);
}

OverlapMeter::Sample SchedulerImpl::EndIteration(int lane) {
  LaneState& l = state_.lanes[lane];
  OverlapMeter::Sample sample = state_.overlap.Finish(lane, state_.now);
  if (JobState* job = FindJob(l.running_job)) job->running = false;
  l.busy = false;
  l.paused = false;
  if (!l.staged.empty()) {
    const StagedIteration next = l.staged.front();
    l.staged.pop_front();
    JobState* job = FindJob(next.dispatch.job);
    if (job != nullptr) --job->staged;
    StartRunning(lane, next.dispatch, job, next.key);
  }
  return sample;
}

void SchedulerImpl::OnIterationDone(JobId job, int lane, double device_seconds) {
  if (lane < 0 || lane >= state_.LaneCount() || !state_.lanes[lane].busy || state_.lanes[lane].running_job != job) {
    TLOG(Warning, absl::StrCat("ignoring a done report: lane ", lane, " was not running job ", job));
    return;
  }
  Tick();
  const OverlapMeter::Sample sample = EndIteration(lane);
  JobState* state = FindJob(job);
  if (state == nullptr) return;  // closed while its last iteration ran
  const bool measured = std::isfinite(device_seconds) && device_seconds > 0;
  ++state->iterations_done;
  // A job's first iteration, and its first after a move, run op by op and
  // capture its graph (on its new lane) in the daemon (the simulator's
  // first_iteration_factor and move_capture_factor): their time is that
  // cost, not a measurement of the job alone or beside its partners.
  const bool unmeasured = std::exchange(state->unmeasured_next, false);
  if (measured) {
    state->device_seconds += device_seconds;
    if (!unmeasured) {
      if (!sample.was_paused) state->iteration_time.Add(device_seconds);
      state_.interference.AddSample(state->key, sample, device_seconds);
    }
  }
  // Policies count device time (FAIR's and PACK's shares) only for measured
  // iterations: a capture's host time is not a share of the device.
  policy_->OnIterationDone(state_, *state, measured && !unmeasured ? device_seconds : 0.0);
}

void SchedulerImpl::CancelDispatch(JobId job, int lane) {
  if (lane < 0 || lane >= state_.LaneCount()) return;
  LaneState& l = state_.lanes[lane];
  if (!l.staged.empty() && l.staged.back().dispatch.job == job) {
    l.staged.pop_back();
    if (JobState* state = FindJob(job)) --state->staged;
    return;
  }
  OnIterationAborted(job, lane);
}

void SchedulerImpl::OnIterationAborted(JobId job, int lane) {
  if (lane < 0 || lane >= state_.LaneCount() || !state_.lanes[lane].busy || state_.lanes[lane].running_job != job) {
    TLOG(Warning, absl::StrCat("ignoring an abort report: lane ", lane, " was not running job ", job));
    return;
  }
  Tick();
  EndIteration(lane);
}

absl::Status SchedulerImpl::SetPriority(JobId job, int priority) {
  ASSIGN_OR_RETURN(JobState * state, JobOrNotFound(job, "set the priority"));
  state->params.priority = priority;
  LaneState& l = LaneFor(state->lane());
  if (l.busy && l.running_job == job) l.running_priority = priority;
  return absl::OkStatus();
}

absl::Status SchedulerImpl::SetWeight(JobId job, double weight) {
  ASSIGN_OR_RETURN(JobState * state, JobOrNotFound(job, "set the weight"));
  RETURN_IF_ERROR(ValidateWeight(weight));
  state->params.weight = weight;
  return absl::OkStatus();
}

absl::Status SchedulerImpl::SetExpectedIterations(JobId job, int64_t expected_iterations) {
  ASSIGN_OR_RETURN(JobState * state, JobOrNotFound(job, "set the expected iterations"));
  RETURN_IF_ERROR(ValidateExpectedIterations(expected_iterations));
  state->params.expected_iterations = expected_iterations;
  return absl::OkStatus();
}

absl::Status SchedulerImpl::SetPolicy(absl::string_view policy) {
  ASSIGN_OR_RETURN(std::unique_ptr<Policy> next, CreatePolicy(policy, state_.options));
  Tick();
  policy_ = std::move(next);
  // The new policy learns the jobs in arrival order.
  std::vector<const JobState*> jobs;
  jobs.reserve(state_.jobs.size());
  for (const auto& [id, job] : state_.jobs) jobs.push_back(job.get());
  std::sort(jobs.begin(), jobs.end(),
            [](const JobState* a, const JobState* b) { return a->arrival_seq < b->arrival_seq; });
  for (const JobState* job : jobs) policy_->OnJobAdded(state_, *job);
  return absl::OkStatus();
}

int SchedulerImpl::ChooseLane(const JobParams& params, int num_lanes) const {
  if (num_lanes <= 0) return 0;
  const int lane = policy_->ChooseLane(state_, params, num_lanes);
  // Never more lanes than allowed, never beyond "one new lane".
  if (lane < 0 || lane > num_lanes) return 0;
  if (lane == num_lanes && num_lanes >= state_.options.max_lanes) return 0;
  return lane;
}

absl::Status SchedulerImpl::MoveJob(JobId job, int lane) {
  ASSIGN_OR_RETURN(JobState * state, JobOrNotFound(job, "move"));
  RETURN_IF_ERROR(ValidateLane(lane));
  if (state->running || state->staged > 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot move job ", job, " while its iteration runs in lane ",
                                                      state->lane(), "; move it at an iteration boundary"));
  }
  if (lane == state->lane()) return absl::OkStatus();
  Tick();
  const int from = state->lane();
  EraseFromLane(state);
  state->params.lane = lane;
  InsertIntoLane(state);
  state->unmeasured_next = true;
  policy_->OnJobMoved(state_, *state, from);
  return absl::OkStatus();
}

std::vector<LaneChange> SchedulerImpl::Rebalance(int num_lanes) const {
  return policy_->Rebalance(state_, std::max(num_lanes, 0));
}

bool SchedulerImpl::ShouldYield(int lane) {
  Tick();  // asked between events (at each segment's end): the policies read the time
  return policy_->ShouldYield(state_, lane);
}

void SchedulerImpl::OnIterationYielded(int lane) {
  if (lane < 0 || lane >= state_.LaneCount() || !state_.lanes[lane].busy) return;
  Tick();
  state_.lanes[lane].paused = true;
  state_.lanes[lane].paused_since = state_.now;
  state_.overlap.Pause(lane, state_.now);
}

void SchedulerImpl::OnIterationResumed(int lane) {
  if (lane < 0 || lane >= state_.LaneCount() || !state_.lanes[lane].busy) return;
  Tick();
  state_.lanes[lane].paused = false;
  state_.lanes[lane].run_since = state_.now;
  state_.overlap.Resume(lane, state_.now);
}

std::vector<JobSchedStats> SchedulerImpl::Stats() const {
  std::vector<JobSchedStats> out;
  out.reserve(state_.jobs.size());
  for (const auto& [id, job] : state_.jobs) {
    JobSchedStats s;
    s.job = id;
    s.lane = job->lane();
    s.priority = job->params.priority;
    s.weight = job->params.weight;
    s.iterations_done = job->iterations_done;
    s.queued = job->queue.size();
    s.device_seconds = job->device_seconds;
    s.mean_iteration_seconds = job->iterations_done > 0 ? job->device_seconds / job->iterations_done : 0;
    s.expected_iterations = job->params.expected_iterations;
    s.running = job->running;
    s.solo_iteration_seconds = state_.interference.Solo(job->key).value_or(0);
    s.interference_key = state_.interference.KeyName(job->key);
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const JobSchedStats& a, const JobSchedStats& b) { return a.job < b.job; });
  return out;
}

std::vector<PairInterference> SchedulerImpl::Interference() const { return state_.interference.Pairs(); }

std::vector<std::string> PolicyNames() { return {"fifo", "pack", "fair", "srtf", "priority", "srtf_pack"}; }

absl::StatusOr<std::unique_ptr<Scheduler>> CreateScheduler(const SchedulerOptions& options) {
  if (options.preemption != "iteration" && options.preemption != "op") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown preemption granularity '", options.preemption, "'; valid: iteration, op"));
  }
  if (options.max_lanes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_lanes must be >= 1, got ", options.max_lanes));
  }
  if (!(options.fair_window_seconds >= 0) || !(options.pack_margin >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("fair_window_seconds and pack_margin must be >= 0, got ",
                                                   options.fair_window_seconds, " and ", options.pack_margin));
  }
  if (options.lookahead < 0) {
    return absl::InvalidArgumentError(absl::StrCat("lookahead must be >= 0, got ", options.lookahead));
  }
  if (!(options.probe_spacing_seconds >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("probe_spacing_seconds must be >= 0, got ", options.probe_spacing_seconds));
  }
  if (options.min_interference_samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_interference_samples must be >= 1, got ", options.min_interference_samples));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Policy> policy, CreatePolicy(options.policy, options));
  std::shared_ptr<Clock> clock = options.clock;
  if (clock == nullptr) clock = std::make_shared<SteadyClock>();
  return std::unique_ptr<Scheduler>(new SchedulerImpl(options, std::move(clock), std::move(policy)));
}

}  // namespace tandem::sched
