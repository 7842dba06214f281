// Internals of the CUDA backend shared by its source files (not for use
// outside device/cuda): the stream implementation and the completion worker
// that turns host callbacks into OnComplete calls.
//
// How OnComplete works: a host function enqueued with cudaLaunchHostFunc
// only marks its completion ready (host functions must not call CUDA); the
// device's completion worker thread then runs the completion's deferred
// checks and its `done`. The driver never calls host functions once the
// context has failed (a kernel fault), so the worker also polls the streams
// of completions that have waited a while and fails them with the stream's
// error: an OnComplete's `done` is called exactly once, whatever happens.
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
  struct Pending {
    CudaStreamImpl* stream = nullptr;
    std::vector<CudaStream::Check> checks;
    std::function<void(absl::Status)> done;
    std::chrono::steady_clock::time_point since;
  };
  struct HostArg {
    CompletionWorker* worker;
    uint64_t id;
  };
  static void OnHostCallback(void* arg);
  void Run();
  // Runs `pending`'s checks and calls its `done` (no lock held).
  static void Report(Pending pending, absl::Status status);

  const int ordinal_;
  std::mutex mu_;
  std::condition_variable cv_;       // wakes the worker
  std::condition_variable idle_cv_;  // wakes Forget()
  std::map<uint64_t, Pending> pending_;  // guarded by mu_
  std::deque<uint64_t> ready_;           // guarded by mu_
  uint64_t next_id_ = 1;                 // guarded by mu_
  int reporting_ = 0;                    // completions being reported; guarded by mu_
  bool polling_ = false;                 // querying streams outside the lock; guarded by mu_
  bool stopping_ = false;                // guarded by mu_
  std::thread thread_;  // last: starts after the fields above exist
};

}  // namespace tandem::device::cuda_internal

#endif  // TANDEM_DEVICE_CUDA_CUDA_INTERNAL_H_
