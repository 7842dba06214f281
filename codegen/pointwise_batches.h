// Horizontal batching: runs of consecutive fused nodes that share one
// generated kernel and are independent of each other run as one launch of
// its batch entry (codegen/pointwise_kernel.h). An optimizer step is one
// such node per parameter (161 for ResNet-50, 364 for DenseNet-121), each
// a few microseconds of launch for a few kilobytes to megabytes of work;
// batched, it is a handful of launches.
//
// Decided at run time over the iteration's actual addresses, because one
// launch runs its segments concurrently while the memory plan assumed node
// order: a later node's output may reuse an earlier node's dead input.
// Consecutive nodes i < j join one run when
//   - both have the same (non-empty) kernel name;
//   - j reads no value that a node of the run produces;
//   - the bytes j writes overlap none that another node of the run reads or
//     writes, and the bytes j reads overlap none that another writes (a node
//     may still write its own input in place, as alone);
//   - no update copy (compiler/update_schedule.h) is due after a node of
//     the run other than its last, whose copies follow the launch;
//   - the run holds at most kPointwiseBatchMax nodes.
// Pure host code, testable without a GPU.
#ifndef TANDEM_CODEGEN_POINTWISE_BATCHES_H_
#define TANDEM_CODEGEN_POINTWISE_BATCHES_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "ir/graph.h"

namespace tandem::codegen {

// Runs [first, last] (inclusive, at least two nodes each, in order) among
// nodes [begin, end). `kernel_names[i]` is node i's generated kernel name,
// or empty where node i has none (size: graph.nodes); `addresses[v]` is
// value v's storage this iteration; `copies_after(i)` says whether an update
// copy is due after node i.
std::vector<std::pair<int, int>> PlanPointwiseBatches(const Graph& graph, int begin, int end,
                                                      const std::vector<std::string>& kernel_names,
                                                      absl::Span<void* const> addresses,
                                                      const std::function<bool(int)>& copies_after);

}  // namespace tandem::codegen

#endif  // TANDEM_CODEGEN_POINTWISE_BATCHES_H_
