// PACK: maximize throughput by running jobs side by side (separate lanes)
// exactly while the measured interference says that beats taking turns.
//
// Two jobs A and B belong in separate lanes while
//   1/r(A,B) + 1/r(B,A) > 1 + margin,
// i.e. while their aggregate throughput side by side beats running one after
// the other; otherwise they share a lane. Pairs not measured yet are tried
// side by side first (that is how they get measured), then decided.
//
//   * ChooseLane: a lane holding a job the new one is measured to clash with
//     (the worst clash first; a newcomer of a key whose jobs are request
//     streams only where the lane holds fewer than StreamLaneCap jobs and
//     is not past kSaturated); else an empty lane; else a new lane while
//     fewer than max_lanes exist; else the lane with the fewest jobs (for
//     a request stream's newcomer, the fewest among the least busy lanes:
//     loads within kLaneLoadTie count as equal).
//   * Rebalance (at iteration boundaries): moves a job to the lane that
//     leaves it the fewest clashing partners in other lanes (a request
//     stream only to a lane below kSaturated and StreamLaneCap, while
//     levelling is on not to one that it would leave busier than its own
//     by more than kLevelGap, and not within kHoldSeconds of its last move; each move
//     strictly reduces the clashing pairs running side by side, so it never
//     oscillates), and spreads a job of a crowded lane to an empty or a new
//     lane when it clashes with nobody, or when it is a request stream of
//     a lane past kSaturated (folding it back would pass kSaturated again). When every lane is taken, it levels
//     load: a lane whose jobs keep it busy (LaneLoads: recent iteration rate
//     x cost per iteration) well beyond the least busy lane's gives that
//     lane one request stream (LaneLoads::RequestStreamLoad; training jobs stay
//     put): the one whose load is closest to half the gap, below the whole
//     gap, that gains no clashing partner and has not moved in the last
//     kHoldSeconds; then the next busiest and least busy lanes, each lane
//     giving or taking one job per kLevelSpacing at most. Each move lowers the
//     sum of squared lane loads, so it does not oscillate while loads hold,
//     and a move's own cost (the moved job captures its graph again) is
//     kept out of the loads. It is for crowds of request streams of unequal
//     cost (inference hosting).
//   * Pick: in each lane the job whose queued iteration came first runs
//     (first come, first served: a crowd of inference models sharing a lane
//     is served in request order), except that a job that keeps the lane
//     busy (not a request stream) does not run ahead of a lane-mate with a
//     queued iteration by more than one iteration of device time
//     (VirtualTimes, no credit for idle time): then the lane-mate furthest
//     behind runs. Jobs that take turns so get equal device time, whatever
//     their iteration times; plain alternation gave a 6 ms job beside a
//     28 ms one a fifth of its solo rate. A job whose solo time is unknown
//     gets a probe: the other lanes drain and its iteration runs alone
//     (min_interference_samples times per interference key), because r is
//     measured against the solo time; beside jobs that have run, in
//     segments that take turns with them (SoloProbes).
//
// No starvation: side by side must also leave each job its fair share.
// Two jobs that take turns each get half the device (2x their solo time),
// so a pair runs side by side only while neither is slowed beyond
// kFairPairSlowdown = 1.1 x 2 (at least 0.9 of its fair half), even where
// the sum of their rates would gain: DenseNet-121 beside ResNet-18 ran at
// 0.19 of its solo rate while the pair's sum was 1.01. With more jobs,
// pairwise rules do not bound a job that both takes turns in a lane and is
// slowed by the lanes beside it, so the shares are also checked as they
// are: a training job whose measured rate (LaneLoads' decayed iteration
// rate x its key's solo time) stays under 0.9/n of its solo rate, n the
// device's active training jobs, for kJudgeSeconds after the last change of
// placement, makes its pair with its worst partner side by side clash
// (learned clashes, forgotten when a job comes or goes): that partner then
// folds into its lane, where turns are fair.
//
// Assumptions it was designed for:
//   * Interference is pairwise and additive: with several co-runners each adds
//     its own (r - 1) slowdown; a pair's r does not change with who else runs.
//   * Jobs of one interference key behave alike, so a sweep of alike jobs is
//     measured once; jobs with private keys are measured each on their own.
//   * Iterations are short next to job lifetimes (decisions take effect at
//     iteration boundaries), and memory, not the policy, has the last word on
//     where a job can go (the daemon applies only the moves memory accepts).
#ifndef TANDEM_SCHED_PACK_POLICY_H_
#define TANDEM_SCHED_PACK_POLICY_H_

