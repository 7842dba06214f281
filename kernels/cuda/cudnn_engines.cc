#include "kernels/cuda/cudnn_engines.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::cuda {
namespace {

// A descriptor destroyed with the object.
class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(cudnnBackendDescriptorType_t type) { status_ = cudnnBackendCreateDescriptor(type, &d_); }
  ~Descriptor() { Reset(); }
  Descriptor(Descriptor&& other) noexcept : d_(std::exchange(other.d_, nullptr)), status_(other.status_) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    Reset();
    d_ = std::exchange(other.d_, nullptr);
    status_ = other.status_;
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t release() { return std::exchange(d_, nullptr); }

  // Set calls after a failed one do nothing; status() is the first failure.
  template <typename T>
  Descriptor& Set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const T* values) {
    if (status_ == CUDNN_STATUS_SUCCESS) status_ = cudnnBackendSetAttribute(d_, name, type, count, values);
    return *this;
  }
  cudnnStatus_t Finalize() {
    if (status_ == CUDNN_STATUS_SUCCESS) status_ = cudnnBackendFinalize(d_);
    return status_;
  }
  cudnnStatus_t status() const { return status_; }

 private:
  void Reset() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
    d_ = nullptr;
  }
  cudnnBackendDescriptor_t d_ = nullptr;
  cudnnStatus_t status_ = CUDNN_STATUS_SUCCESS;
};

absl::Status Failed(cudnnStatus_t status, absl::string_view what) {
  return absl::InternalError(absl::StrCat("cuDNN graph API: ", what, ": ", cudnnGetErrorString(status)));
}

// Unique ids of the three tensors in every direction's graph and variant pack.
constexpr int64_t kX = 'x', kW = 'w', kY = 'y';

// A packed tensor of `rank` dims (4 or 5) in NC(D)HW order: row-major, or
// with `channels_last` stored N(D)HWC (the channel dim 1 innermost).
Descriptor Tensor(int64_t uid, cudnnDataType_t type, const int64_t* dims, int rank, bool channels_last) {
  int64_t strides[5];
  int64_t stride = 1;
  if (channels_last) {
    strides[1] = stride;
    stride *= dims[1];
    for (int d = rank - 1; d >= 2; --d) {
      strides[d] = stride;
      stride *= dims[d];
    }
    strides[0] = stride;
  } else {
    for (int d = rank - 1; d >= 0; --d) {
      strides[d] = stride;
      stride *= dims[d];
    }
  }
  const int64_t alignment = 16;
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.Set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)
      .Set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, dims)
      .Set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, strides)
      .Set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)
      .Set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment)
      .Finalize();
  return t;
}

// The direction's operation node: y = conv(x, w), dx = conv_bwd_data(w,
// dy), dw = conv_bwd_filter(x, dy); alpha 1, beta 0 (outputs overwritten).
// Per direction: the descriptor type and its attributes for x, w, y (or
// their gradients), the convolution, alpha and beta.
struct OperationAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

OperationAttributes AttributesOf(ConvDirection dir) {
  switch (dir) {
    case ConvDirection::kForward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvDirection::kBackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvDirection::kBackwardFilter:
      break;
  }
  return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
}

Descriptor Operation(ConvDirection dir, const ConvShape& shape, const Descriptor& x, const Descriptor& w,
                     const Descriptor& y, const Descriptor& conv) {
  const bool wide = shape.compute == CUDNN_DATA_DOUBLE;
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const cudnnBackendAttributeType_t scalar = wide ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
  const void* one = wide ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* zero = wide ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f);
  const cudnnBackendDescriptor_t xd = x.get(), wd = w.get(), yd = y.get(), cd = conv.get();
  constexpr auto kDesc = CUDNN_TYPE_BACKEND_DESCRIPTOR;
  const OperationAttributes a = AttributesOf(dir);
  Descriptor op(a.type);
  op.Set(a.x, kDesc, 1, &xd)
      .Set(a.w, kDesc, 1, &wd)
      .Set(a.y, kDesc, 1, &yd)
      .Set(a.conv, kDesc, 1, &cd)
      .Set(a.alpha, scalar, 1, one)
      .Set(a.beta, scalar, 1, zero)
      .Finalize();
  return op;
}

// Whether an engine's numerical notes fit the filter.
bool NotesAllowed(cudnnBackendDescriptor_t engine, const ConvShape& shape, const EngineFilter& filter) {
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t count = 0;
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes) != CUDNN_STATUS_SUCCESS) {
    return false;
  }
  for (int64_t i = 0; i < count; ++i) {
    switch (notes[i]) {
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
        return false;
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
        if (shape.data == CUDNN_DATA_FLOAT && !filter.allow_tf32) return false;
        break;
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
        if (filter.deterministic) return false;
        break;
      default:
        break;
    }
  }
  return true;
}

}  // namespace

EnginePlan::EnginePlan(cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t config,
                       std::shared_ptr<const void> graph, int64_t workspace, int64_t engine_index)
    : plan_(plan), config_(config), graph_(std::move(graph)), workspace_(workspace), engine_index_(engine_index) {}

EnginePlan::~EnginePlan() {
  if (plan_ != nullptr) cudnnBackendDestroyDescriptor(plan_);
  if (config_ != nullptr) cudnnBackendDestroyDescriptor(config_);
}

