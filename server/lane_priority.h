// Which stream priority level each lane of a device should run at under
// PRIORITY: a lane holds one priority level's jobs (sched/priority_policy.h),
// and its stream gets the level of its highest job priority above the
// lowest priority present on the device, capped at the device's levels. So
// a high-priority iteration that runs beside best-effort work (iteration
// granularity, or between two segments) has its thread blocks dispatched
// first as SMs free up. Pure function; thread-compatible.
#ifndef TANDEM_SERVER_LANE_PRIORITY_H_
#define TANDEM_SERVER_LANE_PRIORITY_H_

#include <optional>
#include <vector>

#include "absl/types/span.h"

namespace tandem::server {

struct LaneJob {
  int lane = 0;
  int priority = 0;  // the job's scheduling priority (higher runs first)
};

// Per lane in [0, lanes): the wanted level in [0, levels], or nullopt for a
// lane without jobs (its stream is left as it is). levels == 0 (a device
// without stream priorities, or a policy other than PRIORITY) wants 0
// everywhere. Jobs of lanes outside [0, lanes) are ignored.
std::vector<std::optional<int>> WantedStreamLevels(int lanes, absl::Span<const LaneJob> jobs, int levels);

}  // namespace tandem::server

#endif  // TANDEM_SERVER_LANE_PRIORITY_H_
