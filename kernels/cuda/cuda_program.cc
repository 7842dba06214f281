// The CUDA backend of Program (kernels/cuda_program.h). How iterations run,
// graph capture and its rules: cuda_program_options.h. The Program class:
// cuda_program_internal.h; its graphs (capture, replay, release):
// cuda_program_graphs.cc.
//
// Data errors: when the graph has ops that check data (class labels), each
// lane has a device error word that kernels set on bad data. An iteration
// ends with one small kernel after its graph (LaunchPublishErrorWord): it
// copies the word into a page-locked host slot of the iteration's own (the
// slot changes per iteration, error_slots.h) and zeroes the word, so the
// next iteration starts clean without a memset of its own. The slot is
// checked when the stream's next completion reports (a deferred check,
// cuda_stream.h), and a set word fails that completion with
// INVALID_ARGUMENT naming the node and the bad value. A slot is written
// again only after its check ran or was flushed into the stream ahead of
// the write, so no error is lost or misattributed however far the
// enqueuing runs ahead of the completions. An iteration that began but
// never reached its end (a failed enqueue, an abandoned range) leaves the
// word unknown: the next one zeroes it first (LaneState::word_zero).
//
// Ranges (Program::EnqueueNodes): an iteration cut into ranges runs each
// range op by op the first time, then from a graph of that range captured
// over the same address table (range_graphs). The zeroing of the error word
// (when needed) belongs to the range that starts at node 0, the read-back
// and the deferred check to the range that ends at the last node, so the
// word spans the whole iteration: a bad label in any range skips every
// update after it (in this range or a later one) and fails the completion
// that follows the last range.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/cuda_stream.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_program_internal.h"
#include "kernels/cuda/cuda_program_options.h"
#include "kernels/cuda/error_slots.h"
#include "kernels/cuda_program.h"

