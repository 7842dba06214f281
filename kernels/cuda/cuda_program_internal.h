// Internals of the CUDA Program (cuda_program.cc, cuda_program_graphs.cc),
// not for use elsewhere: the Program class and what it keeps per stream.
#ifndef TANDEM_KERNELS_CUDA_CUDA_PROGRAM_INTERNAL_H_
#define TANDEM_KERNELS_CUDA_CUDA_PROGRAM_INTERNAL_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/update_schedule.h"
#include "device/cuda/cuda_stream.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_program_options.h"
#include "kernels/cuda/error_slots.h"
#include "kernels/cuda/pointwise_batcher.h"
#include "kernels/program.h"

namespace tandem::cuda::program_internal {

using device::CudaStream;

// A captured graph and the address table it was captured with.
struct CapturedGraph {
  std::vector<void*> captured;
  cudaGraphExec_t exec = nullptr;

  bool Replays(absl::Span<void* const> addresses) const {
    return exec != nullptr && std::equal(addresses.begin(), addresses.end(), captured.begin(), captured.end());
  }
};

// What the Program keeps per stream it ran on.
struct LaneState {
  uint64_t stream_serial = 0;
  int64_t* error_word = nullptr;            // device int64[2]
  int64_t* error_host = nullptr;            // pinned int64[2 * kErrorSlots]: one read-back per slot
  int64_t* error_host_on_device = nullptr;  // error_host as the device addresses it
  // The device word is zero once the enqueued work ran: no iteration began
  // since the last read-back (which zeroes it). False at first (a fresh
  // allocation) and from an iteration's first node to its read-back.
  bool word_zero = false;
  std::shared_ptr<ErrorSlots> error_slots;  // shared with the deferred checks
  uint64_t last_used = 0;                   // the Program's use count at this stream's last iteration
  CapturedGraph whole;                      // the whole iteration
  // The last op-by-op run of the whole iteration made convolution choices
  // without a search (the device was shared): the next iteration with the
  // device quiet runs op by op, measuring them, and is captured again.
  bool provisional = false;
  absl::flat_hash_map<std::pair<int, int>, CapturedGraph> ranges;  // [begin, end) of EnqueueNodes
};

// The Program of a CUDA device (CreateCudaProgram).
class CudaProgram final : public Program {
 public:
  CudaProgram(const Graph& graph, device::Device& device, std::vector<CudaKernelFn> kernels,
              std::vector<CudaWarmFn> warmers, bool checks_data, const CudaProgramOptions& options);

  ~CudaProgram() override;

  absl::Status Enqueue(device::Stream& stream, absl::Span<void* const> addresses) override;

  // A range replays its own graph when it ran before over the same address
  // table (a preempted iteration's segments are the same ranges every
  // iteration, so each is captured once); else it runs op by op and is
  // captured. Not profiled (profile_nodes).
  absl::Status EnqueueNodes(device::Stream& stream, absl::Span<void* const> addresses, int begin, int end) override;

  // The nodes with a warmer (FindCudaWarmer), each given its types and no
  // addresses; a step ends after the first that set something up (nodes
  // whose state the stream has already cost a lookup each); nothing is
  // enqueued.
  absl::StatusOr<int> WarmStream(device::Stream& stream, int node) override;

  const CudaProgramStats& stats() const { return stats_; }
  ProgramCounters Counters() const override;

 private:
  // Checks an address table against the graph and `stream` against the
  // device, and makes the device current; the stream as a CudaStream.
  absl::StatusOr<CudaStream*> CheckAndSelect(device::Stream& stream, absl::Span<void* const> addresses);

  // `stream` as a CudaStream of this program's device, made current.
  absl::StatusOr<CudaStream*> SelectStream(device::Stream& stream);

  // An iteration's start, before its first node is enqueued (outside any
  // capture): zeroes the error word unless the last read-back left it zero.
  absl::Status BeginIteration(CudaStream& stream, LaneState& state);

  // An iteration's end, once per iteration, after its last node was
  // enqueued: the read-back of the error word into a slot of its own, whose
  // check runs at the stream's next completion; the word is zero after it.
  absl::Status EndIteration(CudaStream& stream, LaneState& state);

  // A graph replay when the address table is the captured one, else an
  // op-by-op run followed by a capture.
  absl::Status EnqueueFast(CudaStream& stream, LaneState& state, absl::Span<void* const> addresses);

  // Captures nodes [begin, end) into `graph`; true when it worked. A failed
  // capture is counted and logged, and turns capturing off for this Program
  // (its iterations and ranges then run op by op), unless it failed for
  // want of device memory: then the Program's graphs of other streams are
  // released and capturing resumes after a backoff (cuda_program_options.h).
  bool TryCapture(CudaStream& stream, LaneState& state, CapturedGraph& graph, absl::Span<void* const> addresses,
                  int begin, int end);

