#include "kernels/cpu/cpu_program.h"

#include <atomic>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/update_schedule.h"
#include "device/cpu_device.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tandem::cpu {
namespace {

class CpuProgram final : public Program {
 public:
  CpuProgram(const Graph& graph, std::vector<CpuKernelFn> kernels)
      : graph_(graph), kernels_(std::move(kernels)), updates_(ScheduleUpdates(graph)) {}

  absl::Status Enqueue(device::Stream& stream, absl::Span<void* const> addresses) override {
    return EnqueueNodes(stream, addresses, 0, num_nodes());
  }

  absl::Status EnqueueNodes(device::Stream& stream, absl::Span<void* const> addresses, int begin, int end) override {
    if (addresses.size() != graph_.values.size()) {
      return absl::InternalError("address table does not match the graph");
    }
    if (begin < 0 || begin > end || end > num_nodes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("node range [", begin, ", ", end, ") is outside the graph's ", num_nodes(), " nodes"));
    }
    std::vector<void*> table(addresses.begin(), addresses.end());
    static_cast<device::CpuStream&>(stream).Enqueue(
        [this, begin, end, table = std::move(table)]() { return RunRange(table, begin, end); });
    return absl::OkStatus();
  }

  // Runs nodes [begin, end) now, on the calling thread. The ranges of one
  // iteration run in order on one stream's thread (or, after the job moved
  // lanes, on another that the stream hand-offs order after it), so the
  // failure flag needs no lock; it is atomic only to say so.
  absl::Status RunRange(absl::Span<void* const> addresses, int begin, int end) const {
    if (begin == 0) {
      failed_node_.store(-1, std::memory_order_relaxed);
    } else if (const int failed = failed_node_.load(std::memory_order_relaxed); failed >= 0) {
      return absl::AbortedError(absl::StrCat("nodes [", begin, ", ", end,
                                             ") skipped: ", graph_.nodes[failed].Describe(failed),
                                             " failed earlier in this iteration"));
    }
    KernelArgs args;
    for (int i = begin; i < end; ++i) {
      const Node& node = graph_.nodes[i];
      args.node = &node;
      args.inputs.clear();
      args.outputs.clear();
      for (int v : node.inputs) args.inputs.push_back(TensorArg{addresses[v], graph_.values[v].type});
      for (int v : node.outputs) args.outputs.push_back(TensorArg{addresses[v], graph_.values[v].type});
      absl::Status status = kernels_[i](args);
      if (!status.ok()) {
        failed_node_.store(i, std::memory_order_relaxed);
        return absl::Status(status.code(), absl::StrCat(node.Describe(i), ": ", status.message()));
      }
      // Updates land once no later node reads the old value and no later
      // node can fail the iteration (compiler/update_schedule.h).
      for (int k : updates_.after_node[i]) Apply(k, addresses);
    }
    if (graph_.nodes.empty()) {
      for (size_t k = 0; k < graph_.updates.size(); ++k) Apply(static_cast<int>(k), addresses);
    }
    return absl::OkStatus();
  }

 private:
  int num_nodes() const { return static_cast<int>(graph_.nodes.size()); }

  void Apply(int update, absl::Span<void* const> addresses) const {
    const auto& [target, value] = graph_.updates[update];
    if (addresses[target] != addresses[value]) {
      std::memmove(addresses[target], addresses[value], graph_.values[target].type.bytes());
    }
  }

  const Graph& graph_;
  const std::vector<CpuKernelFn> kernels_;  // one per node
  const UpdateSchedule updates_;
  // The node that failed the iteration now running in ranges, or -1. Later
  // ranges of that iteration do nothing, so none of its updates lands.
  mutable std::atomic<int> failed_node_{-1};
};

absl::StatusOr<std::vector<CpuKernelFn>> ResolveKernels(const Graph& graph) {
  std::vector<CpuKernelFn> kernels;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    CpuKernelFn fn = FindCpuKernel(graph.nodes[i].op);
    if (fn == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(graph.nodes[i].Describe(static_cast<int>(i)), ": the CPU backend has no kernel for this op"));
    }
    kernels.push_back(fn);
  }
  return kernels;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Program>> CreateCpuProgram(const Graph& graph) {
  auto kernels = ResolveKernels(graph);
  if (!kernels.ok()) return kernels.status();
  return std::unique_ptr<Program>(new CpuProgram(graph, *std::move(kernels)));
}

absl::Status RunGraphOnCpu(const Graph& graph, absl::Span<void* const> addresses) {
  auto kernels = ResolveKernels(graph);
  if (!kernels.ok()) return kernels.status();
  return CpuProgram(graph, *std::move(kernels)).RunRange(addresses, 0, static_cast<int>(graph.nodes.size()));
}

}  // namespace tandem::cpu
