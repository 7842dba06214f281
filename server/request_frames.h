// The frames of a request after its first (which holds the serialized
// tandem.v1.Request): bytes a client sent alongside it, today only a
// RegisterJobRequest's persistent tensors (Tensor.frame). The bytes stay in
// the transport's receive buffers, so a model's initial values reach the
// device without being copied into protobuf strings first.
//
// Immutable once made; owns its buffers; shared between the control loop and
// the executor that uploads from them (hold the shared_ptr until the upload
// has been enqueued and finished).
#ifndef TANDEM_SERVER_REQUEST_FRAMES_H_
#define TANDEM_SERVER_REQUEST_FRAMES_H_

#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"

namespace tandem::server {

class RequestFrames {
 public:
  virtual ~RequestFrames() = default;
  virtual size_t size() const = 0;
  // Frame i (0-based here; Tensor.frame counts from 1).
  virtual absl::string_view frame(size_t i) const = 0;
  // Every frame's bytes together.
  uint64_t total_bytes() const {
    uint64_t total = 0;
    for (size_t i = 0; i < size(); ++i) total += frame(i).size();
    return total;
  }
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_REQUEST_FRAMES_H_
