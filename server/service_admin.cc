// Operating the daemon: the admin requests (tandemctl), the measured fields
// of the list and stats replies, live option changes (SIGHUP) and the
// status line systemd shows.
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "server/service.h"

namespace tandem::server {
namespace {

double NowSeconds() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

const char* kAdminKillReason = "killed with tandemctl kill";

}  // namespace

bool Service::HandleAdminRequest(const PendingReply& to, const Session& session, const v1::Request& request) {
  auto admin_only = [&](const char* what) {
    if (session.admin) return true;
    ReplyError(to, absl::PermissionDeniedError(
                       absl::StrCat(what,
                                    " needs an administrator of tandemd (root, the daemon's user, or a member of its "
                                    "admin_group); this session is ",
                                    session.identity.ToString())));
    return false;
  };
  switch (request.body_case()) {
    case v1::Request::kSetPriority:
      OnSetPriority(to, session, request.set_priority());
      return true;
    case v1::Request::kSetPolicy:
      if (admin_only("set-policy")) OnSetPolicy(to, request.set_policy());
      return true;
    case v1::Request::kDrain:
      if (admin_only("drain")) OnDrain(to, request.drain());
      return true;
    case v1::Request::kKillJob:
      OnKillJob(to, session, request.kill_job());
      return true;
    case v1::Request::kRegisterJob:
      if (absl::Status s = CheckAdmitting(); !s.ok()) {
        ReplyError(to, s);
        return true;
      }
      return false;
    default:
      return false;
  }
}

absl::Status Service::CheckAdmitting() const {
  if (!draining_) return absl::OkStatus();
  return absl::UnavailableError(
      "tandemd is draining: it admits no new jobs until an administrator resumes it (tandemctl drain --resume); "
      "try again later or use another daemon");
}

absl::Status Service::CheckMayManage(const Session& session, const Job& job) const {
  if (MayManageJob(session.identity, session.admin, session.id, job.owner, job.session)) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("no job ", job.id, " of yours (tandemctl jobs lists them)"));
}

void Service::OnSetPriority(const PendingReply& to, const Session& session, const v1::SetPriorityRequest& set) {
  Job* job = nullptr;
  if (auto it = jobs_.find(set.job_id()); it != jobs_.end()) job = it->second.get();
  if (Job* waiting = waiting_for_memory_.Find(set.job_id())) job = waiting;
  if (job == nullptr) {
    ReplyError(to, absl::NotFoundError(absl::StrCat("no job ", set.job_id(), " (tandemctl jobs lists them)")));
    return;
  }
  if (absl::Status s = CheckMayManage(session, *job); !s.ok()) {
    ReplyError(to, s);
    return;
  }
  if (absl::Status s = CheckPriorityCeiling(set.priority(), session.admin, AccessOptionsNow()); !s.ok()) {
    ReplyError(to, s);
    return;
  }
  if (job->state == JobState::kClosing) {
    ReplyError(to, absl::FailedPreconditionError(absl::StrCat("job ", job->id, " is closing")));
    return;
  }
  int previous = job->hints.priority();
  if (job->state != JobState::kWaitingForMemory) {
    // Admitted jobs are known to their device's scheduler; waiting ones
    // take the new priority with them when admitted.
    if (absl::Status s = job->device->scheduler->SetPriority(job->id, set.priority()); !s.ok()) {
      ReplyError(to, s);
      return;
    }
  }
  job->hints.set_priority(set.priority());
  if (job->device != nullptr) job->device->lane_levels_stale = true;
  TLOG_INFO("job priority set")
      .With("job", job->id)
      .With("name", job->name)
      .With("priority", set.priority())
      .With("previous", previous);
  v1::Response response;
  response.mutable_set_priority()->set_previous(previous);
  Reply(to, std::move(response));
  if (job->state != JobState::kWaitingForMemory) DispatcherOf(*job->device).DispatchAll();
}

