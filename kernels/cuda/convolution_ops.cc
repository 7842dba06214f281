// CUDA kernels of convolution and convolution_backward through cuDNN's
// convolution API (cudnnConvolutionForward / BackwardData /
// BackwardFilter), NCHW (2-D) or NCDHW (3-D); the bias gradient is the
// reductions' channel sum.
//
// Numerics: float32 convolutions run with CUDNN_FMA_MATH, i.e. plain float32
// FMA kernels, unless the node's `allow_tf32` attribute is true; then cuDNN
// may also pick TF32 tensor-core algorithms (what PyTorch does under
// torch.backends.cudnn.allow_tf32, its default; the PyTorch adaptor copies
// that flag into every convolution node it lowers). float64 in float64.
// bfloat16 and float16 convolutions give cuDNN 16-bit tensors with a
// float32 compute type (CUDNN_DATA_FLOAT in the convolution descriptor:
// float32 accumulation, one rounding per stored value, as PyTorch
// configures them); cuDNN may pick tensor-core algorithms for them
// whatever `allow_tf32` says (that attribute concerns float32 data only),
// never a math type that converts the data to another precision. The bias
// is added by the 16-bit pointwise kernel after the convolution (the stored
// convolution rounds, then the sum rounds, as PyTorch's `output.add_(bias)`
// after cuDNN does), and the bias gradient is the 16-bit channel sum
// (float32 accumulation).
//
// Per stream (a CudaStream attachment): a cuDNN handle bound to the stream,
// a cache of plans keyed by dtype, geometry and math mode (descriptors plus
// the algorithm chosen for each direction: measured by cuDNN's search on the
// call's own tensors, cudnnFind*AlgorithmEx, keeping the fastest algorithm
// of the allowed math type (deterministic ones only when the node's
// `deterministic` attribute is true) that needs at most
// device::ConvWorkspaceLimitBytes() of workspace; TANDEM_CUDNN_ALGOS=heuristic takes
// cuDNN's heuristics, cudnnGet*Algorithm_v7, instead), and the workspace.
// A measured choice also times cuDNN's graph-API engines for the direction
// (cudnn_engines.h) against that algorithm and keeps an engine that beats
// it; the engine then runs whenever the call's pointers are 16-byte aligned.
// Choosing an algorithm and growing the workspace happen the first time a
// shape runs on a stream, which is an op-by-op run; an iteration being
// captured into a CUDA graph only finds cached plans and a large enough
// workspace (if not, the kernel fails with
// FAILED_PRECONDITION and the capture is abandoned). A grown workspace
// never frees the old buffer while the stream lives: graphs captured
// earlier on the stream may still use it.
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "device/conv_workspace.h"
#include "ir/ops/cnn_rules.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudnn_engines.h"
#include "kernels/cuda/device_choices.h"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/time_runs.h"

