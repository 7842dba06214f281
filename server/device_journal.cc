#include "server/device_journal.h"

#include <chrono>

namespace tandem::server {

const char* JournalKindName(JournalKind kind) {
  switch (kind) {
    case JournalKind::kMove:
      return "move";
    case JournalKind::kCapture:
      return "capture";
    case JournalKind::kSlowWait:
      return "slow_wait";
    case JournalKind::kSegmented:
      return "segmented";
    case JournalKind::kArena:
      return "arena";
  }
  return "unknown";
}

void DeviceJournal::Add(const JournalEntry& entry) {
  if (capacity_ == 0) {
    ++dropped_;
    return;
  }
  if (entries_.size() == capacity_) {
    entries_.pop_front();
    ++dropped_;
  }
  entries_.push_back(entry);
}

std::vector<JournalEntry> DeviceJournal::Since(double unix_seconds) const {
  // Entries are appended in the loop's order, so their times only grow
  // (the system clock may step back: then a few are out of order, and the
  // filter below still keeps exactly those at or after the bound).
  std::vector<JournalEntry> out;
  for (const JournalEntry& e : entries_) {
    if (e.unix_seconds >= unix_seconds) out.push_back(e);
  }
  return out;
}

double DeviceJournal::UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace tandem::server
