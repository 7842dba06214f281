// Registration is compilation: the one entry point from a job's wire form to
// what a device runs. CompileJob validates the client's graph (BuildGraph:
// every error a job can fail with names the client's own node), runs the
// graph passes over the IR, and plans one iteration's memory exactly.
//
// The passes, in order: needless copies removed (compiler/elide_copies.h),
// transposes folded into the products that read them
// (compiler/fold_transposes.h), a convolution network's activations stored
// channels-last for jobs on a GPU (compiler/channels_last.h), ReLUs and
// residual adds folded into the batch norms before them and the ReLUs'
// gradients into the batch-norm backward ops after them
// (compiler/fold_activations.h), then chains of elementwise nodes fused into
// one node each (compiler/fuse_elementwise.h). Each rewrites the graph
// through an IrBuilder, so every graph a pass produces is validated again.
//
// Thread-safe (a plain function); it runs on the daemon's preparation
// thread, off the control loop.
#ifndef TANDEM_COMPILER_COMPILE_JOB_H_
#define TANDEM_COMPILER_COMPILE_JOB_H_

#include "absl/status/statusor.h"
#include "compiler/iteration_layout.h"
#include "ir/graph.h"
#include "ir/graph_builder.h"
#include "tandem.pb.h"

namespace tandem {

struct CompileOptions {
  GraphLimits limits;
  bool elide_copies = true;
  bool fold_transposes = true;
  bool channels_last = false;  // the daemon's option channels_last (auto: jobs on CUDA devices)
  // With channels_last: keep the source graph where the rewrite's
  // ChannelsLastRelayoutShare is above this (auto); 0: no limit (true).
  double channels_last_max_relayout_share = 0;
  bool fold_activations = true;
  bool fold_residuals = true;  // with fold_activations: residual adds too (TANDEM_FOLD_RESIDUAL=0: not, to measure)
  bool fuse_elementwise = true;
};

struct CompiledJob {
  Graph graph;             // after every pass
  IterationLayout layout;  // where each ephemeral value lives in its lane's arena
  // With channels_last: the rewrite's ChannelsLastRelayoutShare, kept or
  // not (0 when the pass changed nothing).
  double channels_last_relayout_share = 0;
};

// INVALID_ARGUMENT for a graph a client may not register (unknown op, shape
// mismatch, ...: BuildGraph's messages); INTERNAL if a pass broke a graph.
absl::StatusOr<CompiledJob> CompileJob(const v1::RegisterJobRequest& request, const CompileOptions& options = {});
// The same for one graph over the job's persistent tensors `persistent`
// (a registration's variants: RegisterJobRequest.variants).
absl::StatusOr<CompiledJob> CompileGraph(const v1::Graph& graph,
                                         const google::protobuf::RepeatedPtrField<v1::Tensor>& persistent,
                                         const CompileOptions& options = {});

}  // namespace tandem

#endif  // TANDEM_COMPILER_COMPILE_JOB_H_
