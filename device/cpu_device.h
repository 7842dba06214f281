// The CPU backend of the device interface.
//
// Real, not a mock: memory is host memory (aligned), each stream is a worker
// thread that runs its queue in order, and kernels run on those threads. It
// lets the daemon run anywhere, and it is the correctness oracle for the CUDA
// kernels.
#ifndef TANDEM_DEVICE_CPU_DEVICE_H_
#define TANDEM_DEVICE_CPU_DEVICE_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "device/device.h"

namespace tandem::device {

struct CpuDeviceOptions {
  // Memory the device offers; Allocate fails past it (a bound for admission
  // and for tests of out-of-memory paths).
  uint64_t capacity_bytes = uint64_t{8} << 30;
};

// A CPU stream: work items run in order on one worker thread.
class CpuStream : public Stream {
 public:
  // Enqueues `work`; it runs after all work enqueued before it. A work item
  // returning an error marks the stream failed: later items are skipped until
  // the next OnComplete reports the error (and clears it).
  virtual void Enqueue(std::function<absl::Status()> work) = 0;
};

absl::StatusOr<std::unique_ptr<Device>> CreateCpuDevice(const CpuDeviceOptions& options);

}  // namespace tandem::device

#endif  // TANDEM_DEVICE_CPU_DEVICE_H_
