// Which lanes are busy, and for each running iteration how long it ran alone
// and beside iterations of which interference keys.
//
// The scheduler tells it when an iteration starts, pauses, resumes and ends
// (all at clock times that never go backwards); at the end it returns the
// iteration's overlap Sample, which InterferenceEstimates turns into solo
// times and degradation coefficients. A paused iteration neither runs nor
// counts as running beside others.
//
// Cost: O(busy lanes^2) per event. Not thread-safe.
#ifndef TANDEM_SCHED_OVERLAP_METER_H_
#define TANDEM_SCHED_OVERLAP_METER_H_

#include <utility>
#include <vector>

namespace tandem::sched {

class OverlapMeter {
 public:
  struct Sample {
    double wall_seconds = 0;   // start to end, paused time included
    double alone_seconds = 0;  // running with no other lane running
    // Per partner key: the time integral of the number of running iterations
    // of that key beside this one (two partners of one key for 1 s count 2 s).
    std::vector<std::pair<int, double>> partner_seconds;
    bool was_paused = false;
  };

  // Starts an iteration of `key` in `lane`; a lane already busy is restarted.
  void Start(int lane, int key, double now);
  void Pause(int lane, double now);
  void Resume(int lane, double now);
  // Ends the lane's iteration and returns its overlap; an idle lane gives an
  // empty Sample.
  Sample Finish(int lane, double now);

  bool Busy(int lane) const;
  bool Paused(int lane) const;
  // Lanes with an iteration that is running (busy and not paused).
  int RunningCount() const { return running_; }

 private:
  struct Slot {
    bool busy = false;
    bool paused = false;
    int key = -1;
    double start = 0;
    Sample sample;
  };

  // Credits the time since the last event to every running slot.
  void AdvanceTo(double now);
  Slot& SlotFor(int lane);

  std::vector<Slot> slots_;
  double last_event_ = 0;
  bool seen_event_ = false;
  int running_ = 0;
};

}  // namespace tandem::sched

#endif  // TANDEM_SCHED_OVERLAP_METER_H_
