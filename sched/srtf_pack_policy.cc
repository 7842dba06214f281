#include "sched/srtf_pack_policy.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace tandem::sched {

std::optional<double> SrtfPackPolicy::RemainingSeconds(const SchedState& state,
                                                       const JobState& job) {
  constexpr double kLong = std::numeric_limits<double>::infinity();
  const int64_t expected = job.params.expected_iterations;
  if (expected <= 0 || job.iterations_done >= static_cast<uint64_t>(expected)) return kLong;
  std::optional<double> per_iteration = state.interference.Solo(job.key);
  if (!per_iteration && job.iteration_time.samples() > 0) {
    per_iteration = job.iteration_time.mean();
  }
  if (!per_iteration) return std::nullopt;
  return static_cast<double>(expected - static_cast<int64_t>(job.iterations_done)) * *per_iteration;
}

std::vector<const JobState*> SrtfPackPolicy::Ranked(const SchedState& state) const {
  // (remaining, arrival_seq): unmeasured jobs rank as -1 (first, oldest first).
  std::vector<std::pair<std::pair<double, uint64_t>, const JobState*>> keyed;
  for (const LaneState& lane : state.lanes) {
    for (const JobState* job : lane.jobs) {
      if (!job->active()) continue;
      const std::optional<double> remaining = RemainingSeconds(state, *job);
      keyed.push_back({{remaining.value_or(-1.0), job->arrival_seq}, job});
    }
  }
  std::sort(keyed.begin(), keyed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<const JobState*> ranked;
  ranked.reserve(keyed.size());
  for (const auto& entry : keyed) ranked.push_back(entry.second);
  return ranked;
}

std::vector<const JobState*> SrtfPackPolicy::RunningSet(const SchedState& state,
                                                        bool by_lane) const {
  std::vector<const JobState*> set;
  for (const JobState* job : Ranked(state)) {
    if (static_cast<int>(set.size()) >= max_lanes_) break;
    const bool fits = std::none_of(set.begin(), set.end(), [&](const JobState* member) {
      return (by_lane && member->lane() == job->lane()) ||
             MeasuredToClash(state, job->key, member->key, margin_);
    });
    if (fits) set.push_back(job);
  }
  return set;
}

std::optional<JobId> SrtfPackPolicy::Pick(const SchedState& state, int lane) {
  std::optional<JobId> probe;
  if (probes_.Decide(state, lane, &probe)) return probe;
  for (const JobState* job : RunningSet(state, /*by_lane=*/true)) {
    if (job->lane() != lane) continue;
    // A running member keeps the lane busy (Pick is asked for a busy lane
    // only with lookahead); its next iteration is the one to stage.
    if (job->has_queued()) return job->id;
    return std::nullopt;
  }
  return std::nullopt;
}

int SrtfPackPolicy::ChooseLane(const SchedState& state, const JobParams& params,
                               int num_lanes) const {
  return PackLaneFor(state, params, num_lanes, margin_, max_lanes_);
}

std::vector<LaneChange> SrtfPackPolicy::Rebalance(const SchedState& state, int num_lanes) const {
  std::vector<LaneChange> changes;
  const std::vector<const JobState*> set = RunningSet(state, /*by_lane=*/false);
  const int existing = std::min(num_lanes, state.LaneCount());
  // Lanes holding a member, and lanes already claimed by a member (it stays
  // there, or moves there).
  std::vector<bool> holds_member(std::max(num_lanes, state.LaneCount()) + 1, false);
  std::vector<bool> claimed(holds_member.size(), false);
  for (const JobState* job : set) holds_member[job->lane()] = true;
  bool new_lane_used = false;
  for (const JobState* job : set) {
    const int lane = job->lane();
    if (!claimed[lane]) {
      claimed[lane] = true;
      continue;
    }
    if (job->running || job->staged > 0) continue;  // moves wait for a boundary
    int target = -1;
    for (int candidate = 0; candidate < existing; ++candidate) {
      if (!holds_member[candidate] && !claimed[candidate] && !state.LaneHasJobs(candidate)) {
        target = candidate;
        break;
      }
    }
    if (target < 0 && !new_lane_used && num_lanes < max_lanes_) {
      target = num_lanes;
      new_lane_used = true;
    }
    if (target < 0) {
      for (int candidate = 0; candidate < existing; ++candidate) {
        if (!holds_member[candidate] && !claimed[candidate]) {
          target = candidate;
          break;
        }
      }
    }
    if (target < 0) continue;
    claimed[target] = true;
    changes.push_back(LaneChange{job->id, lane, target});
  }
  return changes;
}

}  // namespace tandem::sched
