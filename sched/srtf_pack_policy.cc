#include "sched/srtf_pack_policy.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace tandem::sched {

std::optional<double> SrtfPackPolicy::RemainingSeconds(const SchedState& state, const JobState& job) {
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

std::vector<const JobState*> SrtfPackPolicy::RunningSet(const SchedState& state, bool by_lane) const {
  // Active jobs by (remaining, arrival_seq), unmeasured ones as -1 (first,
  // oldest first), from a heap popped only until the set is full: Pick asks
  // at every dispatch, and a full sort of a crowd of jobs each time costs
  // more than the few pops a set of max_lanes takes.
  using Entry = std::pair<std::pair<double, uint64_t>, const JobState*>;
  std::vector<Entry> heap;
  for (const LaneState& lane : state.lanes) {
    for (const JobState* job : lane.jobs) {
      if (!job->active()) continue;
      const std::optional<double> remaining = RemainingSeconds(state, *job);
      heap.push_back({{remaining.value_or(-1.0), job->arrival_seq}, job});
    }
  }
  const auto later = [](const Entry& a, const Entry& b) { return a.first > b.first; };
  std::make_heap(heap.begin(), heap.end(), later);
  std::vector<const JobState*> set;
  while (!heap.empty() && static_cast<int>(set.size()) < max_lanes_) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const JobState* job = heap.back().second;
    heap.pop_back();
    const bool fits = std::none_of(set.begin(), set.end(), [&](const JobState* member) {
      return (by_lane && member->lane() == job->lane()) || MeasuredToClash(state, job->key, member->key, margin_);
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

int SrtfPackPolicy::ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const {
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
