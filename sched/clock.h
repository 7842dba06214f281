// The scheduler's time source, injected so that the simulator and the tests
// drive a virtual clock while the daemon uses the monotonic one.
//
// Now() is in seconds from an arbitrary origin and never goes backwards.
// SteadyClock is thread-safe; ManualClock is not (one owner moves it).
#ifndef TANDEM_SCHED_CLOCK_H_
#define TANDEM_SCHED_CLOCK_H_

#include <chrono>

namespace tandem::sched {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual double Now() const = 0;
};

// std::chrono::steady_clock, origin at construction.
class SteadyClock : public Clock {
 public:
  SteadyClock() : origin_(std::chrono::steady_clock::now()) {}
  double Now() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
  }

 private:
  const std::chrono::steady_clock::time_point origin_;
};

// A clock that moves only when told to. Setting it backwards is ignored, so
// readers always see a monotone time.
class ManualClock : public Clock {
 public:
  explicit ManualClock(double start_seconds = 0) : now_(start_seconds) {}
  double Now() const override { return now_; }
  void Set(double seconds) {
    if (seconds > now_) now_ = seconds;
  }
  void Advance(double seconds) {
    if (seconds > 0) now_ += seconds;
  }

 private:
  double now_;
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_CLOCK_H_