namespace tandem {
namespace cuda {
namespace program_internal {
namespace {

// Host slots for the error word's read-backs: more than a lane keeps
// iterations in flight, so a read-back never waits for a check.
constexpr int kErrorSlots = 16;
// How long a read-back waits for a free slot before the iteration fails
// (only when completions stopped reporting).
constexpr auto kErrorSlotWait = std::chrono::seconds(5);

}  // namespace

CudaProgram::CudaProgram(const Graph& graph, device::Device& device, std::vector<CudaKernelFn> kernels,
                         std::vector<CudaWarmFn> warmers, bool checks_data, const CudaProgramOptions& options)
    : graph_(graph),
      device_(device),
      kernels_(std::move(kernels)),
      warmers_(std::move(warmers)),
      checks_data_(checks_data),
      options_(options),
      batcher_(graph) {}

CudaProgram::~CudaProgram() {
  cudaSetDevice(device_.info().ordinal);
  if (options_.profile_nodes) LogProfile();
  for (cudaEvent_t e : profile_events_) cudaEventDestroy(e);
  for (auto& [stream, state] : lanes_) Release(*state);
}

absl::Status CudaProgram::Enqueue(device::Stream& stream, absl::Span<void* const> addresses) {
  ASSIGN_OR_RETURN(CudaStream * cuda_stream, CheckAndSelect(stream, addresses));
  ASSIGN_OR_RETURN(LaneState * state, StateFor(*cuda_stream));
  state->last_used = ++uses_;
  RETURN_IF_ERROR(BeginIteration(*cuda_stream, *state));
  if (options_.profile_nodes) {
    RETURN_IF_ERROR(EnqueueProfiled(*cuda_stream, *state, addresses));
  } else {
    RETURN_IF_ERROR(EnqueueFast(*cuda_stream, *state, addresses));
  }
  return EndIteration(*cuda_stream, *state);
}

absl::Status CudaProgram::EnqueueNodes(device::Stream& stream, absl::Span<void* const> addresses, int begin, int end) {
  const int num_nodes = static_cast<int>(graph_.nodes.size());
  if (begin < 0 || begin > end || end > num_nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("node range [", begin, ", ", end, ") is outside the graph's ", num_nodes, " nodes"));
  }
  ASSIGN_OR_RETURN(CudaStream * cuda_stream, CheckAndSelect(stream, addresses));
  ASSIGN_OR_RETURN(LaneState * state, StateFor(*cuda_stream));
  state->last_used = ++uses_;
  if (begin == 0) RETURN_IF_ERROR(BeginIteration(*cuda_stream, *state));
  if (options_.use_graphs && options_.range_graphs && !capture_disabled_) {
    CapturedGraph& range = state->ranges[{begin, end}];
    if (range.Replays(addresses)) {
      CUDA_RETURN_IF_ERROR(cudaGraphLaunch(range.exec, cuda_stream->native()));
      ++stats_.range_graph_launches;
      Count(graph_launches_);
    } else {
      if (begin == 0) CountOpByOp();
      RETURN_IF_ERROR(LaunchNodes(*cuda_stream, *state, addresses, begin, end));
      if (TryCapture(*cuda_stream, *state, range, addresses, begin, end)) {
        ++stats_.range_captures;
        Count(captures_);
      }
    }
  } else {
    if (begin == 0) CountOpByOp();
    RETURN_IF_ERROR(LaunchNodes(*cuda_stream, *state, addresses, begin, end));
  }
  if (end == num_nodes) return EndIteration(*cuda_stream, *state);
  return absl::OkStatus();
}

absl::StatusOr<int> CudaProgram::WarmStream(device::Stream& stream, int node) {
  const int num_nodes = static_cast<int>(graph_.nodes.size());
  if (node < 0 || node > num_nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("warm-up node ", node, " is outside the graph's ", num_nodes, " nodes"));
  }
  ASSIGN_OR_RETURN(CudaStream * cuda_stream, SelectStream(stream));
  CudaKernelContext context;
  context.stream = cuda_stream;
  context.native = cuda_stream->native();
  for (int i = node; i < num_nodes; ++i) {
    if (warmers_[i] == nullptr) continue;
    const Node& n = graph_.nodes[i];
    KernelArgs args;
    args.node = &n;
    for (int v : n.inputs) args.inputs.push_back(TensorArg{nullptr, graph_.values[v].type});
    for (int v : n.outputs) args.outputs.push_back(TensorArg{nullptr, graph_.values[v].type});
    context.error.node = static_cast<int32_t>(i);
    absl::StatusOr<bool> warmed = warmers_[i](context, args);
    if (!warmed.ok()) {
      const absl::Status& status = warmed.status();
      return absl::Status(status.code(), absl::StrCat(n.Describe(i), " (warm-up): ", status.message()));
    }
    if (!*warmed) continue;
    warmed_nodes_.fetch_add(1, std::memory_order_relaxed);
    return i + 1 < num_nodes ? i + 1 : -1;
  }
  return -1;
}

ProgramCounters CudaProgram::Counters() const {
  return ProgramCounters{graph_launches_.load(std::memory_order_relaxed),
                         op_by_op_runs_.load(std::memory_order_relaxed),
                         captures_.load(std::memory_order_relaxed),
                         recapture_ns_.load(std::memory_order_relaxed) * 1e-9,
                         recapture_run_ns_.load(std::memory_order_relaxed) * 1e-9,
                         recapture_graph_ns_.load(std::memory_order_relaxed) * 1e-9,
                         warmed_nodes_.load(std::memory_order_relaxed)};
}

absl::StatusOr<CudaStream*> CudaProgram::CheckAndSelect(device::Stream& stream, absl::Span<void* const> addresses) {
  if (addresses.size() != graph_.values.size()) {
    return absl::InternalError(absl::StrCat("address table has ", addresses.size(), " entries; the graph has ",
                                            graph_.values.size(), " values"));
  }
  for (size_t v = 0; v < addresses.size(); ++v) {
    if (addresses[v] == nullptr && graph_.values[v].type.bytes() > 0) {
      return absl::InternalError(absl::StrCat("value '", graph_.values[v].name, "' has no address"));
    }
  }
  return SelectStream(stream);
}

absl::StatusOr<CudaStream*> CudaProgram::SelectStream(device::Stream& stream) {
  CudaStream* cuda_stream = device::AsCudaStream(stream);
  if (cuda_stream == nullptr) return absl::InternalError("a CUDA program was given a non-CUDA stream");
  if (cuda_stream->ordinal() != device_.info().ordinal) {
    return absl::InternalError(
        absl::StrCat("a program of ", device_.info().name, " was given a stream of cuda:", cuda_stream->ordinal()));
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(cuda_stream->ordinal()));
  return cuda_stream;
}

absl::Status CudaProgram::BeginIteration(CudaStream& stream, LaneState& state) {
  if (!checks_data_) return absl::OkStatus();
  if (!state.word_zero) {
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(state.error_word, 0, 2 * sizeof(int64_t), stream.native()));
  }
  state.word_zero = false;
  return absl::OkStatus();
}

