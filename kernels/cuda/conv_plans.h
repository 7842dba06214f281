// The per-stream state of the convolution kernels (convolution_ops.cc):
// internals shared by convolution_ops.cc and conv_algorithms.cc, not for use
// elsewhere.
//
// Per stream (a CudaStream attachment): a cuDNN handle bound to the stream,
// a cache of plans keyed by dtype, geometry and math mode (descriptors plus
// the algorithm chosen for each direction, conv_algorithms.h), and the
// workspace.
// Choosing an algorithm and growing the workspace happen the first time a
// shape runs on a stream, which is an op-by-op run; an iteration being
// captured into a CUDA graph only finds cached plans and a large enough
// workspace (if not, the kernel fails with
// FAILED_PRECONDITION and the capture is abandoned). A grown workspace
// never frees the old buffer while the stream lives: graphs captured
// earlier on the stream may still use it.
#ifndef TANDEM_KERNELS_CUDA_CONV_PLANS_H_
#define TANDEM_KERNELS_CUDA_CONV_PLANS_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/cuda_stream.h"
#include "ir/dtype.h"
#include "ir/ops/cnn_rules.h"
#include "kernels/cuda/cudnn_engines.h"

namespace tandem::cuda::conv {

// `status` as a Status naming `call`: OK for success, RESOURCE_EXHAUSTED for
// CUDNN_STATUS_ALLOC_FAILED, UNIMPLEMENTED for CUDNN_STATUS_NOT_SUPPORTED,
// INTERNAL otherwise.
absl::Status CudnnStatus(cudnnStatus_t status, absl::string_view call);

// Returns CudnnStatus(...) naming the call from the enclosing function when a
// cuDNN call fails.
#define CUDNN_RETURN_IF_ERROR(call)                                                                                \
  do {                                                                                                             \
    const cudnnStatus_t tandem_cudnn_status_ = (call);                                                             \
    if (tandem_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                                            \
      return ::tandem::cuda::conv::CudnnStatus(tandem_cudnn_status_, ::tandem::device::internal::CallName(#call)); \
    }                                                                                                              \
  } while (0)

using Direction = ConvDirection;

// One direction's choice (conv_algorithms.h).
struct Algo {
  int algo = 0;  // the direction's cudnnConvolution*Algo_t
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace = 0;  // enough for the algorithm and for `engine`
  // A graph-API plan measured faster than the algorithm (cudnn_engines.h);
  // it runs when the call's pointers are 16-byte aligned, else the algorithm.
  std::shared_ptr<const EnginePlan> engine;
  // Chosen by the heuristics while other jobs had work on the device (no
  // search ran): chosen again, measured, at the stream's next run of the
  // convolution with the device to itself (conv_algorithms.cc).
  bool provisional = false;
};

using PlanKey = std::array<int64_t, 24>;

// Descriptors of one convolution and the algorithms chosen for it so far.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;  // the tensors' data type
  bool allow_tf32 = false;                  // float32 may use TF32 tensor cores
  bool deterministic = false;               // only algorithms whose results do not vary run to run
  ConvShape shape;                          // the same convolution for the graph API
  std::string dims;                         // "NxCxHxW" of x, for the debug log
  PlanKey key{};                            // what other streams' choices are found by
  std::optional<Algo> algos[3];             // by Direction

  ~ConvPlan() {
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    if (bias != nullptr) cudnnDestroyTensorDescriptor(bias);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
  }
};

// How a node asks its convolution to compute (its attributes).
struct MathMode {
  bool allow_tf32 = false;
  bool deterministic = false;
};

// The error of a convolution that needs `what` (a new plan, an algorithm
// choice, a larger workspace) while its stream is being captured:
// FAILED_PRECONDITION.
absl::Status CaptureMiss(absl::string_view what);

// A stream's cuDNN state.
class CudnnState final : public device::CudaStream::Attachment {
 public:
  // The stream's state, made (a handle bound to the stream) on first use.
  static absl::StatusOr<CudnnState*> For(device::CudaStream& stream);
  // The stream's state if it has one (nothing is made).
  static const CudnnState* Find(const device::CudaStream& stream);

  ~CudnnState() override;

  // A workspace for an algorithm search: the largest of `limit`, limit / 2,
  // ... down to kMinSearchWorkspaceBytes that can be had; its size in *bytes.
  absl::StatusOr<void*> SearchWorkspace(size_t limit, cudaStream_t stream, size_t* bytes);

  // A workspace of at least `bytes` (nullptr for 0). Growing allocates a new
  // buffer and keeps the old one until the stream is destroyed.
  absl::StatusOr<void*> Workspace(size_t bytes, cudaStream_t stream);

  cudnnHandle_t handle = nullptr;
  size_t workspace_limit = 0;                  // bytes; device::ConvWorkspaceLimitBytes() of the stream's device
  int device = 0;                              // the stream's device ordinal
  const device::CudaStream* stream = nullptr;  // the stream (which owns this state)
  int64_t provisional_made = 0;                // choices made here without a search (Algo::provisional)
  absl::flat_hash_map<PlanKey, std::unique_ptr<ConvPlan>> plans;

 private:
  std::vector<void*> workspaces_;  // the last is the current one
  size_t workspace_bytes_ = 0;
};

// Whether cuDNN's data type is one of the 16-bit types (bfloat16, float16).
bool IsHalfData(cudnnDataType_t data);

// The stream's plan for a convolution of `dtype`, geometry `g` and `mode`
// (TF32 only for float32 data): found in its cache, or made now (its
// descriptors; no algorithm chosen yet). Fails with FAILED_PRECONDITION for
// a new plan while `stream` is being captured, and with UNIMPLEMENTED for
// tensors of 2^31 elements or more.
absl::StatusOr<ConvPlan*> PlanFor(CudnnState& state, DType dtype, const ConvGeometry& g, MathMode mode,
                                  cudaStream_t stream);

// Host scaling factors in the compute type (cuDNN reads double for double
// data, float otherwise: float32 and the 16-bit types).
struct Scale {
  float f = 0.0f;
  double d = 0.0;
  const void* of(const ConvPlan& plan) const {
    return plan.type == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&d) : static_cast<const void*>(&f);
  }
};
inline constexpr Scale kOne{1.0f, 1.0};
inline constexpr Scale kZero{0.0f, 0.0};

}  // namespace tandem::cuda::conv

#endif  // TANDEM_KERNELS_CUDA_CONV_PLANS_H_
