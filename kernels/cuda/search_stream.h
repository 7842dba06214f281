// Where algorithm searches run: cuDNN's cudnnFind and its engines' timing
// (conv_algorithms.cc) and cuBLASLt's timed candidates (blas.cc). A search
// happens the first time a problem runs on a device, in a job's first
// op-by-op iteration, and runs every candidate on the call's tensors: tens
// of milliseconds of kernels on all SMs per convolution. On the lane's own
// stream those kernels held up the other lanes: while a DenseNet-121
// joined, a running ResNet-18's steps took 35-55 ms of device time instead
// of about 8 (bench/results/2026-12-07-h100-join-causes.json; with the
// heuristics' choices instead, no search, that was gone). So a search runs
// on a stream of the device's lowest priority, which no lane has (the CUDA
// device keeps that level: device/cuda/cuda_device.cc): the hardware
// dispatches the lanes' thread blocks ahead of the search's as SMs free
// up (running blocks are not preempted). The search stream waits for the
// lane's work queued so far, and the lane's later work waits for the
// search, so the order of the lane's work is kept.
//
// TANDEM_SEARCH_STREAM=0 in the daemon's environment searches on the lane's
// stream, as before.
#ifndef TANDEM_KERNELS_CUDA_SEARCH_STREAM_H_
#define TANDEM_KERNELS_CUDA_SEARCH_STREAM_H_

#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"

namespace tandem::cuda {

// One lane stream's search stream and the two events that order it (made on
// first use; owned by the lane stream's library state: conv_plans.h's
// CudnnState, blas.cc's BlasState). Thread-compatible: one lane's thread
// uses it.
class SearchStream {
 public:
  SearchStream() = default;
  SearchStream(const SearchStream&) = delete;
  SearchStream& operator=(const SearchStream&) = delete;
  ~SearchStream();

  // The stream to search on for the lane stream `work` of device `ordinal`,
  // after `work`'s queue so far; `work` itself when searches stay on the
  // lane's stream (the switch above, or a device with one priority level).
  absl::StatusOr<cudaStream_t> Enter(int ordinal, cudaStream_t work);
  // `work`'s later work waits for what was queued on the search stream
  // since Enter. Nothing to do when Enter gave `work`.
  absl::Status Leave(cudaStream_t work);

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t entered_ = nullptr;
  cudaEvent_t left_ = nullptr;
  bool unused_ = false;  // the device has no level below the lanes'
};

// Enter on construction, Leave on destruction (an error of either falls
// back to, or is logged on, the lane's stream).
class SearchScope {
 public:
  SearchScope(SearchStream& search, int ordinal, cudaStream_t work);
  SearchScope(const SearchScope&) = delete;
  SearchScope& operator=(const SearchScope&) = delete;
  ~SearchScope();

  // Where the search's work goes.
  cudaStream_t stream() const { return stream_; }

 private:
  SearchStream& search_;
  cudaStream_t work_;
  cudaStream_t stream_;
};

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_SEARCH_STREAM_H_
