#include "kernels/cuda/error_slots.h"

namespace tandem::cuda {

ErrorSlots::ErrorSlots(int slots) : claimed_(slots > 0 ? slots : 1) {
  for (auto& c : claimed_) c.store(0);
}

std::optional<ErrorSlots::Claim> ErrorSlots::TakeSlot(bool checks_deferred) {
  // Checks no longer deferred were taken by a completion: their slots free
  // themselves when those run.
  if (!checks_deferred) deferred_.clear();
  const int n = size();
  for (int k = 0; k < n; ++k) {
    const int slot = (cursor_ + k) % n;
    uint64_t expected = 0;
    const uint64_t generation = next_generation_;
    if (claimed_[slot].compare_exchange_strong(expected, generation)) {
      ++next_generation_;
      cursor_ = (slot + 1) % n;
      return Claim{slot, generation, false};
    }
  }
  bool flush = false;
  for (;;) {
    while (!ordered_.empty()) {
      const Claim old = ordered_.back();
      ordered_.pop_back();
      // Still held by the flushed check (not released and claimed anew since).
      uint64_t expected = old.generation;
      const uint64_t generation = next_generation_;
      if (claimed_[old.slot].compare_exchange_strong(expected, generation)) {
        ++next_generation_;
        return Claim{old.slot, generation, flush};
      }
    }
    if (deferred_.empty()) return std::nullopt;
    // Flushing puts every deferred check in stream order ahead of what is
    // enqueued next, so all their slots may be written again.
    ordered_.swap(deferred_);
    flush = true;
  }
}

void ErrorSlots::Release(int slot, uint64_t generation) {
  if (slot < 0 || slot >= size()) return;
  uint64_t expected = generation;
  claimed_[slot].compare_exchange_strong(expected, 0);
}

}  // namespace tandem::cuda
