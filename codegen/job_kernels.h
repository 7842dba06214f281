// A job's generated kernels at registration: every node the generator
// covers (today: fused_elementwise, codegen/pointwise_kernel.h) gets its
// kernel generated and compiled for each GPU architecture the daemon runs,
// through a KernelCache, so that the job's first iteration finds them
// compiled. Runs on the daemon's preparation thread, off the control loop.
#ifndef TANDEM_CODEGEN_JOB_KERNELS_H_
#define TANDEM_CODEGEN_JOB_KERNELS_H_

#include <string>
#include <vector>

#include "codegen/kernel_cache.h"
#include "ir/graph.h"

namespace tandem::codegen {

struct JobKernelsReport {
  int nodes = 0;            // nodes with a generated kernel
  int kernels = 0;          // distinct kernels among them (alike nodes share one)
  int compiled = 0;         // compiled now (the rest came from the cache)
  int failed = 0;           // did not compile: those nodes run the interpreter
  double seconds = 0.0;     // wall time of the whole preparation
  std::string first_error;  // the first failure's message, if any
};

// Whether the CUDA backend runs generated kernels for the nodes the
// generator covers (else its interpreting kernels). On by default; off
// when TANDEM_CODEGEN=0 is in the environment at the first call, or after
// SetGeneratedKernelsEnabled(false) (tandemd's --codegen=false).
bool GeneratedKernelsEnabled();
void SetGeneratedKernelsEnabled(bool enabled);

// Compiles at most `parallel` kernels at once.
JobKernelsReport PrepareJobKernels(const Graph& graph, const std::vector<CompileTarget>& targets, KernelCache& cache,
                                   int parallel = 4);

// The generated kernels of `graph`, one per node the generator covers (by
// node index), for tools and tests.
std::vector<std::pair<int, GeneratedKernel>> GenerateJobKernels(const Graph& graph);

}  // namespace tandem::codegen

#endif  // TANDEM_CODEGEN_JOB_KERNELS_H_
