// Options and counters of the CUDA Program (kernels/cuda_program.h), for the
// daemon's configuration and for tests.
//
// How a CUDA Program runs an iteration: the first iteration on a stream, and
// any iteration whose address table differs from the captured one, runs op
// by op (one launch per kernel); right after such a run the Program captures
// the whole iteration into a CUDA graph (stream capture on the lane stream,
// thread-local mode), and later iterations with the same address table on
// the same stream replay it with one cudaGraphLaunch. A failed capture is
// logged once and the Program stays op by op, except when the executable
// graph found no device memory (executable graphs live outside the daemon's
// pools, in what its reserve leaves): then the Program releases its graphs
// of other streams, runs op by op, and tries again after a backoff (16
// iterations, doubling to 1024). Node ranges (EnqueueNodes) follow the same
// rule range by range (range_graphs). One more reason to run op by op: the
// whole iteration's last op-by-op run chose convolution algorithms by cuDNN's
// heuristics because other jobs had work on the device
// (device::Stream::device_shared); the first iteration with the device quiet
// then runs op by op, measuring them, and is captured again.
//
// A Program keeps its graphs on at most `kept_lane_graphs` streams (the
// one it captures on and the most recently used others): a job that moves
// between lanes would otherwise leave an executable graph on every lane it
// ran on (512 inference jobs on 12 lanes of an H200 ran the device out of
// memory for new graphs).
//
// A captured graph holds raw device addresses: the tensors of its address
// table, the stream's BLAS workspace and the Program's error word. Whoever
// owns a Program must keep every buffer of an address table it enqueued
// alive while the Program may replay it, which is until it is given another
// table or destroyed (the daemon's memory pools keep a job's persistent
// tensors and its lane's arena for the job's life). Replaying over freed
// memory faults the GPU context and with it every job on the GPU.
//
// A Program must also outlive the completion (OnComplete or Synchronize) of
// every iteration it enqueued: that completion runs the Program's check of
// its error word.
#ifndef TANDEM_KERNELS_CUDA_CUDA_PROGRAM_OPTIONS_H_
#define TANDEM_KERNELS_CUDA_CUDA_PROGRAM_OPTIONS_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/program.h"

namespace tandem::cuda {

struct CudaProgramOptions {
  // Capture and replay CUDA graphs; false runs every iteration op by op.
  bool use_graphs = true;
  // With use_graphs, also capture each node range of Program::EnqueueNodes
  // (an iteration run in segments, for preemption) into a graph of its own,
  // replayed when the same range comes again over the same address table:
  // one capture per range, each pinning the same addresses as the whole
  // iteration's graph. False runs ranges op by op.
  bool range_graphs = true;
  // Time every node with events: iterations run op by op and the enqueueing
  // thread waits for each to finish, and the Program logs where the time went
  // (per op kind and the slowest nodes, with their labels) every
  // `profile_report_every` iterations and when it is destroyed. For finding
  // slow kernels, never for production: it serializes the lane. The daemon
  // turns it on for every job when TANDEM_PROFILE_KERNELS=1 is in its
  // environment.
  bool profile_nodes = false;
  int profile_report_every = 50;
  // The streams whose graphs a Program keeps (at least 1): coming back to a
  // stream it kept, with the same address table, replays without capturing.
  int kept_lane_graphs = 2;
};

struct CudaProgramStats {
  int64_t op_by_op_runs = 0;          // iterations enqueued kernel by kernel
  int64_t graph_launches = 0;         // iterations enqueued as one graph launch
  int64_t captures = 0;               // graphs captured (including updates of one)
  int64_t range_graph_launches = 0;   // node ranges enqueued as one graph launch
  int64_t range_captures = 0;         // graphs of node ranges captured
  int64_t capture_failures = 0;       // including those out of memory
  int64_t capture_out_of_memory = 0;  // failures for want of device memory (retried later)
  int64_t lane_graph_releases = 0;    // streams whose graphs were released (kept_lane_graphs, or memory)
  int64_t profiled_iterations = 0;    // iterations in the node profile (profile_nodes)
  double profiled_seconds = 0.0;      // the nodes' summed time over those iterations
};

absl::StatusOr<std::unique_ptr<Program>> CreateCudaProgram(const Graph& graph, device::Device& device,
                                                           const CudaProgramOptions& options);

// The counters of a Program made by CreateCudaProgram; zeros for any other.
CudaProgramStats GetCudaProgramStats(const Program& program);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_CUDA_PROGRAM_OPTIONS_H_
