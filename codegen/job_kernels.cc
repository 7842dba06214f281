#include "codegen/job_kernels.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace tandem::codegen {
namespace {

std::atomic<int>& EnabledFlag() {
  static std::atomic<int> flag{[] {
    const char* env = std::getenv("TANDEM_CODEGEN");
    return env != nullptr && std::string(env) == "0" ? 0 : 1;
  }()};
  return flag;
}

}  // namespace

bool GeneratedKernelsEnabled() { return EnabledFlag().load(std::memory_order_relaxed) != 0; }
void SetGeneratedKernelsEnabled(bool enabled) { EnabledFlag().store(enabled ? 1 : 0, std::memory_order_relaxed); }

std::vector<std::pair<int, GeneratedKernel>> GenerateJobKernels(const Graph& graph) {
  std::vector<std::pair<int, GeneratedKernel>> out;
  for (int i = 0; i < static_cast<int>(graph.nodes.size()); ++i) {
    if (graph.nodes[i].op != kFusedElementwiseOp) continue;
    absl::StatusOr<PointwiseSpec> spec = PointwiseSpecOf(graph, i);
    if (spec.ok()) out.emplace_back(i, GeneratePointwiseKernel(*spec));
  }
  return out;
}

JobKernelsReport PrepareJobKernels(const Graph& graph, const std::vector<CompileTarget>& targets, KernelCache& cache,
                                   int parallel) {
  const auto start = std::chrono::steady_clock::now();
  JobKernelsReport report;
  const std::vector<std::pair<int, GeneratedKernel>> kernels = GenerateJobKernels(graph);
  report.nodes = static_cast<int>(kernels.size());
  // Distinct (kernel, target) pairs, in node order.
  std::vector<std::pair<const GeneratedKernel*, CompileTarget>> work;
  absl::flat_hash_set<std::string> seen;
  for (const auto& [node, kernel] : kernels) {
    if (seen.insert(kernel.name).second) ++report.kernels;
    for (const CompileTarget& t : targets) {
      if (seen.insert(absl::StrCat(kernel.name, "/", t.compute_capability)).second) work.emplace_back(&kernel, t);
    }
  }
  const int64_t compiles_before = cache.counters().compiles;
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  auto worker = [&] {
    for (size_t i = next.fetch_add(1); i < work.size(); i = next.fetch_add(1)) {
      absl::StatusOr<std::shared_ptr<const std::string>> cubin = cache.Cubin(*work[i].first, work[i].second);
      if (cubin.ok()) continue;
      absl::MutexLock lock(&mu);
      ++report.failed;
      if (report.first_error.empty()) report.first_error = std::string(cubin.status().message());
    }
  };
  const int threads = std::max(1, std::min<int>(parallel, static_cast<int>(work.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  // Other jobs may compile through the same cache meanwhile: an estimate.
  report.compiled = static_cast<int>(
      std::min<int64_t>(cache.counters().compiles - compiles_before, static_cast<int64_t>(work.size())));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace tandem::codegen
