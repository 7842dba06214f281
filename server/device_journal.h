// A device's recent lane events, with wall-clock times, for lining up a
// client's slow requests with what the daemon did at that moment: a job
// moved to another lane, a lane's arena that moved, an iteration that
// captured its graph (it ran kernel by kernel first, holding up its lane),
// an iteration that waited long in the daemon before it ran. A bounded
// ring: the oldest events go first, counted as dropped. The stats reply carries it (DeviceStats.events);
// bench/inference/hosting.py puts the events beside each probe's stalls.
// Thread-compatible (the control loop's).
#ifndef TANDEM_SERVER_DEVICE_JOURNAL_H_
#define TANDEM_SERVER_DEVICE_JOURNAL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace tandem::server {

enum class JournalKind {
  kMove,       // the policy moved `job` from `from_lane` to `lane`
  kCapture,    // an iteration of `job` on `lane` captured a graph; seconds: the host time of its
               // kernel-by-kernel run and capture (ProgramCounters::recapture_seconds)
  kSlowWait,   // an iteration of `job` on `lane` waited `seconds` in the daemon before it ran
  kSegmented,  // an iteration of `job` on `lane` that ran in segments and paused ended (a solo probe, a
               // best-effort iteration under op preemption); seconds: from its first segment to its end,
               // run_seconds: its device time, pauses: the times it yielded
  kArena,      // `lane`'s arena moved to other addresses (each of its jobs captures its graphs again);
               // `job`: the job whose admission, move or departure moved it
};

const char* JournalKindName(JournalKind kind);

struct JournalEntry {
  double unix_seconds = 0;  // when the loop saw it (system clock)
  JournalKind kind = JournalKind::kMove;
  uint64_t job = 0;
  int lane = -1;
  int from_lane = -1;  // kMove only
  double seconds = 0;
  // kCapture: of `seconds`, the kernel-by-kernel run's and the graph's
  // (ProgramCounters::recapture_run_seconds, recapture_graph_seconds).
  double run_seconds = 0;
  double graph_seconds = 0;
  int pauses = 0;  // kSegmented only
};

class DeviceJournal {
 public:
  // Iterations that wait at least this long are journaled (kSlowWait): a
  // quarter of the 20 ms latency target the hosting benchmark checks.
  static constexpr double kSlowWaitSeconds = 0.005;

  explicit DeviceJournal(size_t capacity = 1024) : capacity_(capacity) {}

  // Appends `entry`, dropping the oldest entry when full.
  void Add(const JournalEntry& entry);
  // The entries at or after `unix_seconds`, oldest first.
  std::vector<JournalEntry> Since(double unix_seconds) const;
  uint64_t dropped() const { return dropped_; }
  size_t size() const { return entries_.size(); }

  // Now on the system clock, in seconds since the epoch.
  static double UnixNow();

 private:
  size_t capacity_;
  std::deque<JournalEntry> entries_;
  uint64_t dropped_ = 0;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_DEVICE_JOURNAL_H_
