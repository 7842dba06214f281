// cuDNN's graph API (its "backend") for one direction of a 2-d or 3-d
// convolution:
// an operation graph of one node, the engine configurations cuDNN's
// heuristics rank for it, and execution plans that run them.
//
// Why beside the convolution API of conv_algorithms.cc: that API reaches a
// fixed list of eight algorithms per direction, and on an H200 with cuDNN
// 9.19 its best bfloat16 NCHW kernels ran at 0.43-0.79 of PyTorch's, which
// runs engines of this graph API (bench/results, the op table). The
// convolution kernels time both kinds on the call's own tensors and keep the
// faster one.
//
// Engines are filtered by their numerical notes to what the node allows:
// never one that converts its inputs down or reduces in lower precision
// (every result accumulates in the compute type), no tensor cores for
// float32 data unless TF32 is allowed, and only deterministic ones when
// the node asks for them. Tensors are NCHW or NCDHW, contiguous, declared 16-byte
// aligned: a call whose pointers are not must not run a plan.
#ifndef TANDEM_KERNELS_CUDA_CUDNN_ENGINES_H_
#define TANDEM_KERNELS_CUDA_CUDNN_ENGINES_H_

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::cuda {

enum class ConvDirection { kForward, kBackwardData, kBackwardFilter };

// One convolution: NCHW (NCDHW) dims of x, w (OIHW or OIDHW, I = C /
// groups) and y, the data and compute types, and the geometry (`spatial`
// entries of each array: 2 or 3).
struct ConvShape {
  cudnnDataType_t data = CUDNN_DATA_FLOAT;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int spatial = 2;
  bool channels_last = false;  // 2-D: x, w and y stored NHWC (strides), dims still NCHW
  int64_t x[5] = {}, w[5] = {}, y[5] = {};
  int64_t padding[3] = {}, stride[3] = {}, dilation[3] = {};
};

struct EngineFilter {
  bool allow_tf32 = false;     // float32 data may use tensor cores (TF32)
  bool deterministic = false;  // only engines whose results repeat bit for bit
  size_t max_workspace = 0;    // bytes
  int max_plans = 8;           // per heuristic mode: its first this many that pass
  bool fallback = false;       // also cuDNN's fallback list (TANDEM_CUDNN_FALLBACK_ENGINES)
};

// What a search looked at (for the debug log): configurations read, and
// those refused for their numerical notes, not built here, or needing more
// than the workspace allowed.
struct EngineSearchStats {
  int configs = 0;
  int refused_notes = 0;
  int not_built = 0;
  int over_workspace = 0;
};

// An execution plan (owned; destroyed with the object).
class EnginePlan {
 public:
  // Owns `plan` and `config`; keeps `graph` (the descriptors the plan was
  // built from) alive as long as itself.
  EnginePlan(cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t config, std::shared_ptr<const void> graph,
             int64_t workspace, int64_t engine_index);
  ~EnginePlan();
  EnginePlan(const EnginePlan&) = delete;
  EnginePlan& operator=(const EnginePlan&) = delete;

  size_t workspace() const { return static_cast<size_t>(workspace_); }
  int64_t engine_index() const { return engine_index_; }

  // Runs the plan on the handle's stream. Whatever the direction, x, w and
  // y are the convolution's input, filter and output tensors (backward
  // data writes x from y's gradient; backward filter writes w).
  cudnnStatus_t Run(cudnnHandle_t handle, const void* x, const void* w, const void* y, void* workspace) const;

 private:
  cudnnBackendDescriptor_t plan_;
  cudnnBackendDescriptor_t config_;
  std::shared_ptr<const void> graph_;
  int64_t workspace_;
  int64_t engine_index_;
};

// The plans of the engines cuDNN's heuristics rank first for `dir` of
// `shape` after the filter: mode A's ranking, best first, then (with
// filter.fallback) the engines of cuDNN's fallback list that mode A did not
// name; empty when cuDNN builds none. An error only when the operation graph
// itself cannot be built. `stats`, when given, counts what was looked at.
absl::StatusOr<std::vector<std::unique_ptr<EnginePlan>>> ConvEnginePlans(cudnnHandle_t handle, ConvDirection dir,
                                                                         const ConvShape& shape,
                                                                         const EngineFilter& filter,
                                                                         EngineSearchStats* stats = nullptr);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_CUDNN_ENGINES_H_
