#include "sched/pack_policy.h"

#include <algorithm>
#include <limits>

namespace tandem::sched {

bool MeasuredToClash(const SchedState& state, int key_a, int key_b, double margin) {
  const std::optional<bool> pays = state.interference.SideBySidePays(key_a, key_b, margin);
  return pays.has_value() && !*pays;
}

int PackLaneFor(const SchedState& state, const JobParams& params, int num_lanes, double margin,
                int max_lanes) {
  const std::optional<int> key = params.interference_key.empty()
                                     ? std::nullopt
                                     : state.interference.Find(params.interference_key);
  // A lane holding a job it clashes with, worst clash first.
  if (key) {
    int worst_lane = -1;
    double worst_gain = std::numeric_limits<double>::infinity();
    for (int lane = 0; lane < num_lanes && lane < state.LaneCount(); ++lane) {
      for (const JobState* job : state.lanes[lane].jobs) {
        if (!MeasuredToClash(state, *key, job->key, margin)) continue;
        const double gain = 1.0 / *state.interference.R(*key, job->key) +
                            1.0 / *state.interference.R(job->key, *key);
        if (gain < worst_gain) {
          worst_gain = gain;
          worst_lane = lane;
        }
      }
    }
    if (worst_lane >= 0) return worst_lane;
  }
  const int empty = FirstEmptyLane(state, num_lanes);
  if (empty >= 0) return empty;
  if (num_lanes < max_lanes) return num_lanes;
  int fewest_lane = 0;
  size_t fewest = std::numeric_limits<size_t>::max();
  for (int lane = 0; lane < num_lanes; ++lane) {
    const size_t n = lane < state.LaneCount() ? state.lanes[lane].jobs.size() : 0;
    if (n < fewest) {
      fewest = n;
      fewest_lane = lane;
    }
  }
  return fewest_lane;
}

const JobState* SoloProbes::Target(const SchedState& state) const {
  const JobState* target = nullptr;
  for (const LaneState& lane : state.lanes) {
    for (const JobState* job : lane.jobs) {
      if (!job->has_queued() || (target != nullptr && job->arrival_seq > target->arrival_seq)) {
        continue;
      }
      if (state.interference.Solo(job->key)) continue;
      auto it = started_.find(job->key);
      if (it != started_.end() && it->second >= max_probes_per_key_) continue;
      target = job;
    }
  }
  return target;
}

bool SoloProbes::Decide(const SchedState& state, int lane, std::optional<JobId>* pick) {
  const JobState* probe = Target(state);
  if (probe == nullptr) return false;
  // Everything else waits until the probe iteration can run alone.
  if (probe->lane() != lane || state.overlap.RunningCount() > 0) {
    *pick = std::nullopt;
  } else {
    ++started_[probe->key];
    *pick = probe->id;
  }
  return true;
}

std::optional<JobId> PackPolicy::Pick(const SchedState& state, int lane) {
  std::optional<JobId> probe;
  if (probes_.Decide(state, lane, &probe)) return probe;
  const JobState* oldest = OldestQueued(state, lane);
  if (oldest == nullptr) return std::nullopt;
  return oldest->id;
}

int PackPolicy::ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const {
  return PackLaneFor(state, params, num_lanes, margin_, max_lanes_);
}

int PackPolicy::ClashesOutside(const SchedState& state, const LaneView& lanes, const JobState& job,
                               int lane) const {
  int clashes = 0;
  for (int other = 0; other < static_cast<int>(lanes.size()); ++other) {
    if (other == lane) continue;
    for (const JobState* partner : lanes[other]) {
      if (partner != &job && Clash(state, job.key, partner->key)) ++clashes;
    }
  }
  return clashes;
}

std::vector<LaneChange> PackPolicy::Rebalance(const SchedState& state, int num_lanes) const {
  std::vector<LaneChange> changes;
  // Placement as the moves proposed so far leave it (lane num_lanes: new).
  LaneView lanes(std::max(num_lanes, state.LaneCount()) + 1);
  for (int lane = 0; lane < state.LaneCount(); ++lane) {
    lanes[lane].assign(state.lanes[lane].jobs.begin(), state.lanes[lane].jobs.end());
  }
  auto move = [&](const JobState* job, int from, int to) {
    auto& source = lanes[from];
    source.erase(std::find(source.begin(), source.end(), job));
    lanes[to].push_back(job);
    changes.push_back(LaneChange{job->id, from, to});
  };
  auto moved = [&](const JobState* job) {
    return std::any_of(changes.begin(), changes.end(),
                       [&](const LaneChange& c) { return c.job == job->id; });
  };

  // Fold: each job goes where it has the fewest clashing partners beside it.
  // Every move strictly lowers the number of clashing pairs side by side.
  const int existing = std::min(num_lanes, state.LaneCount());
  for (int lane = 0; lane < state.LaneCount(); ++lane) {
    for (const JobState* job : state.lanes[lane].jobs) {
      if (job->running || job->staged > 0 || moved(job)) continue;
      const int here = ClashesOutside(state, lanes, *job, lane);
      if (here == 0) continue;
      int best_lane = lane;
      int best = here;
      for (int target = 0; target < existing; ++target) {
        if (target == lane) continue;
        const int there = ClashesOutside(state, lanes, *job, target);
        if (there < best) {
          best = there;
          best_lane = target;
        }
      }
      if (best_lane != lane) move(job, lane, best_lane);
    }
  }

  // Spread: a waiting job of a crowded lane that clashes with nobody gets an
  // empty lane, or one new lane per call while fewer than max_lanes exist.
  bool new_lane_used = false;
  for (int lane = 0; lane < existing; ++lane) {
    if (lanes[lane].size() < 2) continue;
    int target = -1;
    for (int candidate = 0; candidate < existing; ++candidate) {
      if (lanes[candidate].empty()) {
        target = candidate;
        break;
      }
    }
    if (target < 0 && !new_lane_used && num_lanes < max_lanes_) target = num_lanes;
    if (target < 0) break;
    // The newest waiting job that clashes with nobody anywhere.
    const std::vector<const JobState*> jobs = lanes[lane];
    for (auto it = jobs.rbegin(); it != jobs.rend(); ++it) {
      const JobState* job = *it;
      if (job->running || job->staged > 0 || !job->has_queued() || moved(job)) continue;
      if (ClashesOutside(state, lanes, *job, -1) > 0) continue;
      move(job, lane, target);
      if (target == num_lanes) new_lane_used = true;
      break;
    }
  }
  return changes;
}

}  // namespace tandem::sched