namespace tandem::cuda {
namespace {

// The most workspace one convolution may use (algorithms that need more are
// skipped) is device::ConvWorkspaceLimitBytes() of the stream's device (2
// GiB on an H200; TANDEM_CUDNN_WORKSPACE_MIB sets it). The search takes
// what the device can still give, halving down to kMinSearchWorkspaceBytes.
constexpr size_t kMinSearchWorkspaceBytes = size_t{64} << 20;

absl::Status CudnnStatus(cudnnStatus_t status, absl::string_view call) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = absl::StrCat(call, ": ", cudnnGetErrorString(status));
  if (status == CUDNN_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  if (status == CUDNN_STATUS_NOT_SUPPORTED) return absl::UnimplementedError(message);
  return absl::InternalError(message);
}

#define CUDNN_RETURN_IF_ERROR(call)                                                          \
  do {                                                                                       \
    const cudnnStatus_t tandem_cudnn_status_ = (call);                                       \
    if (tandem_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                      \
      return CudnnStatus(tandem_cudnn_status_, ::tandem::device::internal::CallName(#call)); \
    }                                                                                        \
  } while (0)

using Direction = ConvDirection;

struct Algo {
  int algo = 0;  // the direction's cudnnConvolution*Algo_t
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace = 0;  // enough for the algorithm and for `engine`
  // A graph-API plan measured faster than the algorithm (cudnn_engines.h);
  // it runs when the call's pointers are 16-byte aligned, else the algorithm.
  std::shared_ptr<const EnginePlan> engine;
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

// Every entry of the geometry (unused spatial entries are 1, 0, 1 alike in
// every key), the dtype and the math mode.
PlanKey KeyOf(DType dtype, const ConvGeometry& g, const MathMode& mode) {
  const ConvParams& p = g.params;
  return {static_cast<int64_t>(dtype),
          g.spatial,
          g.n,
          g.c,
          g.in[0],
          g.in[1],
          g.in[2],
          g.o,
          g.k[0],
          g.k[1],
          g.k[2],
          p.stride[0],
          p.stride[1],
          p.stride[2],
          p.padding[0],
          p.padding[1],
          p.padding[2],
          p.dilation[0],
          p.dilation[1],
          p.dilation[2],
          p.groups,
          mode.allow_tf32 ? 1 : 0,
          mode.deterministic ? 1 : 0,
          0};
}

absl::Status CaptureMiss(absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat(
      "convolution: ", what, " while the stream is being captured; the iteration must run op by op first"));
}

// A stream's cuDNN state.
class CudnnState final : public device::CudaStream::Attachment {
 public:
  static absl::StatusOr<CudnnState*> For(device::CudaStream& stream) {
    static const char kKey = 0;
    if (auto* state = static_cast<CudnnState*>(stream.attachment(&kKey))) return state;
    auto state = std::make_unique<CudnnState>();
    CUDA_RETURN_IF_ERROR(cudaSetDevice(stream.ordinal()));
    CUDNN_RETURN_IF_ERROR(cudnnCreate(&state->handle));
    CUDNN_RETURN_IF_ERROR(cudnnSetStream(state->handle, stream.native()));
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    state->workspace_limit = static_cast<size_t>(device::ConvWorkspaceLimitBytes(total_bytes));
    state->device = stream.ordinal();
    CudnnState* raw = state.get();
    stream.Attach(&kKey, std::move(state));
    return raw;
  }

  ~CudnnState() override {
    for (void* p : workspaces_) cudaFree(p);
    if (handle != nullptr) cudnnDestroy(handle);
  }

  // A workspace of at least `bytes` (nullptr for 0). Growing allocates a new
  // buffer and keeps the old one until the stream is destroyed.
  // A workspace for an algorithm search: the largest of `limit`, limit / 2,
  // ... down to kMinSearchWorkspaceBytes that can be had; its size in *bytes.
  absl::StatusOr<void*> SearchWorkspace(size_t limit, cudaStream_t stream, size_t* bytes) {
    for (size_t want = limit;; want /= 2) {
      auto workspace = Workspace(want, stream);
      if (workspace.ok() || want / 2 < kMinSearchWorkspaceBytes) {
        *bytes = want;
        return workspace;
      }
    }
  }

  absl::StatusOr<void*> Workspace(size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return static_cast<void*>(nullptr);
    if (bytes <= workspace_bytes_) return workspaces_.back();
    if (Capturing(stream)) return CaptureMiss("the workspace must grow");
    const size_t rounded = (bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);
    void* p = nullptr;
    if (const cudaError_t error = cudaMalloc(&p, rounded); error != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky; leave none behind
      return device::CudaStatus(error, "cudaMalloc (cuDNN workspace)");
    }
    workspaces_.push_back(p);
    workspace_bytes_ = rounded;
    return p;
  }

  cudnnHandle_t handle = nullptr;
  size_t workspace_limit = 0;  // bytes; device::ConvWorkspaceLimitBytes() of the stream's device
  int device = 0;              // the stream's device ordinal
  absl::flat_hash_map<PlanKey, std::unique_ptr<ConvPlan>> plans;

 private:
  std::vector<void*> workspaces_;  // the last is the current one
  size_t workspace_bytes_ = 0;
};

absl::Status RequireInt(const Shape& shape, absl::string_view what) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (NumElements(shape) < kLimit) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat("convolution: ", what, " ", ShapeString(shape),
                                               " has 2^31 or more elements, past cuDNN's 32-bit limit"));
}

// cuDNN's data type for the tensors of `dtype`, and the compute type of its
// convolutions: float32 for the 16-bit types (PyTorch's choice), the data
// type otherwise.
cudnnDataType_t CudnnDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return CUDNN_DATA_DOUBLE;
    case DType::kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    case DType::kFloat16:
      return CUDNN_DATA_HALF;
    default:
      return CUDNN_DATA_FLOAT;
  }
}
cudnnDataType_t ComputeType(cudnnDataType_t data) { return data == CUDNN_DATA_DOUBLE ? data : CUDNN_DATA_FLOAT; }
bool IsHalfData(cudnnDataType_t data) { return data == CUDNN_DATA_BFLOAT16 || data == CUDNN_DATA_HALF; }

