#include "server/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace tandem::server {
namespace {

bool ValidName(const std::string& name) {
  constexpr absl::string_view kPrefix = "/tandem-";
  if (!absl::StartsWith(name, kPrefix) || name.size() != kPrefix.size() + 32) return false;
  for (size_t i = kPrefix.size(); i < name.size(); ++i) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::shared_ptr<SharedRegion>> SharedRegion::Map(uint64_t id, const std::string& name, uint64_t bytes,
                                                                const std::vector<device::Device*>& devices,
                                                                uint64_t max_bytes, bool populate) {
  if (!ValidName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory name '", name, "' must be \"/tandem-\" followed by 32 hex digits"));
  }
  if (bytes == 0 || bytes > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory region of ", bytes, " bytes: must be between 1 and ", max_bytes, " bytes"));
  }
  int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) {
    int e = errno;
    std::string why = absl::StrCat("cannot open shared memory ", name, ": ", std::strerror(e));
    if (e == ENOENT) return absl::NotFoundError(why);
    if (e == EACCES) return absl::PermissionDeniedError(why);
    return absl::InvalidArgumentError(why);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != bytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("shared memory ", name, " is ", st.st_size,
                                                   " bytes, not the ", bytes, " bytes announced"));
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  ::close(fd);  // the mapping stays
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot map shared memory ", name, ": ", std::strerror(errno)));
  }
  std::shared_ptr<SharedRegion> region(new SharedRegion(id, base, bytes));
  for (device::Device* d : devices) {
    absl::Status s = d->RegisterHost(base, bytes);
    if (s.ok()) {
      region->registered_.push_back(d);
    } else {
      TLOG_WARNING("shared memory not pinned; copies from it will be slower")
          .With("device", d->info().name)
          .With("error", s.ToString());
    }
  }
  return region;
}

SharedRegion::~SharedRegion() {
  for (device::Device* d : registered_) d->UnregisterHost(base_);
  ::munmap(base_, bytes_);
}

}  // namespace tandem::server
