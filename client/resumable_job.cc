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

absl::StatusOr<IterationResult> ResumableJob::Run(const NamedTensors& feeds, const std::vector<std::string>& fetches) {
  absl::StatusOr<IterationResult> result = client_->RunIteration(job_id(), feeds, fetches, iterations_ + 1);
  if (result.ok()) {
    ++iterations_;
    return result;
  }
  if (result.status().code() != absl::StatusCode::kUnavailable || response_.resume_token().empty() ||
      reattach_timeout_ <= absl::ZeroDuration()) {
    return result.status();
  }
  const absl::Time started = absl::Now();
  client_.reset();  // its session went with the daemon
  if (absl::Status s = Attach(started + reattach_timeout_); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat(result.status().message(), " (job '", request_.name(), "' could not re-attach within ",
                               absl::FormatDuration(reattach_timeout_), ": ", s.message(), ")"));
  }
  const uint64_t resumed = response_.resumed_iterations();
  recoveries_.push_back(Recovery{.resumed_iterations = resumed,
                                 .lost = iterations_ > resumed ? iterations_ - resumed : 0,
                                 .pause_seconds = absl::ToDoubleSeconds(absl::Now() - started)});
  iterations_ = resumed;
  result = client_->RunIteration(job_id(), feeds, fetches, iterations_ + 1);
  if (result.ok()) ++iterations_;
  return result;
}

}  // namespace tandem::client