absl::StatusOr<ConvPlan*> PlanFor(CudnnState& state, DType dtype, const ConvGeometry& g, MathMode mode,
                                  cudaStream_t stream) {
  mode.allow_tf32 = mode.allow_tf32 && dtype == DType::kFloat32;
  const bool allow_tf32 = mode.allow_tf32;
  const PlanKey key = KeyOf(dtype, g, mode);
  auto it = state.plans.find(key);
  if (it != state.plans.end()) return it->second.get();
  if (Capturing(stream)) return CaptureMiss("a new convolution shape");
  RETURN_IF_ERROR(RequireInt(g.input_shape(), "input"));
  RETURN_IF_ERROR(RequireInt(g.output_shape(), "output"));
  auto plan = std::make_unique<ConvPlan>();
  plan->type = CudnnDataType(dtype);
  plan->allow_tf32 = allow_tf32;
  plan->deterministic = mode.deterministic;
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  const ConvParams& p = g.params;
  CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&plan->x));
  CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&plan->y));
  CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&plan->bias));
  CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&plan->w));
  CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&plan->conv));
  const Shape x_dims = g.input_shape(), w_dims = g.weight_shape(), y_dims = g.output_shape();
  const int rank = g.spatial + 2;
  if (g.spatial == 2) {
    CUDNN_RETURN_IF_ERROR(
        cudnnSetTensor4dDescriptor(plan->x, CUDNN_TENSOR_NCHW, plan->type, i(g.n), i(g.c), i(g.in[0]), i(g.in[1])));
    CUDNN_RETURN_IF_ERROR(
        cudnnSetTensor4dDescriptor(plan->y, CUDNN_TENSOR_NCHW, plan->type, i(g.n), i(g.o), i(g.out[0]), i(g.out[1])));
    CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(plan->bias, CUDNN_TENSOR_NCHW, plan->type, 1, i(g.o), 1, 1));
    CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(plan->w, plan->type, CUDNN_TENSOR_NCHW, i(g.o), i(g.c / p.groups),
                                                     i(g.k[0]), i(g.k[1])));
  } else {
    // NCDHW: cuDNN's Nd descriptors with packed strides.
    const auto set_tensor = [&](cudnnTensorDescriptor_t desc, const Shape& dims) {
      int d[5], strides[5];
      int64_t stride = 1;
      for (int k = rank - 1; k >= 0; --k) {
        d[k] = i(dims[k]);
        strides[k] = i(stride);
        stride *= dims[k];
      }
      return cudnnSetTensorNdDescriptor(desc, plan->type, rank, d, strides);
    };
    CUDNN_RETURN_IF_ERROR(set_tensor(plan->x, x_dims));
    CUDNN_RETURN_IF_ERROR(set_tensor(plan->y, y_dims));
    CUDNN_RETURN_IF_ERROR(set_tensor(plan->bias, Shape{1, g.o, 1, 1, 1}));
    int filter[5];
    for (int k = 0; k < rank; ++k) filter[k] = i(w_dims[k]);
    CUDNN_RETURN_IF_ERROR(cudnnSetFilterNdDescriptor(plan->w, plan->type, CUDNN_TENSOR_NCHW, rank, filter));
  }
  if (g.spatial == 2) {
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(plan->conv, i(p.padding[0]), i(p.padding[1]), i(p.stride[0]),
                                                          i(p.stride[1]), i(p.dilation[0]), i(p.dilation[1]),
                                                          CUDNN_CROSS_CORRELATION, ComputeType(plan->type)));
  } else {
    int pad[3], stride[3], dilation[3];
    for (int d = 0; d < 3; ++d) {
      pad[d] = i(p.padding[d]);
      stride[d] = i(p.stride[d]);
      dilation[d] = i(p.dilation[d]);
    }
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionNdDescriptor(plan->conv, 3, pad, stride, dilation, CUDNN_CROSS_CORRELATION,
                                                          ComputeType(plan->type)));
  }
  CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionGroupCount(plan->conv, i(p.groups)));
  // The heuristics and the search only offer algorithms of the descriptor's
  // math type: tensor-op math (TF32 for float32 data, no conversion to half)
  // where the plan allows it, and always for 16-bit data.
  CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(
      plan->conv, allow_tf32 || IsHalfData(plan->type) ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  int dims[5] = {};
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionNdForwardOutputDim(plan->conv, plan->x, plan->w, rank, dims));
  if (!std::equal(y_dims.begin(), y_dims.end(), dims)) {
    return absl::InternalError(absl::StrCat("convolution: cuDNN's output [", absl::StrJoin(dims, dims + rank, ", "),
                                            "] differs from ", ShapeString(y_dims)));
  }
  ConvShape& shape = plan->shape;
  shape.data = plan->type;
  shape.compute = ComputeType(plan->type);
  shape.spatial = g.spatial;
  std::copy(x_dims.begin(), x_dims.end(), shape.x);
  std::copy(w_dims.begin(), w_dims.end(), shape.w);
  std::copy(y_dims.begin(), y_dims.end(), shape.y);
  for (int d = 0; d < g.spatial; ++d) {
    shape.padding[d] = p.padding[d];
    shape.stride[d] = p.stride[d];
    shape.dilation[d] = p.dilation[d];
  }
  plan->dims = absl::StrJoin(x_dims, "x");
  plan->key = key;
  ConvPlan* raw = plan.get();
  state.plans.emplace(key, std::move(plan));
  // One line per plan and stream (a stream's first use of a shape), for
  // reading which streams chose or took which choices at --log_level=debug.
  TLOG_DEBUG("cuDNN convolution plan made")
      .With("stream", absl::StrFormat("%p", static_cast<void*>(stream)))
      .With("plan", absl::StrFormat("%p", static_cast<void*>(raw)))
      .With("x", raw->dims)
      .With("w", absl::StrJoin(w_dims, "x"))
      .With("data_type", static_cast<int>(raw->type));
  return raw;
}

// Whether a heuristic result may be used: float32 without TF32 unless the
// plan allows it, and never with a conversion to another precision (16-bit
// data take any other math type: their tensor-core kernels accumulate in
// the float32 compute type).
bool MathAllowed(const ConvPlan& plan, cudnnMathType_t math) {
  if (math == CUDNN_FMA_MATH) return true;
  if (IsHalfData(plan.type)) return math == CUDNN_DEFAULT_MATH || math == CUDNN_TENSOR_OP_MATH;
  if (plan.type != CUDNN_DATA_FLOAT) return true;
  return plan.allow_tf32 && (math == CUDNN_DEFAULT_MATH || math == CUDNN_TENSOR_OP_MATH);
}

// One algorithm cuDNN offers for a direction, best first.
struct Candidate {
  int algo;
  cudnnStatus_t status;
  size_t memory;
  cudnnMathType_t math;
  bool deterministic = true;
  float ms = -1.0f;  // the search's measured time (-1: a heuristic candidate)
};

// The operands of one convolution call: what a measured search runs on.
// `out` is the direction's output (y, dx or dw), which the search overwrites
// and the call then computes again.
struct ConvOperands {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* dy = nullptr;  // y for the forward
  void* out = nullptr;
};

// How algorithms are chosen: measured by default (cuDNN runs each candidate
// on the call's own tensors, the first time a shape runs on a stream: what
// PyTorch does under cudnn.benchmark), or by cuDNN's heuristics alone with
// TANDEM_CUDNN_ALGOS=heuristic in the daemon's environment.
bool MeasureAlgorithms() {
  static const bool measure = !EnvIs("TANDEM_CUDNN_ALGOS", "heuristic");
  return measure;
}

