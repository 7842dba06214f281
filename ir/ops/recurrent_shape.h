// The dimensions of a fused recurrent layer (the `lstm` / `lstm_backward`
// and `gru` / `gru_backward` ops, ir/ops/recurrent_ops.cc), read by both
// backends' kernels from tensors the registry has already checked.
// Header-only; thread-safe.
#ifndef TANDEM_IR_OPS_RECURRENT_SHAPE_H_
#define TANDEM_IR_OPS_RECURRENT_SHAPE_H_

#include <cstdint>

#include "kernels/kernel.h"

namespace tandem {

struct RecurrentShape {
  int64_t t, b, i, h;  // steps, batch, input features, hidden features
};

// T, B, I from x [T, B, I]; H from h0 [B, H].
inline RecurrentShape RecurrentShapeOf(const TensorArg& x, const TensorArg& h0) {
  return {x.type.shape[0], x.type.shape[1], x.type.shape[2], h0.type.shape[1]};
}

}  // namespace tandem

#endif  // TANDEM_IR_OPS_RECURRENT_SHAPE_H_
