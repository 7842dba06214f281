#include "client/shm_ring.h"

namespace tandem::client {

std::optional<uint64_t> ShmRing::Allocate(uint64_t owner, uint64_t bytes) {
  constexpr uint64_t kAlign = 256;
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  if (bytes == 0 || bytes > capacity_) return std::nullopt;
  uint64_t begin;
  if (slices_.empty()) {
    begin = 0;
  } else {
    uint64_t head = slices_.back().end;     // first free byte after the newest
    uint64_t tail = slices_.front().begin;  // first used byte of the oldest
    if (head > tail) {
      // Used: [tail, head). Free: [head, capacity) and [0, tail).
      if (capacity_ - head >= bytes) {
        begin = head;
      } else if (tail >= bytes) {
        begin = 0;
      } else {
        return std::nullopt;
      }
    } else {
      // Wrapped: used [tail, capacity) and [0, head). Free: [head, tail).
      if (tail - head >= bytes) {
        begin = head;
      } else {
        return std::nullopt;
      }
    }
  }
  slices_.push_back(Slice{owner, begin, begin + bytes, false});
  return begin;
}

void ShmRing::Release(uint64_t owner) {
  for (Slice& s : slices_) {
    if (s.owner == owner) s.released = true;
  }
  while (!slices_.empty() && slices_.front().released) slices_.pop_front();
}

uint64_t ShmRing::in_use() const {
  uint64_t total = 0;
  for (const Slice& s : slices_) {
    if (!s.released) total += s.end - s.begin;
  }
  return total;
}

}  // namespace tandem::client
