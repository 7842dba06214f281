// CudaStreamImpl and the completion worker (cuda_internal.h).
#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "device/completion_pass.h"
#include "device/cuda/cuda_internal.h"
#include "device/cuda/cuda_status.h"

namespace tandem::device {

CudaStream* AsCudaStream(Stream& stream) { return dynamic_cast<CudaStream*>(&stream); }

cudaStream_t NativeStream(Stream& stream) { return static_cast<CudaStream&>(stream).native(); }

namespace cuda_internal {
namespace {

// How often the worker looks at the pending completions' events while any
// is pending: the most a completion waits to be reported.
constexpr auto kPollInterval = std::chrono::microseconds(20);

uint64_t NextSerial() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

// Keeps the first error.
void Merge(absl::Status& into, const absl::Status& status) {
  if (into.ok() && !status.ok()) into = status;
}

}  // namespace

// ---- CudaStreamImpl ----

struct CudaStreamImpl::FlushRecord {
  CudaStreamImpl* stream;
  std::vector<Check> checks;
};

CudaStreamImpl::CudaStreamImpl(int ordinal, cudaStream_t stream, CompletionWorker* worker)
    : ordinal_(ordinal), stream_(stream), worker_(worker), serial_(NextSerial()) {}

CudaStreamImpl::~CudaStreamImpl() {
  cudaSetDevice(ordinal_);
  const cudaError_t sync = cudaStreamSynchronize(stream_);
  if (sync != cudaSuccess) {
    TLOG_WARNING("cuda stream failed while draining for destruction")
        .With("device", ordinal_)
        .With("error", cudaGetErrorName(sync));
  }
  worker_->Forget(*this);
  deferred_.clear();
  attachments_.clear();  // may free device memory: after the drain
  cudaStreamDestroy(stream_);
}

CudaStream::Attachment* CudaStreamImpl::attachment(const void* key) const {
  for (const auto& [k, a] : attachments_) {
    if (k == key) return a.get();
  }
  return nullptr;
}

void CudaStreamImpl::Attach(const void* key, std::unique_ptr<Attachment> attachment) {
  for (auto& [k, a] : attachments_) {
    if (k == key) {
      a = std::move(attachment);
      return;
    }
  }
  attachments_.emplace_back(key, std::move(attachment));
}

void CudaStreamImpl::DeferCheck(const void* owner, Check check) { deferred_.emplace_back(owner, std::move(check)); }

bool CudaStreamImpl::HasDeferredChecks(const void* owner) const {
  return std::any_of(deferred_.begin(), deferred_.end(), [owner](const auto& entry) { return entry.first == owner; });
}

std::vector<CudaStream::Check> CudaStreamImpl::TakeDeferredChecks() {
  std::vector<Check> checks;
  checks.reserve(deferred_.size());
  for (auto& [owner, check] : deferred_) checks.push_back(std::move(check));
  deferred_.clear();
  return checks;
}

void CudaStreamImpl::RunFlushedChecks(void* arg) {
  std::unique_ptr<FlushRecord> record(static_cast<FlushRecord*>(arg));
  for (Check& check : record->checks) {
    absl::Status status = check();
    if (!status.ok()) record->stream->Fail(std::move(status));
  }
}

absl::Status CudaStreamImpl::FlushDeferredChecks() {
  if (deferred_.empty()) return absl::OkStatus();
  auto record = std::make_unique<FlushRecord>(FlushRecord{this, TakeDeferredChecks()});
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  const cudaError_t error = cudaLaunchHostFunc(stream_, &RunFlushedChecks, record.get());
  if (error != cudaSuccess) {
    // Keep the checks for the next completion rather than lose them.
    for (Check& check : record->checks) deferred_.emplace_back(nullptr, std::move(check));
    return CudaStatus(error, "cudaLaunchHostFunc");
  }
  record.release();  // owned by the callback now
  return absl::OkStatus();
}

void CudaStreamImpl::Fail(absl::Status status) {
  std::lock_guard<std::mutex> lock(failure_mu_);
  Merge(failure_, status);
}

absl::Status CudaStreamImpl::TakeFailure() {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return std::exchange(failure_, absl::OkStatus());
}

// ---- CompletionWorker ----

CompletionWorker::CompletionWorker(int ordinal) : ordinal_(ordinal), thread_([this] { Run(); }) {}

CompletionWorker::~CompletionWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  cudaSetDevice(ordinal_);
  for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
}

absl::StatusOr<cudaEvent_t> CompletionWorker::TakeEventLocked() {
  if (!free_events_.empty()) {
    cudaEvent_t event = free_events_.back();
    free_events_.pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

absl::Status CompletionWorker::Add(CudaStreamImpl& stream, std::vector<CudaStream::Check> checks,
                                   std::function<void(absl::Status)> done) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(cudaEvent_t event, TakeEventLocked());
  if (const cudaError_t error = cudaEventRecord(event, stream.native()); error != cudaSuccess) {
    free_events_.push_back(event);
    return CudaStatus(error, "cudaEventRecord");
  }
  const uint64_t id = next_id_++;
  pending_[id] = Pending{&stream, event, std::move(checks), std::move(done)};
  cv_.notify_all();
  return absl::OkStatus();
}

void CompletionWorker::Forget(const CudaStreamImpl& stream) {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] {
    if (polling_ || reporting_ > 0) return false;
    return std::none_of(pending_.begin(), pending_.end(),
                        [&](const auto& entry) { return entry.second.stream == &stream; });
  });
}

