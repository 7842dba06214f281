#include "client/parallel_copy.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace tandem::client {

int CopyThreadsFor(size_t bytes, int max_threads) {
  if (max_threads <= 0) {
    const int hardware = static_cast<int>(std::thread::hardware_concurrency());
    max_threads = std::clamp(hardware / 2, 1, 8);
  }
  const size_t wanted = bytes / kMinBytesPerCopyThread;
  return static_cast<int>(std::clamp<size_t>(wanted, 1, static_cast<size_t>(max_threads)));
}

void ParallelCopy(void* dst, const void* src, size_t bytes, int max_threads) {
  const int threads = CopyThreadsFor(bytes, max_threads);
  if (threads == 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  // Chunks of whole 4-KiB pages, so that no two threads write one page.
  constexpr size_t kPage = 4096;
  const size_t chunk = ((bytes + threads - 1) / threads + kPage - 1) / kPage * kPage;
  auto copy = [&](size_t begin) {
    const size_t end = std::min(bytes, begin + chunk);
    if (begin < end) std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, end - begin);
  };
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  for (int k = 1; k < threads; ++k) helpers.emplace_back(copy, k * chunk);
  copy(0);
  for (std::thread& t : helpers) t.join();
}

}  // namespace tandem::client
