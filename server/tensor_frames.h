// Tensors whose bytes travel in the ZeroMQ frames after a request (Tensor.frame
// and frame_count) instead of inline in it: a registration's initial values
// and an iteration's large feeds. libzmq counts a connection as alive only
// once a whole frame is in, so a tensor that crosses a slow link for longer
// than the heartbeat timeout must come in pieces; the bytes also stay in the
// transport's buffers instead of being copied into protobuf strings.
#ifndef TANDEM_SERVER_TENSOR_FRAMES_H_
#define TANDEM_SERVER_TENSOR_FRAMES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ir/dtype.h"
#include "server/request_frames.h"
#include "tandem.pb.h"

namespace tandem::server {

// The frames (0-based, [first, first + count)) that tensor `t` names:
// count 0 when it names none (its bytes are elsewhere).
struct FrameRange {
  size_t first = 0;
  size_t count = 0;
};
FrameRange FramesOf(const v1::Tensor& t);

// One tensor of a request that may name frames, with the type it must have.
struct FramedTensor {
  const v1::Tensor* tensor = nullptr;
  const TensorType* type = nullptr;
};

// Checks the tensors that name frames: each names frames that exist and that
// no other tensor names, has no inline data or shared slice besides, and its
// frames together hold exactly its type's bytes; no frame is left over.
// Tensors that name none are not looked at. `what` names them in errors
// ("persistent tensor", "feed").
absl::Status CheckTensorFrames(absl::string_view what, const std::vector<FramedTensor>& tensors,
                               const RequestFrames* frames);

// Copies the bytes of `t` (which names frames that CheckTensorFrames passed)
// to `dst`, one frame after the other. Returns the bytes copied.
uint64_t CopyTensorFrames(const v1::Tensor& t, const RequestFrames& frames, char* dst);

}  // namespace tandem::server

#endif  // TANDEM_SERVER_TENSOR_FRAMES_H_
