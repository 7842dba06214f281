// A device::Device for tests of the memory system: raw allocations without
// a GPU, bounded capacity, failure injection and checks on every copy.
//
// Two modes:
//   - simulated (default): Allocate hands out addresses from a simulated
//     address space that is never dereferenced, like a GPU's virtual address
//     space: addresses are never reused and the space never fragments, only
//     capacity_bytes bounds it. Copies and fills are checked, recorded and
//     otherwise do nothing. Capacities of terabytes cost nothing.
//   - backed: every allocation is real host memory and copies really copy
//     (memcpy), so tests can check that data survives a compaction. Keep the
//     capacity small.
// Either way a copy or fill whose device side is not inside one live
// allocation, or a device-to-device copy whose source and destination
// overlap (undefined on CUDA), fails with INVALID_ARGUMENT and is counted.
//
// Work runs at enqueue time: a stream is always idle, OnComplete calls
// `done` at once on the calling thread, events record nothing (elapsed time
// is 0). Thread-safe.
#ifndef TANDEM_MEMORY_FAKE_DEVICE_H_
#define TANDEM_MEMORY_FAKE_DEVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "device/device.h"

namespace tandem::memory {

struct FakeDeviceOptions {
  uint64_t capacity_bytes = uint64_t{1} << 30;
  bool backed = false;
  std::string name = "fake:0";
};

class FakeDevice final : public device::Device {
 public:
  explicit FakeDevice(const FakeDeviceOptions& options);
  ~FakeDevice() override;

  // Failure injection: the next `count` calls of Allocate (or of the copy and
  // fill methods) fail with RESOURCE_EXHAUSTED (INTERNAL for copies).
  void FailNextAllocations(int count);
  void FailNextCopies(int count);

  // Inspection.
  uint64_t used_bytes() const;
  int live_allocations() const;
  int bad_frees() const;          // Free of a pointer that is not live
  int bad_copies() const;         // copies and fills refused by the checks
  int device_copies() const;      // device-to-device copies that ran
  uint64_t bytes_copied() const;  // by device-to-device copies
  // True when [ptr, ptr + bytes) lies inside one live allocation.
  bool IsLive(const void* ptr, size_t bytes) const;

  // device::Device.
  const device::DeviceInfo& info() const override { return info_; }
  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  uint64_t FreeBytes() override;
  absl::StatusOr<void*> AllocateHost(size_t bytes) override;
  void FreeHost(void* ptr) override;
  absl::Status RegisterHost(void*, size_t) override { return absl::OkStatus(); }
  void UnregisterHost(void*) override {}
  absl::StatusOr<std::unique_ptr<device::Stream>> CreateStream() override;
  absl::StatusOr<std::unique_ptr<device::Event>> CreateEvent() override;
  absl::Status CopyToDevice(device::Stream& stream, void* dst, const void* host_src, size_t bytes) override;
  absl::Status CopyToHost(device::Stream& stream, void* host_dst, const void* src, size_t bytes) override;
  absl::Status CopyOnDevice(device::Stream& stream, void* dst, const void* src, size_t bytes) override;
  absl::Status Fill(device::Stream& stream, void* dst, uint8_t byte, size_t bytes) override;
  absl::Status RecordEvent(device::Stream& stream, device::Event& event) override;
  absl::Status WaitEvent(device::Stream& stream, device::Event& event) override;
  absl::StatusOr<double> ElapsedSeconds(device::Event& start, device::Event& end) override;
  absl::Status OnComplete(device::Stream& stream, std::function<void(absl::Status)> done) override;
  absl::Status Synchronize(device::Stream& stream) override;

 private:
  bool IsLiveLocked(const void* ptr, size_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The injected failure or a check failure of one copy; OK to proceed.
  absl::Status CheckCopyLocked(const char* what, const void* dst, bool dst_on_device, const void* src,
                               bool src_on_device, size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  device::DeviceInfo info_;
  bool backed_;

  mutable absl::Mutex mu_;
  uintptr_t next_address_ ABSL_GUARDED_BY(mu_);
  std::map<uintptr_t, size_t> live_ ABSL_GUARDED_BY(mu_);  // address -> rounded size
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_allocations_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_copies_ ABSL_GUARDED_BY(mu_) = 0;
  int bad_frees_ ABSL_GUARDED_BY(mu_) = 0;
  int bad_copies_ ABSL_GUARDED_BY(mu_) = 0;
  int device_copies_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_copied_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem::memory

#endif  // TANDEM_MEMORY_FAKE_DEVICE_H_
