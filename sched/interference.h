// Online interference estimates: per interference key the solo iteration
// time, per ordered pair of keys the degradation coefficient
//   r(A,B) = A's iteration time beside B / A's iteration time alone.
//
// Fed one finished iteration at a time (its measured time and its overlap
// from OverlapMeter). The model behind the estimator: each running partner B
// adds (r(A,B) - 1) x A's solo time per unit of overlap, so for an iteration
// of A that overlapped partners of key K for a fraction c_K of its wall time
// (c_K counts partners: two of one key for the whole iteration give 2)
//   T / solo(A) - 1 = sum_K c_K (r(A,K) - 1).
// An iteration that ran (almost) alone is a solo sample. Otherwise each
// partner key with c_K >= 0.5 gets a sample of r(A,K) solved from that
// equation with the other partners' current estimates (partners with none yet
// share the unexplained slowdown equally). Iterations that were paused, and
// overlapped iterations of a key whose solo time is not known yet, are not
// samples.
//
// Keys are interned to small ints. Not thread-safe.
#ifndef TANDEM_SCHED_INTERFERENCE_H_
#define TANDEM_SCHED_INTERFERENCE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "sched/estimate.h"
#include "sched/overlap_meter.h"
#include "sched/scheduler.h"

namespace tandem::sched {

class InterferenceEstimates {
 public:
  // Fraction of an iteration's wall time it may overlap others and still be
  // a solo sample.
  static constexpr double kSoloOverlapTolerance = 0.01;
  // Least overlap (c_K) with a partner key for a sample of its pair.
  static constexpr double kMinPairOverlap = 0.5;

  explicit InterferenceEstimates(int min_samples) : min_samples_(min_samples) {}

  // The id of `key`, interning it on first use.
  int Intern(const std::string& key);
  const std::string& KeyName(int key) const { return names_[key]; }
  // The id of an interned key; nullopt when it was never seen (or forgotten).
  std::optional<int> Find(const std::string& key) const;
  // Drops every estimate that involves `key` (a job's private key when the
  // job leaves). The id is not reused.
  void Forget(int key);

  // Feeds one finished iteration of `key` that took `iteration_seconds`
  // (measured device time). One that was paused counts only as a solo
  // sample, and only when it ran beside nobody.
  void AddSample(int key, const OverlapMeter::Sample& overlap, double iteration_seconds);

  // Trusted estimates (at least min_samples samples); nullopt otherwise.
  std::optional<double> Solo(int key) const;
  std::optional<double> R(int a, int b) const;
  uint64_t SoloSamples(int key) const;
  uint64_t PairSamples(int a, int b) const;

  // Whether a and b side by side beat taking turns:
  //   1/r(a,b) + 1/r(b,a) > 1 + margin.
  // nullopt while either direction is unmeasured.
  std::optional<bool> SideBySidePays(int a, int b, double margin) const;

  // Every pair with at least one sample.
  std::vector<PairInterference> Pairs() const;

 private:
  const int min_samples_;
  std::vector<std::string> names_;
  absl::flat_hash_map<std::string, int> ids_;
  std::vector<RunningEstimate> solo_;
  absl::flat_hash_map<std::pair<int, int>, RunningEstimate> pairs_;
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_INTERFERENCE_H_
