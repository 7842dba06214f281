#include "device/cpu_device.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "device/injected_fault.h"

namespace tandem::device {

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kCpu:
      return "cpu";
    case Backend::kCuda:
      return "cuda";
  }
  return "unknown";
}

namespace {

class CpuStreamImpl final : public CpuStream {
 public:
  CpuStreamImpl() : worker_([this] { Run(); }) {}
  ~CpuStreamImpl() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  void Enqueue(std::function<absl::Status()> work) override { Push(Item{std::move(work), nullptr, false}); }

  // Enqueues work that runs even after the stream failed (event records, so
  // that other streams waiting on them never hang).
  void EnqueueAlways(std::function<absl::Status()> work) { Push(Item{std::move(work), nullptr, true}); }

  // Enqueues a completion: reports the stream's error (if any) and clears it.
  void EnqueueCompletion(std::function<void(absl::Status)> done) { Push(Item{nullptr, std::move(done), true}); }

 private:
  struct Item {
    std::function<absl::Status()> work;      // a work item, or
    std::function<void(absl::Status)> done;  // a completion
    bool always = false;                     // runs after a failure too
  };

  void Push(Item item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(item));
    }
    cv_.notify_all();
  }

  void Run() {
    while (true) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and drained
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      if (item.done) {
        absl::Status status = std::move(failure_);
        failure_ = absl::OkStatus();
        if (status.ok()) status = InjectedDeviceFault();  // a context fault fails every completion
        item.done(status);
        continue;
      }
      if (!failure_.ok() && !item.always) continue;               // skipped: an earlier item failed
      if (!item.always && !InjectedDeviceFault().ok()) continue;  // after a context fault nothing runs
      absl::Status status = item.work();
      if (!status.ok()) failure_ = status;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  // Touched only by the worker thread.
  absl::Status failure_;
  std::thread worker_;  // last: starts after the fields above exist
};

class CpuEvent final : public Event {
 public:
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;   // times RecordEvent was called
  uint64_t completed = 0;  // times the recorded point was reached
  std::chrono::steady_clock::time_point when;
};

