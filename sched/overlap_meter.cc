#include "sched/overlap_meter.h"

#include <algorithm>

namespace tandem::sched {

OverlapMeter::Slot& OverlapMeter::SlotFor(int lane) {
  if (lane >= static_cast<int>(slots_.size())) slots_.resize(lane + 1);
  return slots_[lane];
}

bool OverlapMeter::Busy(int lane) const {
  return lane >= 0 && lane < static_cast<int>(slots_.size()) && slots_[lane].busy;
}

bool OverlapMeter::Paused(int lane) const { return Busy(lane) && slots_[lane].paused; }

void OverlapMeter::AdvanceTo(double now) {
  if (!seen_event_) {
    seen_event_ = true;
    last_event_ = now;
    return;
  }
  const double dt = now - last_event_;
  if (dt <= 0) return;
  last_event_ = now;
  if (running_ == 0) return;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    if (!slot.busy || slot.paused) continue;
    if (running_ == 1) {
      slot.sample.alone_seconds += dt;
      continue;
    }
    for (size_t j = 0; j < slots_.size(); ++j) {
      const Slot& other = slots_[j];
      if (j == i || !other.busy || other.paused) continue;
      auto& partners = slot.sample.partner_seconds;
      auto it = std::find_if(partners.begin(), partners.end(), [&](const auto& p) { return p.first == other.key; });
      if (it == partners.end()) {
        partners.emplace_back(other.key, dt);
      } else {
        it->second += dt;
      }
    }
  }
}

void OverlapMeter::Start(int lane, int key, double now) {
  if (lane < 0) return;
  AdvanceTo(now);
  Slot& slot = SlotFor(lane);
  if (slot.busy && !slot.paused) --running_;
  slot = Slot{};
  slot.busy = true;
  slot.key = key;
  slot.start = now;
  ++running_;
}

void OverlapMeter::Pause(int lane, double now) {
  if (!Busy(lane) || slots_[lane].paused) return;
  AdvanceTo(now);
  slots_[lane].paused = true;
  slots_[lane].sample.was_paused = true;
  --running_;
}

void OverlapMeter::Resume(int lane, double now) {
  if (!Paused(lane)) return;
  AdvanceTo(now);
  slots_[lane].paused = false;
  ++running_;
}

OverlapMeter::Sample OverlapMeter::Finish(int lane, double now) {
  if (!Busy(lane)) return Sample{};
  AdvanceTo(now);
  Slot& slot = slots_[lane];
  if (!slot.paused) --running_;
  Sample sample = std::move(slot.sample);
  sample.wall_seconds = std::max(0.0, now - slot.start);
  slot = Slot{};
  return sample;
}

}  // namespace tandem::sched
