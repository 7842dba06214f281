#include "server/shared_frames.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tandem::server {

absl::StatusOr<std::shared_ptr<const SharedFrames>> SharedFrames::Map(const v1::SharedFrames& spec, const UniqueFd& fd,
                                                                      uint64_t max_bytes) {
  if (spec.offsets_size() != spec.sizes_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared frames: ", spec.offsets_size(), " offsets but ", spec.sizes_size(), " sizes"));
  }
  std::vector<std::pair<uint64_t, uint64_t>> slices;
  slices.reserve(spec.offsets_size());
  for (int i = 0; i < spec.offsets_size(); ++i) {
    const uint64_t offset = spec.offsets(i), size = spec.sizes(i);
    if (offset > spec.bytes() || size > spec.bytes() - offset) {
      return absl::InvalidArgumentError(absl::StrCat("shared frame ", i + 1, " [", offset, ", +", size,
                                                     ") ends past the object's ", spec.bytes(), " bytes"));
    }
    slices.emplace_back(offset, size);
  }
  // Read once: no device registration (pinning would cost more than it saves).
  ASSIGN_OR_RETURN(std::shared_ptr<SharedRegion> region,
                   SharedRegion::Map(/*id=*/0, fd, spec.bytes(), /*devices=*/{}, max_bytes,
                                     /*populate=*/true));
  return std::shared_ptr<const SharedFrames>(new SharedFrames(std::move(region), std::move(slices)));
}

}  // namespace tandem::server
