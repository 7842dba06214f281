// The CUDA graphs of a CUDA Program (cuda_program_internal.h): an
// iteration replayed from its graph or run op by op and captured, node
// ranges' graphs (EnqueueNodes), and the graphs of streams the Program no
// longer keeps released. The rules: cuda_program_options.h.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "device/cuda/cuda_status.h"
#include "kernels/cuda/cuda_program_internal.h"

namespace tandem::cuda::program_internal {

absl::Status CudaProgram::EnqueueFast(CudaStream& stream, LaneState& state, absl::Span<void* const> addresses) {
  const bool measure_again = state.provisional && !stream.device_shared();
  if (!measure_again && state.whole.Replays(addresses)) {
    CUDA_RETURN_IF_ERROR(cudaGraphLaunch(state.whole.exec, stream.native()));
    ++stats_.graph_launches;
    Count(graph_launches_);
  } else {
    const auto began = std::chrono::steady_clock::now();
    const int num_nodes = static_cast<int>(graph_.nodes.size());
    const int64_t provisional_before = ProvisionalConvChoicesMade(stream);
    RETURN_IF_ERROR(LaunchNodes(stream, state, addresses, 0, num_nodes));
    state.provisional = ProvisionalConvChoicesMade(stream) != provisional_before;
    const auto ran = std::chrono::steady_clock::now();
    CountOpByOp();
    if (options_.use_graphs && !capture_disabled_ && TryCapture(stream, state, state.whole, addresses, 0, num_nodes)) {
      ++stats_.captures;
      Count(captures_);
      auto ns = [](auto d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); };
      recapture_ns_.fetch_add(ns(std::chrono::steady_clock::now() - began), std::memory_order_relaxed);
      recapture_run_ns_.fetch_add(ns(ran - began), std::memory_order_relaxed);
      recapture_graph_ns_.fetch_add(last_capture_ns_, std::memory_order_relaxed);
    }
  }
  return absl::OkStatus();
}

bool CudaProgram::TryCapture(CudaStream& stream, LaneState& state, CapturedGraph& graph,
                             absl::Span<void* const> addresses, int begin, int end) {
  if (uses_ < capture_retry_at_) return false;
  const auto began = std::chrono::steady_clock::now();
  absl::Status captured = Capture(stream, state, graph, addresses, begin, end);
  last_capture_ns_ =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - began).count();
  if (captured.ok()) {
    capture_backoff_ = 0;
    KeepGraphsOf(state, std::max(options_.kept_lane_graphs, 1) - 1);
    return true;
  }
  ++stats_.capture_failures;
  if (absl::IsResourceExhausted(captured)) {
    ++stats_.capture_out_of_memory;
    KeepGraphsOf(state, 0);
    capture_backoff_ = std::clamp<uint64_t>(2 * capture_backoff_, kMinCaptureBackoff, kMaxCaptureBackoff);
    capture_retry_at_ = uses_ + capture_backoff_;
    if (stats_.capture_out_of_memory == 1) {
      TLOG_WARNING("CUDA graph capture found no device memory; this job runs op by op and tries again later")
          .With("device", device_.info().name)
          .With("nodes", absl::StrCat("[", begin, ", ", end, ")"))
          .With("retry_after_iterations", capture_backoff_)
          .With("reason", captured.ToString());
    }
    return false;
  }
  capture_disabled_ = true;
  TLOG_WARNING("CUDA graph capture failed; this job's iterations run op by op")
      .With("device", device_.info().name)
      .With("nodes", absl::StrCat("[", begin, ", ", end, ")"))
      .With("reason", captured.ToString());
  return false;
}

void CudaProgram::KeepGraphsOf(const LaneState& current, int others) {
  std::vector<LaneState*> holding;
  for (auto& [stream, state] : lanes_) {
    if (state.get() != &current && HoldsGraphs(*state)) holding.push_back(state.get());
  }
  if (static_cast<int>(holding.size()) <= others) return;
  std::sort(holding.begin(), holding.end(),
            [](const LaneState* a, const LaneState* b) { return a->last_used > b->last_used; });
  for (size_t i = static_cast<size_t>(others); i < holding.size(); ++i) {
    ReleaseGraphs(*holding[i]);
    ++stats_.lane_graph_releases;
  }
}

bool CudaProgram::HoldsGraphs(const LaneState& state) {
  if (state.whole.exec != nullptr) return true;
  return std::any_of(state.ranges.begin(), state.ranges.end(),
                     [](const auto& range) { return range.second.exec != nullptr; });
}

void CudaProgram::ReleaseGraphs(LaneState& state) {
  if (state.whole.exec != nullptr) cudaGraphExecDestroy(state.whole.exec);
  state.whole.exec = nullptr;
  state.whole.captured.clear();
  for (auto& [range, graph] : state.ranges) {
    if (graph.exec != nullptr) cudaGraphExecDestroy(graph.exec);
  }
  state.ranges.clear();
}

absl::Status CudaProgram::Capture(CudaStream& stream, LaneState& state, CapturedGraph& target,
                                  absl::Span<void* const> addresses, int begin, int end) {
  const cudaStream_t native = stream.native();
  CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(native, cudaStreamCaptureModeThreadLocal));
  absl::Status recorded = LaunchNodes(stream, state, addresses, begin, end);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(native, &graph);
  if (!recorded.ok() || ended != cudaSuccess) {
    cudaGetLastError();  // capture errors are not sticky; leave none behind
    if (graph != nullptr) cudaGraphDestroy(graph);
    return recorded.ok() ? device::CudaStatus(ended, "cudaStreamEndCapture") : recorded;
  }
  absl::Status status = absl::OkStatus();
  bool updated = false;
  if (target.exec != nullptr) {
    cudaGraphExecUpdateResultInfo info;
    if (cudaGraphExecUpdate(target.exec, graph, &info) == cudaSuccess) {
      updated = true;
    } else {
      cudaGetLastError();
      cudaGraphExecDestroy(target.exec);
      target.exec = nullptr;
    }
  }
  if (!updated) {
    status = device::CudaStatus(cudaGraphInstantiate(&target.exec, graph, 0), "cudaGraphInstantiate");
    if (!status.ok()) target.exec = nullptr;
  }
  if (status.ok()) status = device::CudaStatus(cudaGraphUpload(target.exec, native), "cudaGraphUpload");
  cudaGraphDestroy(graph);
  if (!status.ok()) {
    if (target.exec != nullptr) cudaGraphExecDestroy(target.exec);
    target.exec = nullptr;
    return status;
  }
  target.captured.assign(addresses.begin(), addresses.end());
  return absl::OkStatus();
}

}  // namespace tandem::cuda::program_internal
