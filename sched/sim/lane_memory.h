// The simulator's memory model: who may be admitted into which lane.
//
// SimMemory is the pluggable interface (a wrapper over the daemon's own
// memory::DeviceMemory could stand behind it); LaneMemoryModel is the simple
// model the simulator uses by default, the same rule as the daemon's
// admission:
//   sum of persistent bytes + sum over lanes of the lane's largest ephemeral
//   peak <= capacity, with at most max_lanes lanes.
// Lanes keep their numbers; a lane whose jobs all left is empty (arena 0) and
// is reused.
//
// Not thread-safe.
#ifndef TANDEM_SCHED_SIM_LANE_MEMORY_H_
#define TANDEM_SCHED_SIM_LANE_MEMORY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "sched/scheduler.h"

namespace tandem::sched::sim {

class SimMemory {
 public:
  virtual ~SimMemory() = default;
  // Admits a job into `lane`: an existing lane, NumLanes() for a new one, or
  // -1 to let memory pick (the lane whose arena grows least). Returns the
  // granted lane; RESOURCE_EXHAUSTED when it does not fit there (nothing
  // changes).
  virtual absl::StatusOr<int> Admit(JobId job, uint64_t persistent_bytes, uint64_t ephemeral_bytes, int lane) = 0;
  virtual void Release(JobId job) = 0;
  // Moves an admitted job to `lane` (NumLanes(): a new one). Returns the
  // lane; RESOURCE_EXHAUSTED when the target arena cannot grow enough.
  virtual absl::StatusOr<int> Move(JobId job, int lane) = 0;
  virtual int NumLanes() const = 0;
  virtual uint64_t UsedBytes() const = 0;
  virtual uint64_t CapacityBytes() const = 0;
};

class LaneMemoryModel : public SimMemory {
 public:
  LaneMemoryModel(uint64_t capacity_bytes, int max_lanes) : capacity_(capacity_bytes), max_lanes_(max_lanes) {}

  absl::StatusOr<int> Admit(JobId job, uint64_t persistent_bytes, uint64_t ephemeral_bytes, int lane) override;
  void Release(JobId job) override;
  absl::StatusOr<int> Move(JobId job, int lane) override;
  int NumLanes() const override { return static_cast<int>(lanes_.size()); }
  uint64_t UsedBytes() const override;
  uint64_t CapacityBytes() const override { return capacity_; }

 private:
  struct Entry {
    uint64_t persistent = 0;
    uint64_t ephemeral = 0;
    int lane = 0;
  };
  // The lane's arena if a job with ephemeral peak `extra` joined it and
  // `leaving` (if any) left it.
  uint64_t ArenaWith(int lane, uint64_t extra, std::optional<JobId> leaving) const;
  uint64_t LanesTotal() const;
  // OK when `persistent` more bytes and an ephemeral peak in `lane` (with
  // `leaving` gone from every lane) fit.
  absl::Status Fits(uint64_t persistent, uint64_t ephemeral, int lane, std::optional<JobId> leaving) const;

  const uint64_t capacity_;
  const int max_lanes_;
  uint64_t persistent_total_ = 0;
  std::vector<std::vector<JobId>> lanes_;
  absl::flat_hash_map<JobId, Entry> jobs_;
};

}  // namespace tandem::sched::sim

#endif  // TANDEM_SCHED_SIM_LANE_MEMORY_H_