absl::Status CudaProgram::EndIteration(CudaStream& stream, LaneState& state) {
  if (!checks_data_) return absl::OkStatus();
  std::optional<ErrorSlots::Claim> claim = state.error_slots->TakeSlot(stream.HasDeferredChecks(this));
  const auto deadline = std::chrono::steady_clock::now() + kErrorSlotWait;
  while (!claim.has_value()) {
    // Every slot's check waits for a completion that has not reported.
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("the data checks of ", kErrorSlots, " iterations waited ",
                                                      kErrorSlotWait.count(), " s for their completions"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    claim = state.error_slots->TakeSlot(stream.HasDeferredChecks(this));
  }
  std::shared_ptr<ErrorSlots> slots = state.error_slots;
  absl::Status status = claim->flush_first ? stream.FlushDeferredChecks() : absl::OkStatus();
  int64_t* host = state.error_host + 2 * claim->slot;
  if (status.ok()) {
    status = device::CudaStatus(
        LaunchPublishErrorWord(state.error_word, state.error_host_on_device + 2 * claim->slot, stream.native()),
        "publishing the error word");
  }
  if (!status.ok()) {
    slots->Release(claim->slot, claim->generation);
    return status;
  }
  state.word_zero = true;
  stream.DeferCheck(this, [this, host, slots, claim = *claim] {
    absl::Status checked = CheckErrorWord(host);
    slots->Release(claim.slot, claim.generation);
    return checked;
  });
  slots->Deferred(*claim);
  return absl::OkStatus();
}

absl::Status CudaProgram::EnqueueProfiled(CudaStream& stream, LaneState& state, absl::Span<void* const> addresses) {
  if (profile_events_.empty()) {
    profile_events_.resize(graph_.nodes.size() + 1, nullptr);
    for (cudaEvent_t& e : profile_events_) CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    node_seconds_.assign(graph_.nodes.size(), 0.0);
  }
  RETURN_IF_ERROR(
      LaunchNodes(stream, state, addresses, 0, static_cast<int>(graph_.nodes.size()), profile_events_.data()));
  CountOpByOp();
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.native()));
  if (profiled_runs_++ == 0) return absl::OkStatus();
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    float ms = 0.0f;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, profile_events_[i], profile_events_[i + 1]));
    node_seconds_[i] += ms * 1e-3;
    stats_.profiled_seconds += ms * 1e-3;
  }
  ++profiled_iterations_;
  stats_.profiled_iterations = profiled_iterations_;
  if (options_.profile_report_every > 0 && profiled_iterations_ % options_.profile_report_every == 0) {
    LogProfile();
  }
  return absl::OkStatus();
}

