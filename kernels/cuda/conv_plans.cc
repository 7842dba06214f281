// The convolution kernels' per-stream cuDNN state and plans (conv_plans.h):
// a plan's descriptors, made the first time a shape runs on a stream.
#include "kernels/cuda/conv_plans.h"

#include <cudnn.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "device/conv_workspace.h"
#include "kernels/cuda/kernel_util.h"

namespace tandem::cuda::conv {
namespace {

// The most workspace one convolution may use (algorithms that need more are
// skipped) is device::ConvWorkspaceLimitBytes() of the stream's device (2
// GiB on an H200; TANDEM_CUDNN_WORKSPACE_MIB sets it). The search takes
// what the device can still give, halving down to kMinSearchWorkspaceBytes.
constexpr size_t kMinSearchWorkspaceBytes = size_t{64} << 20;

// Every entry of the geometry (unused spatial entries are 1, 0, 1 alike in
// every key), the layout, the dtype and the math mode.
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
          p.channels_last ? 1 : 0};
}

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

}  // namespace

absl::Status CudnnStatus(cudnnStatus_t status, absl::string_view call) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = absl::StrCat(call, ": ", cudnnGetErrorString(status));
  if (status == CUDNN_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  if (status == CUDNN_STATUS_NOT_SUPPORTED) return absl::UnimplementedError(message);
  return absl::InternalError(message);
}

absl::Status CaptureMiss(absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat(
      "convolution: ", what, " while the stream is being captured; the iteration must run op by op first"));
}

namespace {
const char kStateKey = 0;  // the attachment's key
}  // namespace

const CudnnState* CudnnState::Find(const device::CudaStream& stream) {
  return static_cast<const CudnnState*>(stream.attachment(&kStateKey));
}

absl::StatusOr<CudnnState*> CudnnState::For(device::CudaStream& stream) {
  if (auto* state = static_cast<CudnnState*>(stream.attachment(&kStateKey))) return state;
  auto state = std::make_unique<CudnnState>();
  CUDA_RETURN_IF_ERROR(cudaSetDevice(stream.ordinal()));
  CUDNN_RETURN_IF_ERROR(cudnnCreate(&state->handle));
  CUDNN_RETURN_IF_ERROR(cudnnSetStream(state->handle, stream.native()));
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  state->workspace_limit = static_cast<size_t>(device::ConvWorkspaceLimitBytes(total_bytes));
  state->device = stream.ordinal();
  state->stream = &stream;
  CudnnState* raw = state.get();
  stream.Attach(&kStateKey, std::move(state));
  return raw;
}

CudnnState::~CudnnState() {
  for (void* p : workspaces_) cudaFree(p);
  if (handle != nullptr) cudnnDestroy(handle);
}

absl::StatusOr<void*> CudnnState::SearchWorkspace(size_t limit, cudaStream_t stream, size_t* bytes) {
  for (size_t want = limit;; want /= 2) {
    auto workspace = Workspace(want, stream);
    if (workspace.ok() || want / 2 < kMinSearchWorkspaceBytes) {
      *bytes = want;
      return workspace;
    }
  }
}

absl::StatusOr<void*> CudnnState::Workspace(size_t bytes, cudaStream_t stream) {
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
  // Channels-first dims; a channels-last plan's descriptors say NHWC
  // (cuDNN takes the dims in NCHW order with the storage's format).
  const Shape x_dims = g.input_dims(), w_dims = g.weight_dims(), y_dims = g.output_dims();
  const int rank = g.spatial + 2;
  if (g.spatial == 2) {
    const cudnnTensorFormat_t format = p.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CUDNN_RETURN_IF_ERROR(
        cudnnSetTensor4dDescriptor(plan->x, format, plan->type, i(g.n), i(g.c), i(g.in[0]), i(g.in[1])));
    CUDNN_RETURN_IF_ERROR(
        cudnnSetTensor4dDescriptor(plan->y, format, plan->type, i(g.n), i(g.o), i(g.out[0]), i(g.out[1])));
    CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(plan->bias, format, plan->type, 1, i(g.o), 1, 1));
    CUDNN_RETURN_IF_ERROR(
        cudnnSetFilter4dDescriptor(plan->w, plan->type, format, i(g.o), i(g.c / p.groups), i(g.k[0]), i(g.k[1])));
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
  shape.channels_last = p.channels_last;
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

}  // namespace tandem::cuda::conv
