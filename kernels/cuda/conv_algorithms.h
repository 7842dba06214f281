// How the convolution kernels (convolution_ops.cc) choose and run cuDNN's
// algorithm for each direction of a plan (conv_plans.h): internals, not for
// use elsewhere.
//
// The algorithm chosen for each direction is measured by cuDNN's search on
// the call's own tensors, cudnnFind*AlgorithmEx, keeping the fastest
// algorithm of the allowed math type (deterministic ones only when the
// node's `deterministic` attribute is true) that needs at most
// device::ConvWorkspaceLimitBytes() of workspace. While other jobs have work
// on the device (device::Stream::device_shared) cuDNN's heuristics,
// cudnnGet*Algorithm_v7, choose instead, and the search runs at the stream's
// next run of the convolution with the device to itself;
// TANDEM_CUDNN_ALGOS=heuristic takes the heuristics always, =search searches
// always (Mode in conv_algorithms.cc).
// A measured choice also times cuDNN's graph-API engines for the direction
// (cudnn_engines.h) against that algorithm and keeps an engine that beats
// it; the engine then runs whenever the call's pointers are 16-byte aligned.
// The streams of one device share their choices (SharedChoice in
// conv_algorithms.cc).
#ifndef TANDEM_KERNELS_CUDA_CONV_ALGORITHMS_H_
#define TANDEM_KERNELS_CUDA_CONV_ALGORITHMS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "kernels/cuda/conv_plans.h"

namespace tandem::cuda::conv {

// The operands of one convolution call: what a measured search runs on.
// `out` is the direction's output (y, dx or dw), which the search overwrites
// and the call then computes again.
struct ConvOperands {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* dy = nullptr;  // y for the forward
  void* out = nullptr;
};

// The choice another stream of the device made for `dir`, taken into the
// plan when `dir` has none yet and this stream can have the workspace it
// needs; otherwise the plan is left as it was. (Prepare and the warmers.)
absl::Status AdoptShared(CudnnState& state, ConvPlan& plan, Direction dir, cudaStream_t stream);

// Runs `dir` on the call's tensors: the algorithm chosen for it (chosen
// now if new), or its graph-API plan when it has one and the pointers allow.
absl::Status Run(CudnnState& state, ConvPlan& plan, Direction dir, cudaStream_t stream, const ConvOperands& op);

}  // namespace tandem::cuda::conv

#endif  // TANDEM_KERNELS_CUDA_CONV_ALGORITHMS_H_
