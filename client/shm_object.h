// A POSIX shared-memory object this process creates for tandemd to map: an
// unguessable name ("/tandem-" followed by 32 hex digits, the form the
// daemon accepts), sized and mapped read-write here.
//
// The destructor unlinks the name (unless Unlink() already did) and unmaps
// (unless the mapping was released to the caller).
#ifndef TANDEM_CLIENT_SHM_OBJECT_H_
#define TANDEM_CLIENT_SHM_OBJECT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tandem::client {

class ShmObject {
 public:
  // UNAVAILABLE when the object cannot be created, sized, reserved or
  // mapped (no /dev/shm, or too little room there): callers fall back to
  // the socket. `populate`
  // allocates and maps every page at once (for an object about to be
  // written whole: one call instead of a fault per page).
  static absl::StatusOr<ShmObject> Create(uint64_t bytes, bool populate = false);

  ShmObject(ShmObject&& other) noexcept;
  ShmObject& operator=(ShmObject&&) = delete;
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;
  ~ShmObject();

  const std::string& name() const { return name_; }
  char* data() const { return base_; }
  uint64_t bytes() const { return bytes_; }

  // Removes the name (once the daemon has mapped the object); the mapping stays.
  void Unlink();
  // Hands the mapping to the caller, who unmaps it (munmap(data(), bytes())).
  char* ReleaseMapping();

 private:
  ShmObject(std::string name, char* base, uint64_t bytes) : name_(std::move(name)), base_(base), bytes_(bytes) {}

  std::string name_;  // empty once unlinked
  char* base_;        // null once released
  uint64_t bytes_;
};

}  // namespace tandem::client

#endif  // TANDEM_CLIENT_SHM_OBJECT_H_