template <typename Perf>
void AppendPerf(const std::vector<Perf>& perf, int returned, std::vector<Candidate>* out) {
  for (int k = 0; k < returned; ++k) {
    out->push_back({static_cast<int>(perf[k].algo), perf[k].status, perf[k].memory, perf[k].mathType,
                    perf[k].determinism == CUDNN_DETERMINISTIC, perf[k].time});
  }
}

// cuDNN's search: every algorithm within `workspace_bytes` of workspace run
// once on the operands, fastest first.
absl::StatusOr<std::vector<Candidate>> MeasuredCandidates(CudnnState& state, const ConvPlan& plan, Direction dir,
                                                          const ConvOperands& op, void* workspace,
                                                          size_t workspace_bytes) {
  std::vector<Candidate> out;
  int max_count = 0, returned = 0;
  switch (dir) {
    case Direction::kForward: {
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithmMaxCount(state.handle, &max_count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(max_count));
      CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionForwardAlgorithmEx(state.handle, plan.x, op.x, plan.w, op.w, plan.conv,
                                                                   plan.y, op.out, max_count, &returned, perf.data(),
                                                                   workspace, workspace_bytes));
      AppendPerf(perf, returned, &out);
      break;
    }
    case Direction::kBackwardData: {
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(state.handle, &max_count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(max_count));
      CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionBackwardDataAlgorithmEx(state.handle, plan.w, op.w, plan.y, op.dy,
                                                                        plan.conv, plan.x, op.out, max_count, &returned,
                                                                        perf.data(), workspace, workspace_bytes));
      AppendPerf(perf, returned, &out);
      break;
    }
    case Direction::kBackwardFilter: {
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(state.handle, &max_count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(max_count));
      CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          state.handle, plan.x, op.x, plan.y, op.dy, plan.conv, plan.w, op.out, max_count, &returned, perf.data(),
          workspace, workspace_bytes));
      AppendPerf(perf, returned, &out);
      break;
    }
  }
  return out;
}

// The heuristics' results for `dir`, best first (not timed).
absl::StatusOr<std::vector<Candidate>> Candidates(CudnnState& state, const ConvPlan& plan, Direction dir) {
  std::vector<Candidate> out;
  int max_count = 0, returned = 0;
  switch (dir) {
    case Direction::kForward: {
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithmMaxCount(state.handle, &max_count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(max_count));
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(state.handle, plan.x, plan.w, plan.conv, plan.y,
                                                                   max_count, &returned, perf.data()));
      AppendPerf(perf, returned, &out);
      break;
    }
    case Direction::kBackwardData: {
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(state.handle, &max_count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(max_count));
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(state.handle, plan.w, plan.y, plan.conv, plan.x,
                                                                        max_count, &returned, perf.data()));
      AppendPerf(perf, returned, &out);
      break;
    }
    case Direction::kBackwardFilter: {
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(state.handle, &max_count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(max_count));
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(state.handle, plan.x, plan.y, plan.conv,
                                                                          plan.w, max_count, &returned, perf.data()));
      AppendPerf(perf, returned, &out);
      break;
    }
  }
  return out;
}

