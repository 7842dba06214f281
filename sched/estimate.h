// A running estimate of a positive quantity (an iteration time, a ratio):
// the plain mean of the first kHorizon samples, then an exponentially
// weighted mean with weight 1/kHorizon, so it follows slow drift.
//
// A value type; not thread-safe.
#ifndef TANDEM_SCHED_ESTIMATE_H_
#define TANDEM_SCHED_ESTIMATE_H_

#include <algorithm>
#include <cstdint>

namespace tandem::sched {

class RunningEstimate {
 public:
  static constexpr uint64_t kHorizon = 16;

  void Add(double x) {
    ++samples_;
    const double alpha = 1.0 / static_cast<double>(std::min(samples_, kHorizon));
    mean_ += alpha * (x - mean_);
  }
  uint64_t samples() const { return samples_; }
  double mean() const { return mean_; }

 private:
  uint64_t samples_ = 0;
  double mean_ = 0;
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_ESTIMATE_H_
