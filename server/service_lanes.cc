// Lanes: their streams, events and staging slots, and their streams'
// priority levels under PRIORITY.
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "server/lane_priority.h"
#include "server/service.h"

namespace tandem::server {

absl::Status Service::EnsureLane(DeviceRuntime& dev, int lane) {
  while (static_cast<int>(dev.lanes.size()) <= lane) {
    Lane l;
    ASSIGN_OR_RETURN(l.stream, dev.device->CreateStream());
    l.executor = LaneExecutor(dev, static_cast<int>(dev.lanes.size()));
    l.slots.resize(options_.max_inflight_per_lane);
    l.events.resize(l.slots.size() + 1);
    for (IterationEvents& e : l.events) {
      ASSIGN_OR_RETURN(e.begin, dev.device->CreateEvent());
      ASSIGN_OR_RETURN(e.start, dev.device->CreateEvent());
      ASSIGN_OR_RETURN(e.end, dev.device->CreateEvent());
    }
    // Each slot's buffer now, not at its first iteration (kMinStagingBytes);
    // one that cannot be had is allocated when an iteration needs it.
    for (StagingSlot& slot : l.slots) {
      if (!GiveSlotBuffer(dev, l, slot, kMinStagingBytes).ok()) break;
    }
    dev.lanes.push_back(std::move(l));
    WarmNewLane(dev, static_cast<int>(dev.lanes.size()) - 1);
  }
  return absl::OkStatus();
}

absl::Status Service::GiveSlotBuffer(DeviceRuntime& dev, Lane& lane, StagingSlot& slot, size_t capacity) {
  ASSIGN_OR_RETURN(void* host, dev.device->AllocateHost(capacity));
  dev.staging_allocations++;
  if (slot.host != nullptr) lane.retired_host.push_back(slot.host);
  slot.host = host;
  slot.capacity = capacity;
  return absl::OkStatus();
}

void Service::ReleaseIdleRetired(DeviceRuntime& dev) {
  for (int lane = 0; lane < dev.memory->NumLanes(); ++lane) {
    if (!dev.memory->HasRetired(lane)) continue;
    if (lane < static_cast<int>(dev.lanes.size())) {
      const Lane& l = dev.lanes[lane];
      if (l.outstanding > 0 || l.warm_in_flight) continue;  // may still use the old arena
    }
    dev.memory->ReleaseRetired(lane);
  }
}

Executor* Service::LaneExecutor(DeviceRuntime& dev, int lane) {
  const std::string& device = dev.device->info().name;
  const int shared = options_.executor_threads;
  if (shared > 0 && static_cast<int>(dev.executors.size()) >= shared) {
    return dev.executors[static_cast<size_t>(lane % shared)].get();
  }
  // "exec cuda:0/3" in top -H: the thread of lane 3 (or of lanes 3, 3+N, ...).
  dev.executors.push_back(std::make_unique<Executor>(absl::StrCat(device, "/", lane)));
  return dev.executors.back().get();
}

void Service::MatchLaneStreamLevels(DeviceRuntime& dev) {
  const int lanes = static_cast<int>(dev.lanes.size());
  if (dev.lane_levels_stale) {
    dev.lane_levels_stale = false;
    const bool ranked = options_.stream_priorities && options_.policy == "priority";
    const int levels = ranked ? dev.device->info().stream_priority_levels : 0;
    std::vector<LaneJob> placed;
    for (const auto& [id, job] : jobs_) {
      if (job->device != &dev || job->state == JobState::kWaitingForMemory || job->state == JobState::kClosing) {
        continue;
      }
      placed.push_back(LaneJob{job->lane, job->hints.priority()});
    }
    const std::vector<std::optional<int>> wanted = WantedStreamLevels(lanes, placed, levels);
    for (int lane = 0; lane < lanes; ++lane) {
      if (wanted[lane].has_value()) dev.lanes[lane].wanted_stream_level = *wanted[lane];
    }
  }
  for (int lane = 0; lane < lanes; ++lane) {
    Lane& l = dev.lanes[lane];
    if (l.stream_level == l.wanted_stream_level || l.outstanding > 0 || l.segmented != nullptr) continue;
    // Uploads and reads use the lane's stream too.
    const bool busy = std::any_of(jobs_.begin(), jobs_.end(), [&](const auto& entry) {
      const Job& job = *entry.second;
      return job.device == &dev && job.lane == lane && job.device_work > 0;
    });
    if (busy) continue;
    auto stream = dev.device->CreateStreamWithPriority(l.wanted_stream_level);
    if (!stream.ok()) {
      TLOG_WARNING("lane stream priority not changed")
          .With("device", dev.device->info().name)
          .With("lane", lane)
          .With("status", stream.status().ToString());
      l.wanted_stream_level = l.stream_level;
      continue;
    }
    TLOG_INFO("lane stream priority changed")
        .With("device", dev.device->info().name)
        .With("lane", lane)
        .With("level", l.wanted_stream_level)
        .With("previous", l.stream_level);
    // Destroying a CUDA stream frees its libraries' workspaces, which may
    // wait for the device: not on the loop thread.
    std::shared_ptr<device::Stream> old(std::move(l.stream));
    l.executor->Post([old]() mutable { old.reset(); });
    l.stream = *std::move(stream);
    l.stream_level = l.wanted_stream_level;
  }
}

}  // namespace tandem::server
