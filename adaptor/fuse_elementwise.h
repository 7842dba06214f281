// A graph pass on the wire form (tandem.v1.Graph) that fuses chains of small
// elementwise nodes into `fused_elementwise` nodes (adaptor/ops/
// fused_program.h), so that a chain such as SGD-with-momentum's
// mul.Scalar -> add.Tensor -> mul.Tensor -> sub.Tensor runs as one kernel
// making one pass over its tensors instead of four.
//
// Fusable nodes: add.Tensor, sub.Tensor, mul.Tensor, div.Tensor, add.Scalar,
// sub.Scalar, mul.Scalar, div.Scalar, neg, sqrt, whose output is float32 or
// float64 and whose every input has the output's type or is a rank-0 tensor
// of its dtype (a learning rate). A broadcast operand of any other shape, a
// dtype mix, or an attribute that does not parse keeps a node out.
// Two fusable nodes are connected when one reads the other's output and
// both outputs have one type; connected nodes form a group, and nothing is
// fused across a node that is not fusable.
//
// A group is split, in node order, into parts of at most
// kFusedMaxInstructions nodes, kFusedMaxInputs distinct outside inputs and
// kFusedMaxOutputs outputs; a part also ends before a node when a value of
// the part is read by a node outside it that comes earlier. Each part of two
// or more nodes becomes one fused node at the position of its last member.
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
// Types come from BuildGraph (the wire graph lacks persistent tensors'
// types and many declared outputs); the fused nodes declare their output
// types, so the BuildGraph that follows checks them against inference.
// Deterministic; a plain function; the caller owns the graph.
#ifndef TANDEM_ADAPTOR_FUSE_ELEMENTWISE_H_
#define TANDEM_ADAPTOR_FUSE_ELEMENTWISE_H_

#include "adaptor/graph.h"
#include "tandem.pb.h"

namespace tandem {

// Builds `graph` with `persistent` to learn its types, then fuses. A graph
// that BuildGraph refuses is left unchanged (the caller's BuildGraph reports
// the error).
void FuseElementwise(const google::protobuf::RepeatedPtrField<v1::Tensor>& persistent, v1::Graph* graph);

// The same with `built` = BuildGraph(*graph, ...) already at hand.
void FuseElementwise(const Graph& built, v1::Graph* graph);

}  // namespace tandem

#endif  // TANDEM_ADAPTOR_FUSE_ELEMENTWISE_H_
