// A graph pass that fuses chains of small elementwise nodes into
// `fused_elementwise` nodes (ir/ops/fused_program.h), so that a chain such
// as SGD-with-momentum's
// mul.Scalar -> add.Tensor -> mul.Tensor -> sub.Tensor runs as one kernel
// making one pass over its tensors instead of four.
//
// Fusable nodes: add.Tensor, sub.Tensor, mul.Tensor, div.Tensor, add.Scalar,
// sub.Scalar, mul.Scalar, div.Scalar, neg, sqrt, maximum, minimum, relu,
// threshold_backward, whose
// output is float32, float64, bfloat16 or float16 and whose every input has
// the output's type or is a rank-0 tensor of its dtype (a learning rate) —
// or, for a 16-bit output of rank > 0, a rank-0 tensor of any float dtype
// (the float32 step size of a bfloat16 model's optimizer), which the fused
// program rounds to the 16-bit type as the unfused op does. A broadcast
// operand of any other shape, another dtype mix, or an attribute that does
// not parse keeps a node out. A 16-bit chain computes each instruction in
// float32 and rounds its result to 16 bits where the unfused node would
// have stored it, so fusing changes no bit.
// Two fusable nodes are connected when one reads the other's output and
// both outputs have one type; connected nodes form a group, and nothing is
// fused across a node that is not fusable.
//
// A group is split, in node order, into parts of at most
// kFusedMaxInstructions nodes, kFusedMaxInputs distinct outside inputs and
// kFusedMaxOutputs outputs: a part grows while the instruction and input
// limits allow, and ends before a node when a value of the part is read by
// a node outside it that comes earlier; it is then cut back to its longest
// prefix within the output limit (a value read only by later members is no
// output, so the count can fall as a part grows), and the next part starts
// after it. Each part of two or more nodes becomes one fused node at the
// position of its last member.
// Its outputs keep their names: every value of the part that is read outside
// the part, fetched or updated (a part whose values are all dead keeps its
// last value). Values read only inside the part disappear.
//
// Why the graph stays valid: only fused nodes move, and only later (to
// their last member). An outside input of a part is read by a member, so it
// is defined before that member and thus before the part's last member.
// A reader outside the part of one of its values comes after the part's last
// member: a later node by the rule above, or a node of a later part of the
// group (parts follow node order), which sits at or after its own position.
// So every input is still defined before its reader.
//
// Deterministic; a plain function.
#ifndef TANDEM_COMPILER_FUSE_ELEMENTWISE_H_
#define TANDEM_COMPILER_FUSE_ELEMENTWISE_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace tandem {

// The fused graph (compiler/graph_rewriter.h).
absl::StatusOr<Graph> FuseElementwise(const Graph& graph);

}  // namespace tandem

#endif  // TANDEM_COMPILER_FUSE_ELEMENTWISE_H_
