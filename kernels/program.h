// A Program is a job's iteration graph made ready to run on one device: the
// kernels resolved for the device's backend, and (CUDA) graph capture.
//
// The executor gives it the address of every value for this iteration
// (persistent tensors in the persistent pool, feeds and intermediates in the
// lane's arena, as the memory layout placed them), and it enqueues the
// iteration on a stream: whole (Enqueue), or in consecutive ranges of nodes
// (EnqueueNodes), so that the executor can pause a best-effort iteration
// between two ranges while a high-priority one runs (op-granularity
// preemption, docs/scheduling.md). Errors raised by kernels (bad indices)
// surface when the stream's OnComplete reports.
//
// Not thread-safe: one iteration of a job is enqueued at a time, from one
// thread (the device's executor); WarmStream's rule is below.
#ifndef TANDEM_KERNELS_PROGRAM_H_
#define TANDEM_KERNELS_PROGRAM_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "device/device.h"
#include "ir/graph.h"

namespace tandem {

// How a Program's iterations have been enqueued so far: the CUDA backend's
// graph replays against kernel-by-kernel runs (zeros on other backends).
struct ProgramCounters {
  int64_t graph_launches = 0;  // whole iterations and node ranges replayed as one CUDA graph
  int64_t op_by_op_runs = 0;   // iterations started kernel by kernel (a new address table, or no graph)
  int64_t captures = 0;        // graphs captured (whole iterations and node ranges)
  // Host seconds the enqueuing thread spent on whole iterations run kernel
  // by kernel and then captured (the run, recording, instantiating or
  // updating, uploading): what a lane's thread is held up by when a job
  // arrives on it or its addresses change.
  double recapture_seconds = 0;
  // Of those: the kernel-by-kernel runs', and the graphs' (recording,
  // instantiating or updating, uploading). The rest went to releasing the
  // job's graphs on other streams.
  double recapture_run_seconds = 0;
  double recapture_graph_seconds = 0;
  int64_t warmed_nodes = 0;  // nodes WarmStream set up on a stream
};

class Program {
 public:
  virtual ~Program() = default;
  // Enqueues every node of the graph on `stream`, then the graph's updates
  // (value -> persistent tensor copies). `addresses[v]` is where value v
  // lives; all must be non-null and stay valid until the stream has run the
  // iteration. An iteration whose kernels report bad data (an out-of-range
  // label) must leave the persistent tensors unchanged: its updates are
  // skipped, and the stream's next OnComplete reports INVALID_ARGUMENT.
  virtual absl::Status Enqueue(device::Stream& stream, absl::Span<void* const> addresses) = 0;

  // Enqueues nodes [begin, end) of the graph on `stream`, with the updates
  // the update schedule places after them (compiler/update_schedule.h). An
  // iteration run in ranges covers [0, num_nodes) with consecutive ranges
  // (each one's begin is the previous one's end), all on one stream with one
  // address table, and nothing else of this program in between; it has the
  // whole iteration's results and semantics, bit for bit. A range with
  // begin == 0 starts the iteration and one with end == num_nodes ends it (a
  // graph without nodes is the single range [0, 0)). Other work may run on
  // the stream between two ranges if it leaves the iteration's addresses
  // alone.
  //
  // Bad data: the iteration leaves the persistent tensors unchanged and
  // fails. The CPU backend fails the range holding the node that found it
  // (its OnComplete reports INVALID_ARGUMENT) and turns every later range of
  // that iteration into a no-op that fails with ABORTED; the CUDA backend
  // reports it at the OnComplete after the last range. Callers stop
  // enqueueing ranges after a failure. INVALID_ARGUMENT for a range outside
  // [0, num_nodes].
  virtual absl::Status EnqueueNodes(device::Stream& stream, absl::Span<void* const> addresses, int begin, int end) = 0;

  // Readies `stream` for this program's first iteration there without
  // running anything on it: the per-stream state its kernels would otherwise
  // set up during that iteration, holding up the thread that enqueues it
  // (CUDA: each convolution's cuDNN plan, built from the algorithm another
  // stream of the device chose; 0.2-5 ms each on an H200, 20-30 ms for a
  // ResNet-18's forward pass). In steps, so that the caller can put other
  // work of the stream's thread between them: call with node = 0, then with
  // each returned node until it returns -1; a step does the costly setup of
  // at most one node (a stream set up already takes one cheap step).
  // Optional: the first iteration does whatever is not done. It touches only
  // `stream`'s state: it may run on that stream's thread while other threads
  // enqueue this program's iterations on other streams. The default has
  // nothing to do.
  virtual absl::StatusOr<int> WarmStream(device::Stream& stream, int node) { return -1; }

  // The counters so far; unlike the rest, callable from any thread.
  virtual ProgramCounters Counters() const { return {}; }
};

// Resolves every node's kernel for `device`'s backend; UNIMPLEMENTED naming
// the op when a backend lacks one. `graph` must outlive the program.
absl::StatusOr<std::unique_ptr<Program>> CreateProgram(const Graph& graph, device::Device& device);

}  // namespace tandem

#endif  // TANDEM_KERNELS_PROGRAM_H_
