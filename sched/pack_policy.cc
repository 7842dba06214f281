#include "sched/pack_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace tandem::sched {

bool MeasuredToClash(const SchedState& state, int key_a, int key_b, double margin) {
  const std::optional<bool> pays = state.interference.SideBySidePays(key_a, key_b, margin);
  if (!pays.has_value()) return false;
  if (!*pays) return true;
  // Measured both ways (SideBySidePays answered): unfair when either is slowed too much.
  return *state.interference.R(key_a, key_b) > kFairPairSlowdown ||
         *state.interference.R(key_b, key_a) > kFairPairSlowdown;
}

size_t StreamLaneCap(const SchedState& state, int max_lanes) {
  size_t jobs = 0;
  for (int lane = 0; lane < state.LaneCount(); ++lane) jobs += state.lanes[lane].jobs.size();
  const size_t lanes = static_cast<size_t>(std::max(max_lanes, 1));
  return std::max<size_t>(2, (jobs + lanes - 1) / lanes);
}

int PackLaneFor(const SchedState& state, const JobParams& params, int num_lanes, double margin, int max_lanes,
                const std::vector<double>* stream_lane_loads) {
  const std::optional<int> key =
      params.interference_key.empty() ? std::nullopt : state.interference.Find(params.interference_key);
  // A lane holding a job it clashes with, worst clash first. For a request
  // stream, only while the lane holds fewer jobs than StreamLaneCap and is
  // not past kSaturatedLaneLoad: without that, a crowd of alike request
  // streams registering while the lanes were idle all went to one lane
  // (181-246 of 320-352 models on an H200; that lane saturated, the others
  // a third busy).
  if (key) {
    const size_t cap = StreamLaneCap(state, max_lanes);
    int worst_lane = -1;
    double worst_gain = std::numeric_limits<double>::infinity();
    for (int lane = 0; lane < num_lanes && lane < state.LaneCount(); ++lane) {
      if (stream_lane_loads != nullptr) {
        if (state.lanes[lane].jobs.size() >= cap) continue;
        if (lane < static_cast<int>(stream_lane_loads->size()) && (*stream_lane_loads)[lane] > kSaturatedLaneLoad) {
          continue;
        }
      }
      for (const JobState* job : state.lanes[lane].jobs) {
        if (!MeasuredToClash(state, *key, job->key, margin)) continue;
        const double gain = 1.0 / *state.interference.R(*key, job->key) + 1.0 / *state.interference.R(job->key, *key);
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
  // The lane with the fewest jobs; for a request stream, the fewest jobs
  // among the least busy lanes (loads within kLaneLoadTie of the least),
  // where its requests wait least. Loads that close count as equal: a crowd
  // of models registering while every lane was idle otherwise all went to
  // the lane whose last iteration was longest ago (162 of 512 models in one
  // of 12 lanes on an H200, which then held ~half of every probe's active
  // models). And a request stream passes over lanes holding StreamLaneCap
  // jobs while a lane not past kSaturatedLaneLoad holds fewer, however idle
  // the full ones are: models registering while the others ran their first
  // requests elsewhere still crowded one idle lane (100-167 of 512 on an
  // H200; when they became active PACK moved 245 of them in one probe).
  auto load_of = [&](int lane) {
    if (stream_lane_loads == nullptr || lane >= static_cast<int>(stream_lane_loads->size())) return 0.0;
    return (*stream_lane_loads)[lane];
  };
  auto jobs_in = [&](int lane) { return lane < state.LaneCount() ? state.lanes[lane].jobs.size() : size_t{0}; };
  const size_t cap = stream_lane_loads != nullptr ? StreamLaneCap(state, max_lanes) : 0;
  auto open = [&](int lane) { return jobs_in(lane) < cap && load_of(lane) <= kSaturatedLaneLoad; };
  bool any_open = false;
  for (int lane = 0; lane < num_lanes && !any_open; ++lane) any_open = open(lane);
  auto candidate = [&](int lane) { return !any_open || open(lane); };
  double least = std::numeric_limits<double>::infinity();
  for (int lane = 0; lane < num_lanes; ++lane) {
    if (candidate(lane)) least = std::min(least, load_of(lane));
  }
  int best_lane = 0;
  size_t fewest = std::numeric_limits<size_t>::max();
  for (int lane = 0; lane < num_lanes; ++lane) {
    if (!candidate(lane) || load_of(lane) > least + kLaneLoadTie) continue;
    const size_t n = jobs_in(lane);
    if (n < fewest) {
      fewest = n;
      best_lane = lane;
    }
  }
  return best_lane;
}

bool SoloProbes::Settled(const SchedState& state, int key) const {
  if (state.interference.Solo(key)) return true;
  auto it = started_.find(key);
  return it != started_.end() && it->second >= max_probes_per_key_;
}

const JobState* SoloProbes::Target(const SchedState& state) {
  if (all_settled_version_ == state.jobs_version) return nullptr;
  const JobState* target = nullptr;
  bool all_settled = true;
  for (const LaneState& lane : state.lanes) {
    for (const JobState* job : lane.jobs) {
      if (Settled(state, job->key)) continue;
      all_settled = false;
      // A first iteration that captures the job's graph is not measured, so
      // it runs beside the others instead of holding every lane up alone.
      if (job->iterations_done == 0 && state.options.first_iteration_captures) continue;
      if (!job->has_queued() || (target != nullptr && job->arrival_seq > target->arrival_seq)) continue;
      target = job;
    }
  }
  if (all_settled) all_settled_version_ = state.jobs_version;
  return target;
}

const JobState* SoloProbes::RunningProbe(const SchedState& state) const {
  if (running_probe_ == 0) return nullptr;
  const JobState* job = state.Job(running_probe_);
  // The probe iteration itself, not a later ordinary one of the job (while
  // a probe runs nothing is staged behind it, so its start stays the last).
  return job != nullptr && job->running && job->last_start_seq == probe_start_seq_ ? job : nullptr;
}

SoloProbes::HeldUp SoloProbes::HeldUpJobs(const SchedState& state, int probe_lane, absl::FunctionRef<bool(int)> runs) {
  HeldUp held;
  for (int lane = 0; lane < state.LaneCount(); ++lane) {
    if (lane == probe_lane) continue;
    if (state.lanes[lane].busy) held.busy = true;
    if (state.lanes[lane].busy || !runs(lane)) continue;
    for (const JobState* job : state.lanes[lane].jobs) {
      const std::optional<double> estimate = job->has_queued() ? state.IterationEstimate(*job) : std::nullopt;
      if (!estimate) continue;
      held.waiting = true;
      held.shortest = std::min(held.shortest, *estimate);
      held.longest = std::max(held.longest, *estimate);
    }
  }
  return held;
}

bool SoloProbes::Segmented(JobId job) const { return job == running_probe_ && probe_segmented_; }

bool SoloProbes::ShouldYield(const SchedState& state, int lane, absl::FunctionRef<bool(int)> runs) const {
  const JobState* probe = RunningProbe(state);
  if (probe == nullptr || probe->lane() != lane || !probe_segmented_) return false;
  const LaneState& l = state.lanes[lane];
  const HeldUp held = HeldUpJobs(state, lane, runs);
  if (!l.paused) {
    // Pause once the probe has run for its turn (a fraction of the held-up
    // jobs' iterations); the pause then lasts until the slowest of them has
    // had time for one.
    const double turn = std::min(held.shortest, held.longest * state.options.probe_turn_fraction);
    const bool yield = held.busy || (held.waiting && state.now - l.run_since >= turn);
    if (yield) pause_window_ = held.longest;
    return yield;
  }
  return held.busy || (held.waiting && state.now - l.paused_since < pause_window_);
}

bool SoloProbes::Decide(const SchedState& state, int lane, std::optional<JobId>* pick) {
  // While a probe runs, every other lane waits for it; while it is paused
  // (ShouldYield), the other lanes start iterations as usual until its pause
  // window has passed.
  if (running_probe_ != 0) {
    if (const JobState* running = RunningProbe(state); running != nullptr) {
      const LaneState& probe_lane = state.lanes[running->lane()];
      if (running->lane() != lane && probe_lane.paused && state.now - probe_lane.paused_since < pause_window_) {
        return false;
      }
      *pick = std::nullopt;
      return true;
    }
    running_probe_ = 0;
  }
  // Probes are spaced out: each holds the other lanes up for one of the
  // newcomer's iterations, which running jobs should feel once in a while,
  // not back to back.
  if (state.now < next_probe_) return false;
  const JobState* probe = Target(state);
  if (probe == nullptr) return false;
  // Everything else waits until the probe iteration can run alone, from the
  // moment the newcomer's own iteration in progress (beside the others) ends:
  // until then the other lanes go on, so that they wait for the probe's
  // iteration alone, not also for that one.
  if (probe->lane() != lane && probe->running) return false;
  if (probe->lane() != lane || state.overlap.RunningCount() > 0) {
    *pick = std::nullopt;
  } else {
    ++started_[probe->key];
    next_probe_ = state.now + state.options.probe_spacing_seconds;
    running_probe_ = probe->id;
    probe_start_seq_ = state.next_start_seq;  // what Next gives the iteration it starts now
    // Segmented beside jobs that have run: they are the ones it holds up.
    probe_segmented_ = false;
    for (const LaneState& l : state.lanes) {
      for (const JobState* other : l.jobs) {
        probe_segmented_ |= segmented_ && other != probe && other->iterations_done > 0;
      }
    }
    *pick = probe->id;
  }
  return true;
}

void LaneLoads::OnIterationDone(JobId job, double now, double device_seconds, bool still_active) {
  Job& j = jobs_[job];
  j.count = j.count * std::exp(-(now - j.at) / kDecaySeconds) + 1.0;
  j.at = now;
  j.backlog.Add(still_active ? 1.0 : 0.0);
  if (!(device_seconds > 0)) return;
  double x = device_seconds;
  if (j.cost.samples() >= kSettleSamples) x = std::min(x, kOutlierFactor * j.cost.mean());
  j.cost.Add(x);
}

double LaneLoads::LoadOf(const Job& j, double now) {
  return j.count * std::exp(-(now - j.at) / kDecaySeconds) / kDecaySeconds * j.cost.mean();
}

std::optional<double> LaneLoads::RequestStreamLoad(JobId job, double now) const {
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.backlog.samples() == 0 || !(it->second.backlog.mean() < 0.5)) {
    return std::nullopt;
  }
  const double load = LoadOf(it->second, now);
  if (!(load < kRequestStreamLoad)) return std::nullopt;
  return load;
}

double LaneLoads::Rate(JobId job, double now) const {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return 0.0;
  return it->second.count * std::exp(-(now - it->second.at) / kDecaySeconds) / kDecaySeconds;
}

double LaneLoads::Of(JobId job, double now) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0.0 : LoadOf(it->second, now);
}

void PackPolicy::OnJobMoved(const SchedState& state, const JobState& job, int from_lane) {
  vtimes_.Moved(state, job);
  placed_at_ = state.now;
  held_until_[job.id] = state.now + kHoldSeconds;
  next_level_ = state.now + kLevelSpacing;
  recapturing_ = job.id;
  recapture_deadline_ = state.now + kRecaptureWaitSeconds;
}

void PackPolicy::OnIterationDone(const SchedState& state, const JobState& job, double device_seconds) {
  loads_.OnIterationDone(job.id, state.now, device_seconds, job.active());
  vtimes_.Served(state, job, device_seconds);
  JudgeShare(state, job);
  if (job.id == recapturing_) {
    recapturing_ = 0;
    next_level_ = std::max(next_level_, state.now + kSettleSeconds);
  }
}

void PackPolicy::JudgeShare(const SchedState& state, const JobState& job) {
  if (state.jobs_version != learned_for_version_) {  // another mix: what was learned does not apply
    learned_clashes_.clear();
    learned_for_version_ = state.jobs_version;
  }
  if (state.now - placed_at_ < kJudgeSeconds) return;
  if (loads_.RequestStreamLoad(job.id, state.now).has_value()) return;  // its rate is its clients'
  const std::optional<double> solo = state.interference.Solo(job.key);
  if (!solo) return;
  int n = 0;
  for (const auto& [id, other] : state.jobs) {
    if (other->active() && !loads_.RequestStreamLoad(id, state.now).has_value()) ++n;
  }
  if (n < 2 || loads_.Rate(job.id, state.now) * *solo >= kFairShareFloor / n) return;
  // The partner side by side that slows it most (an unmeasured pair counts
  // as the least).
  const JobState* worst = nullptr;
  double worst_r = 0;
  for (int lane = 0; lane < state.LaneCount(); ++lane) {
    if (lane == job.lane()) continue;
    for (const JobState* other : state.lanes[lane].jobs) {
      if (!other->active() || Clash(state, job.key, other->key)) continue;
      const double r = state.interference.R(job.key, other->key).value_or(1.0);
      if (worst == nullptr || r > worst_r) {
        worst = other;
        worst_r = r;
      }
    }
  }
  if (worst == nullptr) return;
  learned_clashes_.insert({std::min(job.key, worst->key), std::max(job.key, worst->key)});
  placed_at_ = state.now;  // judged again once the fold has settled
}

bool PackPolicy::Held(JobId job, double now) const {
  auto it = held_until_.find(job);
  return it != held_until_.end() && now < it->second;
}

std::vector<double> PackPolicy::LaneLoadsNow(const SchedState& state, int lanes) const {
  std::vector<double> load(std::max(lanes, state.LaneCount()), 0.0);
  for (int lane = 0; lane < state.LaneCount(); ++lane) {
    for (const JobState* job : state.lanes[lane].jobs) load[lane] += loads_.Of(job->id, state.now);
  }
  return load;
}

std::optional<JobId> PackPolicy::Pick(const SchedState& state, int lane) {
  std::optional<JobId> probe;
  if (probes_.Decide(state, lane, &probe)) return probe;
  const JobState* first = FirstQueued(state, lane);
  if (first == nullptr) return std::nullopt;
  return FairTurn(state, lane, first)->id;
}

const JobState* PackPolicy::FairTurn(const SchedState& state, int lane, const JobState* first) const {
  if (loads_.RequestStreamLoad(first->id, state.now).has_value()) return first;
  const JobState* behind = first;
  for (const JobState* job : state.lanes[lane].jobs) {
    if (job->has_queued() && vtimes_.Of(job->id) < vtimes_.Of(behind->id)) behind = job;
  }
  if (behind == first) return first;
  // One iteration of slack (the longer of the two jobs' own), so that jobs
  // of equal cost still alternate in arrival order.
  const double slack = std::max(first->iteration_time.mean() / first->params.weight,
                                behind->iteration_time.mean() / behind->params.weight);
  return vtimes_.Of(first->id) - vtimes_.Of(behind->id) > slack ? behind : first;
}

int PackPolicy::ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const {
  // A newcomer of a key whose jobs are request streams is taken for one.
  const std::optional<int> key =
      params.interference_key.empty() ? std::nullopt : state.interference.Find(params.interference_key);
  bool stream_key = false;
  for (int lane = 0; key && lane < state.LaneCount() && !stream_key; ++lane) {
    for (const JobState* job : state.lanes[lane].jobs) {
      if (job->key == *key && loads_.RequestStreamLoad(job->id, state.now).has_value()) {
        stream_key = true;
        break;
      }
    }
  }
  if (!stream_key) return PackLaneFor(state, params, num_lanes, margin_, max_lanes_);
  const std::vector<double> loads = LaneLoadsNow(state, num_lanes);
  return PackLaneFor(state, params, num_lanes, margin_, max_lanes_, &loads);
}

namespace {

// The clashing pairs a Rebalance in progress sees: the distinct keys of the
// jobs, whether each pair of keys clashes (asked once per unordered pair:
// the rule is symmetric), and per lane and key how many clashing partners a
// job of that key has there. A job's clashing partners outside a lane are
// then two lookups, and a move updates one entry per key: Rebalance runs at
// iteration boundaries, and with 80 small jobs (inference hosting) walking
// every job for every candidate lane was most of the daemon's control loop.
class ClashCounts {
 public:
  template <typename ClashFn>
  ClashCounts(const SchedState& state, int lanes, ClashFn clash) : partners_(lanes) {
    for (const LaneState& lane : state.lanes) {
      for (const JobState* job : lane.jobs) {
        if (index_.emplace(job->key, static_cast<int>(keys_.size())).second) keys_.push_back(job->key);
      }
    }
    const size_t k = keys_.size();
    clash_.assign(k * k, false);
    for (size_t a = 0; a < k; ++a) {
      for (size_t b = a; b < k; ++b) {
        const bool c = clash(keys_[a], keys_[b]);
        clash_[a * k + b] = clash_[b * k + a] = c;
        any_ = any_ || c;
      }
    }
    total_.assign(k, 0);
    for (auto& lane : partners_) lane.assign(k, 0);
    if (!any_) return;
    for (int lane = 0; lane < state.LaneCount() && lane < lanes; ++lane) {
      for (const JobState* job : state.lanes[lane].jobs) Add(Of(*job), lane, +1);
    }
  }

  // Whether any two keys present clash (else no job has a clashing partner).
  bool any() const { return any_; }
  void Move(const JobState& job, int from, int to) {
    if (!any_) return;
    Add(Of(job), from, -1);
    Add(Of(job), to, +1);
  }
  // Clashing partners of `job`, which sits in `own_lane`, in lanes other
  // than `lane` (-1: in every lane).
  int Outside(const JobState& job, int own_lane, int lane) const {
    const size_t mine = Of(job);
    int clashes = total_[mine] - (lane >= 0 ? partners_[lane][mine] : 0);
    if (own_lane != lane && clash_[mine * keys_.size() + mine]) --clashes;  // not its own partner
    return clashes;
  }

 private:
  size_t Of(const JobState& job) const { return static_cast<size_t>(index_.at(job.key)); }
  // A job of key position `key` enters (+1) or leaves (-1) `lane`: every key
  // it clashes with gains or loses a partner there.
  void Add(size_t key, int lane, int delta) {
    const size_t k = keys_.size();
    for (size_t other = 0; other < k; ++other) {
      if (!clash_[key * k + other]) continue;
      partners_[lane][other] += delta;
      total_[other] += delta;
    }
  }

  std::vector<int> keys_;
  absl::flat_hash_map<int, int> index_;     // key -> position in keys_
  std::vector<bool> clash_;                 // keys_.size()^2, row-major, symmetric
  std::vector<std::vector<int>> partners_;  // per lane, per key position: clashing jobs there
  std::vector<int> total_;                  // per key position: clashing jobs in every lane
  bool any_ = false;
};

}  // namespace

std::vector<LaneChange> PackPolicy::Rebalance(const SchedState& state, int num_lanes) const {
  std::vector<LaneChange> changes;
  // Placement as the moves proposed so far leave it (lane num_lanes: new).
  const int view_lanes = std::max(num_lanes, state.LaneCount()) + 1;
  std::vector<std::vector<const JobState*>> lanes(view_lanes);
  for (int lane = 0; lane < state.LaneCount(); ++lane) {
    lanes[lane].assign(state.lanes[lane].jobs.begin(), state.lanes[lane].jobs.end());
  }
  ClashCounts counts(state, view_lanes, [&](int a, int b) { return Clash(state, a, b); });
  // Lane loads as the moves so far leave them, computed when first needed
  // (a lookup per job): most calls fold nothing and do not level.
  std::vector<double> load;
  auto loads = [&]() -> std::vector<double>& {
    if (load.empty()) load = LaneLoadsNow(state, view_lanes);
    return load;
  };
  auto move = [&](const JobState* job, int from, int to) {
    auto& source = lanes[from];
    source.erase(std::find(source.begin(), source.end(), job));
    lanes[to].push_back(job);
    counts.Move(*job, from, to);
    if (!load.empty()) {
      const double l = loads_.Of(job->id, state.now);
      load[from] -= l;
      load[to] += l;
    }
    changes.push_back(LaneChange{job->id, from, to});
  };
  auto moved = [&](const JobState* job) {
    return std::any_of(changes.begin(), changes.end(), [&](const LaneChange& c) { return c.job == job->id; });
  };

  // Fold: each job goes where it has the fewest clashing partners beside it.
  // Every move strictly lowers the number of clashing pairs side by side.
  // A request stream goes only to a lane below kSaturated with it (while
  // levelling is on, no busier with it than its own lane without it, within
  // kLevelGap), holding fewer jobs than StreamLaneCap: idle lanes have no load to stop
  // a fold, and a crowd of alike models registered before their first
  // requests folded into one or two lanes of 74-123 models each.
  const int existing = std::min(num_lanes, state.LaneCount());
  const size_t cap = StreamLaneCap(state, max_lanes_);
  // Levelling (below) is on with every lane taken: max_lanes of them, none empty.
  bool levelling = existing >= 2 && num_lanes >= max_lanes_;
  for (int lane = 0; lane < existing && levelling; ++lane) levelling = !lanes[lane].empty();
  for (int lane = 0; lane < state.LaneCount() && counts.any(); ++lane) {
    for (const JobState* job : state.lanes[lane].jobs) {
      if (job->running || job->staged > 0 || moved(job)) continue;
      const int here = counts.Outside(*job, lane, lane);
      if (here == 0) continue;
      int best_lane = lane;
      int best = here;
      const std::optional<double> stream_load = loads_.RequestStreamLoad(job->id, state.now);
      const bool stream = stream_load.has_value();
      // A request stream moved in the last kHoldSeconds stays put (its
      // clashing partners may still come to it): each move costs it a
      // capture, and r measured under load flips between clash and not,
      // which moved 650-850 jobs per probe of 448-512 models on an H200.
      if (stream && Held(job->id, state.now)) continue;
      const double l = stream_load.value_or(0.0);
      for (int target = 0; target < existing; ++target) {
        if (target == lane) continue;
        if (stream && loads()[target] + l > kSaturated) continue;  // its requests would queue there
        if (stream && lanes[target].size() >= cap) continue;
        // While levelling is on, nor past its own lane's load without it
        // by more than levelling leaves: levelling took a job out of a busy
        // lane (below the cap then) and a fold put another into it, and the
        // busiest lanes of 352-384 models on an H200 kept twice the least
        // busy ones' load.
        if (stream && levelling && loads()[target] + l > loads()[lane] - l + kLevelGap) continue;
        const int there = counts.Outside(*job, lane, target);
        if (there < best) {
          best = there;
          best_lane = target;
        }
      }
      if (best_lane != lane) move(job, lane, best_lane);
    }
  }

  // Spread: a waiting job of a crowded lane that clashes with nobody, or a
  // request stream of a lane past kSaturated, gets an empty lane, or one new
  // lane per call while fewer than max_lanes exist.
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
    // The newest waiting job that clashes with nobody anywhere; in a
    // saturated lane, the newest waiting request stream.
    const bool saturated = loads()[lane] > kSaturated;
    const std::vector<const JobState*> jobs = lanes[lane];
    for (auto it = jobs.rbegin(); it != jobs.rend(); ++it) {
      const JobState* job = *it;
      if (job->running || job->staged > 0 || !job->has_queued() || moved(job)) continue;
      if (counts.Outside(*job, lane, -1) > 0 &&
          !(saturated && loads_.RequestStreamLoad(job->id, state.now).has_value())) {
        continue;
      }
      move(job, lane, target);
      if (target == num_lanes) new_lane_used = true;
      break;
    }
  }

  // Level: with every lane taken and nothing else to do, busy lanes give
  // idle ones a job: the busiest the least busy, then the busiest and least
  // busy of the rest, and so on, each lane giving or taking one job at most
  // per call (a moved job's first iteration on its new lane holds that lane
  // up a few ms). With one move per call, a probe of 352-384 models in 12
  // lanes of an H200 ended with its busiest lanes at twice the kernel time
  // of the least busy ones, and most slow requests in those.
  // (A free lane is spreading's business.)
  const bool awaiting_capture = recapturing_ != 0 && state.now < recapture_deadline_;
  if (!changes.empty() || !levelling || state.now < next_level_ || awaiting_capture) return changes;
  if (state.now < next_level_check_) return changes;
  next_level_check_ = state.now + kLevelSpacing;  // loads change slowly: look at most this often
  loads();
  std::vector<bool> paired(existing, false);
  for (;;) {
    int hi = -1;
    int lo = -1;
    for (int lane = 0; lane < existing; ++lane) {
      if (paired[lane]) continue;
      if (hi < 0 || load[lane] > load[hi]) hi = lane;
      if (lo < 0 || load[lane] < load[lo]) lo = lane;
    }
    if (hi < 0 || hi == lo) break;
    const double gap = load[hi] - load[lo];
    if (gap <= kLevelGap) break;
    paired[hi] = true;  // it gives at most one job, or none
    if (lanes[hi].size() < 2) continue;
    // The job whose load comes closest to half the gap: any load below the
    // gap lowers the sum of squared lane loads, half the gap the most.
    const JobState* best = nullptr;
    double best_miss = std::numeric_limits<double>::infinity();
    // Only request streams move: a training job keeps whatever lane it has
    // busy, and a move costs it a capture.
    for (const JobState* job : lanes[hi]) {
      if (job->running || job->staged > 0 || Held(job->id, state.now)) continue;
      const std::optional<double> stream_load = loads_.RequestStreamLoad(job->id, state.now);
      if (!stream_load.has_value()) continue;
      const double l = *stream_load;
      if (l <= 0 || l >= gap || std::abs(l - gap / 2) >= best_miss) continue;
      // It gains no clashing partner, unless the busy lane is past
      // kSaturated: taking turns there queues its requests.
      if (load[hi] <= kSaturated && counts.any() && counts.Outside(*job, hi, lo) > counts.Outside(*job, hi, hi)) {
        continue;
      }
      best = job;
      best_miss = std::abs(l - gap / 2);
    }
    if (best == nullptr) continue;
    move(best, hi, lo);
    paired[lo] = true;
  }
  return changes;
}

}  // namespace tandem::sched
