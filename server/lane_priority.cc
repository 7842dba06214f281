#include "server/lane_priority.h"

#include <algorithm>
#include <cstdint>

namespace tandem::server {

std::vector<std::optional<int>> WantedStreamLevels(int lanes, absl::Span<const LaneJob> jobs, int levels) {
  std::vector<std::optional<int>> top(std::max(lanes, 0));
  std::optional<int> bottom;
  for (const LaneJob& job : jobs) {
    if (job.lane < 0 || job.lane >= lanes) continue;
    std::optional<int>& t = top[job.lane];
    t = t.has_value() ? std::max(*t, job.priority) : job.priority;
    bottom = bottom.has_value() ? std::min(*bottom, job.priority) : job.priority;
  }
  std::vector<std::optional<int>> wanted(top.size());
  for (size_t lane = 0; lane < top.size(); ++lane) {
    if (!top[lane].has_value()) continue;
    // 64-bit: priorities span the whole int32 range.
    const int64_t above = static_cast<int64_t>(*top[lane]) - *bottom;
    wanted[lane] = static_cast<int>(std::clamp<int64_t>(above, 0, std::max(levels, 0)));
  }
  return wanted;
}

}  // namespace tandem::server
