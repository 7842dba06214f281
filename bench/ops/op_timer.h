// Times OpRows (op_rows.h) on a CUDA device, the way the daemon runs a
// job's iteration: a CUDA Program over buffers of every value, enqueued on
// one stream; the first run goes op by op and is captured, later runs replay
// the CUDA graph. Times come from device events around a batch of
// back-to-back iterations (after a warm-up), one batch after another; a
// row's time is the median over batches of the time per iteration.
//
// Feeds are filled by device-to-device copies from a pool of random floats
// made once (FeedFiller), since making gigabytes of random numbers on the
// host would take longer than the measurements.
//
// Everything runs on gpu_test::Gpu(), the first CUDA device (the device the
// buffers of gpu_test::GpuRun live on). Not thread-safe; one row at a time.
#ifndef TANDEM_BENCH_OPS_OP_TIMER_H_
#define TANDEM_BENCH_OPS_OP_TIMER_H_

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/ops/op_rows.h"
#include "device/device.h"

namespace tandem::bench {

struct TimingOptions {
  int iterations = 0;      // iterations per timed batch; 0: enough for about `batch_ms`
  int batches = 5;         // timed batches; the row's time is their median
  double batch_ms = 20.0;  // target length of a batch when `iterations` is 0
  int warmup = 3;          // untimed iterations first (the first captures the graph)
};

struct Timing {
  double ms = 0;                 // median over batches, ms per iteration
  std::vector<double> batch_ms;  // each batch's ms per iteration
  int iterations = 0;            // per batch
};

struct RowTiming {
  Timing replay;          // CUDA graph replay (how the daemon runs iterations)
  Timing eager;           // op by op, one launch per kernel (same iteration count)
  bool replayed = false;  // false: the capture failed and `replay` ran op by op too
};

// Random float32, bfloat16 and float16 data resident on the device, copied
// into feeds (int64 labels are made on the host).
class FeedFiller {
 public:
  // FAILED_PRECONDITION without a CUDA device.
  static absl::StatusOr<std::unique_ptr<FeedFiller>> Create(uint64_t seed);
  ~FeedFiller();
  FeedFiller(const FeedFiller&) = delete;
  FeedFiller& operator=(const FeedFiller&) = delete;

  // Fills feed `spec` of `graph` at `address`, on `stream`; returns after
  // the stream has run the fill.
  absl::Status Fill(device::Stream& stream, const Graph& graph, const FeedSpec& spec, void* address);

 private:
  FeedFiller(device::Device& device, uint64_t seed) : device_(device), rng_(seed) {}

  device::Device& device_;
  std::mt19937_64 rng_;
  // Per dtype (float32, bfloat16, float16), indexed by gpu_test::Fill; null
  // for kLabels.
  std::vector<void*> pools_, bf16_pools_, f16_pools_;
};

// Times `row` (graph replay, then op by op). Errors: the registry rejected
// the row's graph, a buffer did not fit, the Program or a kernel failed.
absl::StatusOr<RowTiming> TimeRow(const OpRow& row, FeedFiller& filler, const TimingOptions& options);

// What a Program's first iteration on a stream costs the enqueuing thread
// (host milliseconds of Program::Enqueue: the op-by-op run that sets up the
// stream's per-shape state, and the capture), as when the daemon first runs
// a job in a lane. `first_ms`: on the row's own stream, where the device
// meets the row's shapes for the first time (algorithm searches, unless an
// earlier row had the same shapes); `other_ms`: then on each of `streams`,
// which have run other rows before (their handles and workspaces exist) and
// take the first stream's choices; `replay_ms`: a graph replay's enqueue on
// the last of them.
struct FirstUse {
  double first_ms = 0;
  std::vector<double> other_ms;
  double replay_ms = 0;
};

// Times `row` as above. The streams are the caller's, kept across rows.
absl::StatusOr<FirstUse> TimeFirstUse(const OpRow& row, FeedFiller& filler,
                                      const std::vector<device::Stream*>& streams);

// Times a device-to-device copy of `bytes` (cudaMemcpyAsync): the bandwidth
// reference of the memory-bound rows.
absl::StatusOr<Timing> TimeDeviceCopy(int64_t bytes, const TimingOptions& options);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_OPS_OP_TIMER_H_
