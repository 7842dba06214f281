// Which host copy of a Program's device error word an iteration's read-back
// may land in (kernels/cuda/cuda_program.cc: every data-checking iteration
// ends by copying the device word to pinned host memory and zeroing it; the
// copy is checked when the iteration's completion reports).
//
// One host copy would be overwritten by the next iteration's read-back
// whenever the check of the previous one has not run yet: the check runs on
// a completion thread some time after the GPU finished the iteration, while
// the next iteration's read-back may already have landed. So each iteration
// claims a slot of its own, and a slot is free again only once the check
// that reads it ran (Release). A slot whose check is still deferred on the
// stream (not yet handed to a completion) can be reused after the checks are
// flushed into the stream (CudaStream::FlushDeferredChecks): they then run
// in stream order, before any later read-back. Only when every slot is
// claimed by a check that is neither deferred nor flushed by us does a claim
// have to wait (Claim returns nullopt) — with more slots than a lane keeps
// iterations in flight that does not happen in the daemon.
//
// Host-only logic, no CUDA calls. Claim and Deferred are called from the
// enqueuing thread (one per stream); Release from any thread.
#ifndef TANDEM_KERNELS_CUDA_ERROR_SLOTS_H_
#define TANDEM_KERNELS_CUDA_ERROR_SLOTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace tandem::cuda {

class ErrorSlots {
 public:
  struct Claim {
    int slot = 0;
    uint64_t generation = 0;  // pass to Release
    // The deferred checks must be flushed into the stream before the
    // read-back into `slot` is enqueued.
    bool flush_first = false;
  };

  explicit ErrorSlots(int slots);

  // A slot for the next read-back. `checks_deferred` says whether the
  // stream still holds this Program's deferred checks (none were taken by a
  // completion or flushed since the last Deferred). nullopt: every slot's
  // check is in flight elsewhere; try again once one has been released.
  std::optional<Claim> TakeSlot(bool checks_deferred);

  // The check of `claim` was deferred on the stream.
  void Deferred(const Claim& claim) { deferred_.push_back(claim); }

  // The check of `claim` ran: its slot is free, unless it was claimed again
  // since (a reuse after a flush).
  void Release(int slot, uint64_t generation);

  int size() const { return static_cast<int>(claimed_.size()); }

 private:
  // Per slot: 0 when free, else the generation of its claim.
  std::vector<std::atomic<uint64_t>> claimed_;
  uint64_t next_generation_ = 1;
  int cursor_ = 0;
  std::vector<Claim> deferred_;  // claims whose checks are deferred on the stream
  std::vector<Claim> ordered_;   // claims whose checks we flushed: reusable now
};

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_ERROR_SLOTS_H_
