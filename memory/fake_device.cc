#include "memory/fake_device.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_format.h"
#include "memory/byte_format.h"

namespace tandem::memory {
namespace {

// Simulated addresses start high and far from anything the process maps.
constexpr uintptr_t kSimulatedBase = uintptr_t{0x7e00} << 32;

class FakeStream final : public device::Stream {};
class FakeEvent final : public device::Event {};

}  // namespace

FakeDevice::FakeDevice(const FakeDeviceOptions& options) : backed_(options.backed), next_address_(kSimulatedBase) {
  info_.backend = device::Backend::kCpu;
  info_.ordinal = 0;
  info_.name = options.name;
  info_.description = backed_ ? "fake device (host-backed)" : "fake device (simulated addresses)";
  info_.capacity_bytes = options.capacity_bytes;
}

FakeDevice::~FakeDevice() {
  if (!backed_) return;
  absl::MutexLock lock(&mu_);
  for (const auto& [address, bytes] : live_) std::free(reinterpret_cast<void*>(address));
}

void FakeDevice::FailNextAllocations(int count) {
  absl::MutexLock lock(&mu_);
  fail_allocations_ = count;
}

void FakeDevice::FailNextCopies(int count) {
  absl::MutexLock lock(&mu_);
  fail_copies_ = count;
}

uint64_t FakeDevice::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

int FakeDevice::live_allocations() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(live_.size());
}

int FakeDevice::bad_frees() const {
  absl::MutexLock lock(&mu_);
  return bad_frees_;
}

int FakeDevice::bad_copies() const {
  absl::MutexLock lock(&mu_);
  return bad_copies_;
}

int FakeDevice::device_copies() const {
  absl::MutexLock lock(&mu_);
  return device_copies_;
}

uint64_t FakeDevice::bytes_copied() const {
  absl::MutexLock lock(&mu_);
  return bytes_copied_;
}

bool FakeDevice::IsLive(const void* ptr, size_t bytes) const {
  absl::MutexLock lock(&mu_);
  return IsLiveLocked(ptr, bytes);
}

bool FakeDevice::IsLiveLocked(const void* ptr, size_t bytes) const {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto it = live_.upper_bound(address);
  if (it == live_.begin()) return false;
  --it;
  return address + bytes <= it->first + it->second;
}

absl::StatusOr<void*> FakeDevice::Allocate(size_t bytes) {
  const uint64_t rounded = AlignUp(bytes == 0 ? 1 : bytes, device::kDeviceAlignment);
  absl::MutexLock lock(&mu_);
  if (fail_allocations_ > 0) {
    --fail_allocations_;
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: injected allocation failure (%s)", info_.name, FormatBytes(rounded)));
  }
  if (rounded > info_.capacity_bytes - used_) {
    return absl::ResourceExhaustedError(absl::StrFormat("%s: cannot allocate %s: %s of %s in use", info_.name,
                                                        FormatBytes(rounded), FormatBytes(used_),
                                                        FormatBytes(info_.capacity_bytes)));
  }
  uintptr_t address;
  if (backed_) {
    void* ptr = std::aligned_alloc(device::kDeviceAlignment, rounded);
    if (ptr == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s: host allocation of %s failed", info_.name, FormatBytes(rounded)));
    }
    address = reinterpret_cast<uintptr_t>(ptr);
  } else {
    address = next_address_;
    // One unused unit between allocations, so an access just past the end of
    // one allocation is never inside the next.
    next_address_ += rounded + device::kDeviceAlignment;
  }
  live_[address] = rounded;
  used_ += rounded;
  return reinterpret_cast<void*>(address);
}

void FakeDevice::Free(void* ptr) {
  if (ptr == nullptr) return;
  absl::MutexLock lock(&mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == live_.end()) {
    ++bad_frees_;
    return;
  }
  used_ -= it->second;
  live_.erase(it);
  if (backed_) std::free(ptr);
}

uint64_t FakeDevice::FreeBytes() {
  absl::MutexLock lock(&mu_);
  return info_.capacity_bytes - used_;
}

