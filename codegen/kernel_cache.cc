#include "codegen/kernel_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"

#ifdef TANDEM_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace tandem::codegen {
namespace {

constexpr char kMagic[] = "TANDEM-KERNEL-1\n";

// mkdir -p with mode 0700 for the folders it makes.
bool MakeFolders(const std::string& path) {
  if (path.empty()) return false;
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      partial = path.substr(0, i);
      if (mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) return false;
    }
  }
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void AppendSized(std::string& out, const std::string& bytes) {
  const uint64_t size = bytes.size();
  out.append(reinterpret_cast<const char*>(&size), sizeof(size));
  out.append(bytes);
}

// Reads a size-prefixed field at `pos`; false when the file is cut short.
bool ReadSized(const std::string& file, size_t& pos, std::string* out) {
  uint64_t size = 0;
  if (file.size() - pos < sizeof(size)) return false;
  std::memcpy(&size, file.data() + pos, sizeof(size));
  pos += sizeof(size);
  if (file.size() - pos < size) return false;
  out->assign(file, pos, size);
  pos += size;
  return true;
}

// Writes `bytes` to `path` through a temporary file and a rename.
bool WriteAtomically(const std::string& path, const std::string& bytes) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid(), ".", counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      unlink(tmp.c_str());
      return false;
    }
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

#ifdef TANDEM_HAVE_NVRTC

bool NvrtcAvailable() { return true; }

std::string NvrtcVersion() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return absl::StrCat(major, ".", minor);
}

absl::StatusOr<std::string> CompileKernel(const GeneratedKernel& kernel, int compute_capability) {
  nvrtcProgram program;
  const std::string file = absl::StrCat(kernel.name, ".cu");
  nvrtcResult r = nvrtcCreateProgram(&program, kernel.source.c_str(), file.c_str(), 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) return absl::InternalError(absl::StrCat("nvrtcCreateProgram: ", nvrtcGetErrorString(r)));
  const std::string arch = absl::StrCat("--gpu-architecture=sm_", compute_capability);
  const char* options[] = {arch.c_str(), "--std=c++17"};
  r = nvrtcCompileProgram(program, 2, options);
  if (r != NVRTC_SUCCESS) {
    size_t log_size = 0;
    nvrtcGetProgramLogSize(program, &log_size);
    std::string log(log_size, '\0');
    if (log_size > 0) nvrtcGetProgramLog(program, log.data());
    nvrtcDestroyProgram(&program);
    return absl::InvalidArgumentError(absl::StrCat("NVRTC could not compile ", kernel.name, " for sm_",
                                                   compute_capability, ": ", nvrtcGetErrorString(r), "\n", log));
  }
  size_t size = 0;
  r = nvrtcGetCUBINSize(program, &size);
  std::string cubin(size, '\0');
  if (r == NVRTC_SUCCESS) r = nvrtcGetCUBIN(program, cubin.data());
  nvrtcDestroyProgram(&program);
  if (r != NVRTC_SUCCESS) return absl::InternalError(absl::StrCat("nvrtcGetCUBIN: ", nvrtcGetErrorString(r)));
  return cubin;
}

#else

bool NvrtcAvailable() { return false; }
std::string NvrtcVersion() { return "none"; }
absl::StatusOr<std::string> CompileKernel(const GeneratedKernel& kernel, int) {
  return absl::UnimplementedError(
      absl::StrCat("this build has no NVRTC (the CUDA toolkit was not found); ", kernel.name, " cannot be compiled"));
}

#endif

KernelCache::KernelCache(std::string folder) : folder_(std::move(folder)) {}

std::string KernelCache::Key(const GeneratedKernel& kernel, const CompileTarget& target) const {
  return absl::StrCat(kernel.name, " sm_", target.compute_capability, " nvrtc ", NvrtcVersion(), " driver ",
                      target.driver_version);
}

std::shared_ptr<const std::string> KernelCache::ReadFile(const std::string& path, const std::string& key,
                                                         const GeneratedKernel& kernel) const {
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string file = buffer.str();
  const size_t magic = sizeof(kMagic) - 1;
  if (file.compare(0, magic, kMagic) != 0) return nullptr;
  size_t pos = magic;
  std::string file_key, source, cubin;
  if (!ReadSized(file, pos, &file_key) || !ReadSized(file, pos, &source) || !ReadSized(file, pos, &cubin)) {
    return nullptr;
  }
  if (pos != file.size() || file_key != key || source != kernel.source || cubin.empty()) return nullptr;
  return std::make_shared<const std::string>(std::move(cubin));
}

void KernelCache::WriteFile(const std::string& folder, const std::string& path, const std::string& key,
                            const GeneratedKernel& kernel, const std::string& cubin) {
  std::string file = kMagic;
  AppendSized(file, key);
  AppendSized(file, kernel.source);
  AppendSized(file, cubin);
  const bool ok = MakeFolders(folder) && WriteAtomically(path, file) &&
                  WriteAtomically(absl::StrCat(folder, "/", kernel.name, ".cu"), kernel.source);
  if (ok) return;
  absl::MutexLock lock(&mu_);
  if (write_failure_logged_) return;
  write_failure_logged_ = true;
  TLOG(Warning, "cannot write the kernel cache; compiled kernels are kept in memory only")
      .With("folder", folder)
      .With("error", std::strerror(errno));
}

absl::StatusOr<std::shared_ptr<const std::string>> KernelCache::Cubin(const GeneratedKernel& kernel,
                                                                      const CompileTarget& target) {
  const std::string key = Key(kernel, target);
  std::string folder;
  {
    absl::MutexLock lock(&mu_);
    auto it = cubins_.find(key);
    if (it != cubins_.end()) {
      ++counters_.memory_hits;
      return it->second;
    }
    folder = folder_;
  }
  const std::string path =
      folder.empty() ? "" : absl::StrCat(folder, "/", kernel.name, ".sm", target.compute_capability, ".cubin");
  std::shared_ptr<const std::string> cubin = path.empty() ? nullptr : ReadFile(path, key, kernel);
  if (cubin != nullptr) {
    absl::MutexLock lock(&mu_);
    ++counters_.disk_hits;
    return cubins_.emplace(key, cubin).first->second;
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> compiled = CompileKernel(kernel, target.compute_capability);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!compiled.ok()) {
    absl::MutexLock lock(&mu_);
    ++counters_.compile_failures;
    return compiled.status();
  }
  if (!path.empty()) WriteFile(folder, path, key, kernel, *compiled);
  absl::MutexLock lock(&mu_);
  ++counters_.compiles;
  counters_.compile_seconds += seconds;
  return cubins_.emplace(key, std::make_shared<const std::string>(*std::move(compiled))).first->second;
}

KernelCache::Counters KernelCache::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

std::string KernelCache::folder() const {
  absl::MutexLock lock(&mu_);
  return folder_;
}

void KernelCache::set_folder(std::string folder) {
  absl::MutexLock lock(&mu_);
  folder_ = std::move(folder);
  write_failure_logged_ = false;
}

KernelCache& DefaultKernelCache() {
  static auto* cache = new KernelCache();
  return *cache;
}

}  // namespace tandem::codegen
