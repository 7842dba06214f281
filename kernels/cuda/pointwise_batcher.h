// Batched launches of a CUDA program's alike fused nodes: the program's
// generated pointwise kernels (codegen/pointwise_kernel.h), the runs of
// nodes that may share one launch this time (codegen/pointwise_batches.h),
// and the launch of a run through its kernel's batch entry. One per
// CudaProgram; thread-compatible (the program's launches are serialized).
#ifndef TANDEM_KERNELS_CUDA_POINTWISE_BATCHER_H_
#define TANDEM_KERNELS_CUDA_POINTWISE_BATCHER_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codegen/pointwise_kernel.h"
#include "ir/graph.h"

namespace tandem::cuda {

class PointwiseBatcher {
 public:
  // Generates the kernel of each fused node of `graph` (kept by reference).
  explicit PointwiseBatcher(const Graph& graph);

  // Runs [first, last] among nodes [begin, end) over this iteration's
  // `addresses`; none while generated kernels or batching are off
  // (--codegen=false, TANDEM_PW_BATCH=0). `copies_after(i)`: an update
  // copy is due after node i.
  std::vector<std::pair<int, int>> Plan(int begin, int end, absl::Span<void* const> addresses,
                                        const std::function<bool(int)>& copies_after) const;

  // Nodes [first, last] (a run of Plan) as one launch of their kernel's
  // batch entry, skipped on the device when `*error_word` is set; false
  // when that entry is unavailable (the nodes then run one by one).
  absl::StatusOr<bool> Launch(int first, int last, absl::Span<void* const> addresses, const int64_t* error_word,
                              cudaStream_t stream) const;

 private:
  const Graph& graph_;
  std::vector<std::optional<codegen::GeneratedKernel>> kernels_;  // per node
  std::vector<std::string> names_;                                // per node; empty: no kernel
  bool any_ = false;
};

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_POINTWISE_BATCHER_H_
