// Jobs' checkpoints (state_dir): a job that trains is snapshotted to the host
// between iterations at most every checkpoint_interval, and once more when
// its client goes away or tandemd stops; the persist thread writes each
// snapshot (server/checkpoint_file.h). A registration with the job's resume
// token starts from its checkpoint instead of the values the client sent.
//
// A snapshot is a copy of every persistent tensor enqueued on the job's lane
// stream after the iterations dispatched so far, so it holds whole
// iterations only (a segmented iteration in progress defers it). Its
// iteration count is the job's completed iterations when the copy's
// completion reaches the loop: the stream finishes in order, and every
// iteration before the copy has reported by then.
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "ir/graph_builder.h"
#include "server/checkpoint_file.h"
#include "server/service.h"

namespace tandem::server {

v1::JobCheckpoint Service::CheckpointHeader(const Job& job) const {
  v1::JobCheckpoint header;
  header.set_name(job.name);
  header.set_owner(job.checkpoint_owner);
  header.set_resume_token(job.resume_token);
  header.set_iterations(job.resumed_iterations + job.done);
  for (int v : job.graph->persistents) {
    v1::TensorSpec* spec = header.add_persistent();
    spec->set_name(job.graph->values[v].name);
    TensorTypeToProto(job.graph->values[v].type, spec);
  }
  header.set_unix_seconds(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  return header;
}

Clock::time_point Service::NextCheckpointTime() const {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(options_.checkpoint_interval_seconds));
}

void Service::OnIterationReplied(Job& job) {
  iterations_++;
  MaybeCheckpoint(job);
}

void Service::MaybeCheckpoint(Job& job) {
  if (!job.checkpoint_path.empty() && Clock::now() >= job.next_checkpoint) CheckpointJob(job, /*final=*/false);
}

void Service::CheckpointPausedJobs() {
  for (auto& [id, job] : jobs_) {
    // Iterations that finished while the job's previous snapshot was in
    // flight, with none after them (the job paused or stopped sending).
    if (job->resumed_iterations + job->done > job->snapshot_iterations && job->inflight == 0) MaybeCheckpoint(*job);
  }
}

void Service::CheckpointJob(Job& job, bool final) {
  if (job.checkpoint_path.empty() || job.discard_checkpoint || job.device == nullptr) return;
  // A faulted device's memory cannot be read: its last snapshot on disk stands.
  if (!job.device->device->Fault().ok()) return;
  if (job.state != JobState::kRunning || DispatcherOf(*job.device).HasSegmentedIteration(job)) return;
  if (!final && job.checkpoint_in_flight) return;
  DeviceRuntime& dev = *job.device;
  Lane& lane = dev.lanes[job.lane];
  if (lane.executor == nullptr) return;
  char* dst = nullptr;
  std::shared_ptr<std::string> owned;
  if (final) {
    owned = std::make_shared<std::string>(job.persistent_bytes, '\0');
    dst = owned->data();
  } else {
    if (job.snapshot_host == nullptr) {
      for (auto it = dev.spare_snapshots.begin(); it != dev.spare_snapshots.end(); ++it) {
        if (it->second >= job.persistent_bytes) {
          job.snapshot_host = it->first;
          dev.spare_snapshots.erase(it);
          break;
        }
      }
    }
    if (job.snapshot_host == nullptr) {
      absl::StatusOr<void*> host = dev.device->AllocateHost(job.persistent_bytes);
      if (!host.ok()) {
        TLOG_WARNING("no host memory for a checkpoint").With("job", job.id).With("error", host.status().message());
        job.next_checkpoint = NextCheckpointTime();
        return;
      }
      job.snapshot_host = *host;
    }
    dst = static_cast<char*>(job.snapshot_host);
    job.checkpoint_in_flight = true;
  }
  std::vector<std::pair<const void*, size_t>> sources;
  for (size_t i = 0; i < job.persistent.size(); ++i) {
    sources.emplace_back(job.persistent[i], job.graph->values[job.graph->persistents[i]].type.bytes());
  }
  job.device_work++;
  device::Device* device = dev.device.get();
  device::Stream* stream = lane.stream.get();
  const uint64_t job_id = job.id;
  lane.executor->Post([this, device, stream, dst, sources, owned, job_id]() {
    auto done = [this, owned, job_id](absl::Status s) {
      loop_.Post("Service.OnSnapshotCopied", [this, owned, job_id, s]() { OnSnapshotCopied(job_id, owned, s); });
    };
    absl::Status s;
    size_t offset = 0;
    for (const auto& [src, bytes] : sources) {
      if (s.ok()) s = device->CopyToHost(*stream, dst + offset, src, bytes);
      offset += bytes;
    }
    if (s.ok()) s = device->OnComplete(*stream, done);
    if (!s.ok()) done(s);
  });
}

void Service::OnSnapshotCopied(uint64_t job_id, std::shared_ptr<std::string> owned, absl::Status status) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Job& job = *it->second;
  const bool periodic = owned == nullptr;
  if (!status.ok()) {
    TLOG_WARNING("checkpoint snapshot failed")
        .With("job", job.id)
        .With("name", job.name)
        .With("error", status.message());
    if (periodic) job.checkpoint_in_flight = false;
    OnDeviceWorkDone(job_id);
    return;
  }
  v1::JobCheckpoint header = CheckpointHeader(job);
  if (periodic) job.snapshot_iterations = header.iterations();
  const absl::string_view data =
      periodic ? absl::string_view(static_cast<const char*>(job.snapshot_host), job.persistent_bytes) : *owned;
  const std::string path = job.checkpoint_path;
  if (persist_ == nullptr) {  // after shutdown
    if (periodic) job.checkpoint_in_flight = false;
    OnDeviceWorkDone(job_id);
    return;
  }
  // The write reads the page-locked buffer of a periodic snapshot: the job
  // (and its buffer) stays until OnCheckpointWritten (device_work).
  persist_->Post([this, header = std::move(header), data, owned, path, job_id, periodic]() {
    const Clock::time_point start = Clock::now();
    absl::Status s = WriteCheckpoint(path, header, data);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const uint64_t iterations = header.iterations();
    loop_.Post("Service.OnCheckpointWritten", [this, s, seconds, iterations, job_id, periodic, path]() {
      auto it = jobs_.find(job_id);
      if (!s.ok()) {
        TLOG_WARNING("checkpoint not written").With("job", job_id).With("error", s.message());
      } else {
        TLOG_DEBUG("checkpoint written")
            .With("job", job_id)
            .With("iterations", iterations)
            .With("write_ms", seconds * 1e3);
      }
      if (it == jobs_.end()) return;
      Job& job = *it->second;
      if (job.discard_checkpoint) ::unlink(path.c_str());
      if (periodic) {
        job.checkpoint_in_flight = false;
        job.next_checkpoint = NextCheckpointTime();
        // Iterations that ended during the write, and none in flight to
        // take the next snapshot after: take it now when it is due.
        if (job.inflight == 0 && job.resumed_iterations + job.done > job.snapshot_iterations) MaybeCheckpoint(job);
      }
      OnDeviceWorkDone(job_id);
    });
  });
}

