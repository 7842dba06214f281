#include "kernels/cuda/pointwise_batcher.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "codegen/job_kernels.h"
#include "codegen/pointwise_batches.h"
#include "ir/ops/fused_program.h"
#include "kernels/cuda/generated_kernels.h"

namespace tandem::cuda {
namespace {

// Whether alike fused nodes run in batches: yes, unless TANDEM_PW_BATCH=0
// (for measuring what batching saves).
bool BatchingEnabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("TANDEM_PW_BATCH");
    return env == nullptr || std::string(env) != "0";
  }();
  return enabled;
}

}  // namespace

PointwiseBatcher::PointwiseBatcher(const Graph& graph)
    : graph_(graph), kernels_(graph.nodes.size()), names_(graph.nodes.size()) {
  for (int i = 0; i < static_cast<int>(graph_.nodes.size()); ++i) {
    if (graph_.nodes[i].op != kFusedElementwiseOp) continue;
    absl::StatusOr<codegen::PointwiseSpec> spec = codegen::PointwiseSpecOf(graph_, i);
    if (!spec.ok()) continue;
    kernels_[i] = codegen::GeneratePointwiseKernel(*spec);
    names_[i] = kernels_[i]->name;
    any_ = true;
  }
}

std::vector<std::pair<int, int>> PointwiseBatcher::Plan(int begin, int end, absl::Span<void* const> addresses,
                                                        const std::function<bool(int)>& copies_after) const {
  if (!any_ || !codegen::GeneratedKernelsEnabled() || !BatchingEnabled()) return {};
  return codegen::PlanPointwiseBatches(graph_, begin, end, names_, addresses, copies_after);
}

absl::StatusOr<bool> PointwiseBatcher::Launch(int first, int last, absl::Span<void* const> addresses,
                                              const int64_t* error_word, cudaStream_t stream) const {
  const codegen::GeneratedKernel& kernel = *kernels_[first];
  absl::StatusOr<cudaKernel_t> entry = LoadGeneratedKernel(kernel, codegen::BatchEntryName(kernel));
  if (!entry.ok()) return false;
  std::vector<codegen::PointwiseKernelArgs> segments(last - first + 1);
  for (int j = first; j <= last; ++j) {
    const Node& node = graph_.nodes[j];
    codegen::PointwiseKernelArgs& segment = segments[j - first];
    for (size_t k = 0; k < node.inputs.size(); ++k) segment.inputs[k] = addresses[node.inputs[k]];
    for (size_t o = 0; o < node.outputs.size(); ++o) segment.outputs[o] = addresses[node.outputs[o]];
    segment.n = graph_.values[node.outputs[0]].type.numel();
    segment.skip_if_error = error_word;
  }
  const DType dtype = graph_.values[graph_.nodes[first].outputs[0]].type.dtype;
  const cudaError_t e = LaunchPointwiseBatch(*entry, dtype, segments, stream);
  if (e != cudaSuccess) {
    return absl::InternalError(absl::StrCat(graph_.nodes[first].Describe(first), " to ",
                                            graph_.nodes[last].Describe(last),
                                            " (one batched launch): ", cudaGetErrorString(e)));
  }
  return true;
}

}  // namespace tandem::cuda
