// The implementation of DeviceMemory (device_memory.h); private to memory/.
//
// State: one device region of `usable` bytes, a RangeAllocator over it, the
// admitted jobs with the ranges of their persistent tensors, and the lanes
// with their arena and retired ranges. device_memory.cc holds admission,
// release and stats; device_memory_compaction.cc holds Compact.
// Thread-safety: none (see device_memory.h).
#ifndef TANDEM_MEMORY_DEVICE_MEMORY_IMPL_H_
#define TANDEM_MEMORY_DEVICE_MEMORY_IMPL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "memory/device_memory.h"
#include "memory/range_allocator.h"

namespace tandem::memory {

class DeviceMemoryImpl final : public DeviceMemory {
 public:
  // `region` holds `usable` bytes from `device`; the object frees it.
  DeviceMemoryImpl(device::Device& device, const DeviceMemoryOptions& options, void* region, uint64_t usable);
  ~DeviceMemoryImpl() override;

  absl::StatusOr<JobMemoryGrant> Admit(const JobMemoryRequest& request) override;
  void Release(JobId job) override;
  absl::Status MoveJob(JobId job, int lane) override;
  void* LaneArena(int lane) const override;
  void ReleaseRetired(int lane) override;
  bool HasRetired(int lane) const override;
  int NumLanes() const override { return static_cast<int>(lanes_.size()); }
  DeviceMemoryStats Stats() const override;
  void SetMaxJobBytes(uint64_t max_job_bytes) override { options_.max_job_bytes = max_job_bytes; }
  std::vector<void*> PersistentAddresses(JobId job) const override;
  CompactionResult Compact(device::Stream& stream) override;

 private:
  struct Tensor {
    uint64_t offset = 0;
    uint64_t bytes = 0;    // requested
    uint64_t aligned = 0;  // what the range holds
  };
  struct Job {
    JobId id = 0;
    std::string name;
    int lane = 0;
    uint64_t ephemeral = 0;   // aligned planned peak
    uint64_t persistent = 0;  // sum of aligned tensor sizes
    std::vector<Tensor> tensors;
  };
  struct Lane {
    bool open = false;
    Range arena;
    std::vector<JobId> jobs;
    std::vector<Range> retired;
  };
  // A lane a job could go to, and what that costs.
  struct LaneCandidate {
    int lane = 0;
    bool opens = false;   // a closed or new lane
    uint64_t growth = 0;  // arena bytes added
  };

  void* Address(uint64_t offset) const { return static_cast<char*>(region_) + offset; }
  uint64_t OpenLanes() const;
  // The arena a lane needs for its jobs (at least one alignment unit).
  uint64_t LaneNeed(const Lane& lane) const;
  // The candidates in order of preference (see Admit in device_memory.h).
  std::vector<LaneCandidate> LaneCandidates(const JobMemoryRequest& request, uint64_t ephemeral) const;
  // Gives lane `candidate.lane` an arena of at least `ephemeral` bytes (up
  // to ArenaSizes' roomiest); false (and no change) when no free range allows it.
  bool PlaceLane(const LaneCandidate& candidate, uint64_t ephemeral);
  // Grows `lane`'s arena to `bytes` into the free ranges beside it; false
  // (and no change) when they are too small.
  bool GrowInPlace(Lane& lane, uint64_t bytes);
  // The arena sizes to try, roomiest first, for a lane that must hold
  // `ephemeral`: the larger of the largest planned peak among the device's
  // jobs and the lane's even share of the slack (SlackLimit() / max_lanes),
  // then that largest peak, each only while the lanes' slack stays within
  // SlackLimit() with it; last `ephemeral` itself.
  std::vector<uint64_t> ArenaSizes(const LaneCandidate& candidate, uint64_t ephemeral) const;
  // Sum over open lanes of arena bytes beyond LaneNeed, and its bound.
  uint64_t SlackBytes() const;
  uint64_t SlackLimit() const;
  // Places every tensor (largest first) or none; the offsets by tensor index.
  std::optional<std::vector<uint64_t>> PlacePersistent(const std::vector<uint64_t>& aligned);
  void TrimLanes();
  // Shrinks every open lane to LaneNeed, freeing the tails at once (the
  // base stays): no iteration uses them, because a running iteration's job
  // is in the lane (jobs move and leave only with none running) and uses at
  // most its own peak from the base. Returns the trimmed lanes' arenas as
  // they were, for RestoreSlack (which needs the tails still free).
  std::vector<Range> TrimSlack();
  void RestoreSlack(const std::vector<Range>& arenas);
  // Takes `job` out of its lane: the lane shrinks (its tail retired) unless
  // the slack keeps its size, or, when it was the last job, closes (its
  // arena retired).
  void LeaveLane(const Job& job);
  uint64_t RetiredBytes() const;
  uint64_t LaneBytes() const;

  // The refusal of `request` with the breakdown; `code` picks the class.
  absl::Status Refusal(absl::StatusCode code, const JobMemoryRequest& request, uint64_t persistent, uint64_t ephemeral,
                       const std::string& reason, const std::string& suggestion) const;

  // Constant after construction.
  device::Device& device_;
  DeviceMemoryOptions options_;  // constant but for max_job_bytes (SetMaxJobBytes)
  void* const region_;
  const uint64_t usable_;

  RangeAllocator space_;
  std::map<JobId, Job> jobs_;
  std::vector<Lane> lanes_;
  uint64_t persistent_bytes_ = 0;
  uint64_t persistent_peak_ = 0;
  uint64_t persistent_allocated_ = 0;
  uint64_t persistent_freed_ = 0;
  uint64_t jobs_admitted_ = 0;
  uint64_t jobs_refused_ = 0;
  uint64_t compactions_ = 0;
  uint64_t slack_trims_ = 0;
  uint64_t compaction_bytes_moved_ = 0;
};

}  // namespace tandem::memory

#endif  // TANDEM_MEMORY_DEVICE_MEMORY_IMPL_H_