// The workspace `algo` needs with the plan's descriptor set to `math`.
cudnnStatus_t WorkspaceSize(CudnnState& state, const ConvPlan& plan, Direction dir, int algo, size_t* bytes) {
  switch (dir) {
    case Direction::kForward:
      return cudnnGetConvolutionForwardWorkspaceSize(state.handle, plan.x, plan.w, plan.conv, plan.y,
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
    case Direction::kBackwardData:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(state.handle, plan.w, plan.y, plan.conv, plan.x,
                                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
    case Direction::kBackwardFilter:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(state.handle, plan.x, plan.y, plan.conv, plan.w,
                                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

const char* DirectionName(Direction dir) {
  switch (dir) {
    case Direction::kForward:
      return "forward";
    case Direction::kBackwardData:
      return "backward data";
    case Direction::kBackwardFilter:
      return "backward filter";
  }
  return "?";
}

// Host scaling factors in the compute type (cuDNN reads double for double
// data, float otherwise: float32 and the 16-bit types).
struct Scale {
  float f = 0.0f;
  double d = 0.0;
  const void* of(const ConvPlan& plan) const {
    return plan.type == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&d) : static_cast<const void*>(&f);
  }
};
constexpr Scale kOne{1.0f, 1.0};
constexpr Scale kZero{0.0f, 0.0};

// The call's tensors as the convolution's x, w and y (whichever of them the
// direction writes).
struct ConvTensors {
  const void* x;
  const void* w;
  const void* y;
};
ConvTensors TensorsOf(Direction dir, const ConvOperands& op) {
  switch (dir) {
    case Direction::kForward:
      return {op.x, op.w, op.out};
    case Direction::kBackwardData:
      return {op.out, op.w, op.dy};
    case Direction::kBackwardFilter:
      return {op.x, op.out, op.dy};
  }
  return {};
}

// Runs `dir` with the algorithm, or with its graph-API plan when `engine`
// (the descriptor's math type must be set for the algorithm).
cudnnStatus_t RunDirection(cudnnHandle_t handle, const ConvPlan& plan, Direction dir, const Algo& algo, bool engine,
                           const ConvOperands& op, void* workspace) {
  const ConvTensors t = TensorsOf(dir, op);
  if (engine) return algo.engine->Run(handle, t.x, t.w, t.y, workspace);
  switch (dir) {
    case Direction::kForward:
      return cudnnConvolutionForward(handle, kOne.of(plan), plan.x, t.x, plan.w, t.w, plan.conv,
                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo.algo), workspace, algo.workspace,
                                     kZero.of(plan), plan.y, const_cast<void*>(t.y));
    case Direction::kBackwardData:
      return cudnnConvolutionBackwardData(handle, kOne.of(plan), plan.w, t.w, plan.y, t.y, plan.conv,
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo.algo), workspace,
                                          algo.workspace, kZero.of(plan), plan.x, const_cast<void*>(t.x));
    case Direction::kBackwardFilter:
      return cudnnConvolutionBackwardFilter(handle, kOne.of(plan), plan.x, t.x, plan.y, t.y, plan.conv,
                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo.algo), workspace,
                                            algo.workspace, kZero.of(plan), plan.w, const_cast<void*>(t.w));
  }
  return CUDNN_STATUS_BAD_PARAM;
}

bool CallAligned(Direction dir, const ConvOperands& op) {
  const ConvTensors t = TensorsOf(dir, op);
  for (const void* p : {t.x, t.w, t.y}) {
    if ((reinterpret_cast<uintptr_t>(p) & 15) != 0) return false;
  }
  return true;
}

// Whether convolutions also try the graph API's engines (on by default;
// TANDEM_CUDNN_ENGINES=0 in the daemon's environment keeps to the
// convolution API's algorithms). Only with measured choices.
bool TryGraphEngines() {
  static const bool engines = !EnvIs("TANDEM_CUDNN_ENGINES", "0");
  return engines && MeasureAlgorithms();
}

// Which engines a plan's node allows, within `limit` bytes of workspace.
EngineFilter FilterFor(const ConvPlan& plan, size_t limit) {
  EngineFilter filter;
  // Read once, as the other switches are.
  static const bool fallback = std::getenv("TANDEM_CUDNN_FALLBACK_ENGINES") != nullptr;
  filter.fallback = fallback;
  filter.allow_tf32 = plan.allow_tf32;
  filter.deterministic = plan.deterministic;
  filter.max_workspace = limit;
  return filter;
}

// The graph API's engines for `dir` timed against the chosen algorithm on
// the call's tensors; the fastest engine is kept in `algo` when it beats the
// algorithm by more than 3%. Nothing changes when no engine builds, runs,
// or fits the workspace.
void TryEngines(CudnnState& state, ConvPlan& plan, Direction dir, cudaStream_t stream, const ConvOperands& op,
                size_t limit, Algo* algo, int* position) {
  *position = -1;
  if (!TryGraphEngines() || !CallAligned(dir, op)) return;
  const absl::Time search_start = absl::Now();
  const EngineFilter filter = FilterFor(plan, limit);
  EngineSearchStats stats;
  absl::StatusOr<std::vector<std::unique_ptr<EnginePlan>>> plans =
      ConvEnginePlans(state.handle, dir, plan.shape, filter, &stats);
  if (!plans.ok() || plans->empty()) {
    TLOG_DEBUG("cuDNN graph API: no engine")
        .With("direction", DirectionName(dir))
        .With("why", plans.ok() ? std::string("none built") : std::string(plans.status().message()));
    return;
  }
  size_t need = algo->workspace;
  for (const auto& p : *plans) need = std::max(need, p->workspace());
  absl::StatusOr<void*> workspace = state.Workspace(need, stream);
  if (!workspace.ok()) return;
  const auto runs = [&](const Algo& a, bool engine) {
    return RunDirection(state.handle, plan, dir, a, engine, op, *workspace) == CUDNN_STATUS_SUCCESS;
  };
  const float algo_ms = TimeRuns(stream, [&] { return runs(*algo, false); });
  if (algo_ms < 0) return;
  const float give_up_ms = GiveUpMs(algo_ms);
  std::unique_ptr<EnginePlan>* best = nullptr;
  float best_ms = algo_ms * 0.97f;
  Algo trial = *algo;
  for (auto& p : *plans) {
    trial.engine = std::shared_ptr<const EnginePlan>(p.get(), [](const EnginePlan*) {});
    const float ms = TimeRuns(
        stream, [&] { return runs(trial, true); }, give_up_ms);
    if (ms >= 0 && ms < best_ms) {
      best_ms = ms;
      best = &p;
    }
  }
  TLOG_DEBUG("cuDNN graph API engines timed")
      .With("direction", DirectionName(dir))
      .With("engines", plans->size())
      .With("looked_at", absl::StrCat(stats.configs, " configs: ", stats.refused_notes, " refused for notes, ",
                                      stats.not_built, " not built, ", stats.over_workspace, " over workspace"))
      .With("algorithm_ms", algo_ms)
      .With("search_ms", absl::ToDoubleMilliseconds(absl::Now() - search_start))
      .With("chosen", best != nullptr ? absl::StrCat("engine ", (*best)->engine_index(), " ", best_ms, " ms")
                                      : std::string("the algorithm"));
  if (best == nullptr) return;
  *position = static_cast<int>(best - plans->data());
  algo->workspace = std::max(algo->workspace, (*best)->workspace());
  algo->engine = std::shared_ptr<const EnginePlan>(std::move(*best));
}

// A direction's choice, shared by the streams of one device (process-wide):
// the first stream to meet a convolution searches (cudnnFind, the engines'
// timing: 0.8 s of ResNet-50's first iteration on an H200), the others take
// its result, building only the chosen engine's plan on their own handle.
// TANDEM_CUDNN_SHARE_CHOICES=0 in the daemon's environment searches per
// stream.
struct SharedChoice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace = 0;       // the algorithm's, and the engine's when there is one
  int engine_position = -1;   // in ConvEnginePlans' list; -1: the algorithm
  int64_t engine_index = -1;  // its global index, checked when the plan is rebuilt
};

