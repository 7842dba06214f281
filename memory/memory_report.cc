#include "memory/memory_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "memory/byte_format.h"

namespace tandem::memory {

std::string DescribeUsage(const DeviceMemoryStats& stats, size_t max_jobs) {
  std::string out = absl::StrCat("capacity ", FormatBytes(stats.capacity_bytes), ", reserve ",
                                 FormatBytes(stats.reserve_bytes), ", usable ", FormatBytes(stats.usable_bytes), " = ",
                                 FormatBytes(stats.persistent_bytes), " persistent + ", FormatBytes(stats.lane_bytes),
                                 " in ", stats.lanes.size(), stats.lanes.size() == 1 ? " lane" : " lanes", " + ",
                                 FormatBytes(stats.retired_bytes), " retired + ", FormatBytes(stats.free_bytes),
                                 " free (largest free range ", FormatBytes(stats.largest_free_bytes), ")");
  for (const LaneStats& lane : stats.lanes) {
    absl::StrAppend(&out, "; lane ", lane.lane, ": ", FormatBytes(lane.arena_bytes), " arena, ",
                    lane.jobs.size() == 1 ? "job " : "jobs ", absl::StrJoin(lane.jobs, ", "));
    if (lane.retired_bytes > 0) {
      absl::StrAppend(&out, " (+", FormatBytes(lane.retired_bytes), " retired)");
    }
  }
  std::vector<const JobMemoryStats*> jobs;
  for (const JobMemoryStats& job : stats.jobs) jobs.push_back(&job);
  std::stable_sort(jobs.begin(), jobs.end(), [](const JobMemoryStats* a, const JobMemoryStats* b) {
    return a->persistent_bytes + a->ephemeral_bytes > b->persistent_bytes + b->ephemeral_bytes;
  });
  for (size_t i = 0; i < jobs.size() && i < max_jobs; ++i) {
    const JobMemoryStats& job = *jobs[i];
    absl::StrAppend(&out, "; job ", job.job, " '", job.name, "': ", FormatBytes(job.persistent_bytes), " persistent (",
                    job.persistent_tensors, job.persistent_tensors == 1 ? " tensor) + " : " tensors) + ",
                    FormatBytes(job.ephemeral_bytes), " ephemeral in lane ", job.lane);
  }
  if (jobs.size() > max_jobs) {
    absl::StrAppend(&out, "; and ", jobs.size() - max_jobs, " more jobs");
  }
  if (jobs.empty()) absl::StrAppend(&out, "; no jobs");
  return out;
}

}  // namespace tandem::memory
