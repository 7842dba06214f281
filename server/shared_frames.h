// A registration's frames in a client's sealed memfd
// (RegisterJobRequest.shared_frames): each frame a slice of the object,
// which is mapped for this registration only. The initial values of a large
// model are then read straight from the client's pages instead of
// travelling through the socket (and its two copies into fresh memory).
//
// The mapping is read only and not pinned (the bytes are read once), so it
// may end on any thread: it ends when the last holder of the frames lets go,
// after the upload.
#ifndef TANDEM_SERVER_SHARED_FRAMES_H_
#define TANDEM_SERVER_SHARED_FRAMES_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/request_frames.h"
#include "server/shared_region.h"
#include "tandem.pb.h"

namespace tandem::server {

class SharedFrames final : public RequestFrames {
 public:
  // Maps `spec`'s object, the memfd `fd` (at most `max_bytes` bytes).
  // INVALID_ARGUMENT for a bad descriptor, size or slice (offsets and sizes
  // of different lengths, a slice past the object's end).
  static absl::StatusOr<std::shared_ptr<const SharedFrames>> Map(const v1::SharedFrames& spec, const UniqueFd& fd,
                                                                 uint64_t max_bytes);

  size_t size() const override { return slices_.size(); }
  absl::string_view frame(size_t i) const override {
    return absl::string_view(region_->base() + slices_[i].first, slices_[i].second);
  }

 private:
  SharedFrames(std::shared_ptr<SharedRegion> region, std::vector<std::pair<uint64_t, uint64_t>> slices)
      : region_(std::move(region)), slices_(std::move(slices)) {}

  std::shared_ptr<SharedRegion> region_;
  std::vector<std::pair<uint64_t, uint64_t>> slices_;  // (offset, size)
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_SHARED_FRAMES_H_