  // Releases the graphs of every stream but `current` and the `others` most
  // recently used other streams that hold graphs.
  void KeepGraphsOf(const LaneState& current, int others);

  // Whether the stream has an executable graph, of its whole iteration or of a range.
  static bool HoldsGraphs(const LaneState& state);

  // Destroys a stream's executable graphs (one still running is freed when
  // it completes); its next iteration there runs op by op and captures.
  static void ReleaseGraphs(LaneState& state);

  // An op-by-op run with an event before every node, waited for here; adds
  // each node's time to the profile (the first run, which chooses algorithms
  // and grows workspaces, is left out).
  absl::Status EnqueueProfiled(CudaStream& stream, LaneState& state, absl::Span<void* const> addresses);

  // The profile so far: per op kind and the slowest nodes, per iteration.
  void LogProfile() const;

  // The state of `stream`, made on first use. A stream seen before under
  // another serial (a new stream at a recycled address) starts afresh.
  absl::StatusOr<LaneState*> StateFor(CudaStream& stream);

  // Frees a stream's graphs (ReleaseGraphs), its error word and its host slots.
  void Release(LaneState& state);

  // Enqueues nodes [begin, end) kernel by kernel, each followed by the
  // updates scheduled after it (a whole iteration is [0, nodes): also what
  // stream capture records). The error word is zero before the first node
  // (BeginIteration) and read back after the last (EndIteration), both
  // outside the captured graphs.
  // With `events` (nodes + 1 of them), records events[i] before node i and
  // events[end] after the last node.
  absl::Status LaunchNodes(CudaStream& stream, LaneState& state, absl::Span<void* const> addresses, int begin, int end,
                           cudaEvent_t* events = nullptr);

  // One update (a new weight into its persistent tensor) as soon as the
  // schedule allows (compiler/update_schedule.h), skipped on the device when a
  // kernel reported bad data, so a failed iteration leaves the job's state
  // as it was. In-place updates have one address and need no copy.
  absl::Status EnqueueUpdate(int update, LaneState& state, absl::Span<void* const> addresses, cudaStream_t native);

  // Records nodes [begin, end) into a graph over `addresses` (nothing runs),
  // and makes it `target`'s to replay: an update of its executable graph
  // when the topology allows, else a new one.
  absl::Status Capture(CudaStream& stream, LaneState& state, CapturedGraph& target, absl::Span<void* const> addresses,
                       int begin, int end);

  // Runs when the iteration's completion reports (no CUDA calls here).
  absl::Status CheckErrorWord(const int64_t* host) const;

  const Graph& graph_;
  device::Device& device_;
  const std::vector<CudaKernelFn> kernels_;  // one per node
  const std::vector<CudaWarmFn> warmers_;    // one per node; nullptr: nothing to warm (FindCudaWarmer)
  const bool checks_data_;                   // some node may write the error word
  const UpdateSchedule updates_ = ScheduleUpdates(graph_);
  const CudaProgramOptions options_;
  const PointwiseBatcher batcher_;  // alike fused nodes in one launch
  absl::flat_hash_map<CudaStream*, std::unique_ptr<LaneState>> lanes_;
  bool capture_disabled_ = false;
  // Iterations (and ranges) enqueued so far; no capture is tried before
  // capture_retry_at_ (a backoff after a capture out of memory).
  uint64_t uses_ = 0;
  uint64_t capture_retry_at_ = 0;
  uint64_t capture_backoff_ = 0;
  static constexpr uint64_t kMinCaptureBackoff = 16;
  static constexpr uint64_t kMaxCaptureBackoff = 1024;
  CudaProgramStats stats_;
  // Counters() for other threads (stats_ is the executor thread's).
  static void Count(std::atomic<int64_t>& counter) { counter.fetch_add(1, std::memory_order_relaxed); }
  void CountOpByOp() {
    ++stats_.op_by_op_runs;
    Count(op_by_op_runs_);
  }
  std::atomic<int64_t> graph_launches_{0}, op_by_op_runs_{0}, captures_{0};
  std::atomic<int64_t> recapture_ns_{0};        // ProgramCounters::recapture_seconds
  std::atomic<int64_t> recapture_run_ns_{0};    // ... its recapture_run_seconds
  std::atomic<int64_t> recapture_graph_ns_{0};  // ... its recapture_graph_seconds
  int64_t last_capture_ns_ = 0;                 // the last Capture() call's (executor thread)
  // WarmStream steps that readied a node; atomic: the lanes' threads warm
  // their own streams for one program at the same time.
  std::atomic<int64_t> warmed_nodes_{0};
  // The profile (options_.profile_nodes).
  std::vector<cudaEvent_t> profile_events_;
  std::vector<double> node_seconds_;  // summed over the profiled iterations
  int profiled_runs_ = 0;
  int profiled_iterations_ = 0;
};

}  // namespace tandem::cuda::program_internal

#endif  // TANDEM_KERNELS_CUDA_CUDA_PROGRAM_INTERNAL_H_
