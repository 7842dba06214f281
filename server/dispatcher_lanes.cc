// Lanes: their streams, events and staging slots, and their streams'
// priority levels under PRIORITY.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "server/device_dispatcher.h"
#include "server/lane_priority.h"

namespace tandem::server {

DeviceDispatcher::DeviceDispatcher(std::unique_ptr<DeviceRuntime> runtime, DispatcherHost& host, EventLoop& loop)
    : host_(host), loop_(loop), runtime_(std::move(runtime)), dev_(*runtime_) {}

absl::Status DeviceDispatcher::EnsureLane(int lane) {
  while (static_cast<int>(dev_.lanes.size()) <= lane) {
    LoopSection timed(loop_, "EnsureLane/new lane");
    Lane l;
    ASSIGN_OR_RETURN(l.stream, dev_.device->CreateStream());
    l.executor = LaneExecutor(static_cast<int>(dev_.lanes.size()));
    l.slots.resize(host_.Options().max_inflight_per_lane);
    l.events.resize(l.slots.size() + 1);
    for (IterationEvents& e : l.events) {
      ASSIGN_OR_RETURN(e.begin, dev_.device->CreateEvent());
      ASSIGN_OR_RETURN(e.start, dev_.device->CreateEvent());
      ASSIGN_OR_RETURN(e.end, dev_.device->CreateEvent());
    }
    // Each slot's buffer now, not at its first iteration (kMinStagingBytes);
    // one that cannot be had is allocated when an iteration needs it.
    for (StagingSlot& slot : l.slots) {
      if (!GiveSlotBuffer(l, slot, kMinStagingBytes).ok()) break;
    }
    dev_.lanes.push_back(std::move(l));
    WarmNewLane(static_cast<int>(dev_.lanes.size()) - 1);
  }
  return absl::OkStatus();
}

absl::Status DeviceDispatcher::GiveSlotBuffer(Lane& lane, StagingSlot& slot, size_t capacity) {
  ASSIGN_OR_RETURN(void* host, dev_.device->AllocateHost(capacity));
  dev_.staging_allocations++;
  if (slot.host != nullptr) lane.retired_host.push_back(slot.host);
  slot.host = host;
  slot.capacity = capacity;
  return absl::OkStatus();
}

void DeviceDispatcher::ReleaseIdleRetired() {
  for (int lane = 0; lane < dev_.memory->NumLanes(); ++lane) {
    if (!dev_.memory->HasRetired(lane)) continue;
    if (lane < static_cast<int>(dev_.lanes.size())) {
      const Lane& l = dev_.lanes[lane];
      if (l.outstanding > 0 || l.warm_in_flight) continue;  // may still use the old arena
    }
    dev_.memory->ReleaseRetired(lane);
  }
}

Executor* DeviceDispatcher::LaneExecutor(int lane) {
  const std::string& device = dev_.device->info().name;
  const int shared = host_.Options().executor_threads;
  if (shared > 0 && static_cast<int>(dev_.executors.size()) >= shared) {
    return dev_.executors[static_cast<size_t>(lane % shared)].get();
  }
  // "exec cuda:0/3" in top -H: the thread of lane 3 (or of lanes 3, 3+N, ...).
  dev_.executors.push_back(std::make_unique<Executor>(absl::StrCat(device, "/", lane)));
  return dev_.executors.back().get();
}

void DeviceDispatcher::MatchLaneStreamLevels() {
  const int lanes = static_cast<int>(dev_.lanes.size());
  if (dev_.lane_levels_stale) {
    dev_.lane_levels_stale = false;
    const DaemonOptions& options = host_.Options();
    const bool ranked = options.stream_priorities && options.policy == "priority";
    const int levels = ranked ? dev_.device->info().stream_priority_levels : 0;
    std::vector<LaneJob> placed;
    host_.ForEachJob([&](Job& job) {
      if (job.device != &dev_ || job.state == JobState::kWaitingForMemory || job.state == JobState::kClosing) {
        return true;
      }
      placed.push_back(LaneJob{job.lane, job.hints.priority()});
      return true;
    });
    const std::vector<std::optional<int>> wanted = WantedStreamLevels(lanes, placed, levels);
    for (int lane = 0; lane < lanes; ++lane) {
      if (wanted[lane].has_value()) dev_.lanes[lane].wanted_stream_level = *wanted[lane];
    }
  }
  for (int lane = 0; lane < lanes; ++lane) {
    Lane& l = dev_.lanes[lane];
    if (l.stream_level == l.wanted_stream_level || l.outstanding > 0 || l.segmented != nullptr) continue;
    // Uploads and reads use the lane's stream too.
    bool busy = false;
    host_.ForEachJob([&](Job& job) {
      busy = job.device == &dev_ && job.lane == lane && job.device_work > 0;
      return !busy;
    });
    if (busy) continue;
    auto stream = dev_.device->CreateStreamWithPriority(l.wanted_stream_level);
    if (!stream.ok()) {
      TLOG_WARNING("lane stream priority not changed")
          .With("device", dev_.device->info().name)
          .With("lane", lane)
          .With("status", stream.status().ToString());
      l.wanted_stream_level = l.stream_level;
      continue;
    }
    TLOG_INFO("lane stream priority changed")
        .With("device", dev_.device->info().name)
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

void DeviceDispatcher::StopExecutors() {
  for (auto& lane : dev_.lanes) lane.executor = nullptr;
  dev_.executors.clear();
  for (auto& lane : dev_.lanes) {
    if (lane.stream) (void)dev_.device->Synchronize(*lane.stream);
  }
}

void DeviceDispatcher::FreeHostBuffers() {
  for (auto& [host, bytes] : dev_.spare_snapshots) dev_.device->FreeHost(host);
  dev_.spare_snapshots.clear();
  for (auto& lane : dev_.lanes) {
    for (auto& slot : lane.slots) {
      if (slot.host != nullptr) dev_.device->FreeHost(slot.host);
    }
    for (void* host : lane.retired_host) dev_.device->FreeHost(host);
  }
}

}  // namespace tandem::server
