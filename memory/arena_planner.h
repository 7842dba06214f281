// Static placement of buffers with known lifetimes into one arena.
//
// The input is abstract: each buffer has a size and the first and last step
// (inclusive) at which it is live; two buffers conflict when their lifetimes
// intersect, and conflicting buffers must get disjoint address ranges. The
// output is an offset per buffer and the arena's peak (the highest end).
// The adaptor turns an iteration graph into lifetimes (one step per node);
// this file knows nothing about graphs.
//
// Finding the least peak is NP-hard (it is dynamic storage allocation), so
// the planner runs several heuristics and keeps the best plan:
//   - greedy by size: largest buffer first, each at the best-fitting gap
//     between the already placed buffers it conflicts with (or at the lowest
//     such gap), else above them all;
//   - online best fit: in step order, free the buffers that died, then place
//     the new ones in the smallest free range (the classic allocator).
// The greedy heuristics cost O(n^2) in the worst case (0.6 s for 9,000
// training-like buffers on one build-machine core), so above kGreedyLimit
// buffers only the O(n log n) online one runs (within 1-2% of the bound on
// such graphs).
// LowerBoundBytes (the most bytes live at one step) bounds every plan from
// below; docs/memory.md records how close the plans come.
//
// Pure functions; thread-safe.
#ifndef TANDEM_MEMORY_ARENA_PLANNER_H_
#define TANDEM_MEMORY_ARENA_PLANNER_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tandem::memory {

struct BufferLifetime {
  uint64_t bytes = 0;
  int first = 0;  // first step at which the buffer is live
  int last = 0;   // last step at which it is live (inclusive; >= first)
};

struct ArenaPlan {
  std::vector<uint64_t> offsets;  // per buffer, a multiple of the alignment
  uint64_t peak_bytes = 0;        // max over buffers of offset + aligned size
};

enum class ArenaHeuristic { kBest, kGreedyBySizeBestGap, kGreedyBySizeLowestGap, kOnlineBestFit };

inline constexpr size_t kGreedyLimit = 8192;

// Buffer sizes are rounded up to `alignment` (a power of two); a buffer of 0
// bytes takes no space (its offset is 0 and it conflicts with nothing).
// kBest runs every heuristic that applies and keeps the least peak.
ArenaPlan PlanArena(absl::Span<const BufferLifetime> buffers, uint64_t alignment,
                    ArenaHeuristic heuristic = ArenaHeuristic::kBest);

// The most aligned bytes live at any one step: no plan's peak is lower.
uint64_t LowerBoundBytes(absl::Span<const BufferLifetime> buffers, uint64_t alignment);

}  // namespace tandem::memory

#endif  // TANDEM_MEMORY_ARENA_PLANNER_H_
