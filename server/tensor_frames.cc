#include "server/tensor_frames.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace tandem::server {

FrameRange FramesOf(const v1::Tensor& t) {
  if (t.frame() == 0) return {};
  return {t.frame() - size_t{1}, std::max<size_t>(t.frame_count(), 1)};
}

absl::Status CheckTensorFrames(absl::string_view what, const std::vector<FramedTensor>& tensors,
                               const RequestFrames* frames) {
  const size_t count = frames != nullptr ? frames->size() : 0;
  std::vector<bool> used(count, false);
  for (const FramedTensor& ft : tensors) {
    const v1::Tensor& t = *ft.tensor;
    const FrameRange range = FramesOf(t);
    if (range.count == 0) continue;
    const std::string& name = t.spec().name();
    const std::string named = range.count == 1 ? absl::StrCat("frame ", t.frame())
                                               : absl::StrCat("frames ", t.frame(), "-", range.first + range.count);
    if (range.first + range.count > count) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", name, "' names ", named, " but ", count, " frame(s) followed the request"));
    }
    if (!t.data().empty() || t.has_shared()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " '", name, "' has both ", t.has_shared() ? "a shared slice" : "inline data", " and ", named));
    }
    uint64_t got = 0;
    for (size_t f = range.first; f < range.first + range.count; ++f) {
      if (used[f]) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " '", name, "' names frame ", f + 1, ", which another tensor named"));
      }
      used[f] = true;
      got += frames->frame(f).size();
    }
    const uint64_t want = ft.type->bytes();
    if (got != want) {
      return absl::InvalidArgumentError(absl::StrCat(what, " '", name, "': ", named,
                                                     range.count == 1 ? " has " : " have ", got, " bytes; ",
                                                     ft.type->ToString(), " needs ", want));
    }
  }
  for (size_t f = 0; f < count; ++f) {
    if (!used[f]) {
      return absl::InvalidArgumentError(
          absl::StrCat("frame ", f + 1, " of ", count, " after the request belongs to no ", what));
    }
  }
  return absl::OkStatus();
}

uint64_t CopyTensorFrames(const v1::Tensor& t, const RequestFrames& frames, char* dst) {
  const FrameRange range = FramesOf(t);
  uint64_t copied = 0;
  for (size_t f = range.first; f < range.first + range.count; ++f) {
    const absl::string_view bytes = frames.frame(f);
    if (!bytes.empty()) std::memcpy(dst + copied, bytes.data(), bytes.size());
    copied += bytes.size();
  }
  return copied;
}

}  // namespace tandem::server
