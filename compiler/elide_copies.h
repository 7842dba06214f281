// A graph pass that removes the copies a functional graph does not need. No
// node of a graph writes a value in place (kernels that may overwrite an
// input do so only where the memory plan proves the input dead), so a copy
// always reads the same as its source:
//
//   - `clone` (PyTorch's `.contiguous()`, `.clone()`, and what
//     functionalization leaves around views), and
//   - `expand` / `expand_copy` to the shape its input already has (traced
//     attention expands q, k and v to their own shapes before `bmm`),
//
// are dropped and their readers read the source. A copy whose value is
// fetched or updated stays: its name is the client's. What it saves: a read
// and a write of each copied value, and its buffer in the plan
// (ConvNeXt-T's step had 149 clones, 1.6 ms of an H100's 57.7 ms op by op).
//
// Deterministic; a plain function.
#ifndef TANDEM_COMPILER_ELIDE_COPIES_H_
#define TANDEM_COMPILER_ELIDE_COPIES_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace tandem {

// The graph without its needless copies (compiler/graph_rewriter.h).
absl::StatusOr<Graph> ElideCopies(const Graph& graph);

}  // namespace tandem

#endif  // TANDEM_COMPILER_ELIDE_COPIES_H_
