#include "sched/interference.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace tandem::sched {
namespace {

// A sample r outside this range is a measurement artefact (clock jitter on a
// tiny iteration), not interference.
constexpr double kMinPlausibleR = 0.2;
constexpr double kMaxPlausibleR = 100.0;

}  // namespace

int InterferenceEstimates::Intern(const std::string& key) {
  auto it = ids_.find(key);
  if (it != ids_.end()) return it->second;
  const int id = static_cast<int>(names_.size());
  names_.emplace_back(key);
  ids_.emplace(key, id);
  solo_.emplace_back();
  return id;
}

std::optional<int> InterferenceEstimates::Find(const std::string& key) const {
  auto it = ids_.find(key);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

void InterferenceEstimates::Forget(int key) {
  if (key < 0 || key >= static_cast<int>(names_.size())) return;
  ids_.erase(names_[key]);
  solo_[key] = RunningEstimate{};
  absl::erase_if(pairs_, [key](const auto& entry) { return entry.first.first == key || entry.first.second == key; });
}

void InterferenceEstimates::AddSample(int key, const OverlapMeter::Sample& overlap, double iteration_seconds) {
  if (key < 0 || key >= static_cast<int>(names_.size())) return;
  if (!(iteration_seconds > 0) || !std::isfinite(iteration_seconds)) return;
  if (overlap.was_paused) {
    // A paused iteration (a segmented solo probe, a yielded best-effort
    // one) measures its key's solo time when it ran alone throughout: its
    // device time is its segments'. Beside partners, its wall time (pauses
    // included) no longer tells their share.
    if (overlap.partner_seconds.empty()) solo_[key].Add(iteration_seconds);
    return;
  }
  double overlapped = 0;
  for (const auto& [partner, seconds] : overlap.partner_seconds) overlapped += seconds;
  const double wall = overlap.wall_seconds;
  if (overlapped <= kSoloOverlapTolerance * wall || overlap.partner_seconds.empty()) {
    solo_[key].Add(iteration_seconds);
    return;
  }
  if (!(wall > 0)) return;
  const std::optional<double> solo = Solo(key);
  if (!solo) return;

  // y = T / solo - 1 = sum_K c_K (r(A,K) - 1), one equation per iteration.
  // Partners never sampled beside A share what the sampled ones do not
  // explain, equally per unit of overlap; once every partner has an estimate,
  // each significant partner is corrected in turn against the others'
  // current estimates (a Kaczmarz step), which converges for a steady mix.
  const double excess = iteration_seconds / *solo - 1;
  double known_excess = 0;
  double unknown_share = 0;
  for (const auto& [partner, seconds] : overlap.partner_seconds) {
    const double share = seconds / wall;
    auto it = pairs_.find(std::make_pair(key, partner));
    if (it == pairs_.end() || it->second.samples() == 0) {
      unknown_share += share;
    } else {
      known_excess += share * (it->second.mean() - 1);
    }
  }
  auto record = [&](int partner, double r) {
    if (r >= kMinPlausibleR && r <= kMaxPlausibleR) pairs_[{key, partner}].Add(r);
  };
  if (unknown_share > 0) {
    const double r_unknown = 1 + (excess - known_excess) / unknown_share;
    for (const auto& [partner, seconds] : overlap.partner_seconds) {
      if (seconds / wall < kMinPairOverlap) continue;
      auto it = pairs_.find(std::make_pair(key, partner));
      if (it == pairs_.end() || it->second.samples() == 0) record(partner, r_unknown);
    }
    return;
  }
  for (const auto& [partner, seconds] : overlap.partner_seconds) {
    const double share = seconds / wall;
    if (share < kMinPairOverlap) continue;
    const double own = pairs_.at(std::make_pair(key, partner)).mean();
    const double others = known_excess - share * (own - 1);
    record(partner, 1 + (excess - others) / share);
  }
}

std::optional<double> InterferenceEstimates::Solo(int key) const {
  if (key < 0 || key >= static_cast<int>(solo_.size())) return std::nullopt;
  const RunningEstimate& e = solo_[key];
  if (e.samples() < static_cast<uint64_t>(min_samples_) || e.samples() == 0) return std::nullopt;
  return e.mean();
}

uint64_t InterferenceEstimates::SoloSamples(int key) const {
  if (key < 0 || key >= static_cast<int>(solo_.size())) return 0;
  return solo_[key].samples();
}

std::optional<double> InterferenceEstimates::R(int a, int b) const {
  auto it = pairs_.find(std::make_pair(a, b));
  if (it == pairs_.end()) return std::nullopt;
  if (it->second.samples() < static_cast<uint64_t>(std::max(min_samples_, 1))) return std::nullopt;
  return it->second.mean();
}

uint64_t InterferenceEstimates::PairSamples(int a, int b) const {
  auto it = pairs_.find(std::make_pair(a, b));
  return it == pairs_.end() ? 0 : it->second.samples();
}

std::optional<bool> InterferenceEstimates::SideBySidePays(int a, int b, double margin) const {
  const std::optional<double> rab = R(a, b);
  const std::optional<double> rba = R(b, a);
  if (!rab || !rba) return std::nullopt;
  return 1.0 / *rab + 1.0 / *rba > 1.0 + margin;
}

std::vector<PairInterference> InterferenceEstimates::Pairs() const {
  std::vector<PairInterference> out;
  out.reserve(pairs_.size());
  for (const auto& [key, estimate] : pairs_) {
    out.push_back(PairInterference{names_[key.first], names_[key.second], estimate.mean(), estimate.samples()});
  }
  std::sort(out.begin(), out.end(), [](const PairInterference& x, const PairInterference& y) {
    return std::tie(x.a, x.b) < std::tie(y.a, y.b);
  });
  return out;
}

}  // namespace tandem::sched
