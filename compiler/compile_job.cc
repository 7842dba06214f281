#include "compiler/compile_job.h"

#include <utility>

#include "base/status_macros.h"
#include "compiler/channels_last.h"
#include "compiler/elide_copies.h"
#include "compiler/fold_activations.h"
#include "compiler/fold_transposes.h"
#include "compiler/fuse_elementwise.h"

namespace tandem {

absl::StatusOr<CompiledJob> CompileJob(const v1::RegisterJobRequest& request, const CompileOptions& options) {
  return CompileGraph(request.graph(), request.persistent(), options);
}

absl::StatusOr<CompiledJob> CompileGraph(const v1::Graph& graph,
                                         const google::protobuf::RepeatedPtrField<v1::Tensor>& persistent,
                                         const CompileOptions& options) {
  CompiledJob job;
  ASSIGN_OR_RETURN(job.graph, BuildGraph(graph, persistent, options.limits));
  if (options.elide_copies) {
    ASSIGN_OR_RETURN(job.graph, ElideCopies(job.graph));
  }
  if (options.fold_transposes) {
    ASSIGN_OR_RETURN(job.graph, FoldTransposes(job.graph));
  }
  if (options.channels_last) {
    ASSIGN_OR_RETURN(Graph last, ChannelsLast(job.graph));
    const double limit = options.channels_last_max_relayout_share;
    job.channels_last_relayout_share = ChannelsLastRelayoutShare(last);
    if (limit <= 0 || job.channels_last_relayout_share <= limit) job.graph = std::move(last);
  }
  if (options.fold_activations) {
    ASSIGN_OR_RETURN(job.graph, FoldActivations(job.graph, options.fold_residuals));
  }
  if (options.fuse_elementwise) {
    ASSIGN_OR_RETURN(job.graph, FuseElementwise(job.graph));
  }
  ASSIGN_OR_RETURN(job.layout, PlanIterationLayout(job.graph));
  return job;
}

}  // namespace tandem
