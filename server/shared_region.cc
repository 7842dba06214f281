#include "server/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace tandem::server {

absl::StatusOr<std::shared_ptr<SharedRegion>> SharedRegion::Map(uint64_t id, const UniqueFd& fd, uint64_t bytes,
                                                                const std::vector<device::Device*>& devices,
                                                                uint64_t max_bytes, bool populate) {
  if (bytes == 0 || bytes > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory region of ", bytes, " bytes: must be between 1 and ", max_bytes, " bytes"));
  }
  // Sealed against shrinking, the object can never end before `bytes`: no
  // read of the mapping can fault.
  const int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return absl::InvalidArgumentError(
        "the shared-memory descriptor must be a memfd sealed with F_SEAL_SHRINK (memfd_create with "
        "MFD_ALLOW_SEALING, then fcntl F_ADD_SEALS), so that it cannot shrink under the daemon");
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the shared-memory object is ", st.st_size, " bytes, less than the ", bytes, " bytes announced"));
  }
  // Pinned regions are populated first (shared_region.h).
  const bool all_pages = populate || !devices.empty();
  void* base = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED | (all_pages ? MAP_POPULATE : 0), fd.get(), 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot map shared memory: ", std::strerror(errno)));
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