// By device, the convolution (plan key) and direction.
using SharedChoices = DeviceChoices<std::pair<PlanKey, int>, SharedChoice>;

SharedChoices& DeviceConvChoices() {
  static SharedChoices* const choices = new SharedChoices;
  return *choices;
}

bool ShareChoices() {
  static const bool enabled = !EnvIs("TANDEM_CUDNN_SHARE_CHOICES", "0");
  return enabled && MeasureAlgorithms();
}

std::atomic<int64_t> g_adopted{0};
std::atomic<int64_t> g_adopted_with_engine{0};
std::atomic<int64_t> g_declined{0};  // a choice existed, its workspace could not be had here
std::atomic<int64_t> g_searched{0};  // directions searched on a stream

// Takes another stream's choice for `dir`: its algorithm, and its engine's
// plan rebuilt on this stream's handle when the choice had one and the
// heuristics list the same engine at the same place (otherwise the
// algorithm runs). Every adoption is counted and logged, with or without
// an engine.
Algo AdoptChoice(CudnnState& state, ConvPlan& plan, Direction dir, const SharedChoice& shared) {
  Algo algo{shared.algo, shared.math, shared.workspace};
  if (shared.engine_position >= 0 && TryGraphEngines()) {
    EngineFilter filter = FilterFor(plan, state.workspace_limit);
    filter.max_plans = shared.engine_position + 1;
    absl::StatusOr<std::vector<std::unique_ptr<EnginePlan>>> plans =
        ConvEnginePlans(state.handle, dir, plan.shape, filter);
    const size_t at = static_cast<size_t>(shared.engine_position);
    if (plans.ok() && plans->size() > at && (*plans)[at]->engine_index() == shared.engine_index) {
      algo.engine = std::shared_ptr<const EnginePlan>(std::move((*plans)[at]));
    }
  }
  g_adopted.fetch_add(1);
  if (algo.engine != nullptr) g_adopted_with_engine.fetch_add(1);
  TLOG_DEBUG("cuDNN choice taken from another stream")
      .With("plan", absl::StrFormat("%p", static_cast<void*>(&plan)))
      .With("direction", DirectionName(dir))
      .With("algorithm", shared.algo)
      .With("engine", algo.engine != nullptr ? absl::StrCat(shared.engine_index) : std::string("none"));
  return algo;
}

// One debug line per choice (`tandemd --log_level=debug`, `op_bench
// --log_level=debug`): the chosen algorithm and the search's fastest three,
// as algo/math/ms/MiB, to compare with what other libraries pick.
void LogChoice(const ConvPlan& plan, Direction dir, const Candidate& chosen, const std::vector<Candidate>& candidates) {
  if (MinLogLevel() > LogLevel::kDebug) return;
  const auto describe = [](const Candidate& c) {
    return absl::StrCat(c.algo, "/", static_cast<int>(c.math), "/", c.ms, "/", c.memory >> 20);
  };
  std::string measured;
  int listed = 0;
  for (const Candidate& c : candidates) {
    if (c.ms < 0 || c.status != CUDNN_STATUS_SUCCESS || listed == 3) continue;
    absl::StrAppend(&measured, listed++ == 0 ? "" : " ", describe(c));
  }
  TLOG_DEBUG("cuDNN algorithm chosen")
      .With("plan", absl::StrFormat("%p", static_cast<const void*>(&plan)))
      .With("direction", DirectionName(dir))
      .With("data_type", static_cast<int>(plan.type))
      .With("x", plan.dims)
      .With("chosen", describe(chosen))
      .With("fastest", measured);
}

// The key of `dir`'s choice in DeviceConvChoices.
std::pair<PlanKey, int> SharedKey(const ConvPlan& plan, Direction dir) { return {plan.key, static_cast<int>(dir)}; }

// The choice another stream of the device made for `dir`, taken into the
// plan when `dir` has none yet and this stream can have the workspace it
// needs; otherwise the plan is left as it was. (Prepare and the warmers.)
absl::Status AdoptShared(CudnnState& state, ConvPlan& plan, Direction dir, cudaStream_t stream) {
  std::optional<Algo>& slot = plan.algos[static_cast<int>(dir)];
  if (slot.has_value() || !ShareChoices()) return absl::OkStatus();
  std::optional<SharedChoice> shared = DeviceConvChoices().Find(state.device, SharedKey(plan, dir));
  if (!shared.has_value() || shared->workspace > state.workspace_limit) return absl::OkStatus();
  if (Capturing(stream)) return CaptureMiss("a new algorithm choice");
  // The workspace this stream's own search would have taken (the one size
  // it keeps; the daemon's reserve counts it per lane). When the device
  // cannot give the choice's share of it, search here instead.
  size_t bytes = 0;
  const absl::StatusOr<void*> space = state.SearchWorkspace(state.workspace_limit, stream, &bytes);
  if (space.ok() && bytes >= shared->workspace) {
    slot = AdoptChoice(state, plan, dir, *shared);
  } else {
    g_declined.fetch_add(1);
  }
  return absl::OkStatus();
}

