// A job's life as a state machine:
//
//   waiting-for-memory -> uploading -> running
//   and from each of the three -> closing
//
// A job waits for memory only when it asked to (hints.queue_if_full);
// uploading copies its initial values to the device; it runs until it
// closes (its client closed it or went away, an administrator killed it, the
// daemon stops). Nothing leaves closing: the job is erased once its device
// work is done. JobStateMachine reads like a JobState and changes only
// through MoveTo, which refuses any other transition.
#ifndef TANDEM_SERVER_JOB_STATE_H_
#define TANDEM_SERVER_JOB_STATE_H_

#include "absl/status/status.h"

namespace tandem::server {

enum class JobState { kWaitingForMemory, kUploading, kRunning, kClosing };

// "waiting-for-memory", "uploading", "running", "closing".
const char* JobStateName(JobState state);

// Whether a job may go from `from` to `to`.
bool JobCanMove(JobState from, JobState to);

class JobStateMachine {
 public:
  JobStateMachine() = default;
  explicit JobStateMachine(JobState initial) : state_(initial) {}

  JobState get() const { return state_; }
  operator JobState() const { return state_; }  // NOLINT: reads like the state it holds

  // FAILED_PRECONDITION (and no change) for a transition the diagram above
  // does not have; moving to the state it is in is one too.
  absl::Status MoveTo(JobState next);

 private:
  JobState state_ = JobState::kWaitingForMemory;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_JOB_STATE_H_
