// ErrorSlots on the CPU: a slot is never handed out while a check that
// reads it may still run after the new read-back (the invariant), checked by
// a model of the stream's deferred checks against random sequences of
// iterations, completions and flushes; plus the plain cases.
#include "kernels/cuda/error_slots.h"

#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::cuda {
namespace {

TEST(ErrorSlots, FreeSlotsRotateAndReleaseFreesThem) {
  ErrorSlots slots(3);
  auto a = slots.TakeSlot(false);
  auto b = slots.TakeSlot(false);
  auto c = slots.TakeSlot(false);
  ASSERT_TRUE(a && b && c);
  EXPECT_NE(a->slot, b->slot);
  EXPECT_NE(b->slot, c->slot);
  EXPECT_NE(a->slot, c->slot);
  EXPECT_FALSE(a->flush_first);
  // All three are held by checks taken by completions (nothing deferred):
  // nothing may be reused until one is released.
  EXPECT_FALSE(slots.TakeSlot(false).has_value());
  slots.Release(b->slot, b->generation);
  auto d = slots.TakeSlot(false);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->slot, b->slot);
  EXPECT_FALSE(d->flush_first);
}

TEST(ErrorSlots, DeferredChecksAreFlushedBeforeTheirSlotIsReused) {
  ErrorSlots slots(2);
  auto a = slots.TakeSlot(false);
  slots.Deferred(*a);
  auto b = slots.TakeSlot(true);
  slots.Deferred(*b);
  auto c = slots.TakeSlot(true);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->flush_first);
  // The other flushed slot is reusable without another flush.
  auto d = slots.TakeSlot(false);
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->flush_first);
  EXPECT_NE(c->slot, d->slot);
}

TEST(ErrorSlots, AStaleReleaseDoesNotFreeAReusedSlot) {
  ErrorSlots slots(1);
  auto a = slots.TakeSlot(false);
  slots.Deferred(*a);
  auto b = slots.TakeSlot(true);  // reuses the slot after a flush
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->flush_first);
  EXPECT_EQ(a->slot, b->slot);
  slots.Release(a->slot, a->generation);  // the flushed check of `a` runs
  EXPECT_FALSE(slots.TakeSlot(false).has_value()) << "b's check has not run yet";
  slots.Release(b->slot, b->generation);
  EXPECT_TRUE(slots.TakeSlot(false).has_value());
}

// A model of one stream: checks are deferred, then either taken by a
// completion (they run later, in any order) or flushed (they run in stream
// order, before every later read-back). A read-back into a slot whose
// pending check is not ordered before it would be lost; the model fails
// the test if the ring ever allows one.
TEST(ErrorSlots, RandomHistoriesNeverOverwriteAnUncheckedSlot) {
  const unsigned seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 4);
    ErrorSlots slots(n);
    struct Pending {
      ErrorSlots::Claim claim;
      bool ordered = false;  // flushed: runs before any later read-back
    };
    std::vector<Pending> deferred;  // on the stream, not yet taken
    std::vector<Pending> running;   // taken by completions or flushed, not run
    for (int step = 0; step < 200; ++step) {
      const unsigned action = rng() % 4;
      if (action == 0) {  // a completion takes the deferred checks
        for (Pending& p : deferred) running.push_back(p);
        deferred.clear();
      } else if (action == 1 && !running.empty()) {  // one pending check runs
        const size_t k = rng() % running.size();
        slots.Release(running[k].claim.slot, running[k].claim.generation);
        running.erase(running.begin() + k);
      } else {  // an iteration ends: its read-back needs a slot
        auto claim = slots.TakeSlot(!deferred.empty());
        if (!claim) {
          // Allowed only when no deferred check could be flushed and every
          // slot is held by an unordered check.
          EXPECT_TRUE(deferred.empty());
          continue;
        }
        if (claim->flush_first) {
          for (Pending& p : deferred) running.push_back(Pending{p.claim, true});
          deferred.clear();
        }
        for (const Pending& p : running) {
          if (p.claim.slot == claim->slot) {
            EXPECT_TRUE(p.ordered) << "trial " << trial << " step " << step << ": slot " << claim->slot
                                   << " reused while an unordered check of it is pending";
          }
        }
        for (const Pending& p : deferred) {
          EXPECT_NE(p.claim.slot, claim->slot) << "slot reused while its check is still deferred";
        }
        // A reused slot's ordered check runs before the new read-back lands.
        for (size_t k = 0; k < running.size();) {
          if (running[k].claim.slot == claim->slot) {
            slots.Release(running[k].claim.slot, running[k].claim.generation);
            running.erase(running.begin() + static_cast<long>(k));
          } else {
            ++k;
          }
        }
        slots.Deferred(*claim);
        deferred.push_back(Pending{*claim, false});
      }
    }
  }
}

}  // namespace
}  // namespace tandem::cuda
