// The pooled allocator of one device: persistent pool + ephemeral lanes, and
// admission of jobs against them.
//
//   usable = capacity - reserve = persistent pool (all admitted jobs) + lanes
//
// A job's persistent tensors (weights, optimizer state) are allocated from
// the persistent pool when it is admitted and stay resident until it leaves.
// A lane is one ephemeral arena that one iteration at a time uses; jobs in a
// lane take turns, lanes run side by side. A lane's arena is as large as the
// largest planned peak among its jobs. Admission: sum of persistent + sum
// over lanes of each lane's arena <= usable.
//
// Raw memory comes from the device interface (a fake device in tests).
// Thread-safety: not thread-safe; owned by the daemon's control loop.
#ifndef TANDEM_MEMORY_DEVICE_MEMORY_H_
#define TANDEM_MEMORY_DEVICE_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
};

struct JobMemoryRequest {
  JobId job = 0;
  std::string name;                       // for reports
  std::vector<uint64_t> persistent_bytes;  // one entry per persistent tensor
  uint64_t ephemeral_bytes = 0;            // the planned peak of one iteration
  uint64_t quota_bytes = 0;                // the job's own bound; 0: the default
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
};

struct DeviceMemoryStats {
  uint64_t capacity_bytes = 0;
  uint64_t reserve_bytes = 0;
  uint64_t persistent_bytes = 0;  // allocated to jobs
  uint64_t persistent_peak_bytes = 0;
  uint64_t lane_bytes = 0;        // sum of lane arenas
  uint64_t free_bytes = 0;        // usable - persistent - lanes
  std::vector<LaneStats> lanes;
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
  virtual absl::StatusOr<JobMemoryGrant> Admit(const JobMemoryRequest& request) = 0;

  // Frees everything of `job`; lanes shrink when their largest job leaves.
  virtual void Release(JobId job) = 0;

  // Base address of a lane's arena. It changes only inside Admit/Release
  // (when the lane grows or shrinks). An iteration that was already running
  // in the lane may still use the old arena, so the old one is retired, not
  // freed (its bytes still count as used), until the caller, knowing no
  // iteration runs in the lane, calls ReleaseRetired(lane).
  virtual void* LaneArena(int lane) const = 0;
  virtual void ReleaseRetired(int lane) = 0;
  virtual int NumLanes() const = 0;

  virtual DeviceMemoryStats Stats() const = 0;
};

}  // namespace tandem::memory

#endif  // TANDEM_MEMORY_DEVICE_MEMORY_H_