void Service::SweepCheckpoints() {
  if (options_.state_dir.empty() || options_.checkpoint_ttl_seconds <= 0 || persist_ == nullptr) return;
  absl::flat_hash_set<std::string> live;
  for (const auto& [id, job] : jobs_) {
    if (!job->checkpoint_path.empty()) live.insert(job->checkpoint_path);
  }
  persist_->Post([dir = options_.state_dir, ttl = options_.checkpoint_ttl_seconds, live = std::move(live)]() {
    for (const std::string& path : RemoveExpiredCheckpoints(dir, ttl, std::chrono::system_clock::now(), live)) {
      TLOG_INFO("deleted a checkpoint nobody resumed").With("path", path).With("checkpoint_ttl_s", ttl);
    }
  });
}

void Service::ReleaseCheckpointState(Job& job) {
  if (job.discard_checkpoint && !job.checkpoint_path.empty() && persist_ != nullptr) {
    const std::string path = job.checkpoint_path;
    persist_->Post([path]() { ::unlink(path.c_str()); });  // after any write still queued
  }
  if (job.snapshot_host != nullptr && job.device != nullptr) {
    job.device->spare_snapshots.emplace_back(job.snapshot_host, job.persistent_bytes);
    job.snapshot_host = nullptr;
  }
}

absl::StatusOr<Service::Resumed> Service::LoadResume(const v1::Request& request, const std::string& path,
                                                     uint64_t max_bytes) {
  const v1::RegisterJobRequest& reg = request.register_job();
  absl::StatusOr<LoadedCheckpoint> loaded = ReadCheckpoint(path, max_bytes);
  if (absl::IsNotFound(loaded.status())) {
    return absl::NotFoundError("no checkpoint of this job to resume (it was closed, or never checkpointed)");
  }
  if (!loaded.ok()) return loaded.status();
  if (!TokensEqual(loaded->header.resume_token(), reg.resume_token())) {
    return absl::PermissionDeniedError("the resume token is not this job's");
  }
  if (absl::Status s = CheckCheckpointMatches(loaded->header, reg.persistent()); !s.ok()) return s;
  // The request as the client sent it, but its persistent tensors' bytes
  // are the checkpoint's frames.
  auto resumed = std::make_shared<v1::Request>();
  v1::RegisterJobRequest* out = resumed->mutable_register_job();
  out->set_name(reg.name());
  *out->mutable_graph() = reg.graph();
  *out->mutable_hints() = reg.hints();
  *out->mutable_variants() = reg.variants();
  out->set_resume_token(reg.resume_token());
  for (int i = 0; i < reg.persistent_size(); ++i) {
    v1::Tensor* t = out->add_persistent();
    *t->mutable_spec() = reg.persistent(i).spec();
    t->set_frame(static_cast<uint32_t>(i + 1));
  }
  return Resumed{std::move(resumed), std::move(loaded->frames), loaded->header.iterations()};
}

}  // namespace tandem::server