void CudaProgram::LogProfile() const {
  if (profiled_iterations_ == 0) return;
  struct Kind {
    double seconds = 0.0;
    int nodes = 0;
  };
  absl::flat_hash_map<std::string, Kind> kinds;
  double total = 0.0;
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    Kind& k = kinds[graph_.nodes[i].op];
    k.seconds += node_seconds_[i];
    ++k.nodes;
    total += node_seconds_[i];
  }
  const double n = static_cast<double>(profiled_iterations_);
  std::vector<std::pair<std::string, Kind>> by_kind(kinds.begin(), kinds.end());
  std::sort(by_kind.begin(), by_kind.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  TLOG_INFO("kernel profile")
      .With("device", device_.info().name)
      .With("iterations", profiled_iterations_)
      .With("nodes", graph_.nodes.size())
      .With("ms_per_iteration", absl::StrFormat("%.3f", total / n * 1e3));
  for (size_t k = 0; k < by_kind.size() && k < 20; ++k) {
    const Kind& kind = by_kind[k].second;
    TLOG_INFO("kernel profile: op")
        .With("op", by_kind[k].first)
        .With("nodes", kind.nodes)
        .With("ms_per_iteration", absl::StrFormat("%.3f", kind.seconds / n * 1e3))
        .With("percent", absl::StrFormat("%.1f", total > 0 ? 100.0 * kind.seconds / total : 0.0));
  }
  std::vector<size_t> order(graph_.nodes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const size_t shown = std::min<size_t>(order.size(), 15);
  std::partial_sort(order.begin(), order.begin() + shown, order.end(),
                    [this](size_t a, size_t b) { return node_seconds_[a] > node_seconds_[b]; });
  for (size_t k = 0; k < shown; ++k) {
    const size_t i = order[k];
    TLOG_INFO("kernel profile: node")
        .With("ms_per_iteration", absl::StrFormat("%.3f", node_seconds_[i] / n * 1e3))
        .With("node", graph_.nodes[i].Describe(static_cast<int>(i)));
  }
}

absl::StatusOr<LaneState*> CudaProgram::StateFor(CudaStream& stream) {
  std::unique_ptr<LaneState>& slot = lanes_[&stream];
  if (slot != nullptr && slot->stream_serial != stream.serial()) {
    Release(*slot);
    slot.reset();
  }
  if (slot == nullptr) {
    auto state = std::make_unique<LaneState>();
    state->stream_serial = stream.serial();
    if (checks_data_) {
      ASSIGN_OR_RETURN(void* word, device_.Allocate(2 * sizeof(int64_t)));
      state->error_word = static_cast<int64_t*>(word);
      auto host = device_.AllocateHost(2 * sizeof(int64_t) * kErrorSlots);
      if (!host.ok()) {
        device_.Free(word);
        return host.status();
      }
      state->error_host = static_cast<int64_t*>(*host);
      std::fill(state->error_host, state->error_host + 2 * kErrorSlots, 0);
      void* on_device = nullptr;
      const cudaError_t mapped = cudaHostGetDevicePointer(&on_device, *host, 0);
      if (mapped != cudaSuccess) {
        device_.Free(word);
        device_.FreeHost(*host);
        return device::CudaStatus(mapped, "cudaHostGetDevicePointer");
      }
      state->error_host_on_device = static_cast<int64_t*>(on_device);
      state->error_slots = std::make_shared<ErrorSlots>(kErrorSlots);
    }
    slot = std::move(state);
  }
  return slot.get();
}

void CudaProgram::Release(LaneState& state) {
  ReleaseGraphs(state);
  device_.Free(state.error_word);
  device_.FreeHost(state.error_host);
  state.error_word = nullptr;
  state.error_host = nullptr;
}

absl::Status CudaProgram::LaunchNodes(CudaStream& stream, LaneState& state, absl::Span<void* const> addresses,
                                      int begin, int end, cudaEvent_t* events) {
  const cudaStream_t native = stream.native();
  const int num_nodes = static_cast<int>(graph_.nodes.size());
  CudaKernelContext context;
  context.stream = &stream;
  context.native = native;
  context.error.word = state.error_word;
  KernelArgs args;
  // Alike independent fused nodes (an optimizer step's) as one launch
  // each run; not while profiling, which times every node alone.
  std::vector<std::pair<int, int>> runs;
  if (events == nullptr) {
    runs = batcher_.Plan(begin, end, addresses, [&](int i) {
      for (int k : updates_.after_node[i]) {
        if (addresses[graph_.updates[k].first] != addresses[graph_.updates[k].second]) return true;
      }
      return false;
    });
  }
  size_t next_run = 0;
  for (int i = begin; i < end; ++i) {
    if (next_run < runs.size() && runs[next_run].first == i) {
      const int last = runs[next_run++].second;
      ASSIGN_OR_RETURN(bool batched, batcher_.Launch(i, last, addresses, state.error_word, native));
      if (batched) {
        for (int j = i; j <= last; ++j) {
          for (int k : updates_.after_node[j]) RETURN_IF_ERROR(EnqueueUpdate(k, state, addresses, native));
        }
        i = last;
        continue;
      }
    }
    const Node& node = graph_.nodes[i];
    args.node = &node;
    args.inputs.clear();
    args.outputs.clear();
    for (int v : node.inputs) args.inputs.push_back(TensorArg{addresses[v], graph_.values[v].type});
    for (int v : node.outputs) args.outputs.push_back(TensorArg{addresses[v], graph_.values[v].type});
    context.error.node = static_cast<int32_t>(i);
    if (events != nullptr) CUDA_RETURN_IF_ERROR(cudaEventRecord(events[i], native));
    absl::Status status = kernels_[i](context, args);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat(node.Describe(i), ": ", status.message()));
    }
    for (int k : updates_.after_node[i]) RETURN_IF_ERROR(EnqueueUpdate(k, state, addresses, native));
  }
  if (num_nodes == 0) {
    for (size_t k = 0; k < graph_.updates.size(); ++k) {
      RETURN_IF_ERROR(EnqueueUpdate(static_cast<int>(k), state, addresses, native));
    }
  }
  if (events != nullptr) CUDA_RETURN_IF_ERROR(cudaEventRecord(events[end], native));
  return absl::OkStatus();
}

