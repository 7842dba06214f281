// Shared helpers of the GPU tests: the per-run random seed, the "no GPU:
// skipping" rule, a small graph maker over the op registry, random inputs,
// runs of a graph on the CPU oracle and on a CUDA device, and the
// comparison of results (relative error, NaN, unwritten outputs).
//
// Not thread-safe; one test at a time.
#ifndef TANDEM_TESTS_GPU_GPU_TEST_UTIL_H_
#define TANDEM_TESTS_GPU_GPU_TEST_UTIL_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "device/device.h"
#include "gtest/gtest.h"
#include "ir/attrs.h"
#include "ir/graph.h"
#include "ir/make_attrs.h"
#include "kernels/program.h"

namespace tandem::gpu_test {

// Seeded from the clock once per process (or from TANDEM_TEST_SEED), and
// printed, so that a failure can be replayed.
uint64_t TestSeed();
std::mt19937_64& Rng();

// The first CUDA device, or nullptr (no driver, no GPU, no CUDA build).
device::Device* Gpu();

#define TANDEM_SKIP_WITHOUT_GPU()               \
  do {                                          \
    if (::tandem::gpu_test::Gpu() == nullptr) { \
      std::printf("no GPU: skipping\n");        \
      GTEST_SKIP() << "no GPU";                 \
    }                                           \
  } while (0)

// How a feed is filled with random data.
enum class Fill {
  kUniform,   // floats in [-1, 1); integers in [-50, 50] without -1
  kPositive,  // floats in [0.5, 2)
  kNonZero,   // floats with magnitude in [1, 1.5], either sign; integers in [-50, 50] but 0 and -1
  kLabels,    // int64 in [0, labels_upper)
  kSmall,     // floats in [-0.02, 0.02): weights of wide layers
};

using Bytes = std::vector<uint8_t>;

// Builds a Graph node by node; output types come from the op registry.
class GraphMaker {
 public:
  int Feed(TensorType type, Fill fill = Fill::kUniform, int64_t labels_upper = 0);
  // Adds `op`; returns its output value ids. Fails the test on a registry
  // error.
  std::vector<int> Add(const std::string& op, std::vector<int> inputs, Attrs attrs = {});
  // The first output. A refused op (the failure above says why) stops the
  // binary: the rest of the test would build on a value that is not there.
  int Add1(const std::string& op, std::vector<int> inputs, Attrs attrs = {}) {
    std::vector<int> outputs = Add(op, std::move(inputs), std::move(attrs));
    if (outputs.empty()) {
      std::fprintf(stderr, "GraphMaker: '%s' was refused; stopping\n", op.c_str());
      std::abort();
    }
    return outputs[0];
  }

  const Graph& graph() const { return graph_; }
  const TensorType& type(int value) const { return graph_.values[value].type; }

  // Random contents for every feed (empty for other values).
  std::vector<Bytes> RandomFeeds(std::mt19937_64& rng) const;

 private:
  struct FeedSpec {
    Fill fill;
    int64_t labels_upper;
  };
  Graph graph_;
  std::vector<FeedSpec> feed_specs_;  // parallel to graph_.feeds
};

// Every value of `graph` after running it on the CPU oracle with `feeds`.
absl::StatusOr<std::vector<Bytes>> RunOnCpu(const Graph& graph, const std::vector<Bytes>& feeds);

// Device buffers for every value of a graph on the GPU, and a stream.
class GpuRun {
 public:
  // `alias`: (output value, input value) pairs that share a buffer, as the
  // planner may place an in-place op's output on its input.
  GpuRun(const Graph& graph, std::vector<std::pair<int, int>> alias = {});
  ~GpuRun();

  device::Stream& stream() { return *stream_; }
  const std::vector<void*>& addresses() const { return addresses_; }
  // Gives `value` a fresh buffer (a changed address table).
  void Reallocate(int value);

  // Copies the feeds in and poisons every other value with 0xFF bytes.
  absl::Status Upload(const std::vector<Bytes>& feeds);
  // Enqueues one iteration and waits for its completion (OnComplete), whose
  // status is returned.
  absl::Status RunIteration(Program& program);
  absl::StatusOr<std::vector<Bytes>> Download();

 private:
  const Graph& graph_;
  std::unique_ptr<device::Stream> stream_;
  std::vector<void*> addresses_;
  std::vector<void*> owned_;
};

// Waits for everything enqueued on `stream` so far through OnComplete.
absl::Status WaitForCompletion(device::Device& device, device::Stream& stream);

// Whether `out` matches `ref` (both of `type`): for floats (bfloat16 and
// float16 compared as their float32 values), no NaN and no poison (0xFF
// bytes, a NaN in every float type) in `out`, and ||out - ref|| / ||ref|| <=
// tolerance; other dtypes exactly.
::testing::AssertionResult Matches(const Bytes& out, const Bytes& ref, const TensorType& type, double tolerance);

// One node output after one GPU run, next to the CPU oracle's.
struct OutputPair {
  const Graph* graph = nullptr;
  int node = 0;
  int value = 0;
  const Bytes* gpu = nullptr;
  const Bytes* ref = nullptr;
  bool replay = false;  // the second run, from the captured CUDA graph

  const TensorType& type() const { return graph->values[value].type; }
  // "node 3 (mm 'x') output float32[2, 3] (op by op)", for failure messages.
  std::string Where() const;
};

// The GPU tests' comparison: `maker`'s graph on the CPU oracle and on the
// GPU, op by op and then replayed from the captured CUDA graph, with `feeds`
// (random ones when empty) and `alias` (as GpuRun); `check` is called for
// every node output of both runs. Fails the test if a run fails, if no
// output was compared, or (with `expect_capture`) unless the Program ran
// once op by op, captured, and replayed once.
void CompareWithCpu(const GraphMaker& maker, const std::function<void(const OutputPair&)>& check,
                    std::vector<std::pair<int, int>> alias = {}, std::vector<Bytes> feeds = {},
                    bool expect_capture = true);

// CompareWithCpu with Matches on every node output: float64 within
// `tolerance64`, other floats within `tolerance32`, the rest exactly.
void CompareWithCpuWithin(const GraphMaker& maker, double tolerance32, double tolerance64,
                          std::vector<std::pair<int, int>> alias = {}, std::vector<Bytes> feeds = {});

// Bitwise equality.
::testing::AssertionResult SameBytes(const Bytes& a, const Bytes& b);

}  // namespace tandem::gpu_test

#endif  // TANDEM_TESTS_GPU_GPU_TEST_UTIL_H_