void CompletionWorker::Report(Pending pending, absl::Status status) {
  Merge(status, pending.stream->TakeFailure());
  for (CudaStream::Check& check : pending.checks) Merge(status, check());
  pending.done(std::move(status));
}

void CompletionWorker::Run() {
  cudaSetDevice(ordinal_);  // for the event queries below
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (pending_.empty()) {
      cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    } else {
      cv_.wait_for(lock, kPollInterval, [this] { return stopping_; });
    }
    if (stopping_) break;
    if (pending_.empty()) continue;
    // Query the events outside the lock (Add may run meanwhile; it only adds
    // later ids), keeping each stream's order (device/completion_pass.h).
    std::vector<uint64_t> ids;
    std::vector<const void*> streams;
    std::vector<cudaEvent_t> events;
    for (const auto& [id, pending] : pending_) {
      ids.push_back(id);
      streams.push_back(pending.stream);
      events.push_back(pending.event);
    }
    polling_ = true;
    lock.unlock();
    std::vector<cudaError_t> errors(events.size(), cudaErrorNotReady);
    std::vector<std::pair<uint64_t, cudaError_t>> ended;
    for (size_t i : CompletionPass(streams, [&](size_t k) {
           errors[k] = cudaEventQuery(events[k]);
           return errors[k] != cudaErrorNotReady;
         })) {
      ended.emplace_back(ids[i], errors[i]);
    }
    lock.lock();
    polling_ = false;
    for (const auto& [id, error] : ended) {
      auto it = pending_.find(id);
      if (it == pending_.end()) continue;
      Pending pending = std::move(it->second);
      pending_.erase(it);
      // A failed context makes every query fail; the event is dropped then.
      if (error == cudaSuccess) {
        free_events_.push_back(pending.event);
      } else {
        cudaGetLastError();
      }
      ++reporting_;
      lock.unlock();
      Report(std::move(pending), error == cudaSuccess ? absl::OkStatus() : CudaStatus(error, "stream"));
      lock.lock();
      --reporting_;
    }
    idle_cv_.notify_all();
  }
  // Stopping: the device has drained, so whatever is left will never run.
  std::map<uint64_t, Pending> left = std::move(pending_);
  pending_.clear();
  lock.unlock();
  for (auto& [id, pending] : left) {
    cudaEventDestroy(pending.event);
    pending.done(absl::CancelledError("the CUDA device was shut down before the work completed"));
  }
}

}  // namespace cuda_internal
}  // namespace tandem::device
