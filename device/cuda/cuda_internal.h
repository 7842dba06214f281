// Internals of the CUDA backend shared by its source files (not for use
// outside device/cuda): the stream implementation and the completion worker
// that turns finished stream work into OnComplete calls.
//
// How OnComplete works: it records an event on the stream; the device's
// completion worker thread polls the pending events (every 20 us while any
// is pending) and, for each that has happened, runs the completion's
// deferred checks and its `done`. No host function sits in the stream, so
// the work enqueued behind a completion (the next iteration of a lane)
// starts the moment the work before it ends. After a context failure (a
// kernel fault) every query returns the error, and the worker fails the
// completion with it: an OnComplete's `done` is called exactly once,
// whatever happens.
#ifndef TANDEM_DEVICE_CUDA_CUDA_INTERNAL_H_
#define TANDEM_DEVICE_CUDA_CUDA_INTERNAL_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "device/cuda/cuda_stream.h"

namespace tandem::device::cuda_internal {

class CompletionWorker;

class CudaStreamImpl final : public CudaStream {
 public:
  CudaStreamImpl(int ordinal, cudaStream_t stream, CompletionWorker* worker);
  // Waits for the stream to drain and for its completions to be reported,
  // destroys the attachments, then the stream. Deferred checks that no
  // completion took are dropped.
  ~CudaStreamImpl() override;

  cudaStream_t native() const override { return stream_; }
  int ordinal() const override { return ordinal_; }
  uint64_t serial() const override { return serial_; }
  Attachment* attachment(const void* key) const override;
  void Attach(const void* key, std::unique_ptr<Attachment> attachment) override;
  void DeferCheck(const void* owner, Check check) override;
  bool HasDeferredChecks(const void* owner) const override;
  absl::Status FlushDeferredChecks() override;

  // The checks deferred so far (the enqueuing thread hands them to a
  // completion).
  std::vector<Check> TakeDeferredChecks();
  // Records a failure found by a flushed check (any thread).
  void Fail(absl::Status status);
  // The recorded failure, cleared (any thread).
  absl::Status TakeFailure();

 private:
  struct FlushRecord;
  static void RunFlushedChecks(void* record);

  const int ordinal_;
  const cudaStream_t stream_;
  CompletionWorker* const worker_;
  const uint64_t serial_;
  // Touched only by the enqueuing thread.
  std::vector<std::pair<const void*, std::unique_ptr<Attachment>>> attachments_;
  std::vector<std::pair<const void*, Check>> deferred_;
  std::mutex failure_mu_;
  absl::Status failure_;  // guarded by failure_mu_
};

class CompletionWorker {
 public:
  explicit CompletionWorker(int ordinal);
  // Reports every completion still pending as CANCELLED and stops the
  // thread. Call only after the device has drained (cudaDeviceSynchronize).
  ~CompletionWorker();

  // Enqueues a completion on `stream`: after the stream's work so far, the
  // checks run and `done` gets the resulting status.
  absl::Status Add(CudaStreamImpl& stream, std::vector<CudaStream::Check> checks,
                   std::function<void(absl::Status)> done);

  // Blocks until no completion of `stream` is pending or being reported, and
  // the worker no longer looks at it. The stream must have drained.
  void Forget(const CudaStreamImpl& stream);

 private:
  // A completion is an event recorded on the stream (no host function in
  // the stream: the stream never waits for the host, so work enqueued behind
  // a completion starts the moment the work before it ends). The worker
  // polls the pending events in order every kPollInterval while any is
  // pending, and sleeps otherwise; within a pass it stops asking about a
  // stream at its first event not ready, so a stream's reports keep its
  // order.
  struct Pending {
    CudaStreamImpl* stream = nullptr;
    cudaEvent_t event = nullptr;
    std::vector<CudaStream::Check> checks;
    std::function<void(absl::Status)> done;
  };
  void Run();
  // Runs `pending`'s checks and calls its `done` (no lock held).
  static void Report(Pending pending, absl::Status status);
  // An event for a completion: a recycled one, or a new one (mu_ held).
  absl::StatusOr<cudaEvent_t> TakeEventLocked();

  const int ordinal_;
  std::mutex mu_;
  std::condition_variable cv_;            // wakes the worker
  std::condition_variable idle_cv_;       // wakes Forget()
  std::map<uint64_t, Pending> pending_;   // guarded by mu_
  std::vector<cudaEvent_t> free_events_;  // guarded by mu_
  uint64_t next_id_ = 1;                  // guarded by mu_
  int reporting_ = 0;                     // completions being reported; guarded by mu_
  bool polling_ = false;                  // querying events outside the lock; guarded by mu_
  bool stopping_ = false;                 // guarded by mu_
  std::thread thread_;                    // last: starts after the fields above exist
};

}  // namespace tandem::device::cuda_internal

#endif  // TANDEM_DEVICE_CUDA_CUDA_INTERNAL_H_
