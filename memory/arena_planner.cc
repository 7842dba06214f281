#include "memory/arena_planner.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "memory/byte_format.h"
#include "memory/range_allocator.h"

namespace tandem::memory {
namespace {

bool Conflict(const BufferLifetime& a, const BufferLifetime& b) { return a.first <= b.last && b.first <= a.last; }

uint64_t PeakOf(absl::Span<const BufferLifetime> buffers, const std::vector<uint64_t>& offsets, uint64_t alignment) {
  uint64_t peak = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].bytes == 0) continue;
    peak = std::max(peak, offsets[i] + AlignUp(buffers[i].bytes, alignment));
  }
  return peak;
}

// Largest first; among equal sizes the longer-lived first, then by index so
// the plan is deterministic.
std::vector<size_t> BySizeDescending(absl::Span<const BufferLifetime> buffers) {
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].last - buffers[a].first > buffers[b].last - buffers[b].first;
  });
  return order;
}

std::vector<uint64_t> GreedyBySize(absl::Span<const BufferLifetime> buffers, uint64_t alignment, bool best_gap) {
  std::vector<uint64_t> offsets(buffers.size(), 0);
  // Placed buffers in offset order: (offset, aligned size, index).
  struct Placed {
    uint64_t offset;
    uint64_t bytes;
    size_t index;
  };
  std::vector<Placed> placed;
  for (size_t i : BySizeDescending(buffers)) {
    const BufferLifetime& buffer = buffers[i];
    if (buffer.bytes == 0) continue;
    const uint64_t need = AlignUp(buffer.bytes, alignment);
    uint64_t prev_end = 0;
    uint64_t chosen = 0;
    uint64_t chosen_gap = UINT64_MAX;
    bool found = false;
    for (const Placed& other : placed) {
      if (!Conflict(buffer, buffers[other.index])) continue;
      if (other.offset > prev_end) {
        const uint64_t gap = other.offset - prev_end;
        if (gap >= need && gap < chosen_gap) {
          chosen = prev_end;
          chosen_gap = gap;
          found = true;
          if (!best_gap) break;
        }
      }
      prev_end = std::max(prev_end, other.offset + other.bytes);
    }
    const uint64_t offset = found ? chosen : prev_end;
    offsets[i] = offset;
    auto at = std::lower_bound(placed.begin(), placed.end(), offset,
                               [](const Placed& p, uint64_t value) { return p.offset < value; });
    placed.insert(at, Placed{offset, need, i});
  }
  return offsets;
}

std::vector<uint64_t> OnlineBestFit(absl::Span<const BufferLifetime> buffers, uint64_t alignment) {
  std::vector<uint64_t> offsets(buffers.size(), 0);
  uint64_t total = 0;
  std::vector<size_t> births;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].bytes == 0) continue;
    total += AlignUp(buffers[i].bytes, alignment);
    births.push_back(i);
  }
  if (births.empty()) return offsets;
  // Births in step order, larger first within a step; deaths in step order.
  std::stable_sort(births.begin(), births.end(), [&](size_t a, size_t b) {
    if (buffers[a].first != buffers[b].first) return buffers[a].first < buffers[b].first;
    return buffers[a].bytes > buffers[b].bytes;
  });
  std::vector<size_t> deaths = births;
  std::stable_sort(deaths.begin(), deaths.end(), [&](size_t a, size_t b) { return buffers[a].last < buffers[b].last; });
  // The space never needs more than every buffer side by side.
  RangeAllocator space(total, alignment);
  size_t next_death = 0;
  for (size_t i : births) {
    // A buffer whose last step is before this birth's first step is dead.
    while (next_death < deaths.size() && buffers[deaths[next_death]].last < buffers[i].first) {
      const size_t dead = deaths[next_death++];
      space.Free(offsets[dead], buffers[dead].bytes);
    }
    offsets[i] = *space.Allocate(buffers[i].bytes, RangeAllocator::End::kLow);
  }
  return offsets;
}

}  // namespace

ArenaPlan PlanArena(absl::Span<const BufferLifetime> buffers, uint64_t alignment, ArenaHeuristic heuristic) {
  std::vector<std::vector<uint64_t>> candidates;
  const bool greedy_allowed = buffers.size() <= kGreedyLimit;
  switch (heuristic) {
    case ArenaHeuristic::kBest:
      if (greedy_allowed) {
        candidates.push_back(GreedyBySize(buffers, alignment, /*best_gap=*/true));
        candidates.push_back(GreedyBySize(buffers, alignment, /*best_gap=*/false));
      }
      candidates.push_back(OnlineBestFit(buffers, alignment));
      break;
    case ArenaHeuristic::kGreedyBySizeBestGap:
      candidates.push_back(GreedyBySize(buffers, alignment, /*best_gap=*/true));
      break;
    case ArenaHeuristic::kGreedyBySizeLowestGap:
      candidates.push_back(GreedyBySize(buffers, alignment, /*best_gap=*/false));
      break;
    case ArenaHeuristic::kOnlineBestFit:
      candidates.push_back(OnlineBestFit(buffers, alignment));
      break;
  }
  ArenaPlan best;
  bool have = false;
  for (auto& offsets : candidates) {
    const uint64_t peak = PeakOf(buffers, offsets, alignment);
    if (!have || peak < best.peak_bytes) {
      best.offsets = std::move(offsets);
      best.peak_bytes = peak;
      have = true;
    }
  }
  return best;
}

uint64_t LowerBoundBytes(absl::Span<const BufferLifetime> buffers, uint64_t alignment) {
  // +bytes at `first`, -bytes after `last`; sweep in step order.
  std::vector<std::pair<int64_t, int64_t>> events;
  events.reserve(buffers.size() * 2);
  for (const BufferLifetime& buffer : buffers) {
    if (buffer.bytes == 0) continue;
    const auto bytes = static_cast<int64_t>(AlignUp(buffer.bytes, alignment));
    events.emplace_back(buffer.first, bytes);
    events.emplace_back(int64_t{buffer.last} + 1, -bytes);
  }
  // At equal steps the deaths (negative) come first.
  std::sort(events.begin(), events.end());
  int64_t live = 0;
  int64_t most = 0;
  for (const auto& [step, delta] : events) {
    live += delta;
    most = std::max(most, live);
  }
  return static_cast<uint64_t>(most);
}

}  // namespace tandem::memory
