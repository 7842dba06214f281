// The CPU backend of Program: an iteration (or a range of its nodes,
// Program::EnqueueNodes) is one work item on the lane's CPU stream, running
// each node's reference kernel in order on the stream's thread.
#ifndef TANDEM_KERNELS_CPU_CPU_PROGRAM_H_
#define TANDEM_KERNELS_CPU_CPU_PROGRAM_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/program.h"

namespace tandem::cpu {

absl::StatusOr<std::unique_ptr<Program>> CreateCpuProgram(const Graph& graph);

// Runs every node of `graph` now, then its updates, on the calling thread
// (tests and the CPU program's work item).
absl::Status RunGraphOnCpu(const Graph& graph, absl::Span<void* const> addresses);

}  // namespace tandem::cpu

#endif  // TANDEM_KERNELS_CPU_CPU_PROGRAM_H_