#include <limits>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "sched/estimate.h"
#include "sched/policy.h"
#include "sched/virtual_time.h"

namespace tandem::sched {

// PACK's decision rules, shared with the policies that pack (srtf_pack).

// The most a job may be slowed by one partner running side by side:
// 1.1 x 2, so that it keeps at least 0.9 of the half of the device that
// taking turns would give it.
inline constexpr double kFairPairSlowdown = 2.2;

// True when keys a and b are measured to be better off taking turns: side
// by side does not pay (SideBySidePays is false) or slows either beyond
// kFairPairSlowdown. False while the pair is unmeasured.
bool MeasuredToClash(const SchedState& state, int key_a, int key_b, double margin);

// A lane this busy (LaneLoads: a fraction of its time) takes no more
// request streams by the clash rule: taking turns there queues their
// requests (PackPolicy::kSaturated).
inline constexpr double kSaturatedLaneLoad = 0.7;

// Lane loads this close (fractions of a lane's time) count as equal when a
// request stream's newcomer looks for the least busy lane: it then takes
// the one with the fewest jobs.
inline constexpr double kLaneLoadTie = 0.05;

// The most jobs a lane may hold for a request stream to join it by the
// clash rule (placement or fold): the lane's share of the device's jobs
// (their number over max_lanes, rounded up), at least 2 (a pair may always
// take turns).
size_t StreamLaneCap(const SchedState& state, int max_lanes);

// PACK's lane for a new job: a lane holding a job it is measured to clash
// with (the worst clash first); for a request stream (stream_lane_loads
// given: the lanes' loads) only a lane holding fewer jobs than
// StreamLaneCap and not past kSaturatedLaneLoad; else an empty lane; else
// a new lane (num_lanes) while fewer than max_lanes exist; else the lane
// with the fewest jobs (for a request stream, the one with the fewest jobs
// among the lanes within kLaneLoadTie of the least busy).
int PackLaneFor(const SchedState& state, const JobParams& params, int num_lanes, double margin, int max_lanes,
                const std::vector<double>* stream_lane_loads = nullptr);

// Solo probes: r is measured against a key's solo time, so a job whose key
// has none yet runs iterations alone (the other lanes drain), at most
// max_probes_per_key per key. Not a first iteration that captures the job's
// graph (SchedulerOptions::first_iteration_captures), which is not
// measured; and one probe per probe_spacing_seconds at most, so that a
// running job is held up by one of the newcomer's iterations now and then,
// not by a run of them.
//
// Beside jobs that have run, a probe runs in segments (Dispatch::segmented)
// and takes turns with the jobs it holds up (ShouldYield): it pauses at a
// segment boundary once it has run for its turn (probe_turn_fraction of the
// slowest one's iteration estimate, at most the quickest one's), the other
// lanes start iterations as usual for the slowest one's, and the probe goes
// on alone once those end. The probe's device time is the sum of its
// segments, each of them alone. So a newcomer whose iterations are much
// longer than a running job's holds that job's iterations up by a fraction
// of one of them at a time, not for one of the newcomer's (a 28 ms newcomer
// beside a 6.4 ms job made its slowest iteration 4.4x its median; with turns
// of a whole iteration of it, 1.78x; now 1.04x, in the simulator).
// Owned by one policy; not thread-safe.
class SoloProbes {
 public:
  // segmented: probes beside jobs that have run go in segments (PACK; not
  // SRTF_PACK, whose shortest-first order the pauses disturbed in the
  // simulator: a short newcomer then finished after a longer job).
  SoloProbes(int max_probes_per_key, bool segmented) : max_probes_per_key_(max_probes_per_key), segmented_(segmented) {}

  // True when a probe is due; then *pick is the decision for `lane`: the
  // probe's job (counted as a probe started), or nullopt while the lane must
  // wait for it. False (and *pick untouched) when no probe is due.
  bool Decide(const SchedState& state, int lane, std::optional<JobId>* pick);
  // Whether the probe just picked for `lane` (Decide) runs in segments: it
  // does when another job of the device has completed an iteration.
  bool Segmented(JobId job) const;
  // True when `lane` runs a segmented probe that should pause, or stay
  // paused. It takes turns with the jobs it holds up (those of other lanes
  // with a queued iteration and an iteration estimate): it runs for its
  // turn (above), then pauses for the slowest one's iteration time (the
  // pause window: other lanes start iterations as usual), then waits for
  // the iterations in progress to end, and goes on. `runs(lane)` tells
  // whether the policy would start an iteration in a free lane now, so that
  // a probe never waits for a lane the policy keeps idle.
  bool ShouldYield(const SchedState& state, int lane, absl::FunctionRef<bool(int)> runs) const;