void Service::OnSetPolicy(const PendingReply& to, const v1::SetPolicyRequest& set) {
  std::vector<std::string> names = sched::PolicyNames();
  if (std::find(names.begin(), names.end(), set.policy()) == names.end()) {
    ReplyError(to, absl::InvalidArgumentError(
                       absl::StrCat("unknown policy '", set.policy(), "'; valid: ", absl::StrJoin(names, ", "))));
    return;
  }
  std::string previous = options_.policy;
  DaemonOptions fresh = options_;
  fresh.policy = set.policy();
  ApplyLiveOptions(fresh, {"policy"});
  v1::Response response;
  response.mutable_set_policy()->set_previous(previous);
  Reply(to, std::move(response));
}

void Service::OnDrain(const PendingReply& to, const v1::DrainRequest& drain) {
  bool was = draining_;
  draining_ = !drain.resume();
  if (was != draining_) {
    TLOG_INFO(draining_ ? "draining: new jobs are refused" : "drain ended: new jobs are admitted")
        .With("jobs", jobs_.size());
  }
  v1::Response response;
  response.mutable_drain()->set_draining(draining_);
  response.mutable_drain()->set_jobs(jobs_.size() + waiting_for_memory_.size());
  Reply(to, std::move(response));
}

void Service::OnKillJob(const PendingReply& to, const Session& session, const v1::KillJobRequest& kill) {
  std::string reason = kill.reason().empty() ? kAdminKillReason : kill.reason();
  if (const Job* waiting = waiting_for_memory_.Find(kill.job_id())) {
    if (absl::Status s = CheckMayManage(session, *waiting); !s.ok()) {
      ReplyError(to, s);
      return;
    }
    std::unique_ptr<Job> job = waiting_for_memory_.Take(kill.job_id());
    TLOG_INFO("waiting job killed").With("job", job->id).With("name", job->name).With("reason", reason);
    ReplyError(job->registration.reply,
               absl::CancelledError(absl::StrCat("job '", job->name, "' was not admitted: ", reason)));
    v1::Response response;
    response.mutable_kill_job();
    Reply(to, std::move(response));
    return;
  }
  auto it = jobs_.find(kill.job_id());
  if (it == jobs_.end()) {
    ReplyError(to, absl::NotFoundError(absl::StrCat("no job ", kill.job_id(), " (tandemctl jobs lists them)")));
    return;
  }
  if (absl::Status s = CheckMayManage(session, *it->second); !s.ok()) {
    ReplyError(to, s);
    return;
  }
  // Answered with the owner's close replies, once the job's memory is free.
  it->second->close_replies.push_back(to);
  BeginCloseJob(*it->second, reason.c_str());
}

void Service::FillJobMeasurements(const Job& job, const std::vector<sched::JobSchedStats>& sched_stats,
                                  v1::JobInfo* info) const {
  info->set_session_id(job.session);
  info->set_expected_iterations(job.hints.expected_iterations());
  if (job.done_interval_seconds > 0) {
    const double rate = 1.0 / job.done_interval_seconds;
    info->set_iterations_per_second(rate);
    const int64_t expected = job.hints.expected_iterations();
    if (expected > static_cast<int64_t>(job.done)) {
      info->set_eta_seconds(static_cast<double>(expected - static_cast<int64_t>(job.done)) / rate);
    }
  }
  info->set_queued_iterations(job.queued.size());
  info->set_failed_iterations(job.failed);
  info->set_device_seconds(job.device_seconds);
  if (const JobMeasurements* m = measurements_.Job(job.id); m != nullptr && m->queue_seconds.count() > 0) {
    info->set_mean_queue_seconds(m->queue_seconds.sum() / static_cast<double>(m->queue_seconds.count()));
  }
  if (job.device == nullptr) return;
  info->set_gpu_time_share(measurements_.GpuTimeShare(job.device->index, job.id, NowSeconds()));
  if (job.state == JobState::kWaitingForMemory) return;
  // Stats() is sorted by job id.
  auto it = std::lower_bound(sched_stats.begin(), sched_stats.end(), job.id,
                             [](const sched::JobSchedStats& s, uint64_t id) { return s.job < id; });
  if (it == sched_stats.end() || it->job != job.id) return;
  info->set_weight(it->weight);
  info->set_solo_iteration_seconds(it->solo_iteration_seconds);
  if (it->solo_iteration_seconds > 0 && it->mean_iteration_seconds > 0) {
    info->set_slowdown(it->mean_iteration_seconds / it->solo_iteration_seconds);
  }
}

