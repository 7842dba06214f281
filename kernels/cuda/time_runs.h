// Timing candidate algorithms on the call's own operands (cuDNN engines in
// conv_algorithms.cc, cuBLASLt algorithms in blas.cc): the first time a
// problem runs on a device (its streams share the choice, device_choices.h),
// in an op-by-op run, never during capture.
#ifndef TANDEM_KERNELS_CUDA_TIME_RUNS_H_
#define TANDEM_KERNELS_CUDA_TIME_RUNS_H_

#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"

namespace tandem::cuda {

// The give-up time for a candidate against the incumbent's `incumbent_ms`:
// 4x it, plus 20 ms for a first launch's module load.
inline float GiveUpMs(float incumbent_ms) { return 4 * incumbent_ms + 20; }

// Longer than the host takes to record an event and enqueue one run.
inline constexpr int kTimedRunDelayUs = 50;

// The best of three timed runs of `run` (a callable returning true when it
// enqueued its work) after a first one, in milliseconds; negative when a
// run fails, or when the first run already took longer than `give_up_ms`
// (when positive): a candidate that slow cannot win, and the first run of
// a slow engine can take tens of milliseconds. Each run is enqueued behind
// a delay kernel of `delay_us`, so that the start event and the run
// wait on the device together and the span is the run's device time: on an
// idle stream the span also held the host's enqueueing of the run (a
// cuBLASLt or cuDNN call: several microseconds, as long as a small product
// itself), and the choice among candidates for small problems followed the
// host's noise.
template <typename Run>
float TimeRuns(cudaStream_t stream, Run&& run, float give_up_ms = -1.0f, int delay_us = kTimedRunDelayUs) {
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    cudaGetLastError();
    if (start != nullptr) cudaEventDestroy(start);
    return -1.0f;
  }
  float best = -1.0f;
  for (int i = 0; i < 4; ++i) {
    LaunchDelay(delay_us, stream);
    cudaEventRecord(start, stream);
    if (!run()) {
      best = -1.0f;
      break;
    }
    cudaEventRecord(stop, stream);
    float ms = 0.0f;
    if (cudaEventSynchronize(stop) != cudaSuccess || cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) {
      best = -1.0f;
      break;
    }
    if (i == 0 && give_up_ms > 0 && ms > give_up_ms) break;  // best stays negative
    if (i > 0 && (best < 0 || ms < best)) best = ms;
  }
  cudaGetLastError();
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_TIME_RUNS_H_
