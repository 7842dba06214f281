// The device runtime behind one interface: raw memory, streams, events, copies.
//
// A `Device` is one compute device (the host CPU, or one CUDA GPU with its own
// context). Everything above it (memory pools, kernels, the executor) goes
// through this interface, so the daemon, the scheduler and the tests run on a
// machine without a GPU on the CPU backend, and tests can wrap a device with
// a fault-injecting one.
//
// Work is asynchronous: copies and kernels are enqueued on a `Stream` and run
// in enqueue order; different streams of one device may run concurrently.
// `OnComplete` is how results come back without blocking a thread.
//
// Thread-safety: all methods may be called from any thread; one Stream must
// not be enqueued onto from two threads at once.
#ifndef TANDEM_DEVICE_DEVICE_H_
#define TANDEM_DEVICE_DEVICE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::device {

enum class Backend { kCpu, kCuda };

const char* BackendName(Backend backend);

// Alignment of every Allocate() result, and the unit the memory planner
// rounds tensors to.
inline constexpr size_t kDeviceAlignment = 256;

struct DeviceInfo {
  Backend backend = Backend::kCpu;
  int ordinal = 0;
  std::string name;         // "cpu" or "cuda:N"; how clients name it
  std::string description;  // e.g. "NVIDIA H200, cc 9.0, 132 SMs"
  // The GPU's UUID as nvidia-smi prints it ("GPU-xxxxxxxx-xxxx-..."); empty
  // on the CPU.
  std::string uuid;
  // CUDA: the compute capability as major * 10 + minor (90 for an H100 or
  // H200), which generated kernels are compiled for; 0 on the CPU.
  int compute_capability = 0;
  int driver_version = 0;       // CUDA: cudaDriverGetVersion's (13000 for 13.0); 0 on the CPU
  uint64_t capacity_bytes = 0;  // memory this device offers to Tandem
  // Stream priority levels above the default that CreateStreamWithPriority
  // can give (CUDA: the device's stream priority range; 0: none).
  int stream_priority_levels = 0;
};

// An ordered queue of device work. Backend-specific subclasses carry the
// native handle (a worker thread on the CPU, a cudaStream_t on CUDA).
class Stream {
 public:
  virtual ~Stream() = default;

  // Whether other jobs have work on the stream's device now: set by whoever
  // enqueues on the stream (the daemon's dispatcher, before each iteration),
  // read by kernels on the thread that enqueues. While it is set, a kernel
  // that would choose by running candidates on the device (cuDNN's
  // algorithm search, conv_algorithms.cc) chooses without running anything,
  // so that the other jobs' iterations do not wait behind slow candidates.
  void set_device_shared(bool shared) { device_shared_.store(shared, std::memory_order_relaxed); }
  bool device_shared() const { return device_shared_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> device_shared_{false};
};

// A marker in a stream, for ordering between streams and for timing.
class Event {
 public:
  virtual ~Event() = default;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceInfo& info() const = 0;

  // Raw device memory, aligned to kDeviceAlignment. RESOURCE_EXHAUSTED when
  // the device has too little free memory.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  // What the device reports free now (not what Tandem's pools hold free).
  virtual uint64_t FreeBytes() = 0;

  // Page-locked host memory for staging copies (plain memory on the CPU).
  virtual absl::StatusOr<void*> AllocateHost(size_t bytes) = 0;
  virtual void FreeHost(void* ptr) = 0;

  // Pins existing host memory (a shared-memory region) so that copies from
  // it can be asynchronous; a no-op on the CPU. Unregister before unmapping.
  virtual absl::Status RegisterHost(void* ptr, size_t bytes) = 0;
  virtual void UnregisterHost(void* ptr) = 0;

  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateStream() = 0;
  // A stream whose work the device schedules ahead of lower levels' where
  // both have work ready (CUDA: the hardware dispatches the higher
  // stream's thread blocks first as SMs free up; running blocks are not
  // preempted). `level` 0 is the default; it is clamped to
  // [0, info().stream_priority_levels]. Devices without priorities give a
  // plain stream.
  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateStreamWithPriority(int level) {
    (void)level;
    return CreateStream();
  }
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;

  // Enqueued copies and fills; asynchronous with respect to the caller.
  // The host side of a copy must stay valid until the copy has run.
  virtual absl::Status CopyToDevice(Stream& stream, void* dst, const void* host_src, size_t bytes) = 0;
  virtual absl::Status CopyToHost(Stream& stream, void* host_dst, const void* src, size_t bytes) = 0;
  virtual absl::Status CopyOnDevice(Stream& stream, void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status Fill(Stream& stream, void* dst, uint8_t byte, size_t bytes) = 0;

  virtual absl::Status RecordEvent(Stream& stream, Event& event) = 0;
  // Work enqueued on `stream` after this call waits for `event`.
  virtual absl::Status WaitEvent(Stream& stream, Event& event) = 0;
  // Seconds between two recorded, completed events.
  virtual absl::StatusOr<double> ElapsedSeconds(Event& start, Event& end) = 0;

  // Calls `done` on a thread owned by the device once everything enqueued on
  // `stream` before it has run. `done` gets OK, or the error that made the
  // stream fail. It must be quick and must not enqueue onto the device; post
  // to another thread instead.
  virtual absl::Status OnComplete(Stream& stream, std::function<void(absl::Status)> done) = 0;

  // Blocks until everything enqueued on `stream` has run.
  virtual absl::Status Synchronize(Stream& stream) = 0;

  // OK while the device works. After a fault that leaves its context
  // unusable (a kernel's illegal address, an uncorrectable ECC error: CUDA's
  // "sticky" errors), that fault: every later call and completion fails
  // too, and only a new process can use the device again (tandemd restarts;
  // docs/deploy.md, Faults).
  virtual absl::Status Fault() const { return absl::OkStatus(); }
};

}  // namespace tandem::device

#endif  // TANDEM_DEVICE_DEVICE_H_