absl::Status CudaProgram::EnqueueUpdate(int update, LaneState& state, absl::Span<void* const> addresses,
                                        cudaStream_t native) {
  const auto& [target, value] = graph_.updates[update];
  if (addresses[target] == addresses[value]) return absl::OkStatus();
  const size_t bytes = graph_.values[target].type.bytes();
  if (checks_data_) {
    CUDA_RETURN_IF_ERROR(LaunchCopyUnlessError(state.error_word, addresses[value], addresses[target], bytes, native));
  } else {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(addresses[target], addresses[value], bytes, cudaMemcpyDeviceToDevice, native));
  }
  return absl::OkStatus();
}

absl::Status CudaProgram::CheckErrorWord(const int64_t* host) const {
  const int64_t tag = host[0];
  if (tag == 0) return absl::OkStatus();
  const int64_t value = host[1];
  const int64_t index = tag - 1;
  if (index < 0 || index >= static_cast<int64_t>(graph_.nodes.size())) {
    return absl::InternalError(absl::StrCat("the GPU reported bad data from an unknown node ", index));
  }
  const Node& node = graph_.nodes[index];
  if (node.op != "nll_loss_forward" && node.op != "nll_loss_backward") {
    return absl::InvalidArgumentError(
        absl::StrCat(node.Describe(static_cast<int>(index)), ": ", DescribeBadIndex(graph_, node, value)));
  }
  // nll_loss_forward's self is input 0, nll_loss_backward's input 1.
  const int self_input = node.op == "nll_loss_backward" ? 1 : 0;
  const int64_t classes = graph_.values[node.inputs[self_input]].type.shape.back();
  const int64_t ignore_index = node.attrs.GetInt("ignore_index", -100).value_or(-100);
  return absl::InvalidArgumentError(absl::StrCat(node.Describe(static_cast<int>(index)), ": target value ", value,
                                                 " is outside the classes [0, ", classes, ") and not ignore_index (",
                                                 ignore_index, ")"));
}

}  // namespace program_internal

absl::StatusOr<std::unique_ptr<Program>> CreateCudaProgram(const Graph& graph, device::Device& device,
                                                           const CudaProgramOptions& options) {
  if (device.info().backend != device::Backend::kCuda) {
    return absl::InvalidArgumentError(
        absl::StrCat("a CUDA program needs a CUDA device; ", device.info().name, " is not one"));
  }
  std::vector<CudaKernelFn> kernels;
  std::vector<CudaWarmFn> warmers;
  bool checks_data = false;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    CudaKernelFn fn = FindCudaKernel(graph.nodes[i].op);
    if (fn == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(graph.nodes[i].Describe(static_cast<int>(i)), ": the CUDA backend has no kernel for this op"));
    }
    kernels.push_back(fn);
    warmers.push_back(FindCudaWarmer(graph.nodes[i].op));
    checks_data = checks_data || OpChecksData(graph.nodes[i].op);
  }
  return std::unique_ptr<Program>(
      new program_internal::CudaProgram(graph, device, std::move(kernels), std::move(warmers), checks_data, options));
}

CudaProgramStats GetCudaProgramStats(const Program& program) {
  const auto* cuda_program = dynamic_cast<const program_internal::CudaProgram*>(&program);
  return cuda_program != nullptr ? cuda_program->stats() : CudaProgramStats{};
}

}  // namespace cuda

absl::StatusOr<std::unique_ptr<Program>> CreateCudaProgram(const Graph& graph, device::Device& device) {
  cuda::CudaProgramOptions options;
  const char* profile = std::getenv("TANDEM_PROFILE_KERNELS");
  options.profile_nodes = profile != nullptr && std::string(profile) == "1";
  return cuda::CreateCudaProgram(graph, device, options);
}

}  // namespace tandem