// The plan's algorithm for `dir` (chosen now if new: measured on `op`, or by
// the heuristics), with the descriptor's math type set for it, and a
// workspace large enough for it. A deterministic plan keeps to algorithms
// whose results do not vary from run to run (PyTorch's
// cudnn.deterministic); otherwise any algorithm may be chosen, as in
// PyTorch by default.
absl::StatusOr<Algo> Prepare(CudnnState& state, ConvPlan& plan, Direction dir, cudaStream_t stream,
                             const ConvOperands& op, void** workspace) {
  std::optional<Algo>& slot = plan.algos[static_cast<int>(dir)];
  RETURN_IF_ERROR(AdoptShared(state, plan, dir, stream));
  if (!slot.has_value()) {
    if (Capturing(stream)) return CaptureMiss("a new algorithm choice");
    g_searched.fetch_add(1);
    std::vector<Candidate> candidates;
    size_t limit = state.workspace_limit;
    if (MeasureAlgorithms()) {
      size_t search_bytes = 0;
      ASSIGN_OR_RETURN(void* search_space, state.SearchWorkspace(limit, stream, &search_bytes));
      limit = search_bytes;
      ASSIGN_OR_RETURN(candidates, MeasuredCandidates(state, plan, dir, op, search_space, search_bytes));
    }
    ASSIGN_OR_RETURN(std::vector<Candidate> heuristic, Candidates(state, plan, dir));
    for (Candidate& c : heuristic) c.ms = -1.0f;
    candidates.insert(candidates.end(), heuristic.begin(), heuristic.end());
    for (const Candidate& c : candidates) {
      if (c.status != CUDNN_STATUS_SUCCESS || !MathAllowed(plan, c.math)) continue;
      if (plan.deterministic && !c.deterministic) continue;
      CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(plan.conv, c.math));
      size_t bytes = 0;
      if (WorkspaceSize(state, plan, dir, c.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
      if (bytes > limit) continue;
      slot = Algo{c.algo, c.math, bytes};
      LogChoice(plan, dir, c, candidates);
      int position = -1;
      TryEngines(state, plan, dir, stream, op, limit, &*slot, &position);
      if (ShareChoices()) {
        DeviceConvChoices().Put(state.device, SharedKey(plan, dir),
                                {slot->algo, slot->math, slot->workspace, position,
                                 slot->engine != nullptr ? slot->engine->engine_index() : -1});
      }
      break;
    }
    if (!slot.has_value()) {
      return absl::UnimplementedError(
          absl::StrCat("convolution: cuDNN offers no ", DirectionName(dir),
                       plan.allow_tf32 || IsHalfData(plan.type) ? " algorithm" : " algorithm without TF32", " within ",
                       limit >> 20, " MiB of workspace"));
    }
  }
  CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(plan.conv, slot->math));
  ASSIGN_OR_RETURN(*workspace, state.Workspace(slot->workspace, stream));
  return *slot;
}

// Runs `dir` on the call's tensors: the algorithm chosen for it (chosen
// now if new), or its graph-API plan when it has one and the pointers allow.
absl::Status Run(CudnnState& state, ConvPlan& plan, Direction dir, cudaStream_t stream, const ConvOperands& op) {
  void* workspace = nullptr;
  ASSIGN_OR_RETURN(Algo algo, Prepare(state, plan, dir, stream, op, &workspace));
  const bool engine = algo.engine != nullptr && CallAligned(dir, op);
  const cudnnStatus_t status = RunDirection(state.handle, plan, dir, algo, engine, op, workspace);
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return CudnnStatus(status, engine ? absl::StrCat("cudnnBackendExecute (convolution ", DirectionName(dir), ")")
                                    : absl::StrCat("cudnnConvolution (", DirectionName(dir), ")"));
}

struct Setup {
  CudnnState* state = nullptr;
  ConvPlan* plan = nullptr;
};

absl::StatusOr<Setup> SetUp(const CudaKernelContext& context, const KernelArgs& args, const TensorArg& input,
                            const TensorArg& weight, ConvGeometry* geometry) {
  const DType dtype = input.type.dtype;
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64 && dtype != DType::kBFloat16 && dtype != DType::kFloat16) {
    return UnsupportedDType(args, dtype);
  }
  ASSIGN_OR_RETURN(*geometry, ParseConvGeometry(args.node->attrs, input.type.shape, weight.type.shape));
  MathMode mode;
  ASSIGN_OR_RETURN(mode.allow_tf32, args.node->attrs.GetBool("allow_tf32", false));
  ASSIGN_OR_RETURN(mode.deterministic, args.node->attrs.GetBool("deterministic", false));
  Setup s;
  ASSIGN_OR_RETURN(s.state, CudnnState::For(*context.stream));
  ASSIGN_OR_RETURN(s.plan, PlanFor(*s.state, input.type.dtype, *geometry, mode, context.native));
  return s;
}

// out[n, o, :] += bias[o] for a 16-bit convolution's output: each element
// widened, summed in float32 and rounded once (as the 16-bit add.Tensor).
absl::Status AddHalfBias(const CudaKernelContext& context, const KernelArgs& args, const ConvGeometry& g,
                         const TensorArg& bias, const TensorArg& out) {
  const DType dtype = out.type.dtype;
  return Launched(
      args, LaunchHalfChannelBias(dtype, g.n * g.o, g.o, g.out_plane(), bias.data, out.data, context.native), dtype);
}

