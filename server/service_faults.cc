// Restarting after a device fault (docs/deploy.md, Device faults).
//
// A fault that leaves a device's context unusable (CUDA's sticky errors: a
// kernel's illegal address, an uncorrectable ECC error; Device::Fault)
// cannot be undone inside the process: CUDA requires the process to end. So
// the first iteration that reports one makes tandemd stop as for SIGTERM
// (main.cc) and then start itself again. Jobs survive through their
// checkpoints: the last whole-iteration snapshot of each (taken on the
// host, before the fault) is already on disk, or being written by the
// persist thread, which FinishShutdown waits for; the final snapshots of
// the stop are not taken on the faulted device. Clients re-attach with their
// jobs' resume tokens (the PyTorch adaptor does it by itself).
//
// Which job faulted: every stream of the context reports the same error,
// so the daemon knows only which jobs had work on the device. When one job
// had, it is blamed: its client gets the fault (INTERNAL) and is not
// re-attached. When several had, none is blamed; their checkpoint paths go
// to the next process (main.cc passes them on), which runs the device one
// iteration at a time while any of them that comes back has not completed
// an iteration (Job::suspect, DeviceDispatcher::DispatchAll). A fault that
// repeats then has one job on the device, and is blamed on it.
//
// The iterations that report the fault wait, unanswered, until the stop has
// drained the devices (AnswerFaultReports); every other request answered
// during the stop gets UNAVAILABLE, which tells a client to re-attach once
// tandemd is back.
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "proto/status_convert.h"
#include "server/service.h"

namespace tandem::server {

void Service::OnDeviceFault(Job& job, const PendingReply& to, uint64_t iteration, const absl::Status& status) {
  fault_reports_.push_back(
      FaultReport{.job_id = job.id, .job_name = job.name, .to = to, .iteration = iteration, .status = status});
  if (fault_.has_value()) return;
  DeviceRuntime* dev = job.device;
  fault_ = DeviceFault{.device = dev->device->info().name, .status = dev->device->Fault()};
  // The jobs with work on the device now: this one (its iteration has just
  // ended) and those with iterations still in flight.
  suspects_.push_back(job.id);
  for (const auto& [id, other] : jobs_) {
    if (other->device == dev && other->inflight > 0 && id != job.id) suspects_.push_back(id);
  }
  if (suspects_.size() > 1) {
    for (uint64_t id : suspects_) {
      if (const Job& other = *jobs_.at(id); !other.checkpoint_path.empty()) {
        suspects_out_.push_back(other.checkpoint_path);
      }
    }
  }
  TLOG_ERROR("device fault: tandemd restarts, and jobs resume from their checkpoints")
      .With("device", fault_->device)
      .With("job", job.id)
      .With("name", job.name)
      .With("iteration", iteration)
      .With("jobs_on_device", suspects_.size())
      .With("fault", fault_->status.message());
  if (on_device_fault_) on_device_fault_();
}

std::optional<Service::DeviceFault> Service::CurrentFault() const {
  if (fault_.has_value()) return fault_;
  for (const auto& d : devices_) {
    const device::Device& dev = *d->runtime().device;
    if (absl::Status s = dev.Fault(); !s.ok()) return DeviceFault{.device = dev.info().name, .status = s};
  }
  return std::nullopt;
}

absl::Status Service::AfterFault(const DeviceFault& fault, const absl::Status& status) {
  return absl::UnavailableError(absl::StrCat(
      "tandemd is restarting after a fault of its device ", fault.device, " (", fault.status.message(),
      "); this request was not done (", status.message(),
      "). Connect again and register the job with its resume token: it continues from its last checkpoint"));
}

void Service::AnswerFaultReports() {
  const bool blame = suspects_.size() == 1;
  for (const FaultReport& r : fault_reports_) {
    if (!blame || r.job_id != suspects_[0]) {
      ReplyError(r.to, r.status);  // AfterFault: UNAVAILABLE
      continue;
    }
    TLOG_ERROR("job blamed for the device fault: it was alone on the device")
        .With("job", r.job_id)
        .With("name", r.job_name);
    ++errors_;
    measurements_.OnError(absl::StatusCode::kInternal);
    v1::Response response;
    StatusToProto(
        absl::InternalError(absl::StrCat(
            "job '", r.job_name, "' iteration ", r.iteration, ": the device faulted in this job's iteration (",
            r.status.message(), "), with no other job on the device. tandemd restarts; this job is not ",
            "resumed by itself: fix the fault, then register it again (with its resume token it ",
            "continues from its last checkpoint)")),
        response.mutable_status());
    Reply(r.to, std::move(response));
  }
  fault_reports_.clear();
}

}  // namespace tandem::server
