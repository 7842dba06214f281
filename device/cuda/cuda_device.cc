// The CUDA backend of the device interface (device/cuda_device.h).
//
// One Device per GPU, on the GPU's primary context (the one the CUDA runtime
// and the CUDA libraries share). The daemon calls a device from several
// threads, and the current device is per thread, so every entry point that
// touches the GPU first makes its GPU current.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "device/cuda/cuda_internal.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda_device.h"

namespace tandem::device {
namespace {

using cuda_internal::CompletionWorker;
using cuda_internal::CudaStreamImpl;

std::string Bytes(uint64_t bytes) {
  return absl::StrFormat("%d bytes (%.2f GiB)", bytes, static_cast<double>(bytes) / (1 << 30));
}

class CudaEvent final : public Event {
 public:
  CudaEvent(int ordinal, cudaEvent_t event) : ordinal_(ordinal), event_(event) {}
  ~CudaEvent() override {
    cudaSetDevice(ordinal_);
    cudaEventDestroy(event_);
  }
  cudaEvent_t native() const { return event_; }

 private:
  const int ordinal_;
  const cudaEvent_t event_;
};

CudaStreamImpl& AsImpl(Stream& stream) { return static_cast<CudaStreamImpl&>(stream); }
cudaEvent_t AsNative(Event& event) { return static_cast<CudaEvent&>(event).native(); }

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(DeviceInfo info) : info_(std::move(info)), worker_(info_.ordinal) {}

  // Streams and events must be gone; this drains the device so that every
  // host callback has run before the completion worker stops.
  ~CudaDevice() override {
    cudaSetDevice(info_.ordinal);
    cudaDeviceSynchronize();
  }

