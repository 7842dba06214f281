#include "client/shm_object.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::client {

absl::StatusOr<ShmObject> ShmObject::Create(uint64_t bytes, bool populate) {
  std::random_device rd;
  std::string name = "/tandem-";
  for (int i = 0; i < 4; ++i) absl::StrAppend(&name, absl::Hex(rd(), absl::kZeroPad8));
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0644);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("shm_open: ", std::strerror(errno)));
  // posix_fallocate reserves the pages now: a /dev/shm too small for the
  // object (a container's 64 MiB, say) is an error here, not a SIGBUS when
  // the bytes are written.
  void* base = MAP_FAILED;
  int error = 0;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    error = errno;
  } else if (int reserved = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); reserved != 0) {
    error = reserved;
  } else {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
    if (base == MAP_FAILED) error = errno;
  }
  ::close(fd);
  if (base == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot size, reserve or map ", bytes, " bytes of shared memory: ", std::strerror(error)));
  }
  return ShmObject(std::move(name), static_cast<char*>(base), bytes);
}

ShmObject::ShmObject(ShmObject&& other) noexcept
    : name_(std::exchange(other.name_, std::string())),
      base_(std::exchange(other.base_, nullptr)),
      bytes_(other.bytes_) {}

ShmObject::~ShmObject() {
  Unlink();
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

void ShmObject::Unlink() {
  if (!name_.empty()) ::shm_unlink(name_.c_str());
  name_.clear();
}

char* ShmObject::ReleaseMapping() { return std::exchange(base_, nullptr); }

}  // namespace tandem::client
