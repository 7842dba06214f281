// A client's shared-memory region mapped into the daemon (read only) and
// pinned on every device, so large feeds reach the GPU with one
// asynchronous copy instead of travelling through the socket.
//
// The region is a memfd the client created and passed on the side socket
// (proto/fd_message.h), sealed against shrinking (F_SEAL_SHRINK): a client
// that could shrink the object under the daemon's mapping would make the
// daemon's next read of it raise SIGBUS, killing every job. A memfd also
// has no name another user could open (a POSIX object in /dev/shm did).
//
// Owned by its session through a shared_ptr; every queued or running
// iteration that reads from it holds a reference too, so the mapping
// outlives the device copies even when the session ends first. Destroyed on
// the control loop thread while the devices exist (Service::Shutdown drops
// every reference first).
#ifndef TANDEM_SERVER_SHARED_REGION_H_
#define TANDEM_SERVER_SHARED_REGION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "device/device.h"

namespace tandem::server {

class SharedRegion {
 public:
  // Maps the first `bytes` bytes of the memfd `fd` and registers them with
  // `devices` (a failed registration leaves it unpinned: copies still work,
  // only slower). INVALID_ARGUMENT when `bytes` is 0 or above `max_bytes`,
  // when `fd` is not a memfd sealed with F_SEAL_SHRINK, or when it is
  // smaller than `bytes`. `populate` maps every page at once (for an object
  // that is read whole right away: one call instead of a fault per page); a
  // region registered with a device is always populated first, so that the
  // registration does not fault its pages in while it holds the driver's
  // lock (a CUDA call that holds it holds up every lane's launches:
  // bench/ops/stream_stall_bench; the running job waited 20-35 ms right
  // after a newcomer's 64 MiB ring was mapped on an H100, docs/scheduling.md
  // "Joining", not yet measured with this).
  static absl::StatusOr<std::shared_ptr<SharedRegion>> Map(uint64_t id, const UniqueFd& fd, uint64_t bytes,
                                                           const std::vector<device::Device*>& devices,
                                                           uint64_t max_bytes, bool populate = false);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  uint64_t id() const { return id_; }
  const char* base() const { return static_cast<const char*>(base_); }
  uint64_t bytes() const { return bytes_; }
  bool pinned() const { return !registered_.empty(); }

 private:
  SharedRegion(uint64_t id, void* base, uint64_t bytes) : id_(id), base_(base), bytes_(bytes) {}

  const uint64_t id_;
  void* const base_;
  const uint64_t bytes_;
  std::vector<device::Device*> registered_;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_SHARED_REGION_H_
