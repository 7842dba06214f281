// The registrations that asked to wait for memory (hints.queue_if_full):
// prepared jobs that did not fit when they came, owned here until they are
// admitted, killed, or their session ends. Admission tries them in arrival
// order whenever memory frees (Service::AdmitWaitingJobs).
//
// Loop thread only, like the rest of server/state.h.
#ifndef TANDEM_SERVER_WAITING_JOBS_H_
#define TANDEM_SERVER_WAITING_JOBS_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>

#include "absl/functional/function_ref.h"
#include "server/state.h"

namespace tandem::server {

class WaitingJobs {
 public:
  using List = std::list<std::unique_ptr<Job>>;

  // Adds a job at the end of the line.
  void Push(std::unique_ptr<Job> job);
  // Null when the job is not waiting.
  Job* Find(uint64_t job_id) const;
  // Takes the job out of the line; null when it is not waiting.
  std::unique_ptr<Job> Take(uint64_t job_id);
  // Asks `decide` about each job in arrival order; a job it says true to
  // (admitted, or refused for good) leaves the line and goes to `take` at
  // once, before the next job is asked. Neither may change the line.
  void TakeIf(absl::FunctionRef<bool(Job&)> decide, absl::FunctionRef<void(std::unique_ptr<Job>)> take);
  // Drops every job of the session (its client left); how many went.
  size_t DropSession(uint64_t session_id);
  // How many jobs of the session wait.
  size_t CountOf(uint64_t session_id) const;

  size_t size() const { return jobs_.size(); }
  bool empty() const { return jobs_.empty(); }
  // The jobs in arrival order.
  List::const_iterator begin() const { return jobs_.begin(); }
  List::const_iterator end() const { return jobs_.end(); }

 private:
  List jobs_;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_WAITING_JOBS_H_
