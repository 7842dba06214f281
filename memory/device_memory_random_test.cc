// Thousands of random job arrivals and departures against the fake device:
// live ranges never overlap, stats always add up, refused jobs leave nothing
// behind, and everything returns to zero when the last job leaves.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "memory/byte_format.h"
#include "memory/device_memory.h"
#include "memory/fake_device.h"

namespace tandem::memory {
namespace {

constexpr uint64_t kAlign = device::kDeviceAlignment;
constexpr uint64_t kMiB = uint64_t{1} << 20;

struct ModelJob {
  std::vector<uint64_t> persistent;
  uint64_t ephemeral = 0;
  int lane = 0;
};

uint64_t Aligned(uint64_t bytes) { return bytes == 0 ? kAlign : AlignUp(bytes, kAlign); }

class RandomWorkload {
 public:
  RandomWorkload(uint64_t seed, const DeviceMemoryOptions& options, uint64_t capacity)
      : rng_(seed), device_({.capacity_bytes = capacity}), options_(options) {
    auto memory = DeviceMemory::Create(device_, options);
    EXPECT_TRUE(memory.ok()) << memory.status();
    memory_ = std::move(*memory);
    auto stream = device_.CreateStream();
    EXPECT_TRUE(stream.ok());
    stream_ = std::move(*stream);
  }

  // Live ranges: every persistent tensor and every open lane's arena lie in
  // device memory and no two overlap; the stats match the model.
  void Check() {
    std::vector<std::pair<uintptr_t, uint64_t>> ranges;
    uint64_t persistent = 0;
    for (const auto& [id, job] : jobs_) {
      std::vector<void*> addresses = memory_->PersistentAddresses(id);
      ASSERT_EQ(addresses.size(), job.persistent.size());
      for (size_t t = 0; t < addresses.size(); ++t) {
        ASSERT_EQ(reinterpret_cast<uintptr_t>(addresses[t]) % kAlign, 0u);
        ranges.emplace_back(reinterpret_cast<uintptr_t>(addresses[t]), Aligned(job.persistent[t]));
        persistent += Aligned(job.persistent[t]);
      }
    }
    const DeviceMemoryStats stats = memory_->Stats();
    std::map<int, uint64_t> lane_need;
    for (const auto& [id, job] : jobs_) {
      lane_need[job.lane] = std::max(lane_need[job.lane], Aligned(job.ephemeral));
    }
    ASSERT_EQ(stats.lanes.size(), lane_need.size());
    ASSERT_LE(static_cast<int>(stats.lanes.size()), options_.max_lanes);
    uint64_t lane_bytes = 0;
    uint64_t slack = 0;
    for (const LaneStats& lane : stats.lanes) {
      ASSERT_TRUE(lane_need.contains(lane.lane));
      // An arena holds the largest peak of its jobs; without lane slack,
      // exactly that.
      ASSERT_GE(lane.arena_bytes, lane_need[lane.lane]) << "lane " << lane.lane;
      if (options_.lane_slack_bytes == 0) {
        ASSERT_EQ(lane.arena_bytes, lane_need[lane.lane]) << "lane " << lane.lane;
      }
      slack += lane.arena_bytes - lane_need[lane.lane];
      void* arena = memory_->LaneArena(lane.lane);
      ASSERT_NE(arena, nullptr);
      ASSERT_EQ(memory_->HasRetired(lane.lane), lane.retired_bytes > 0) << "lane " << lane.lane;
      ranges.emplace_back(reinterpret_cast<uintptr_t>(arena), lane.arena_bytes);
      lane_bytes += lane.arena_bytes;
    }
    for (const auto& [address, bytes] : ranges) {
      ASSERT_TRUE(device_.IsLive(reinterpret_cast<void*>(address), bytes));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
      ASSERT_LE(ranges[i - 1].first + ranges[i - 1].second, ranges[i].first) << "two live ranges overlap";
    }
    ASSERT_LE(slack, std::min(options_.lane_slack_bytes, stats.usable_bytes / 16));
    max_slack_ = std::max(max_slack_, slack);
    ASSERT_EQ(stats.persistent_bytes, persistent);
    ASSERT_EQ(stats.lane_bytes, lane_bytes);
    ASSERT_EQ(stats.persistent_bytes + stats.lane_bytes + stats.retired_bytes + stats.free_bytes, stats.usable_bytes);
    ASSERT_LE(stats.largest_free_bytes, stats.free_bytes);
    ASSERT_EQ(stats.jobs.size(), jobs_.size());
    ASSERT_EQ(device_.bad_frees(), 0);
    ASSERT_EQ(device_.bad_copies(), 0);
  }

