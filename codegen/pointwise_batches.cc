#include "codegen/pointwise_batches.h"

#include <cstdint>

#include "codegen/pointwise_kernel.h"

namespace tandem::codegen {
namespace {

struct Range {
  uintptr_t begin;
  uintptr_t end;
};

bool Overlap(const Range& a, const Range& b) { return a.begin < b.end && b.begin < a.end; }

class RunBuilder {
 public:
  RunBuilder(const Graph& graph, absl::Span<void* const> addresses) : graph_(graph), addresses_(addresses) {}

  void Reset() {
    reads_.clear();
    writes_.clear();
    produced_.clear();
  }

  // Whether node `i` can join the run so far (empty: always).
  bool Admits(int i) const {
    const Node& n = graph_.nodes[i];
    for (int v : n.inputs) {
      for (int p : produced_) {
        if (p == v) return false;
      }
    }
    for (int v : n.outputs) {
      const Range w = RangeOf(v);
      for (const Range& r : reads_) {
        if (Overlap(w, r)) return false;
      }
      for (const Range& o : writes_) {
        if (Overlap(w, o)) return false;
      }
    }
    for (int v : n.inputs) {
      const Range r = RangeOf(v);
      for (const Range& o : writes_) {
        if (Overlap(r, o)) return false;
      }
    }
    return true;
  }

  void Add(int i) {
    const Node& n = graph_.nodes[i];
    for (int v : n.inputs) reads_.push_back(RangeOf(v));
    for (int v : n.outputs) {
      writes_.push_back(RangeOf(v));
      produced_.push_back(v);
    }
  }

 private:
  Range RangeOf(int v) const {
    const uintptr_t at = reinterpret_cast<uintptr_t>(addresses_[v]);
    return {at, at + graph_.values[v].type.bytes()};
  }

  const Graph& graph_;
  absl::Span<void* const> addresses_;
  std::vector<Range> reads_, writes_;
  std::vector<int> produced_;
};

}  // namespace

std::vector<std::pair<int, int>> PlanPointwiseBatches(const Graph& graph, int begin, int end,
                                                      const std::vector<std::string>& kernel_names,
                                                      absl::Span<void* const> addresses,
                                                      const std::function<bool(int)>& copies_after) {
  std::vector<std::pair<int, int>> runs;
  RunBuilder run(graph, addresses);
  int first = -1;  // the open run's first node
  auto close = [&](int last) {
    if (first >= 0 && last > first) runs.emplace_back(first, last);
    first = -1;
    run.Reset();
  };
  for (int i = begin; i < end; ++i) {
    const std::string& name = kernel_names[i];
    if (first >= 0 && (name != kernel_names[first] || i - first >= kPointwiseBatchMax || !run.Admits(i))) {
      close(i - 1);
    }
    if (name.empty()) continue;
    if (first < 0) first = i;
    run.Add(i);
    // A copy due after node i must follow it before the next node runs.
    if (copies_after(i)) close(i);
  }
  close(end - 1);
  return runs;
}

}  // namespace tandem::codegen
