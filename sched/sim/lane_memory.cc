#include "sched/sim/lane_memory.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace tandem::sched::sim {

uint64_t LaneMemoryModel::ArenaWith(int lane, uint64_t extra, std::optional<JobId> leaving) const {
  uint64_t arena = extra;
  if (lane >= 0 && lane < NumLanes()) {
    for (JobId id : lanes_[lane]) {
      if (id != leaving) arena = std::max(arena, jobs_.at(id).ephemeral);
    }
  }
  return arena;
}

uint64_t LaneMemoryModel::LanesTotal() const {
  uint64_t total = 0;
  for (int lane = 0; lane < NumLanes(); ++lane) total += ArenaWith(lane, 0, std::nullopt);
  return total;
}

uint64_t LaneMemoryModel::UsedBytes() const { return persistent_total_ + LanesTotal(); }

absl::Status LaneMemoryModel::Fits(uint64_t persistent, uint64_t ephemeral, int lane,
                                   std::optional<JobId> leaving) const {
  if (lane < 0 || lane > NumLanes()) {
    return absl::InvalidArgumentError(absl::StrCat("no lane ", lane, " (", NumLanes(), " exist)"));
  }
  if (lane == NumLanes() && NumLanes() >= max_lanes_) {
    return absl::ResourceExhaustedError(absl::StrCat("all ", max_lanes_, " lanes exist"));
  }
  uint64_t lanes_total = 0;
  for (int l = 0; l < NumLanes(); ++l) {
    lanes_total += ArenaWith(l, l == lane ? ephemeral : 0, leaving);
  }
  if (lane == NumLanes()) lanes_total += ephemeral;
  const uint64_t need = persistent_total_ + persistent + lanes_total;
  if (need > capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat("needs ", need, " bytes in all, capacity ", capacity_));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> LaneMemoryModel::Admit(JobId job, uint64_t persistent_bytes, uint64_t ephemeral_bytes, int lane) {
  if (jobs_.count(job) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("job ", job, " is already admitted"));
  }
  if (lane < 0) {
    // The lane whose arena grows least; a new lane only when no lane takes it.
    int best = -1;
    uint64_t best_growth = std::numeric_limits<uint64_t>::max();
    for (int l = 0; l < NumLanes(); ++l) {
      if (!Fits(persistent_bytes, ephemeral_bytes, l, std::nullopt).ok()) continue;
      const uint64_t growth = ArenaWith(l, ephemeral_bytes, std::nullopt) - ArenaWith(l, 0, std::nullopt);
      if (growth < best_growth) {
        best_growth = growth;
        best = l;
      }
    }
    lane = best >= 0 ? best : NumLanes();
  }
  if (absl::Status fits = Fits(persistent_bytes, ephemeral_bytes, lane, std::nullopt); !fits.ok()) {
    return fits;
  }
  if (lane == NumLanes()) lanes_.emplace_back();
  lanes_[lane].push_back(job);
  jobs_[job] = Entry{persistent_bytes, ephemeral_bytes, lane};
  persistent_total_ += persistent_bytes;
  return lane;
}

void LaneMemoryModel::Release(JobId job) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;
  auto& lane = lanes_[it->second.lane];
  lane.erase(std::remove(lane.begin(), lane.end(), job), lane.end());
  persistent_total_ -= it->second.persistent;
  jobs_.erase(it);
}

absl::StatusOr<int> LaneMemoryModel::Move(JobId job, int lane) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job ", job, " is not admitted"));
  Entry& entry = it->second;
  if (lane == entry.lane) return lane;
  // The persistent bytes stay; only the ephemeral peak changes lanes.
  if (absl::Status fits = Fits(0, entry.ephemeral, lane, job); !fits.ok()) return fits;
  auto& from = lanes_[entry.lane];
  from.erase(std::remove(from.begin(), from.end(), job), from.end());
  if (lane == NumLanes()) lanes_.emplace_back();
  lanes_[lane].push_back(job);
  entry.lane = lane;
  return lane;
}

}  // namespace tandem::sched::sim