  void Arrive() {
    const JobId id = next_id_++;
    JobMemoryRequest request;
    request.job = id;
    request.name = absl::StrCat("job", id);
    const int tensors = static_cast<int>(rng_() % 8);
    const uint64_t usable = memory_->Stats().usable_bytes;
    for (int t = 0; t < tensors; ++t) {
      // Mostly small, sometimes large, occasionally zero-sized.
      uint64_t bytes = rng_() % 10 == 0 ? 0 : 1 + rng_() % (usable / 40);
      if (rng_() % 20 == 0) bytes = usable / 4 + rng_() % (usable / 4);
      request.persistent_bytes.push_back(bytes);
    }
    request.ephemeral_bytes = rng_() % (usable / 8);
    if (rng_() % 50 == 0) request.ephemeral_bytes = usable;  // never fits
    if (rng_() % 10 == 0) request.quota_bytes = usable / 6;
    if (rng_() % 4 == 0) request.lane = static_cast<int>(rng_() % (memory_->NumLanes() + 1));
    if (request.lane >= options_.max_lanes) request.lane = -1;

    const DeviceMemoryStats before = memory_->Stats();
    const bool empty = jobs_.empty() && before.retired_bytes == 0;
    auto grant = memory_->Admit(request);
    if (!grant.ok()) {
      ++refused_;
      uint64_t total = Aligned(request.ephemeral_bytes);
      for (uint64_t bytes : request.persistent_bytes) total += Aligned(bytes);
      const uint64_t quota = request.quota_bytes != 0 ? request.quota_bytes : UINT64_MAX;
      if (grant.status().code() == absl::StatusCode::kResourceExhausted) {
        ASSERT_TRUE(total > before.usable_bytes || total > quota) << grant.status();
      } else {
        ASSERT_EQ(grant.status().code(), absl::StatusCode::kFailedPrecondition) << grant.status();
        ASSERT_LE(total, before.usable_bytes);
        // An empty device takes every job that fits its usable bytes.
        ASSERT_FALSE(empty) << grant.status();
      }
      // Nothing left behind.
      const DeviceMemoryStats after = memory_->Stats();
      ASSERT_EQ(after.free_bytes, before.free_bytes);
      ASSERT_EQ(after.largest_free_bytes, before.largest_free_bytes);
      ASSERT_EQ(after.persistent_bytes, before.persistent_bytes);
      ASSERT_EQ(after.lane_bytes, before.lane_bytes);
      ASSERT_EQ(after.retired_bytes, before.retired_bytes);
      ASSERT_EQ(after.lanes.size(), before.lanes.size());
      ASSERT_TRUE(memory_->PersistentAddresses(id).empty());
      return;
    }
    ++admitted_;
    if (request.lane >= 0) {
      ASSERT_EQ(grant->lane, request.lane);
    }
    jobs_[id] = ModelJob{request.persistent_bytes, request.ephemeral_bytes, grant->lane};
  }

  void Leave() {
    auto it = jobs_.begin();
    std::advance(it, rng_() % jobs_.size());
    memory_->Release(it->first);
    jobs_.erase(it);
  }

  // A job moves to a random lane (an open one or a new one): on success the
  // model follows it; a refusal changes nothing.
  void Move() {
    auto it = jobs_.begin();
    std::advance(it, rng_() % jobs_.size());
    const int to = static_cast<int>(rng_() % (memory_->NumLanes() + 1));
    const DeviceMemoryStats before = memory_->Stats();
    const absl::Status moved = memory_->MoveJob(it->first, to);
    if (moved.ok()) {
      it->second.lane = to;
      ++moves_;
      return;
    }
    ASSERT_TRUE(moved.code() == absl::StatusCode::kFailedPrecondition ||
                moved.code() == absl::StatusCode::kInvalidArgument)
        << moved;
    const DeviceMemoryStats after = memory_->Stats();
    ASSERT_EQ(after.free_bytes, before.free_bytes);
    ASSERT_EQ(after.lane_bytes, before.lane_bytes);
    ASSERT_EQ(after.retired_bytes, before.retired_bytes);
  }

  void Step() {
    const uint64_t dice = rng_() % 100;
    if (jobs_.empty() || dice < 50) {
      Arrive();
    } else if (options_.lane_slack_bytes > 0 && dice >= 75 && dice < 85) {
      Move();  // only with slack, so the other workloads keep their sequences
    } else if (dice < 85) {
      Leave();
    } else if (dice < 97) {
      if (memory_->NumLanes() > 0) memory_->ReleaseRetired(static_cast<int>(rng_() % memory_->NumLanes()));
    } else {
      CompactionResult result = memory_->Compact(*stream_);
      ASSERT_TRUE(result.status.ok()) << result.status;
      ASSERT_EQ(memory_->Stats().retired_bytes, 0u);
      ++compactions_;
    }
  }

