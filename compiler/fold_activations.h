// A graph pass that folds a ReLU and a residual add into the batch norm
// before them, and the ReLU's gradient into the batch-norm backward after
// it, so that none of these passes over the activation is a kernel of its
// own:
//
//   forward:  relu(native_batch_norm(x, ...)[0])  -> native_batch_norm
//             with attribute relu = true (also
//             _native_batch_norm_legit_functional), whose output 0 is the
//             ReLU's value;
//   residual: [relu](native_batch_norm(x, ...)[0] + r) -> native_batch_norm
//             with attribute residual = true and r as a last input (and
//             relu = true where a ReLU follows): a residual block's end
//             (ResNet's bn3 + identity, MobileNetV2's projection +
//             identity) in one pass instead of two. The add must have
//             alpha 1 and operands of one type (no broadcast), and r must
//             be defined before the batch norm, which takes it where it
//             stands: with a downsampling shortcut, whose batch norm the
//             step computes after the block's last one, the residual folds
//             into the shortcut's batch norm, with the block's output as r;
//   backward: native_batch_norm_backward(threshold_backward(g, y, t), ...)
//             -> native_batch_norm_backward(g, ..., y) with attribute
//             mask_threshold = t: it reads g where y > t and 0 elsewhere.
//
// A fold needs the value between the two nodes to be read by the second
// node alone (once) and to be neither fetched nor updated: it disappears.
// The folded nodes compute what the unfolded ops computed, bit for bit (the
// add and the ReLU are applied to the stored, rounded output, the add in
// add.Tensor's arithmetic; the mask selects gradient values):
// ir/ops/batch_norm_ops.cc, the kernels in kernels/*/batch_norm*.
//
// Why the graph stays valid: a folded forward node stays where the batch
// norm was and defines the ReLU's value earlier than the ReLU did, which is
// before every reader of it. A folded backward node stays where it was and
// reads g and y, which the threshold_backward before it read.
//
// Deterministic; a plain function.
#ifndef TANDEM_COMPILER_FOLD_ACTIVATIONS_H_
#define TANDEM_COMPILER_FOLD_ACTIVATIONS_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace tandem {

// The folded graph (compiler/graph_rewriter.h); residual adds only with
// `fold_residuals`.
absl::StatusOr<Graph> FoldActivations(const Graph& graph, bool fold_residuals);
inline absl::StatusOr<Graph> FoldActivations(const Graph& graph) { return FoldActivations(graph, true); }

}  // namespace tandem

#endif  // TANDEM_COMPILER_FOLD_ACTIVATIONS_H_