  const DeviceInfo& info() const override { return info_; }
  absl::Status Fault() const override { return StickyCudaFault(); }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    RETURN_IF_ERROR(MakeCurrent());
    // cudaMalloc aligns to at least 256 bytes (kDeviceAlignment); a zero-byte
    // request still gets a distinct, valid address.
    const size_t size = bytes == 0 ? kDeviceAlignment : bytes;
    void* ptr = nullptr;
    const cudaError_t error = cudaMalloc(&ptr, size);
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it, so that later calls do not see it
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      return absl::ResourceExhaustedError(absl::StrCat(info_.name, ": cannot allocate ", Bytes(size),
                                                       ": out of device memory (", Bytes(free_bytes), " free of ",
                                                       Bytes(total_bytes), ")"));
    }
    CUDA_RETURN_IF_ERROR(error);
    return ptr;
  }

  void Free(void* ptr) override {
    if (ptr == nullptr) return;
    cudaSetDevice(info_.ordinal);
    const cudaError_t error = cudaFree(ptr);
    if (error != cudaSuccess) {
      TLOG_ERROR("cudaFree failed").With("device", info_.name).With("error", cudaGetErrorString(error));
    }
  }

  uint64_t FreeBytes() override {
    if (!MakeCurrent().ok()) return 0;
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 0;
    return free_bytes;
  }

  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    RETURN_IF_ERROR(MakeCurrent());
    void* ptr = nullptr;
    const cudaError_t error = cudaHostAlloc(&ptr, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(
          absl::StrCat(info_.name, ": cannot allocate ", Bytes(bytes), " of page-locked host memory"));
    }
    CUDA_RETURN_IF_ERROR(error);
    return ptr;
  }

  void FreeHost(void* ptr) override {
    if (ptr == nullptr) return;
    cudaSetDevice(info_.ordinal);
    const cudaError_t error = cudaFreeHost(ptr);
    if (error != cudaSuccess) {
      TLOG_ERROR("cudaFreeHost failed").With("device", info_.name).With("error", cudaGetErrorString(error));
    }
  }

  // Portable registration pins the range for every GPU's context; a range
  // another device registered already is fine.
  absl::Status RegisterHost(void* ptr, size_t bytes) override {
    RETURN_IF_ERROR(MakeCurrent());
    // Read-only: the daemon maps clients' shared memory without write access.
    const cudaError_t error = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
    if (error == cudaErrorHostMemoryAlreadyRegistered) {
      cudaGetLastError();
      return absl::OkStatus();
    }
    CUDA_RETURN_IF_ERROR(error);
    return absl::OkStatus();
  }

  void UnregisterHost(void* ptr) override {
    if (ptr == nullptr) return;
    cudaSetDevice(info_.ordinal);
    const cudaError_t error = cudaHostUnregister(ptr);
    if (error == cudaErrorHostMemoryNotRegistered) {
      cudaGetLastError();
    } else if (error != cudaSuccess) {
      TLOG_ERROR("cudaHostUnregister failed").With("device", info_.name).With("error", cudaGetErrorString(error));
    }
  }

  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override { return CreateStreamWithPriority(0); }

  absl::StatusOr<std::unique_ptr<Stream>> CreateStreamWithPriority(int level) override {
    RETURN_IF_ERROR(MakeCurrent());
    int least = 0, greatest = 0;  // CUDA: lower numbers are higher priorities
    CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    const int priority = std::max(greatest, least - std::clamp(level, 0, info_.stream_priority_levels));
    cudaStream_t stream = nullptr;
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority));
    return std::unique_ptr<Stream>(new CudaStreamImpl(info_.ordinal, stream, &worker_));
  }

  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    RETURN_IF_ERROR(MakeCurrent());
    cudaEvent_t event = nullptr;
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDefault));
    return std::unique_ptr<Event>(new CudaEvent(info_.ordinal, event));
  }

  absl::Status CopyToDevice(Stream& stream, void* dst, const void* src, size_t bytes) override {
    return Copy(stream, dst, src, bytes, cudaMemcpyHostToDevice);
  }
  absl::Status CopyToHost(Stream& stream, void* dst, const void* src, size_t bytes) override {
    return Copy(stream, dst, src, bytes, cudaMemcpyDeviceToHost);
  }
  absl::Status CopyOnDevice(Stream& stream, void* dst, const void* src, size_t bytes) override {
    if (dst == src) return absl::OkStatus();
    return Copy(stream, dst, src, bytes, cudaMemcpyDeviceToDevice);
  }

  absl::Status Fill(Stream& stream, void* dst, uint8_t byte, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    RETURN_IF_ERROR(MakeCurrent());
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, byte, bytes, AsImpl(stream).native()));
    return absl::OkStatus();
  }

  absl::Status RecordEvent(Stream& stream, Event& event) override {
    RETURN_IF_ERROR(MakeCurrent());
    CUDA_RETURN_IF_ERROR(cudaEventRecord(AsNative(event), AsImpl(stream).native()));
    return absl::OkStatus();
  }

  absl::Status WaitEvent(Stream& stream, Event& event) override {
    RETURN_IF_ERROR(MakeCurrent());
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(AsImpl(stream).native(), AsNative(event), 0));
    return absl::OkStatus();
  }

  absl::StatusOr<double> ElapsedSeconds(Event& start, Event& end) override {
    RETURN_IF_ERROR(MakeCurrent());
    float ms = 0;
    const cudaError_t error = cudaEventElapsedTime(&ms, AsNative(start), AsNative(end));
    if (error == cudaErrorNotReady) {
      cudaGetLastError();
      return absl::FailedPreconditionError("an event has not completed yet");
    }
    if (error == cudaErrorInvalidResourceHandle) {
      cudaGetLastError();
      return absl::FailedPreconditionError("an event was never recorded");
    }
    CUDA_RETURN_IF_ERROR(error);
    return ms / 1000.0;
  }

  absl::Status OnComplete(Stream& stream, std::function<void(absl::Status)> done) override {
    CudaStreamImpl& impl = AsImpl(stream);
    return worker_.Add(impl, impl.TakeDeferredChecks(), std::move(done));
  }

  absl::Status Synchronize(Stream& stream) override {
    RETURN_IF_ERROR(MakeCurrent());
    CudaStreamImpl& impl = AsImpl(stream);
    absl::Status status = CudaStatus(cudaStreamSynchronize(impl.native()), "cudaStreamSynchronize");
    absl::Status failure = impl.TakeFailure();
    if (status.ok()) status = failure;
    for (CudaStream::Check& check : impl.TakeDeferredChecks()) {
      absl::Status checked = check();
      if (status.ok()) status = checked;
    }
    return status;
  }

 private:
  absl::Status MakeCurrent() {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(info_.ordinal));
    return absl::OkStatus();
  }

  absl::Status Copy(Stream& stream, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0) return absl::OkStatus();
    RETURN_IF_ERROR(MakeCurrent());
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, kind, AsImpl(stream).native()));
    return absl::OkStatus();
  }

  const DeviceInfo info_;
  CompletionWorker worker_;  // after info_: its thread uses the ordinal
};