void Service::ApplyLiveOptions(const DaemonOptions& fresh, const std::vector<std::string>& changed) {
  for (const std::string& key : changed) {
    if (key == "policy") {
      for (auto& d : devices_) {
        DeviceRuntime* dev = &d->runtime();
        if (absl::Status s = dev->scheduler->SetPolicy(fresh.policy); !s.ok()) {
          TLOG_ERROR("policy not changed").With("device", dev->device->info().name).With("status", s.ToString());
          continue;
        }
      }
      TLOG_INFO("policy changed").With("policy", fresh.policy).With("previous", options_.policy);
      options_.policy = fresh.policy;
      for (auto& d : devices_) {
        d->runtime().lane_levels_stale = true;  // stream priorities apply under PRIORITY only
        d->DispatchAll();
      }
    } else if (key == "log_level") {
      LogLevel level;
      if (ParseLogLevel(fresh.log_level, &level)) {
        options_.log_level = fresh.log_level;
        SetMinLogLevel(level);
        TLOG_INFO("log level changed").With("log_level", fresh.log_level);
      }
    } else if (key == "session_timeout") {
      options_.session_timeout_seconds = fresh.session_timeout_seconds;
      TLOG_INFO("session timeout changed").With("seconds", fresh.session_timeout_seconds);
    } else if (key == "max_job_memory_mib") {
      options_.max_job_bytes = fresh.max_job_bytes;
      for (auto& d : devices_) d->runtime().memory->SetMaxJobBytes(fresh.max_job_bytes);
      TLOG_INFO("per-job memory quota changed").With("max_job_memory_mib", fresh.max_job_bytes >> 20);
    } else if (key == "max_user_priority" || key == "max_user_weight") {
      options_.max_user_priority = fresh.max_user_priority;
      options_.max_user_weight = fresh.max_user_weight;
      TLOG_INFO("user ceilings changed")
          .With("max_user_priority", fresh.max_user_priority)
          .With("max_user_weight", fresh.max_user_weight);
    } else if (key == "max_jobs_per_session") {
      options_.max_jobs_per_session = fresh.max_jobs_per_session;
      TLOG_INFO("jobs per session changed").With("max_jobs_per_session", fresh.max_jobs_per_session);
    } else if (key == "max_unread_reply_mib") {
      options_.max_unread_reply_bytes = fresh.max_unread_reply_bytes;
      TLOG_INFO("unread reply bytes per session changed").With("bytes", fresh.max_unread_reply_bytes);
    } else if (key == "max_queued_per_job") {
      options_.max_queued_per_job = fresh.max_queued_per_job;
      TLOG_INFO("queued iterations per job changed").With("max_queued_per_job", fresh.max_queued_per_job);
    } else if (key == "checkpoint_interval") {
      options_.checkpoint_interval_seconds = fresh.checkpoint_interval_seconds;
      TLOG_INFO("checkpoint interval changed").With("seconds", fresh.checkpoint_interval_seconds);
    }
  }
}

void Service::OnConfigReload(bool ok) {
  if (ok) config_reloads_++;
  measurements_.OnConfigReload(ok);
}

std::string Service::StatusLine() {
  absl::flat_hash_set<uint64_t> live;
  for (const auto& [id, job] : jobs_) live.insert(id);
  measurements_.RetainJobs(live);
  uint64_t queued = 0;
  for (const auto& [id, job] : jobs_) queued += job->queued.size();
  return absl::StrCat("serving ", sessions_.size(), " session", sessions_.size() == 1 ? "" : "s", ", ", jobs_.size(),
                      " job", jobs_.size() == 1 ? "" : "s", " (", waiting_for_memory_.size(), " waiting for memory, ",
                      queued, " iterations queued) on ", absl::StrJoin(DeviceNames(), ","), "; policy ",
                      options_.policy, draining_ ? "; draining" : "");
}

}  // namespace tandem::server
