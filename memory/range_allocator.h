// Best-fit allocation of aligned ranges inside one address range [0, size).
//
// The core of the persistent pool and of the lanes: both carve their blocks
// from the one device region a DeviceMemory owns. Free ranges are kept
// coalesced (no two free ranges touch), indexed by offset (to coalesce) and by
// size (to find the best fit in O(log n)). Every offset and size is a multiple
// of the alignment given at construction; requests are rounded up to it and
// a request of 0 bytes takes one alignment unit, so every block has a
// distinct, non-empty range.
//
// The allocator knows only free ranges: callers remember what they hold.
// Thread-safety: none; the owner serializes calls.
#ifndef TANDEM_MEMORY_RANGE_ALLOCATOR_H_
#define TANDEM_MEMORY_RANGE_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace tandem::memory {

struct Range {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t end() const { return offset + bytes; }
  bool operator==(const Range& other) const = default;
};

class RangeAllocator {
 public:
  // Which end of the chosen free range a block takes, and which range wins
  // among equally good fits: kLow keeps blocks toward offset 0 (persistent
  // tensors), kHigh toward the top (lane arenas), so the two kinds meet in
  // the middle instead of interleaving.
  enum class End { kLow, kHigh };

  // `alignment` is a power of two; `size` is rounded down to it.
  RangeAllocator(uint64_t size, uint64_t alignment);

  uint64_t size() const { return size_; }
  uint64_t alignment() const { return alignment_; }
  // `bytes` rounded up to the alignment; 0 becomes one alignment unit.
  uint64_t Aligned(uint64_t bytes) const;

  // Best fit: the smallest free range that holds Aligned(bytes); nullopt when
  // none does (the allocator is unchanged).
  std::optional<uint64_t> Allocate(uint64_t bytes, End end = End::kLow);
  // Not best fit: the highest free range that holds Aligned(bytes), at its
  // top end (compaction's way to push lane arenas up); nullopt when none.
  std::optional<uint64_t> AllocateHighest(uint64_t bytes);
  // Takes exactly [offset, offset + Aligned(bytes)); false (and no change)
  // unless that range is aligned and entirely free.
  bool AllocateAt(uint64_t offset, uint64_t bytes);
  // Returns [offset, offset + Aligned(bytes)) to the free ranges, merging it
  // with free neighbours. False (and no change) when the range is out of
  // bounds, misaligned or overlaps a free range (a double free).
  bool Free(uint64_t offset, uint64_t bytes);

  uint64_t free_bytes() const { return free_bytes_; }
  uint64_t used_bytes() const { return size_ - free_bytes_; }
  uint64_t largest_free() const;
  // Size of the free range that starts exactly at `offset` / ends exactly at
  // `offset`; 0 when there is none.
  uint64_t FreeBytesStartingAt(uint64_t offset) const;
  uint64_t FreeBytesEndingAt(uint64_t offset) const;
  // True when [offset, offset + bytes) lies inside one free range.
  bool IsFree(uint64_t offset, uint64_t bytes) const;
  // Free ranges in offset order.
  std::vector<Range> FreeRanges() const;
  // The lowest free range that lies entirely below `limit` and holds
  // Aligned(bytes); nullopt when none does.
  std::optional<Range> LowestFitBelow(uint64_t limit, uint64_t bytes) const;

 private:
  void Insert(uint64_t offset, uint64_t bytes);
  void Erase(std::map<uint64_t, uint64_t>::iterator it);
  // Takes [offset, offset + bytes) out of the free range `it`, which holds it.
  void Carve(std::map<uint64_t, uint64_t>::iterator it, uint64_t offset, uint64_t bytes);

  uint64_t size_;
  uint64_t alignment_;
  uint64_t free_bytes_ = 0;
  std::map<uint64_t, uint64_t> by_offset_;           // offset -> bytes
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (bytes, offset)
};

}  // namespace tandem::memory

#endif  // TANDEM_MEMORY_RANGE_ALLOCATOR_H_