 private:
  struct HeldUp {
    bool busy = false;     // another lane runs an iteration
    bool waiting = false;  // a job of a free lane that `runs` has a queued iteration and an estimate
    double shortest = std::numeric_limits<double>::infinity();  // the least of the waiting jobs' estimates
    double longest = 0;                                         // the greatest
  };
  static HeldUp HeldUpJobs(const SchedState& state, int probe_lane, absl::FunctionRef<bool(int)> runs);
  // The running probe's job while its iteration runs, else null.
  const JobState* RunningProbe(const SchedState& state) const;

  // The oldest job with a queued iteration whose key still needs a probe.
  const JobState* Target(const SchedState& state);
  // True when key needs no (more) probes: its solo time is known, or its
  // probes are spent. Once true it stays true while the key is in use.
  bool Settled(const SchedState& state, int key) const;

  const int max_probes_per_key_;
  const bool segmented_;
  absl::flat_hash_map<int, int> started_;  // per key: probe iterations started
  double next_probe_ = 0;                  // no probe starts before this
  JobId running_probe_ = 0;                // the probe iteration's job while it may still run (0: none)
  uint64_t probe_start_seq_ = 0;           // the probe iteration's JobState::last_start_seq
  bool probe_segmented_ = false;           // the running probe runs in segments
  // How long the paused probe leaves the other lanes to start iterations
  // (ShouldYield sets it when it asks for the pause).
  mutable double pause_window_ = 0;
  // The state's jobs_version at which every job's key was found settled:
  // until a job comes or goes, no probe can be due, and Target answers
  // without walking the jobs (it is asked at every dispatch).
  uint64_t all_settled_version_ = 0;
};

// Each job's load: the fraction of a lane's time its iterations take, as
// its recent iteration rate (iteration ends per second, an exponentially
// decayed count with time constant kDecaySeconds) times its cost per
// iteration (a running mean of its device times). Once a job has
// kSettleSamples samples, a sample counts at most kOutlierFactor times its
// cost: the iteration that runs op by op and captures the job's graph again
// after a move (tens of milliseconds for a model of a millisecond) must not
// make it look costly wherever it lands, which would drive the next move.
// A lane's load is its jobs' sum.
//
// A job is a request stream (an inference model's, a client that thinks
// between iterations) when it usually wants nothing more when an iteration
// ends (a running mean of "queued, staged or running again" at its
// iteration ends under 0.5) and its load is under kRequestStreamLoad. A
// training job keeps its next iteration queued (two in flight), whether it
// runs alone or takes turns in a lane.
class LaneLoads {
 public:
  static constexpr double kDecaySeconds = 1.0;
  static constexpr uint64_t kSettleSamples = 4;
  static constexpr double kOutlierFactor = 2.0;
  static constexpr double kRequestStreamLoad = 0.5;

  // `still_active`: the job wants the device again as this iteration ends.
  void OnIterationDone(JobId job, double now, double device_seconds, bool still_active);
  void Forget(JobId job) { jobs_.erase(job); }
  double Of(JobId job, double now) const;
  // Iteration ends per second, decayed (0 for a job not seen).
  double Rate(JobId job, double now) const;
  // The job's load (Of) when it is a request stream, nullopt otherwise: one
  // lookup for both questions.
  std::optional<double> RequestStreamLoad(JobId job, double now) const;

 private:
  struct Job {
    double count = 0;  // iteration ends, decayed to `at`
    double at = 0;
    RunningEstimate cost;
    RunningEstimate backlog;  // 1 when the job was still active at an iteration end, else 0
  };
  static double LoadOf(const Job& j, double now);
  absl::flat_hash_map<JobId, Job> jobs_;
};

class PackPolicy : public Policy {
 public:
  explicit PackPolicy(const SchedulerOptions& options)
      : margin_(options.pack_margin),
        max_lanes_(options.max_lanes),
        probes_(4 * options.min_interference_samples, /*segmented=*/true) {}