CpuStreamImpl& AsCpu(Stream& stream) { return static_cast<CpuStreamImpl&>(stream); }
CpuEvent& AsCpu(Event& event) { return static_cast<CpuEvent&>(event); }

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options) {
    info_.backend = Backend::kCpu;
    info_.ordinal = 0;
    info_.name = "cpu";
    info_.description = absl::StrFormat("host CPU, %u threads", std::thread::hardware_concurrency());
    info_.capacity_bytes = options.capacity_bytes;
  }

  const DeviceInfo& info() const override { return info_; }
  absl::Status Fault() const override { return InjectedDeviceFault(); }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    size_t rounded = RoundUp(bytes == 0 ? 1 : bytes);
    {
      absl::MutexLock lock(&mu_);
      if (used_ + rounded > info_.capacity_bytes) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "cpu device: cannot allocate %d bytes: %d of %d bytes in use", rounded, used_, info_.capacity_bytes));
      }
      used_ += rounded;
    }
    void* ptr = std::aligned_alloc(kDeviceAlignment, rounded);
    if (ptr == nullptr) {
      absl::MutexLock lock(&mu_);
      used_ -= rounded;
      return absl::ResourceExhaustedError(absl::StrFormat("cpu device: host allocation of %d bytes failed", rounded));
    }
    absl::MutexLock lock(&mu_);
    sizes_[ptr] = rounded;
    return ptr;
  }

  void Free(void* ptr) override {
    if (ptr == nullptr) return;
    {
      absl::MutexLock lock(&mu_);
      auto it = sizes_.find(ptr);
      if (it == sizes_.end()) return;
      used_ -= it->second;
      sizes_.erase(it);
    }
    std::free(ptr);
  }

  uint64_t FreeBytes() override {
    absl::MutexLock lock(&mu_);
    return info_.capacity_bytes - used_;
  }

  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    void* ptr = std::aligned_alloc(kDeviceAlignment, RoundUp(bytes == 0 ? 1 : bytes));
    if (ptr == nullptr) return absl::ResourceExhaustedError("host allocation failed");
    return ptr;
  }
  void FreeHost(void* ptr) override { std::free(ptr); }

  absl::Status RegisterHost(void*, size_t) override { return absl::OkStatus(); }
  void UnregisterHost(void*) override {}

  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    return std::unique_ptr<Stream>(new CpuStreamImpl());
  }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override { return std::unique_ptr<Event>(new CpuEvent()); }

  absl::Status CopyToDevice(Stream& stream, void* dst, const void* src, size_t bytes) override {
    return Copy(stream, dst, src, bytes);
  }
  absl::Status CopyToHost(Stream& stream, void* dst, const void* src, size_t bytes) override {
    return Copy(stream, dst, src, bytes);
  }
  absl::Status CopyOnDevice(Stream& stream, void* dst, const void* src, size_t bytes) override {
    return Copy(stream, dst, src, bytes);
  }
  absl::Status Fill(Stream& stream, void* dst, uint8_t byte, size_t bytes) override {
    AsCpu(stream).Enqueue([=]() {
      std::memset(dst, byte, bytes);
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }

  absl::Status RecordEvent(Stream& stream, Event& event) override {
    CpuEvent* e = &AsCpu(event);
    uint64_t target;
    {
      std::lock_guard<std::mutex> lock(e->mu);
      target = ++e->recorded;
    }
    AsCpu(stream).EnqueueAlways([e, target]() {
      {
        std::lock_guard<std::mutex> lock(e->mu);
        e->completed = std::max(e->completed, target);
        e->when = std::chrono::steady_clock::now();
      }
      e->cv.notify_all();
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }

  absl::Status WaitEvent(Stream& stream, Event& event) override {
    CpuEvent* e = &AsCpu(event);
    uint64_t target;
    {
      std::lock_guard<std::mutex> lock(e->mu);
      target = e->recorded;
    }
    AsCpu(stream).Enqueue([e, target]() {
      std::unique_lock<std::mutex> lock(e->mu);
      e->cv.wait(lock, [&] { return e->completed >= target; });
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }

  absl::StatusOr<double> ElapsedSeconds(Event& start, Event& end) override {
    CpuEvent& a = AsCpu(start);
    CpuEvent& b = AsCpu(end);
    std::chrono::steady_clock::time_point ta, tb;
    {
      std::lock_guard<std::mutex> lock(a.mu);
      if (a.completed == 0 || a.completed < a.recorded) {
        return absl::FailedPreconditionError("start event has not completed");
      }
      ta = a.when;
    }
    {
      std::lock_guard<std::mutex> lock(b.mu);
      if (b.completed == 0 || b.completed < b.recorded) {
        return absl::FailedPreconditionError("end event has not completed");
      }
      tb = b.when;
    }
    return std::chrono::duration<double>(tb - ta).count();
  }

  absl::Status OnComplete(Stream& stream, std::function<void(absl::Status)> done) override {
    AsCpu(stream).EnqueueCompletion(std::move(done));
    return absl::OkStatus();
  }

  absl::Status Synchronize(Stream& stream) override {
    std::mutex mu;
    std::condition_variable cv;
    bool finished = false;
    absl::Status result;
    AsCpu(stream).EnqueueCompletion([&](absl::Status status) {
      std::lock_guard<std::mutex> lock(mu);
      result = status;
      finished = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return finished; });
    return result;
  }

 private:
  static size_t RoundUp(size_t bytes) { return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment; }
  absl::Status Copy(Stream& stream, void* dst, const void* src, size_t bytes) {
    AsCpu(stream).Enqueue([=]() {
      if (bytes > 0) std::memmove(dst, src, bytes);
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }

  DeviceInfo info_;  // constant after construction
  absl::Mutex mu_;
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<void*, size_t> sizes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> CreateCpuDevice(const CpuDeviceOptions& options) {
  if (options.capacity_bytes == 0) {
    return absl::InvalidArgumentError("cpu device: capacity_bytes must be positive");
  }
  return std::unique_ptr<Device>(new CpuDevice(options));
}

}  // namespace tandem::device