absl::StatusOr<void*> FakeDevice::AllocateHost(size_t bytes) {
  void* ptr = std::aligned_alloc(device::kDeviceAlignment, AlignUp(bytes == 0 ? 1 : bytes, device::kDeviceAlignment));
  if (ptr == nullptr) return absl::ResourceExhaustedError("host allocation failed");
  return ptr;
}

void FakeDevice::FreeHost(void* ptr) { std::free(ptr); }

absl::StatusOr<std::unique_ptr<device::Stream>> FakeDevice::CreateStream() {
  return std::unique_ptr<device::Stream>(new FakeStream());
}

absl::StatusOr<std::unique_ptr<device::Event>> FakeDevice::CreateEvent() {
  return std::unique_ptr<device::Event>(new FakeEvent());
}

absl::Status FakeDevice::CheckCopyLocked(const char* what, const void* dst, bool dst_on_device, const void* src,
                                         bool src_on_device, size_t bytes) {
  if (fail_copies_ > 0) {
    --fail_copies_;
    return absl::InternalError(absl::StrFormat("%s: injected %s failure", info_.name, what));
  }
  if (bytes == 0) return absl::OkStatus();
  auto refuse = [&](const char* why) {
    ++bad_copies_;
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s of %d bytes (dst %p, src %p): %s", info_.name, what, bytes, dst, src, why));
  };
  if (dst_on_device && !IsLiveLocked(dst, bytes)) return refuse("destination is not live memory");
  if (src_on_device && !IsLiveLocked(src, bytes)) return refuse("source is not live memory");
  if (dst_on_device && src_on_device) {
    const auto d = reinterpret_cast<uintptr_t>(dst);
    const auto s = reinterpret_cast<uintptr_t>(src);
    if (d < s + bytes && s < d + bytes) return refuse("source and destination overlap");
  }
  return absl::OkStatus();
}

absl::Status FakeDevice::CopyToDevice(device::Stream&, void* dst, const void* host_src, size_t bytes) {
  absl::MutexLock lock(&mu_);
  absl::Status status = CheckCopyLocked("copy to device", dst, true, host_src, false, bytes);
  if (!status.ok()) return status;
  if (backed_ && bytes > 0) std::memcpy(dst, host_src, bytes);
  return absl::OkStatus();
}

absl::Status FakeDevice::CopyToHost(device::Stream&, void* host_dst, const void* src, size_t bytes) {
  absl::MutexLock lock(&mu_);
  absl::Status status = CheckCopyLocked("copy to host", host_dst, false, src, true, bytes);
  if (!status.ok()) return status;
  if (backed_ && bytes > 0) std::memcpy(host_dst, src, bytes);
  return absl::OkStatus();
}

absl::Status FakeDevice::CopyOnDevice(device::Stream&, void* dst, const void* src, size_t bytes) {
  absl::MutexLock lock(&mu_);
  absl::Status status = CheckCopyLocked("device copy", dst, true, src, true, bytes);
  if (!status.ok()) return status;
  if (backed_ && bytes > 0) std::memcpy(dst, src, bytes);
  ++device_copies_;
  bytes_copied_ += bytes;
  return absl::OkStatus();
}

absl::Status FakeDevice::Fill(device::Stream&, void* dst, uint8_t byte, size_t bytes) {
  absl::MutexLock lock(&mu_);
  absl::Status status = CheckCopyLocked("fill", dst, true, nullptr, false, bytes);
  if (!status.ok()) return status;
  if (backed_ && bytes > 0) std::memset(dst, byte, bytes);
  return absl::OkStatus();
}

absl::Status FakeDevice::RecordEvent(device::Stream&, device::Event&) { return absl::OkStatus(); }
absl::Status FakeDevice::WaitEvent(device::Stream&, device::Event&) { return absl::OkStatus(); }
absl::StatusOr<double> FakeDevice::ElapsedSeconds(device::Event&, device::Event&) { return 0.0; }

absl::Status FakeDevice::OnComplete(device::Stream&, std::function<void(absl::Status)> done) {
  done(absl::OkStatus());
  return absl::OkStatus();
}

absl::Status FakeDevice::Synchronize(device::Stream&) { return absl::OkStatus(); }

}  // namespace tandem::memory
