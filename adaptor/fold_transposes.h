// A graph pass on the wire form (tandem.v1.Graph) that folds matrix
// transposes into the products they feed, so that no transpose is
// materialized only to be read by a matrix product: the product reads the
// untransposed tensor through its transpose_a / transpose_b attribute
// (docs/ops.md), as cuBLAS reads an operand transposed.
//
// First, a transpose of an `mm` result that nothing else reads becomes the
// product itself: t(mm(a, b)) -> mm(b, a) with the two transpose flags
// swapped and flipped (a traced linear layer's weight gradient comes out as
// t(mm(t(x), grad))); the product then defines the transpose's output name
// and declared type. Then:
//
// For each `mm` / `addmm` node and each of its matrix operands (mm's inputs
// 0 and 1, addmm's inputs 1 and 2) produced by a `t` or `t_copy` node, the
// operand becomes that node's input and the operand's transpose attribute
// flips; a chain of transposes folds at once (an even chain flips nothing).
// Any other node's input that is an even chain of transposes (t(t(x)), how
// a traced linear layer's weight gradient comes out) reads the chain's
// source. Then every transpose that lost a use this way and is used no more (by no
// node input, fetch or update, persistent or value side) is removed; so is
// a transpose feeding only removed transposes. A transpose whose output is
// fetched or updated is never removed (its consumers may still be folded).
//
// The pass changes only what is well defined: a name resolves as BuildGraph
// resolves it (to its one definition among feeds and earlier node outputs),
// so a graph BuildGraph refuses stays refused, except that a removed
// transpose's own defects (a wrong declared output type, an output name that
// clashes with a persistent tensor, which the wire graph does not list) are
// no longer reported. Every kept node keeps its label; node indices in
// BuildGraph's messages count the nodes left. Deterministic, O(nodes +
// inputs). A plain function; the caller owns the graph.
#ifndef TANDEM_ADAPTOR_FOLD_TRANSPOSES_H_
#define TANDEM_ADAPTOR_FOLD_TRANSPOSES_H_

#include "tandem.pb.h"

namespace tandem {

void FoldTransposes(v1::Graph* graph);

}  // namespace tandem

#endif  // TANDEM_ADAPTOR_FOLD_TRANSPOSES_H_
