// A graph pass that folds matrix transposes into the products they feed, so
// that no transpose is materialized only to be read by a matrix product: the
// product reads the untransposed tensor through its transpose_a /
// transpose_b attribute (docs/ops.md), as cuBLAS reads an operand
// transposed.
//
// First, a transpose of an `mm` result that nothing else reads becomes the
// product itself: t(mm(a, b)) -> mm(b, a) with the two transpose flags
// swapped and flipped (a traced linear layer's weight gradient comes out as
// t(mm(t(x), grad))); the product then defines the transpose's output name
// (and type). Then:
//
// For each `mm` / `addmm` node and each of its matrix operands (mm's inputs
// 0 and 1, addmm's inputs 1 and 2) produced by a `t` or `t_copy` node, the
// operand becomes that node's input and the operand's transpose attribute
// flips; a chain of transposes folds at once (an even chain flips nothing).
// Any other node's input that is an even chain of transposes (t(t(x)), how
// a traced linear layer's weight gradient comes out) reads the chain's
// source. Then every transpose that lost a use this way and is used no more
// (by no node input, fetch or update, persistent or value side) is removed; so is
// a transpose feeding only removed transposes. A transpose whose output is
// fetched or updated is never removed (its consumers may still be folded).
//
// Every kept node keeps its label. Deterministic, O(nodes + inputs).
#ifndef TANDEM_COMPILER_FOLD_TRANSPOSES_H_
#define TANDEM_COMPILER_FOLD_TRANSPOSES_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace tandem {

// The folded graph (compiler/graph_rewriter.h).
absl::StatusOr<Graph> FoldTransposes(const Graph& graph);

}  // namespace tandem

#endif  // TANDEM_COMPILER_FOLD_TRANSPOSES_H_