// Inputs: input, weight[, bias].
absl::Status ConvolutionKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& input = args.inputs[0];
  const TensorArg& weight = args.inputs[1];
  ConvGeometry g;
  ASSIGN_OR_RETURN(Setup s, SetUp(context, args, input, weight, &g));
  ConvPlan& plan = *s.plan;
  const TensorArg& out = args.outputs[0];
  const ConvOperands op{.x = input.data, .w = weight.data, .out = out.data};
  RETURN_IF_ERROR(Run(*s.state, plan, Direction::kForward, context.native, op));
  if (args.inputs.size() > 2) {
    if (IsHalfData(plan.type)) return AddHalfBias(context, args, g, args.inputs[2], out);
    CUDNN_RETURN_IF_ERROR(cudnnAddTensor(s.state->handle, kOne.of(plan), plan.bias, args.inputs[2].data, kOne.of(plan),
                                         plan.y, out.data));
  }
  return absl::OkStatus();
}

// Inputs: grad_output, input, weight. Outputs: grad_input, grad_weight,
// grad_bias; those of 0 elements (output_mask false) are not computed.
absl::Status ConvolutionBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& input = args.inputs[1];
  const TensorArg& weight = args.inputs[2];
  ConvGeometry g;
  ASSIGN_OR_RETURN(Setup s, SetUp(context, args, input, weight, &g));
  ConvPlan& plan = *s.plan;
  if (args.outputs[0].numel() > 0) {
    RETURN_IF_ERROR(Run(*s.state, plan, Direction::kBackwardData, context.native,
                        {.w = weight.data, .dy = grad.data, .out = args.outputs[0].data}));
  }
  if (args.outputs[1].numel() > 0) {
    RETURN_IF_ERROR(Run(*s.state, plan, Direction::kBackwardFilter, context.native,
                        {.x = input.data, .dy = grad.data, .out = args.outputs[1].data}));
  }
  if (args.outputs[2].numel() > 0) {
    // grad_bias[o] = the sum of grad over n and the spatial dims: the reductions' channel
    // sum (fixed order, so deterministic), not cudnnConvolutionBackwardBias,
    // which took 1 ms more than PyTorch's whole conv1_1 backward of VGG-19
    // on an H200.
    StridedOperand kept, reduced;
    kept.rank = 1;
    kept.sizes[0] = g.o;
    kept.strides[0] = g.out_plane();
    reduced.rank = 2;
    reduced.sizes[0] = g.n;
    reduced.strides[0] = g.o * g.out_plane();
    reduced.sizes[1] = g.out_plane();
    reduced.strides[1] = 1;
    const TensorArg& grad_bias = args.outputs[2];
    if (IsHalfData(plan.type)) {
      return Launched(args,
                      LaunchHalfReduceGeneral(grad_bias.type.dtype, grad.type.dtype, g.o, kept, reduced,
                                              /*mean=*/false, grad.data, grad_bias.data, context.native),
                      grad.type.dtype);
    }
    return Launched(args,
                    LaunchReduceGeneral(grad_bias.type.dtype, grad.type.dtype, g.o, kept, reduced, /*mean=*/false,
                                        grad.data, grad_bias.data, context.native),
                    grad.type.dtype);
  }
  return absl::OkStatus();
}

// The warmers (FindCudaWarmer): each direction the kernel would run gets
// its plan on the context's stream now, from another stream's choice; a
// direction no stream has chosen yet is left to the first run, whose search
// needs the operands. True when the stream had no plan for the shape or a
// direction had no algorithm (its setup was done now, or tried).
absl::StatusOr<bool> WarmDirections(const CudaKernelContext& context, const KernelArgs& args, const TensorArg& input,
                                    const TensorArg& weight, absl::Span<const Direction> directions) {
  ASSIGN_OR_RETURN(CudnnState * state, CudnnState::For(*context.stream));
  const size_t plans = state->plans.size();
  ConvGeometry g;
  ASSIGN_OR_RETURN(Setup s, SetUp(context, args, input, weight, &g));
  bool warmed = state->plans.size() != plans;
  for (Direction dir : directions) {
    if (s.plan->algos[static_cast<int>(dir)].has_value()) continue;
    warmed = true;
    RETURN_IF_ERROR(AdoptShared(*s.state, *s.plan, dir, context.native));
  }
  return warmed;
}

absl::StatusOr<bool> ConvolutionWarmer(const CudaKernelContext& context, const KernelArgs& args) {
  const Direction forward[] = {Direction::kForward};
  return WarmDirections(context, args, args.inputs[0], args.inputs[1], forward);
}

absl::StatusOr<bool> ConvolutionBackwardWarmer(const CudaKernelContext& context, const KernelArgs& args) {
  std::vector<Direction> directions;
  if (args.outputs[0].numel() > 0) directions.push_back(Direction::kBackwardData);
  if (args.outputs[1].numel() > 0) directions.push_back(Direction::kBackwardFilter);
  if (directions.empty()) return false;
  return WarmDirections(context, args, args.inputs[1], args.inputs[2], directions);
}

}  // namespace

void AddConvolutionKernels(CudaKernelTable& table) {
  table["convolution"] = ConvolutionKernel;
  table["convolution_backward"] = ConvolutionBackwardKernel;
}

void AddConvolutionWarmers(CudaWarmTable& table) {
  table["convolution"] = ConvolutionWarmer;
  table["convolution_backward"] = ConvolutionBackwardWarmer;
}

ConvChoiceSharing ConvChoiceSharingForTesting() {
  return {g_adopted.load(), g_adopted_with_engine.load(), g_declined.load(), g_searched.load()};
}

}  // namespace tandem::cuda
