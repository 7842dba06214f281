// Compiled generated kernels: NVRTC turns a kernel's source into a CUBIN
// for one GPU architecture, and a KernelCache keeps every CUBIN it made or
// read, in memory and in a folder of its own, so that a second job of the
// same model, or the same job after a restart, compiles nothing.
//
// Key: the kernel's name (a hash of its source), the architecture, the
// NVRTC version and the driver version. A file holds the key, the whole
// source and the CUBIN; a file whose key or source differs from the
// request, or that is cut short, is compiled again and replaced (written
// to a temporary name and renamed, so a reader never sees half a file).
// Beside each CUBIN the folder keeps the kernel's source as <name>.cu, for
// reading what a job runs (docs/codegen.md).
//
// Thread-safe. Two threads asking for one missing kernel at once may both
// compile it; both get the same bytes.
#ifndef TANDEM_CODEGEN_KERNEL_CACHE_H_
#define TANDEM_CODEGEN_KERNEL_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "codegen/pointwise_kernel.h"

namespace tandem::codegen {

struct CompileTarget {
  int compute_capability = 90;  // major * 10 + minor
  int driver_version = 0;       // cudaDriverGetVersion's (0 where there is no driver)
};

// Whether this build can compile generated kernels (it found NVRTC), and
// NVRTC's version ("13.0"; "none" without it).
bool NvrtcAvailable();
std::string NvrtcVersion();

// `kernel` compiled for `compute_capability` into a CUBIN; INVALID_ARGUMENT
// with NVRTC's log when the source does not compile, UNIMPLEMENTED in a
// build without NVRTC.
absl::StatusOr<std::string> CompileKernel(const GeneratedKernel& kernel, int compute_capability);

class KernelCache {
 public:
  // `folder`: where CUBINs persist (made, 0700, when first written); empty
  // keeps them in memory only.
  explicit KernelCache(std::string folder = "");

  // The CUBIN of `kernel` for `target`: from memory, else from the folder,
  // else compiled (and written to the folder; a folder that cannot be
  // written is logged once and the CUBIN kept in memory).
  absl::StatusOr<std::shared_ptr<const std::string>> Cubin(const GeneratedKernel& kernel, const CompileTarget& target);

  struct Counters {
    int64_t memory_hits = 0;
    int64_t disk_hits = 0;
    int64_t compiles = 0;
    int64_t compile_failures = 0;
    double compile_seconds = 0.0;  // summed over compiles
  };
  Counters counters() const;

  // The folder (empty: memory only). Changing it keeps what is in memory.
  std::string folder() const;
  void set_folder(std::string folder);

 private:
  std::string Key(const GeneratedKernel& kernel, const CompileTarget& target) const;
  std::shared_ptr<const std::string> ReadFile(const std::string& path, const std::string& key,
                                              const GeneratedKernel& kernel) const;
  void WriteFile(const std::string& folder, const std::string& path, const std::string& key,
                 const GeneratedKernel& kernel, const std::string& cubin);

  mutable absl::Mutex mu_;
  std::string folder_ ABSL_GUARDED_BY(mu_);
  bool write_failure_logged_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::shared_ptr<const std::string>> cubins_ ABSL_GUARDED_BY(mu_);  // by Key()
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

// The daemon's cache (tandemd sets its folder from --kernel_cache_dir).
KernelCache& DefaultKernelCache();

}  // namespace tandem::codegen

#endif  // TANDEM_CODEGEN_KERNEL_CACHE_H_
