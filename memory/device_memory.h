// The pooled allocator of one device: persistent pool + ephemeral lanes, and
// admission of jobs against them.
//
//   usable = capacity - reserve = persistent pool (all admitted jobs) + lanes
//
// A job's persistent tensors (weights, optimizer state) are allocated from
// the persistent pool when it is admitted and stay resident until it leaves.
// A lane is one ephemeral arena that one iteration at a time uses; jobs in a
// lane take turns, lanes run side by side. A lane's arena is as large as the
// largest planned peak among its jobs, plus slack within
// DeviceMemoryOptions::lane_slack_bytes. Admission: sum of persistent + sum
// over lanes of each lane's arena <= usable.
//
// Raw memory comes from the device interface (a fake device in tests): Create
// takes the usable bytes in one device allocation, and every persistent
// tensor and lane arena is a range of that region (best fit, coalescing,
// aligned to device::kDeviceAlignment; range_allocator.h). So no device
// allocation or free happens after Create (on CUDA a free synchronizes the
// whole device, which would stall the lanes that are running), and the
// admission arithmetic above is exact: what fits by bytes is placed, unless
// the free bytes are split into ranges too small (fragmentation), which
// Compact undoes. docs/memory.md describes the design.
// Thread-safety: not thread-safe; owned by the daemon's control loop.
#ifndef TANDEM_MEMORY_DEVICE_MEMORY_H_
#define TANDEM_MEMORY_DEVICE_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device.h"

namespace tandem::memory {

using JobId = uint64_t;

struct DeviceMemoryOptions {
  // Bytes kept back from the device's capacity (context, library workspaces).
  uint64_t reserve_bytes = 0;
  // Most lanes (concurrent arenas) on the device.
  int max_lanes = 4;
  // Per-job bound on persistent + ephemeral bytes; 0: none.
  uint64_t max_job_bytes = 0;
  // Bytes the open lanes' arenas may hold beyond their jobs' needs, in sum
  // (at most usable / 16). A lane that opens or grows takes the larger of
  // the largest planned peak among the device's jobs and its even share of
  // the slack (the bound / max_lanes), while the sum stays within the bound;
  // a lane whose largest job leaves keeps its size while the slack stays
  // within it. A lane's arena then moves less often, and each move gives
  // every job in the lane a new address table (on CUDA: a kernel-by-kernel
  // run and a new graph capture each; a crowd of small inference models
  // moved between lanes by PACK's levelling stalled the destination lane for
  // 10-30 ms, and lanes opened while only small models were registered grew
  // one by one, mid-serving, as larger ones moved in). Admission comes
  // first: a job that fits only without the slack gets it (Admit trims every
  // lane to its need). 0: every lane fits its jobs exactly.
  uint64_t lane_slack_bytes = 0;
};

struct JobMemoryRequest {
  JobId job = 0;
  std::string name;                        // for reports
  std::vector<uint64_t> persistent_bytes;  // one entry per persistent tensor
  uint64_t ephemeral_bytes = 0;            // the planned peak of one iteration
  uint64_t quota_bytes = 0;                // the job's own bound; 0: the default
  bool quota_replaces_limit = false;       // quota_bytes applies instead of max_job_bytes (an administrator's)
  int lane = -1;                           // a lane to join; -1: the allocator picks
};

struct JobMemoryGrant {
  int lane = 0;
  std::vector<void*> persistent;  // one address per requested tensor
};

struct LaneStats {
  int lane = 0;
  uint64_t arena_bytes = 0;
  std::vector<JobId> jobs;
  uint64_t retired_bytes = 0;  // old arena ranges awaiting ReleaseRetired(lane)
};

struct JobMemoryStats {
  JobId job = 0;
  std::string name;
  int lane = 0;
  uint64_t persistent_bytes = 0;  // aligned sizes of its tensors
  uint64_t persistent_tensors = 0;
  uint64_t ephemeral_bytes = 0;  // its planned peak, aligned
};

// Sizes count aligned bytes. Always:
//   persistent_bytes + lane_bytes + retired_bytes + free_bytes == usable_bytes
//   usable_bytes == capacity_bytes - reserve_bytes (rounded down to the alignment)
struct DeviceMemoryStats {
  uint64_t capacity_bytes = 0;
  uint64_t reserve_bytes = 0;
  uint64_t persistent_bytes = 0;  // allocated to jobs
  uint64_t persistent_peak_bytes = 0;
  uint64_t lane_bytes = 0;       // sum of lane arenas
  uint64_t free_bytes = 0;       // usable - persistent - lanes - retired
  std::vector<LaneStats> lanes;  // open lanes, by index