  absl::string_view name() const override { return "pack"; }
  std::optional<JobId> Pick(const SchedState& state, int lane) override;
  bool ShouldYield(const SchedState& state, int lane) const override {
    return probes_.ShouldYield(state, lane, [&](int l) { return FirstQueued(state, l) != nullptr; });
  }
  bool Segmented(const SchedState& state, JobId job, int lane) const override { return probes_.Segmented(job); }
  int ChooseLane(const SchedState& state, const JobParams& params, int num_lanes) const override;
  std::vector<LaneChange> Rebalance(const SchedState& state, int num_lanes) const override;
  void OnIterationDone(const SchedState& state, const JobState& job, double device_seconds) override;
  void OnJobAdded(const SchedState& state, const JobState& job) override {
    vtimes_.Added(state, job);
    placed_at_ = state.now;
  }
  void OnJobActivated(const SchedState& state, const JobState& job) override { vtimes_.Activated(state, job); }
  void OnJobRemoved(const SchedState& state, JobId job) override {
    loads_.Forget(job);
    vtimes_.Removed(job);
    placed_at_ = state.now;
    held_until_.erase(job);
    if (recapturing_ == job) recapturing_ = 0;
  }
  void OnJobMoved(const SchedState& state, const JobState& job, int from_lane) override;

  // Levelling moves only when the busiest lane's load exceeds the least
  // busy one's by this much (a fraction of a lane's time).
  static constexpr double kLevelGap = 0.15;
  // Request streams (LaneLoads::RequestStreamLoad) and crowded lanes: a
  // request stream is not folded into a lane whose load would pass
  // kSaturated, however it clashes there (nor is a new job placed by the
  // clash rule into a lane already past it), and spreading and levelling
  // may move one out of a lane past kSaturated even beside a job it
  // clashes with: taking
  // turns in a lane that busy queues its requests. Fold cannot take it back
  // (its old lane is still past kSaturated with it), so this does not
  // oscillate. Training jobs fold as the clash rule says.
  static constexpr double kSaturated = kSaturatedLaneLoad;
  // A job that moved stays where it is this long (any move). Levelling
  // moves at most one job into or out of a lane per kLevelSpacing, and not
  // before the job it moved last has finished its first iteration on the new lane (op by op,
  // a new capture: it holds up that lane's other jobs, whose rates dip)
  // and kSettleSeconds more have passed.
  static constexpr double kHoldSeconds = 10.0;
  static constexpr double kLevelSpacing = 0.1;
  static constexpr double kSettleSeconds = 0.25;
  // ... or until this long after the move, if the moved job stays idle.
  static constexpr double kRecaptureWaitSeconds = 1.0;
  // How long shares settle after a change of placement before a starving
  // job is judged (several LaneLoads::kDecaySeconds).
  static constexpr double kJudgeSeconds = 3.0;
  // A training job below this fraction of its fair share (1/n) starves.
  static constexpr double kFairShareFloor = 0.9;

 private:
  bool Clash(const SchedState& state, int key_a, int key_b) const {
    return MeasuredToClash(state, key_a, key_b, margin_) || LearnedClash(key_a, key_b);
  }
  bool LearnedClash(int key_a, int key_b) const {
    return learned_clashes_.contains({std::min(key_a, key_b), std::max(key_a, key_b)});
  }
  // After `job`'s iteration: when its share has starved since the last
  // change of placement, its pair with the partner side by side that slows
  // it most is learned to clash.
  void JudgeShare(const SchedState& state, const JobState& job);

  const double margin_;
  const int max_lanes_;
  bool Held(JobId job, double now) const;
  // Each lane's load now (LaneLoads), `lanes` entries at least.
  std::vector<double> LaneLoadsNow(const SchedState& state, int lanes) const;

  // The lane's first-come choice, or the lane-mate furthest behind it in
  // device time when `first` keeps the lane busy and leads it by more than
  // an iteration (Pick).
  const JobState* FairTurn(const SchedState& state, int lane, const JobState* first) const;

  SoloProbes probes_;
  LaneLoads loads_;
  VirtualTimes vtimes_{0.0};                       // no credit for idle time: shares count while jobs compete
  absl::flat_hash_map<JobId, double> held_until_;  // per moved job: no levelling move before this
  double next_level_ = 0;                          // no levelling move before this
  JobId recapturing_ = 0;                          // moved, its first iteration there not done (0: none)
  double recapture_deadline_ = 0;                  // levelling waits for recapturing_ until then
  mutable double next_level_check_ = 0;            // Rebalance looks at lane loads no sooner
  double placed_at_ = 0;                           // the last time a job came, went or moved
  absl::flat_hash_set<std::pair<int, int>> learned_clashes_;  // (smaller key, larger key)
  uint64_t learned_for_version_ = 0;                          // the jobs_version they were learned for
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_PACK_POLICY_H_
