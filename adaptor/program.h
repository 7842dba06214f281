// A Program is a job's iteration graph made ready to run on one device: the
// kernels resolved for the device's backend, and (CUDA) graph capture.
//
// The executor gives it the address of every value for this iteration
// (persistent tensors in the persistent pool, feeds and intermediates in the
// lane's arena, as the memory layout placed them), and it enqueues the whole
// iteration on a stream. Errors raised by kernels (bad indices) surface when
// the stream's OnComplete reports.
//
// Not thread-safe: one iteration of a job is enqueued at a time.
#ifndef TANDEM_ADAPTOR_PROGRAM_H_
#define TANDEM_ADAPTOR_PROGRAM_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "adaptor/graph.h"
#include "device/device.h"

namespace tandem {

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
};

// Resolves every node's kernel for `device`'s backend; UNIMPLEMENTED naming
// the op when a backend lacks one. `graph` must outlive the program.
absl::StatusOr<std::unique_ptr<Program>> CreateProgram(const Graph& graph, device::Device& device);

}  // namespace tandem

#endif  // TANDEM_ADAPTOR_PROGRAM_H_
