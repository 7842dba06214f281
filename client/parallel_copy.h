// Copies large feeds into the shared-memory ring with several threads.
//
// One thread's memcpy moves about 10 GB/s, so a ResNet-50 batch (19 MB)
// takes ~2 ms to reach the ring, most of the batch's whole trip to the GPU.
// Split over a few threads the same copy takes a fraction of that on a
// machine with spare cores. Small copies stay on the calling thread (a
// thread costs more than it saves below a few MiB).
//
// Thread-safe: no shared state; the threads live for one call.
#ifndef TANDEM_CLIENT_PARALLEL_COPY_H_
#define TANDEM_CLIENT_PARALLEL_COPY_H_

#include <cstddef>

namespace tandem::client {

// Bytes per thread below which another thread is not worth starting.
inline constexpr size_t kMinBytesPerCopyThread = size_t{2} << 20;

// The threads a copy of `bytes` uses: one per kMinBytesPerCopyThread, at most
// max_threads (0: half the hardware threads, at most 8), at least 1.
int CopyThreadsFor(size_t bytes, int max_threads = 0);

// memcpy(dst, src, bytes) over CopyThreadsFor(bytes, max_threads) threads
// (the caller's among them). The ranges must not overlap.
void ParallelCopy(void* dst, const void* src, size_t bytes, int max_threads = 0);

}  // namespace tandem::client

#endif  // TANDEM_CLIENT_PARALLEL_COPY_H_
