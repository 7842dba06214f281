#include "client/resumable_job.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::client {

absl::StatusOr<std::unique_ptr<ResumableJob>> ResumableJob::Register(const ClientOptions& options,
                                                                     v1::RegisterJobRequest request,
                                                                     absl::Duration reattach_timeout) {
  std::unique_ptr<ResumableJob> job(new ResumableJob(options, std::move(request), reattach_timeout));
  absl::Status s = job->Attach(absl::Now());  // one try: the daemon is expected to be up
  if (!s.ok()) return s;
  return job;
}

absl::Status ResumableJob::Attach(absl::Time deadline) {
  for (;;) {
    // The first registration waits as long as a Client does; a re-attach
    // tries again within its deadline.
    ClientOptions options = options_;
    const absl::Duration left = deadline - absl::Now();
    if (left > absl::ZeroDuration()) {
      options.connect_timeout = std::max(absl::Milliseconds(500), std::min(left, options_.connect_timeout));
    }
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    absl::Status s = client.status();
    if (s.ok()) {
      v1::RegisterJobRequest request = request_;
      const bool resuming = !response_.resume_token().empty();
      if (resuming) request.set_resume_token(response_.resume_token());
      absl::StatusOr<v1::RegisterJobResponse> registered = (*client)->RegisterJob(std::move(request));
      if (resuming && registered.status().code() == absl::StatusCode::kNotFound) {
        // No checkpoint was written yet: the job starts again from its first values.
        registered = (*client)->RegisterJob(request_);
      }
      if (registered.ok()) {
        client_ = *std::move(client);
        response_ = *std::move(registered);
        return absl::OkStatus();
      }
      s = registered.status();
    }
    if (s.code() != absl::StatusCode::kUnavailable || absl::Now() >= deadline) return s;
    absl::SleepFor(absl::Milliseconds(50));  // tandemd may still be stopping, or not listening yet
  }
}

bool ResumableJob::Resumable(const absl::Status& s) const {
  return s.code() == absl::StatusCode::kUnavailable && !response_.resume_token().empty() &&
         reattach_timeout_ > absl::ZeroDuration();
}

absl::Status ResumableJob::Recover(const absl::Status& cause, bool* resend_failed) {
  const absl::Time started = absl::Now();
  client_.reset();  // its session went with the daemon
  if (absl::Status s = Attach(started + reattach_timeout_); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat(cause.message(), " (job '", request_.name(), "' could not re-attach within ",
                                     absl::FormatDuration(reattach_timeout_), ": ", s.message(), ")"));
  }
  const uint64_t resumed = response_.resumed_iterations();
  recoveries_.push_back(Recovery{.resumed_iterations = resumed,
                                 .lost = iterations_ > resumed ? iterations_ - resumed : 0,
                                 .pause_seconds = absl::ToDoubleSeconds(absl::Now() - started)});
  iterations_ = resumed;
  for (Pending& p : pending_) p.sent = false;  // their tickets were the old session's
  uint64_t number = iterations_;
  for (Pending& p : pending_) {
    absl::StatusOr<uint64_t> ticket = client_->SubmitIteration(job_id(), p.feeds, p.fetches, ++number);
    if (!ticket.ok()) {
      *resend_failed = true;
      return ticket.status();
    }
    p.ticket = *ticket;
    p.sent = true;
  }
  return absl::OkStatus();
}

absl::Status ResumableJob::Submit(NamedTensors feeds, std::vector<std::string> fetches) {
  Pending p{.feeds = std::move(feeds), .fetches = std::move(fetches)};
  absl::StatusOr<uint64_t> ticket =
      client_->SubmitIteration(job_id(), p.feeds, p.fetches, iterations_ + pending_.size() + 1);
  if (ticket.ok()) {
    p.ticket = *ticket;
    p.sent = true;
  } else if (!Resumable(ticket.status())) {
    return ticket.status();
  }
  pending_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::StatusOr<IterationResult> ResumableJob::Wait() {
  if (pending_.empty()) return absl::FailedPreconditionError("no iteration in flight");
  // A daemon that goes away again while the iterations are sent again (a
  // second fault, a restart loop) gets a few more tries, each within the
  // re-attach timeout.
  constexpr int kMaxRecoveries = 3;
  for (int recoveries = 0;; ++recoveries) {
    absl::StatusOr<IterationResult> result =
        pending_.front().sent ? client_->WaitIteration(pending_.front().ticket)
                              : absl::StatusOr<IterationResult>(absl::UnavailableError("tandemd went away"));
    if (result.ok()) {
      ++iterations_;
      pending_.pop_front();
      return result;
    }
    if (!Resumable(result.status()) || recoveries == kMaxRecoveries) {
      pending_.pop_front();
      return result.status();
    }
    bool resend_failed = false;
    if (absl::Status s = Recover(result.status(), &resend_failed); !s.ok() && !(resend_failed && Resumable(s))) {
      pending_.pop_front();
      return s;
    }
  }
}

absl::StatusOr<IterationResult> ResumableJob::Run(const NamedTensors& feeds, const std::vector<std::string>& fetches) {
  if (!pending_.empty()) return absl::FailedPreconditionError("Run with iterations in flight: Wait for them first");
  if (absl::Status s = Submit(feeds, fetches); !s.ok()) return s;
  return Wait();
}

}  // namespace tandem::client
