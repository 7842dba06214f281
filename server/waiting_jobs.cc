#include "server/waiting_jobs.h"

#include <utility>

namespace tandem::server {

void WaitingJobs::Push(std::unique_ptr<Job> job) { jobs_.push_back(std::move(job)); }

Job* WaitingJobs::Find(uint64_t job_id) const {
  for (const std::unique_ptr<Job>& job : jobs_) {
    if (job->id == job_id) return job.get();
  }
  return nullptr;
}

std::unique_ptr<Job> WaitingJobs::Take(uint64_t job_id) {
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if ((*it)->id != job_id) continue;
    std::unique_ptr<Job> job = std::move(*it);
    jobs_.erase(it);
    return job;
  }
  return nullptr;
}

void WaitingJobs::TakeIf(absl::FunctionRef<bool(Job&)> decide, absl::FunctionRef<void(std::unique_ptr<Job>)> take) {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (!decide(**it)) {
      ++it;
      continue;
    }
    std::unique_ptr<Job> job = std::move(*it);
    it = jobs_.erase(it);
    take(std::move(job));
  }
}

size_t WaitingJobs::DropSession(uint64_t session_id) {
  return jobs_.remove_if([&](const std::unique_ptr<Job>& job) { return job->session == session_id; });
}

size_t WaitingJobs::CountOf(uint64_t session_id) const {
  size_t n = 0;
  for (const std::unique_ptr<Job>& job : jobs_) n += job->session == session_id;
  return n;
}

}  // namespace tandem::server
