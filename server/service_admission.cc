// Admission: the device a job goes to, whether it fits there now (memory
// and the policy's lane), and the registrations that wait for memory
// (hints.queue_if_full), admitted in arrival order when memory frees.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "server/service.h"

namespace tandem::server {

DeviceRuntime* Service::NamedDevice(const std::string& want) {
  for (auto& d : devices_) {
    DeviceRuntime* dev = &d->runtime();
    const std::string& name = dev->device->info().name;
    if (name == want || (want == "cuda" && dev->device->info().backend == device::Backend::kCuda)) return dev;
  }
  return nullptr;
}

device::Device* Service::KnownDevice(const v1::JobHints& hints) {
  DeviceRuntime* dev = nullptr;
  if (!hints.device().empty()) {
    dev = NamedDevice(hints.device());
  } else if (devices_.size() == 1) {
    dev = &devices_[0]->runtime();
  }
  return dev != nullptr ? dev->device.get() : nullptr;
}

DeviceRuntime* Service::ChooseDevice(const v1::JobHints& hints, absl::Status* error) {
  const std::string& want = hints.device();
  if (want.empty()) {
    // The device with the most free memory.
    DeviceRuntime* best = nullptr;
    uint64_t best_free = 0;
    for (auto& d : devices_) {
      uint64_t free = d->runtime().memory->Stats().free_bytes;
      if (best == nullptr || free > best_free) {
        best = &d->runtime();
        best_free = free;
      }
    }
    return best;
  }
  if (DeviceRuntime* dev = NamedDevice(want); dev != nullptr) return dev;
  *error = absl::InvalidArgumentError(absl::StrCat(
      "device '", want, "' is not served by this daemon; it serves: ", absl::StrJoin(DeviceNames(), ", ")));
  return nullptr;
}

absl::Status Service::Admit(Job& job) {
  DeviceRuntime& dev = *job.device;
  const v1::JobHints& hints = job.hints;
  memory::JobMemoryRequest mem;
  mem.job = job.id;
  mem.name = job.name;
  for (int v : job.graph->persistents) mem.persistent_bytes.push_back(job.graph->values[v].type.bytes());
  mem.ephemeral_bytes = job.ArenaBytes();
  mem.quota_bytes = hints.memory_quota_bytes();
  // An administrator's quota may exceed max_job_memory_mib (others' were
  // refused above it at registration).
  mem.quota_replaces_limit = job.admin_owner && hints.memory_quota_bytes() != 0;
  sched::JobParams params = SchedParams(job);
  // Where the policy wants the job; if that lane cannot take it, where
  // memory can.
  mem.lane = dev.scheduler->ChooseLane(params, dev.memory->NumLanes());
  auto grant = dev.memory->Admit(mem);
  if (!grant.ok() && mem.lane >= 0 && !absl::IsResourceExhausted(grant.status())) {
    mem.lane = -1;
    grant = dev.memory->Admit(mem);
  }
  if (!grant.ok()) return grant.status();
  job.lane = grant->lane;
  job.persistent = grant->persistent;
  job.persistent_bytes = 0;
  for (uint64_t b : mem.persistent_bytes) job.persistent_bytes += b;
  if (absl::Status s = DispatcherOf(dev).EnsureLane(job.lane); !s.ok()) {
    dev.memory->Release(job.id);
    return s;
  }
  params.lane = job.lane;
  if (absl::Status s = dev.scheduler->AddJob(job.id, params); !s.ok()) {
    dev.memory->Release(job.id);
    return s;
  }
  DispatcherOf(dev).JournalArenaMoves(job.id);
  dev.lane_levels_stale = true;
  return absl::OkStatus();
}

sched::JobParams Service::SchedParams(const Job& job) const {
  sched::JobParams params;
  params.priority = job.hints.priority();
  params.weight = job.hints.weight() > 0 ? job.hints.weight() : 1.0;
  params.expected_iterations = job.hints.expected_iterations();
  params.lane = job.lane;
  params.interference_key = job.interference_key;
  return params;
}

void Service::AdmitWaitingJobs() {
  absl::Status admitted;  // the job just asked about
  waiting_for_memory_.TakeIf(
      [&](Job& job) {
        admitted = Admit(job);
        return !absl::IsFailedPrecondition(admitted);  // still does not fit: it keeps its place
      },
      [&](std::unique_ptr<Job> job) {
        if (!admitted.ok()) {
          ReplyError(job->registration.reply,
                     absl::Status(admitted.code(), absl::StrCat("job '", job->name, "': ", admitted.message())));
          return;
        }
        TLOG_INFO("waiting job admitted").With("job", job->id).With("name", job->name);
        StartJob(std::move(job));
      });
}

}  // namespace tandem::server