  void DrainAndCheckZero() {
    while (!jobs_.empty()) {
      Leave();
      ASSERT_NO_FATAL_FAILURE(Check());
    }
    for (int lane = memory_->NumLanes() - 1; lane >= 0; --lane) memory_->ReleaseRetired(lane);
    const DeviceMemoryStats stats = memory_->Stats();
    EXPECT_EQ(memory_->NumLanes(), 0);
    EXPECT_EQ(stats.persistent_bytes, 0u);
    EXPECT_EQ(stats.lane_bytes, 0u);
    EXPECT_EQ(stats.retired_bytes, 0u);
    EXPECT_EQ(stats.free_bytes, stats.usable_bytes);
    EXPECT_EQ(stats.largest_free_bytes, stats.usable_bytes);
    EXPECT_EQ(stats.persistent_allocated, stats.persistent_freed);
  }

  std::mt19937_64 rng_;
  FakeDevice device_;
  DeviceMemoryOptions options_;
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<device::Stream> stream_;
  std::map<JobId, ModelJob> jobs_;
  JobId next_id_ = 1;
  int admitted_ = 0;
  int refused_ = 0;
  int compactions_ = 0;
  int moves_ = 0;
  uint64_t max_slack_ = 0;  // the most lane slack Check saw
};

TEST(DeviceMemoryRandomTest, ArrivalsAndDeparturesKeepEveryInvariant) {
  for (uint64_t seed : {1, 2, 3, 4}) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    DeviceMemoryOptions options;
    options.reserve_bytes = 64 * kMiB + 100;
    options.max_lanes = 1 + static_cast<int>(seed % 4);
    RandomWorkload workload(seed, options, 4096 * kMiB);
    for (int step = 0; step < 5000; ++step) {
      ASSERT_NO_FATAL_FAILURE(workload.Step()) << "step " << step;
      ASSERT_NO_FATAL_FAILURE(workload.Check()) << "step " << step;
    }
    // Both outcomes happened many times, so the checks above saw both.
    EXPECT_GT(workload.admitted_, 500);
    EXPECT_GT(workload.refused_, 200);
    EXPECT_GT(workload.compactions_, 50);
    workload.DrainAndCheckZero();
    std::printf("seed %d: %d admitted, %d refused, %d compactions\n", static_cast<int>(seed), workload.admitted_,
                workload.refused_, workload.compactions_);
  }
}

TEST(DeviceMemoryRandomTest, LaneSlackStaysWithinItsBoundThroughMoves) {
  for (uint64_t seed : {5, 6}) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    DeviceMemoryOptions options;
    options.reserve_bytes = 64 * kMiB;
    options.max_lanes = 4;
    options.lane_slack_bytes = seed == 5 ? 96 * kMiB : 4096 * kMiB;  // the second: capped at usable / 16
    RandomWorkload workload(seed, options, 4096 * kMiB);
    for (int step = 0; step < 5000; ++step) {
      ASSERT_NO_FATAL_FAILURE(workload.Step()) << "step " << step;
      ASSERT_NO_FATAL_FAILURE(workload.Check()) << "step " << step;
    }
    EXPECT_GT(workload.admitted_, 500);
    EXPECT_GT(workload.moves_, 100);
    EXPECT_GT(workload.max_slack_, 0u) << "the slack was never used";
    // Admissions trimmed it (and Check saw the trimmed lanes hold their jobs).
    const uint64_t trims = workload.memory_->Stats().slack_trims;
    EXPECT_GT(trims, 0u);
    workload.DrainAndCheckZero();
    std::printf("seed %d: %d admitted, %d moves, most slack %.1f MiB, %d slack trims\n", static_cast<int>(seed),
                workload.admitted_, workload.moves_, static_cast<double>(workload.max_slack_) / kMiB,
                static_cast<int>(trims));
  }
}

TEST(DeviceMemoryRandomTest, ManyTinyJobsOnATightDevice) {
  DeviceMemoryOptions options;
  options.max_lanes = 3;
  RandomWorkload workload(99, options, 64 * kMiB);
  for (int step = 0; step < 10000; ++step) {
    ASSERT_NO_FATAL_FAILURE(workload.Step()) << "step " << step;
    ASSERT_NO_FATAL_FAILURE(workload.Check()) << "step " << step;
  }
  EXPECT_GT(workload.admitted_, 1000);
  workload.DrainAndCheckZero();
}

}  // namespace
}  // namespace tandem::memory
