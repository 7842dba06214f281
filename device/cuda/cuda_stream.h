// A stream of a CUDA device (device/cuda_device.h), and what the layers
// above need from it besides the Device interface:
//   - the native cudaStream_t and the device ordinal, to launch kernels;
//   - attachments: per-stream state of those layers (library handles and
//     workspaces), created on first use and destroyed with the stream once it
//     has drained, so work on one stream never shares them with another;
//   - deferred checks: host-side checks of results that kernels leave in
//     pinned memory (an error word), run when the stream's next OnComplete or
//     Synchronize reports, so that data errors found on the GPU fail the
//     iteration that caused them without a host callback per iteration.
//
// Ownership: the stream owns its attachments and its pending checks. A
// CudaStream must be destroyed before its Device.
// Thread-safety: like any Stream, one thread at a time enqueues onto it;
// every method here belongs to that thread.
#ifndef TANDEM_DEVICE_CUDA_CUDA_STREAM_H_
#define TANDEM_DEVICE_CUDA_CUDA_STREAM_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "device/device.h"

namespace tandem::device {

class CudaStream : public Stream {
 public:
  // Per-stream state owned by the stream. Destroyed after the stream has
  // drained, with the stream's device current.
  class Attachment {
   public:
    virtual ~Attachment() = default;
  };

  // A host-side check. It must not call CUDA and must not own CUDA
  // resources: it may run, and be destroyed, on a driver callback thread.
  using Check = std::function<absl::Status()>;

  virtual cudaStream_t native() const = 0;
  virtual int ordinal() const = 0;
  // Unique among the streams of the process and never reused (unlike the
  // stream's address): state kept per stream elsewhere (a captured CUDA
  // graph) is keyed by it.
  virtual uint64_t serial() const = 0;

  // The attachment stored under `key` (the address of a static tag), or
  // nullptr.
  virtual Attachment* attachment(const void* key) const = 0;
  // Stores `attachment` under `key`, replacing (and destroying) any there.
  virtual void Attach(const void* key, std::unique_ptr<Attachment> attachment) = 0;

  // Defers `check` to the stream's next OnComplete or Synchronize: it runs
  // once everything enqueued before that call has run, before its `done` is
  // called, and an error it returns is the status reported there. What the
  // check reads must not be overwritten by work enqueued before that point;
  // an owner about to overwrite it calls FlushDeferredChecks first.
  virtual void DeferCheck(const void* owner, Check check) = 0;
  // Whether a check deferred by `owner` is still waiting for a completion.
  virtual bool HasDeferredChecks(const void* owner) const = 0;
  // Enqueues the deferred checks now, as one host callback in stream order:
  // they run once everything enqueued before this call has run, and an
  // error one returns fails the stream (the next OnComplete or Synchronize
  // reports it, then the stream is clean again).
  virtual absl::Status FlushDeferredChecks() = 0;
};

// The CudaStream behind `stream`, or nullptr when it belongs to another
// backend.
CudaStream* AsCudaStream(Stream& stream);

// The native handle of a CUDA stream (`stream` must be one).
cudaStream_t NativeStream(Stream& stream);

}  // namespace tandem::device

#endif  // TANDEM_DEVICE_CUDA_CUDA_STREAM_H_
