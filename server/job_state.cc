#include "server/job_state.h"

#include "absl/strings/str_cat.h"

namespace tandem::server {

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kWaitingForMemory:
      return "waiting-for-memory";
    case JobState::kUploading:
      return "uploading";
    case JobState::kRunning:
      return "running";
    case JobState::kClosing:
      return "closing";
  }
  return "?";
}

bool JobCanMove(JobState from, JobState to) {
  switch (from) {
    case JobState::kWaitingForMemory:
      return to == JobState::kUploading || to == JobState::kClosing;
    case JobState::kUploading:
      return to == JobState::kRunning || to == JobState::kClosing;
    case JobState::kRunning:
      return to == JobState::kClosing;
    case JobState::kClosing:
      return false;
  }
  return false;
}

absl::Status JobStateMachine::MoveTo(JobState next) {
  if (!JobCanMove(state_, next)) {
    return absl::FailedPreconditionError(
        absl::StrCat("a job cannot go from ", JobStateName(state_), " to ", JobStateName(next)));
  }
  state_ = next;
  return absl::OkStatus();
}

}  // namespace tandem::server