// nvidia-smi's spelling of a GPU's 16-byte UUID: GPU-8-4-4-4-12 hex digits.
std::string FormatGpuUuid(const unsigned char* bytes) {
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    absl::StrAppend(&out, absl::Hex(bytes[i], absl::kZeroPad2));
  }
  return out;
}

absl::StatusOr<DeviceInfo> Describe(int ordinal) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  cudaDeviceProp prop;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  DeviceInfo info;
  info.backend = Backend::kCuda;
  info.ordinal = ordinal;
  info.name = absl::StrCat("cuda:", ordinal);
  info.compute_capability = prop.major * 10 + prop.minor;
  CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&info.driver_version));
  info.description = absl::StrFormat("%s, cc %d.%d, %d SMs, %.1f GiB", prop.name, prop.major, prop.minor,
                                     prop.multiProcessorCount, static_cast<double>(total_bytes) / (1 << 30));
  info.capacity_bytes = total_bytes;
  info.uuid = FormatGpuUuid(reinterpret_cast<const unsigned char*>(prop.uuid.bytes));
  int least = 0, greatest = 0;
  CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  info.stream_priority_levels = least - greatest;
  return info;
}

// The hardware work queues a CUDA context feeds its streams through
// (CUDA_DEVICE_MAX_CONNECTIONS, read once, when the process first uses
// CUDA): 8 unless set, and streams beyond that share queues, so that work
// of one stream can wait behind another's without any dependency between
// them. tandemd's lanes are independent streams (plus those of stream
// priority changes): on the H200, with 8 lanes each lane's stream sat idle
// 2/3 of the time it had iterations enqueued, and the hosting benchmark's
// count stopped at 224-256 models; with 32 queues the same 8 lanes hosted
// 352 (bench/results/README.md). 32 is CUDA's most. A value already in the
// environment is kept.
void UseAllHardwareQueues() {
  static const bool once = [] {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
    return true;
  }();
  (void)once;
}

}  // namespace

int CudaDeviceCount() {
  UseAllHardwareQueues();  // before the process's first CUDA call
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error here
    return 0;
  }
  return count;
}

absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateCudaDevices(const CudaDeviceOptions& options) {
  const int count = CudaDeviceCount();
  std::vector<int> ordinals = options.ordinals;
  if (ordinals.empty()) {
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
  }
  std::vector<std::unique_ptr<Device>> devices;
  for (size_t i = 0; i < ordinals.size(); ++i) {
    const int ordinal = ordinals[i];
    if (ordinal < 0 || ordinal >= count) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU ", ordinal, " does not exist: ", count, " GPU(s) are visible"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (ordinals[j] == ordinal) {
        return absl::InvalidArgumentError(absl::StrCat("GPU ", ordinal, " is named twice"));
      }
    }
    ASSIGN_OR_RETURN(DeviceInfo info, Describe(ordinal));
    devices.push_back(std::make_unique<CudaDevice>(std::move(info)));
  }
  const char* queues = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  TLOG_INFO("CUDA hardware queues per device").With("CUDA_DEVICE_MAX_CONNECTIONS", queues == nullptr ? "8" : queues);
  return devices;
}

}  // namespace tandem::device
