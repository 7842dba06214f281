#include "memory/range_allocator.h"

#include <limits>

#include "memory/byte_format.h"

namespace tandem::memory {

RangeAllocator::RangeAllocator(uint64_t size, uint64_t alignment)
    : size_(size & ~(alignment - 1)), alignment_(alignment) {
  if (size_ > 0) Insert(0, size_);
}

uint64_t RangeAllocator::Aligned(uint64_t bytes) const { return bytes == 0 ? alignment_ : AlignUp(bytes, alignment_); }

void RangeAllocator::Insert(uint64_t offset, uint64_t bytes) {
  by_offset_.emplace(offset, bytes);
  by_size_.emplace(bytes, offset);
  free_bytes_ += bytes;
}

void RangeAllocator::Erase(std::map<uint64_t, uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  free_bytes_ -= it->second;
  by_offset_.erase(it);
}

void RangeAllocator::Carve(std::map<uint64_t, uint64_t>::iterator it, uint64_t offset, uint64_t bytes) {
  const uint64_t start = it->first;
  const uint64_t end = it->first + it->second;
  Erase(it);
  if (offset > start) Insert(start, offset - start);
  if (offset + bytes < end) Insert(offset + bytes, end - (offset + bytes));
}

std::optional<uint64_t> RangeAllocator::Allocate(uint64_t bytes, End end) {
  const uint64_t need = Aligned(bytes);
  auto fit = by_size_.lower_bound({need, 0});
  if (fit == by_size_.end()) return std::nullopt;
  if (end == End::kHigh) {
    // The highest-offset range among those of the best size.
    auto last = by_size_.upper_bound({fit->first, std::numeric_limits<uint64_t>::max()});
    fit = std::prev(last);
  }
  auto it = by_offset_.find(fit->second);
  const uint64_t offset = end == End::kLow ? it->first : it->first + it->second - need;
  Carve(it, offset, need);
  return offset;
}

std::optional<uint64_t> RangeAllocator::AllocateHighest(uint64_t bytes) {
  const uint64_t need = Aligned(bytes);
  for (auto it = by_offset_.rbegin(); it != by_offset_.rend(); ++it) {
    if (it->second < need) continue;
    const uint64_t offset = it->first + it->second - need;
    Carve(std::prev(it.base()), offset, need);
    return offset;
  }
  return std::nullopt;
}

bool RangeAllocator::AllocateAt(uint64_t offset, uint64_t bytes) {
  const uint64_t need = Aligned(bytes);
  if (offset % alignment_ != 0) return false;
  auto it = by_offset_.upper_bound(offset);
  if (it == by_offset_.begin()) return false;
  --it;
  if (offset + need > it->first + it->second) return false;
  Carve(it, offset, need);
  return true;
}

bool RangeAllocator::Free(uint64_t offset, uint64_t bytes) {
  const uint64_t need = Aligned(bytes);
  if (offset % alignment_ != 0 || offset > size_ || need > size_ - offset) return false;
  uint64_t start = offset;
  uint64_t end = offset + need;
  auto next = by_offset_.lower_bound(offset);
  if (next != by_offset_.end() && next->first < end) return false;  // overlaps a free range
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > offset) return false;
    if (prev->first + prev->second == offset) {
      start = prev->first;
      Erase(prev);
    }
  }
  if (next != by_offset_.end() && next->first == end) {
    end = next->first + next->second;
    Erase(next);
  }
  Insert(start, end - start);
  return true;
}

uint64_t RangeAllocator::largest_free() const { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }

uint64_t RangeAllocator::FreeBytesStartingAt(uint64_t offset) const {
  auto it = by_offset_.find(offset);
  return it == by_offset_.end() ? 0 : it->second;
}

uint64_t RangeAllocator::FreeBytesEndingAt(uint64_t offset) const {
  auto it = by_offset_.lower_bound(offset);
  if (it == by_offset_.begin()) return 0;
  --it;
  return it->first + it->second == offset ? it->second : 0;
}

bool RangeAllocator::IsFree(uint64_t offset, uint64_t bytes) const {
  auto it = by_offset_.upper_bound(offset);
  if (it == by_offset_.begin()) return false;
  --it;
  return offset + bytes <= it->first + it->second;
}

std::vector<Range> RangeAllocator::FreeRanges() const {
  std::vector<Range> ranges;
  ranges.reserve(by_offset_.size());
  for (const auto& [offset, bytes] : by_offset_) ranges.push_back({offset, bytes});
  return ranges;
}

std::optional<Range> RangeAllocator::LowestFitBelow(uint64_t limit, uint64_t bytes) const {
  const uint64_t need = Aligned(bytes);
  for (const auto& [offset, free] : by_offset_) {
    if (offset + need > limit) break;
    if (free >= need) return Range{offset, free};
  }
  return std::nullopt;
}

}  // namespace tandem::memory
