#include "kernels/cuda/generated_kernels.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace tandem::cuda {
namespace {

struct Loaded {
  std::string source;  // compared on every lookup: names are hashes
  absl::StatusOr<cudaKernel_t> kernel = absl::UnknownError("not loaded");
};

absl::Mutex& Mu() {
  static auto* mu = new absl::Mutex();
  return *mu;
}

// By kernel name and architecture.
absl::flat_hash_map<std::string, Loaded>& LoadedKernels() ABSL_EXCLUSIVE_LOCKS_REQUIRED(Mu()) {
  static auto* map = new absl::flat_hash_map<std::string, Loaded>();
  return *map;
}

int SmCount() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 132;
  }
  return sms;
}

std::atomic<int64_t> launches{0};
std::atomic<int64_t> batch_segments{0};

absl::Status CudaError(const char* what, cudaError_t e) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

}  // namespace

absl::StatusOr<codegen::CompileTarget> CurrentTarget() {
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return CudaError("the current device", e);
  // Asked at every launch of a generated kernel: each device's answer once.
  static auto* targets = new absl::flat_hash_map<int, codegen::CompileTarget>();
  {
    absl::MutexLock lock(&Mu());
    auto it = targets->find(device);
    if (it != targets->end()) return it->second;
  }
  int major = 0, minor = 0, driver = 0;
  e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (e == cudaSuccess) e = cudaDriverGetVersion(&driver);
  if (e != cudaSuccess) return CudaError("the device's architecture", e);
  const codegen::CompileTarget target{major * 10 + minor, driver};
  absl::MutexLock lock(&Mu());
  (*targets)[device] = target;
  return target;
}

absl::StatusOr<cudaKernel_t> LoadGeneratedKernel(const codegen::GeneratedKernel& kernel, const std::string& entry) {
  ASSIGN_OR_RETURN(codegen::CompileTarget target, CurrentTarget());
  const std::string& function_name = entry.empty() ? kernel.name : entry;
  const std::string key = absl::StrCat(function_name, "/sm", target.compute_capability);
  {
    absl::MutexLock lock(&Mu());
    auto it = LoadedKernels().find(key);
    if (it != LoadedKernels().end() && it->second.source == kernel.source) return it->second.kernel;
  }
  Loaded loaded;
  loaded.source = kernel.source;
  absl::StatusOr<std::shared_ptr<const std::string>> cubin = codegen::DefaultKernelCache().Cubin(kernel, target);
  if (!cubin.ok()) {
    loaded.kernel = cubin.status();
  } else {
    cudaLibrary_t library = nullptr;
    cudaError_t e = cudaLibraryLoadData(&library, (*cubin)->data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    cudaKernel_t function = nullptr;
    if (e == cudaSuccess) e = cudaLibraryGetKernel(&function, library, function_name.c_str());
    loaded.kernel = e == cudaSuccess ? absl::StatusOr<cudaKernel_t>(function)
                                     : absl::StatusOr<cudaKernel_t>(CudaError("loading a generated kernel", e));
  }
  if (!loaded.kernel.ok()) {
    TLOG(Warning, "a generated kernel is unavailable; its nodes run the interpreting kernel")
        .With("kernel", function_name)
        .With("error", loaded.kernel.status().ToString());
  }
  absl::MutexLock lock(&Mu());
  Loaded& slot = LoadedKernels()[key];
  slot = std::move(loaded);
  return slot.kernel;
}

// Blocks for one tensor of `n` elements: a thread per vector, at most 8
// blocks per SM (the kernels stride).
int64_t PointwiseBlocks(DType dtype, int64_t n) {
  static const int sms = SmCount();
  const int64_t width = codegen::PointwiseElementsPerVector(dtype);
  const int64_t items = std::max<int64_t>(1, (n + width - 1) / width);
  return std::min<int64_t>((items + codegen::kPointwiseBlock - 1) / codegen::kPointwiseBlock, int64_t{8} * sms);
}

cudaError_t LaunchPointwise(cudaKernel_t kernel, DType dtype, const codegen::PointwiseKernelArgs& args,
                            cudaStream_t stream) {
  const int64_t blocks = PointwiseBlocks(dtype, args.n);
  launches.fetch_add(1, std::memory_order_relaxed);
  codegen::PointwiseKernelArgs copy = args;
  void* params[] = {&copy};
  return cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(static_cast<unsigned>(blocks)),
                          dim3(codegen::kPointwiseBlock), params, 0, stream);
}

cudaError_t LaunchPointwiseBatch(cudaKernel_t batch_entry, DType dtype,
                                 absl::Span<const codegen::PointwiseKernelArgs> segments, cudaStream_t stream) {
  if (segments.empty() || segments.size() > codegen::kPointwiseBatchMax) return cudaErrorInvalidValue;
  // ~4 KiB: static, not on the (possibly small) calling thread's stack.
  thread_local codegen::PointwiseBatchArgs batch;
  batch.count = static_cast<int64_t>(segments.size());
  batch.block_start[0] = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    batch.segments[s] = segments[s];
    batch.block_start[s + 1] = batch.block_start[s] + PointwiseBlocks(dtype, segments[s].n);
  }
  const int64_t blocks = batch.block_start[segments.size()];
  if (blocks > int64_t{0x7fffffff}) return cudaErrorInvalidValue;
  launches.fetch_add(1, std::memory_order_relaxed);
  batch_segments.fetch_add(batch.count, std::memory_order_relaxed);
  void* params[] = {&batch};
  return cudaLaunchKernel(reinterpret_cast<const void*>(batch_entry), dim3(static_cast<unsigned>(blocks)),
                          dim3(codegen::kPointwiseBlock), params, 0, stream);
}

int64_t GeneratedKernelLaunchesForTesting() { return launches.load(std::memory_order_relaxed); }
int64_t GeneratedBatchSegmentsForTesting() { return batch_segments.load(std::memory_order_relaxed); }

}  // namespace tandem::cuda