cudnnStatus_t EnginePlan::Run(cudnnHandle_t handle, const void* x, const void* w, const void* y,
                              void* workspace) const {
  const int64_t uids[3] = {kX, kW, kY};
  void* pointers[3] = {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.Set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids)
      .Set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers)
      .Set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  if (const cudnnStatus_t status = pack.Finalize(); status != CUDNN_STATUS_SUCCESS) return status;
  return cudnnBackendExecute(handle, plan_, pack.get());
}

// The graph's handle attribute is deprecated in cuDNN 9 in favour of a
// device-properties descriptor, and still what binds a graph to a handle.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
absl::StatusOr<std::vector<std::unique_ptr<EnginePlan>>> ConvEnginePlans(cudnnHandle_t handle, ConvDirection dir,
                                                                         const ConvShape& shape,
                                                                         const EngineFilter& filter,
                                                                         EngineSearchStats* stats) {
  const int rank = shape.spatial + 2;
  Descriptor x = Tensor(kX, shape.data, shape.x, rank, shape.channels_last);
  Descriptor w = Tensor(kW, shape.data, shape.w, rank, shape.channels_last);
  Descriptor y = Tensor(kY, shape.data, shape.y, rank, shape.channels_last);
  for (const Descriptor* t : {&x, &w, &y}) {
    if (t->status() != CUDNN_STATUS_SUCCESS) return Failed(t->status(), "tensor descriptor");
  }
  const int64_t spatial = shape.spatial;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t post_padding[3] = {shape.padding[0], shape.padding[1], shape.padding[2]};
  Descriptor conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  conv.Set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &shape.compute)
      .Set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)
      .Set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial)
      .Set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, spatial, shape.dilation)
      .Set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, spatial, shape.stride)
      .Set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, spatial, shape.padding)
      .Set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, spatial, post_padding)
      .Finalize();
  if (conv.status() != CUDNN_STATUS_SUCCESS) return Failed(conv.status(), "convolution descriptor");
  Descriptor op = Operation(dir, shape, x, w, y, conv);
  if (op.status() != CUDNN_STATUS_SUCCESS) return Failed(op.status(), "operation descriptor");
  const cudnnBackendDescriptor_t op_d = op.get();
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.Set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op_d)
      .Set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
      .Finalize();
  if (graph.status() != CUDNN_STATUS_SUCCESS) return Failed(graph.status(), "operation graph");

  std::vector<std::unique_ptr<EnginePlan>> plans;
  const cudnnBackendDescriptor_t graph_d = graph.get();
  // What the plans are built from lives as long as the last of them.
  auto parts = std::make_shared<std::vector<Descriptor>>();
  EngineSearchStats counted;
  EngineSearchStats& tally = stats != nullptr ? *stats : counted;
  tally = EngineSearchStats{};
  std::vector<int64_t> seen;  // engines already taken (a fallback may repeat one of mode A)
  // Mode A's ranking first, then (if asked) the fallback list,
  // filter.max_plans plans from each at most.
  for (const cudnnBackendHeurMode_t heur_mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    if (heur_mode == CUDNN_HEUR_MODE_FALLBACK && !filter.fallback) break;
    Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.Set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph_d)
        .Set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode)
        .Finalize();
    if (heur.status() != CUDNN_STATUS_SUCCESS) continue;  // no engine of this mode for the graph
    int64_t count = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr) != CUDNN_STATUS_SUCCESS ||
        count <= 0) {
      continue;
    }
    std::vector<Descriptor> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(configs.back().get());
    }
    int64_t returned = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                 &returned, raw.data()) != CUDNN_STATUS_SUCCESS) {
      continue;
    }
    int taken = 0;
    for (int64_t i = 0; i < std::min(returned, count) && taken < filter.max_plans; ++i) {
      ++tally.configs;
      Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      cudnnBackendDescriptor_t engine_d = engine.get();
      int64_t got = 0;
      if (cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                                   &engine_d) != CUDNN_STATUS_SUCCESS ||
          !NotesAllowed(engine_d, shape, filter)) {
        ++tally.refused_notes;
        continue;
      }
      int64_t index = -1;
      cudnnBackendGetAttribute(engine_d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &index);
      if (std::find(seen.begin(), seen.end(), index) != seen.end()) continue;
      Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.Set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
          .Set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i])
          .Finalize();
      if (plan.status() != CUDNN_STATUS_SUCCESS) {  // the engine does not build here
        ++tally.not_built;
        continue;
      }
      int64_t workspace = 0;
      if (cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                                   &workspace) != CUDNN_STATUS_SUCCESS ||
          workspace < 0 || static_cast<size_t>(workspace) > filter.max_workspace) {
        ++tally.over_workspace;
        continue;
      }
      seen.push_back(index);
      ++taken;
      plans.push_back(std::make_unique<EnginePlan>(plan.release(), configs[i].release(), parts, workspace, index));
    }
  }
  if (!plans.empty()) {
    for (Descriptor* d : {&x, &w, &y, &conv, &op, &graph}) parts->push_back(std::move(*d));
  }
  return plans;
}
#pragma GCC diagnostic pop

}  // namespace tandem::cuda