  uint64_t usable_bytes = 0;
  uint64_t retired_bytes = 0;         // sum over lanes of retired arena ranges
  uint64_t largest_free_bytes = 0;    // the largest contiguous free range
  uint64_t persistent_allocated = 0;  // persistent tensors allocated since Create
  uint64_t persistent_freed = 0;      // persistent tensors freed since Create
  uint64_t jobs_admitted = 0;
  uint64_t jobs_refused = 0;
  uint64_t compactions = 0;
  uint64_t compaction_bytes_moved = 0;
  uint64_t slack_trims = 0;          // lanes shrunk to their need so that a job could be admitted
  std::vector<JobMemoryStats> jobs;  // admitted jobs, by id
};

// One persistent tensor moved by Compact.
struct TensorMove {
  JobId job = 0;
  int tensor = 0;  // index into the job's JobMemoryRequest::persistent_bytes
  void* from = nullptr;
  void* to = nullptr;
  uint64_t bytes = 0;  // requested size, the bytes copied
};

struct CompactionResult {
  // Every move that took place, in order. Apply all of them to the pointers
  // held for the jobs, even when `status` is not OK.
  std::vector<TensorMove> moves;
  std::vector<int> lanes_moved;  // lanes whose LaneArena changed
  uint64_t bytes_moved = 0;
  uint64_t largest_free_before = 0;
  uint64_t largest_free_after = 0;
  // OK, or why compaction stopped early (a copy could not be enqueued: that
  // move did not happen; or the stream failed: the device's contents are
  // then unreliable).
  absl::Status status;
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  static absl::StatusOr<std::unique_ptr<DeviceMemory>> Create(device::Device& device,
                                                              const DeviceMemoryOptions& options);

  // Admits a job or says why not: RESOURCE_EXHAUSTED with the breakdown
  // (requested persistent/ephemeral, capacity, reserve, free, per-lane and
  // per-job usage, what would make it fit). FAILED_PRECONDITION when it could
  // fit once other jobs leave (the caller may queue it), RESOURCE_EXHAUSTED
  // when it can never fit. A refused job leaves nothing behind.
  // Also RESOURCE_EXHAUSTED when the job exceeds its quota (the smaller of
  // request.quota_bytes and options.max_job_bytes, where set), ALREADY_EXISTS
  // for a job id already admitted, INVALID_ARGUMENT for a lane out of range.
  // Lane choice when request.lane == -1, first that fits: (1) an open lane
  // whose arena already holds the job's peak (fewest jobs first, then the
  // smallest arena); (2) a new lane while fewer than max_lanes are open;
  // (3) the open lane that grows least.
  virtual absl::StatusOr<JobMemoryGrant> Admit(const JobMemoryRequest& request) = 0;

  // Frees everything of `job` (the caller runs none of its iterations any
  // more); lanes shrink when their largest job leaves
  // (unless the lane slack keeps their size).
  virtual void Release(JobId job) = 0;

  // Moves `job` into lane `lane` (NumLanes() or a closed index opens one):
  // the target grows to the job's planned peak if needed (more within the
  // lane slack), the source shrinks (unless the slack keeps it) or closes
  // (retiring ranges as above); persistent tensors stay where they are.
  // The caller must not run an iteration of the job meanwhile.
  // FAILED_PRECONDITION when the target cannot grow or no lane can open.
  virtual absl::Status MoveJob(JobId job, int lane) = 0;

  // Base address of a lane's arena. It changes only inside Admit/Release
  // (when the lane grows or shrinks) and Compact. In this implementation a
  // shrink keeps the base (the tail is retired), and a growth keeps the bytes
  // of the old arena inside the new one when the neighbouring range is free
  // (the base may still move down); otherwise the arena moves. An iteration that was already running
  // in the lane may still use the old arena, so the old one is retired, not
  // freed (its bytes still count as used), until the caller, knowing no
  // iteration runs in the lane, calls ReleaseRetired(lane).
  virtual void* LaneArena(int lane) const = 0;
  virtual void ReleaseRetired(int lane) = 0;
  // Whether the lane has retired ranges waiting for ReleaseRetired.
  virtual bool HasRetired(int lane) const = 0;
  // Lane indices are stable: a lane keeps its index while it has jobs. A lane
  // whose last job leaves closes (its arena is retired; its index may be
  // reused by a later Admit), and NumLanes() is one past the highest index
  // that is open or still has retired ranges. LaneArena of a closed lane is
  // null; an open lane's arena is never null (at least one alignment unit).
  virtual int NumLanes() const = 0;

  virtual DeviceMemoryStats Stats() const = 0;

  // Changes options.max_job_bytes (0: none) for later admissions; jobs
  // already admitted keep their memory.
  virtual void SetMaxJobBytes(uint64_t max_job_bytes) = 0;

  // Where `job`'s persistent tensors live now (they change only in Compact);
  // empty when the job is not admitted.
  virtual std::vector<void*> PersistentAddresses(JobId job) const = 0;

  // Undoes fragmentation: moves persistent tensors toward the bottom of the
  // region (enqueueing the device copies on `stream`), frees every retired
  // range and moves lane arenas toward the top, so that the free bytes form
  // as few ranges as possible. Call it only when no iteration runs in any
  // lane and nothing else uses the persistent tensors (it then owns every
  // retired range too); it returns after the copies have run (it
  // synchronizes `stream`). The caller applies the returned moves to its
  // pointers and reads LaneArena again for the lanes that moved.
  virtual CompactionResult Compact(device::Stream& stream) = 0;
};

}  // namespace tandem::memory

#endif  // TANDEM_MEMORY_DEVICE_MEMORY_H_
