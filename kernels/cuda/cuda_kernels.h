// The CUDA kernels of the ops, one per registered op, found by op name.
//
// A kernel enqueues its node's work on the context's stream and returns;
// it fails only for what it can see on the host (an unsupported dtype, a
// launch error). Bad data (a class label out of range) is found on the GPU:
// the kernel reports it through the context's error word (launch.h) and
// skips it, and the Program turns the word into INVALID_ARGUMENT when the
// iteration completes. Kernels allocate nothing and never synchronize, so
// every kernel can be captured into a CUDA graph.
//
// Thread-safety: kernels are stateless; the per-stream state they use (BLAS
// handles, workspace) belongs to the stream, which one thread uses at a time.
#ifndef TANDEM_KERNELS_CUDA_CUDA_KERNELS_H_
#define TANDEM_KERNELS_CUDA_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "device/cuda/cuda_stream.h"
#include "kernels/cuda/launch.h"
#include "kernels/kernel.h"

namespace tandem::cuda {

struct CudaKernelContext {
  device::CudaStream* stream = nullptr;
  cudaStream_t native = nullptr;  // stream->native()
  ErrorWord error;                // error.node is the running node's index
};

using CudaKernelFn = absl::Status (*)(const CudaKernelContext& context, const KernelArgs& args);

// nullptr when the op has no CUDA kernel.
CudaKernelFn FindCudaKernel(absl::string_view op);

// The op's warmer, or nullptr when its kernel sets up nothing costly per
// stream: called with a node's types (addresses may be null), it readies the
// context's stream for the kernel's first run there (Program::WarmStream)
// and enqueues nothing; true when it set something up, false when the
// stream was ready already.
using CudaWarmFn = absl::StatusOr<bool> (*)(const CudaKernelContext& context, const KernelArgs& args);
CudaWarmFn FindCudaWarmer(absl::string_view op);

// What the bad value `value` that `node`'s kernel reported through the error
// word means ("index 12000 is outside the rows [0, 10000) of weight"), for
// the indexing ops (indexing_ops.cc); the node's description is not included.
std::string DescribeBadIndex(const Graph& graph, const Node& node, int64_t value);

// How many convolution directions so far took their algorithm from another
// stream of the same device instead of searching (conv_algorithms.cc), how
// many of those also rebuilt the other stream's graph-API engine, how many
// found another stream's choice but not the workspace it needs (and
// searched), how many searched in all, how many took the heuristics' choice
// without a search because the stream's device was shared
// (device::Stream::device_shared), and how many of those were chosen again
// later with the device quiet.
struct ConvChoiceSharing {
  int64_t adopted = 0;
  int64_t with_engine = 0;
  int64_t declined = 0;
  int64_t searched = 0;
  int64_t provisional = 0;
  int64_t refined = 0;
};
ConvChoiceSharing ConvChoiceSharingForTesting();

// How many convolution directions have taken the heuristics' choice on
// `stream` because its device was shared (ConvChoiceSharing::provisional,
// for one stream): a Program whose op-by-op run made some runs op by op
// again, and captures again, at its first iteration there with the device
// quiet, so that its graph holds measured choices (cuda_program_graphs.cc).
int64_t ProvisionalConvChoicesMade(const device::CudaStream& stream);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_CUDA_KERNELS_H_
