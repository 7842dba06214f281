#include "memory/device_memory.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "memory/byte_format.h"
#include "memory/fake_device.h"
#include "memory/memory_report.h"

namespace tandem::memory {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

std::unique_ptr<DeviceMemory> Make(FakeDevice& device, DeviceMemoryOptions options = {}) {
  auto memory = DeviceMemory::Create(device, options);
  EXPECT_TRUE(memory.ok()) << memory.status();
  return memory.ok() ? std::move(*memory) : nullptr;
}

JobMemoryRequest Job(JobId id, std::vector<uint64_t> persistent, uint64_t ephemeral, int lane = -1) {
  JobMemoryRequest request;
  request.job = id;
  request.name = absl::StrCat("job", id);
  request.persistent_bytes = std::move(persistent);
  request.ephemeral_bytes = ephemeral;
  request.lane = lane;
  return request;
}

void ExpectAddsUp(const DeviceMemory& memory) {
  DeviceMemoryStats stats = memory.Stats();
  EXPECT_EQ(stats.persistent_bytes + stats.lane_bytes + stats.retired_bytes + stats.free_bytes, stats.usable_bytes);
}

TEST(FormatBytesTest, ReadableSizes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(12 * kMiB), "12.0 MiB");
  EXPECT_EQ(FormatBytes(9771050598), "9.1 GiB");
  EXPECT_EQ(FormatBytes(1024 * kMiB - 1), "1.0 GiB");
}

TEST(DeviceMemoryTest, CreateTakesTheUsableBytesInOneAllocation) {
  FakeDevice device({.capacity_bytes = 16 * kGiB});
  {
    auto memory = Make(device, {.reserve_bytes = 1 * kGiB});
    EXPECT_EQ(device.used_bytes(), 15 * kGiB);
    EXPECT_EQ(device.live_allocations(), 1);
    DeviceMemoryStats stats = memory->Stats();
    EXPECT_EQ(stats.capacity_bytes, 16 * kGiB);
    EXPECT_EQ(stats.reserve_bytes, 1 * kGiB);
    EXPECT_EQ(stats.usable_bytes, 15 * kGiB);
    EXPECT_EQ(stats.free_bytes, 15 * kGiB);
    EXPECT_EQ(memory->NumLanes(), 0);
  }
  EXPECT_EQ(device.used_bytes(), 0u);
  EXPECT_EQ(device.bad_frees(), 0);
}

TEST(DeviceMemoryTest, CreateRefusesBadOptionsAndReportsDeviceFailure) {
  FakeDevice device({.capacity_bytes = 1 * kGiB});
  EXPECT_EQ(DeviceMemory::Create(device, {.reserve_bytes = 1 * kGiB}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeviceMemory::Create(device, {.max_lanes = 0}).status().code(), absl::StatusCode::kInvalidArgument);
  device.FailNextAllocations(1);
  auto failed = DeviceMemory::Create(device, {});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(failed.status().message(), "raise the reserve"));
  EXPECT_EQ(device.used_bytes(), 0u);
}

TEST(DeviceMemoryTest, AdmitPlacesAlignedDisjointTensorsAndAccounts) {
  FakeDevice device({.capacity_bytes = 1 * kGiB});
  auto memory = Make(device);
  auto grant = memory->Admit(Job(1, {1000, 0, 4096, 10}, 5000));
  ASSERT_TRUE(grant.ok()) << grant.status();
  ASSERT_EQ(grant->persistent.size(), 4u);
  EXPECT_EQ(grant->lane, 0);
  std::vector<std::pair<uintptr_t, uint64_t>> ranges;
  const uint64_t sizes[] = {1024, 256, 4096, 256};
  for (int i = 0; i < 4; ++i) {
    auto address = reinterpret_cast<uintptr_t>(grant->persistent[i]);
    EXPECT_EQ(address % device::kDeviceAlignment, 0u);
    EXPECT_TRUE(device.IsLive(grant->persistent[i], sizes[i]));
    ranges.emplace_back(address, sizes[i]);
  }
  auto arena = reinterpret_cast<uintptr_t>(memory->LaneArena(0));
  ASSERT_NE(arena, 0u);
  ranges.emplace_back(arena, 5120);
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    EXPECT_LE(ranges[i - 1].first + ranges[i - 1].second, ranges[i].first);
  }
  DeviceMemoryStats stats = memory->Stats();
  EXPECT_EQ(stats.persistent_bytes, 1024u + 256 + 4096 + 256);
  EXPECT_EQ(stats.persistent_peak_bytes, stats.persistent_bytes);
  EXPECT_EQ(stats.persistent_allocated, 4u);
  EXPECT_EQ(stats.lane_bytes, 5120u);
  ASSERT_EQ(stats.jobs.size(), 1u);
  EXPECT_EQ(stats.jobs[0].persistent_tensors, 4u);
  EXPECT_EQ(stats.jobs[0].ephemeral_bytes, 5120u);
  EXPECT_EQ(memory->PersistentAddresses(1), grant->persistent);
  ExpectAddsUp(*memory);

  memory->Release(1);
  stats = memory->Stats();
  EXPECT_EQ(stats.persistent_bytes, 0u);
  EXPECT_EQ(stats.persistent_peak_bytes, 1024u + 256 + 4096 + 256);
  EXPECT_EQ(stats.persistent_freed, 4u);
  EXPECT_EQ(stats.lanes.size(), 0u);
  EXPECT_EQ(stats.retired_bytes, 5120u);  // the lane closed; its arena awaits ReleaseRetired
  EXPECT_EQ(memory->LaneArena(0), nullptr);
  EXPECT_EQ(memory->NumLanes(), 1);
  ExpectAddsUp(*memory);
  memory->ReleaseRetired(0);
  EXPECT_EQ(memory->NumLanes(), 0);
  EXPECT_EQ(memory->Stats().free_bytes, memory->Stats().usable_bytes);
  EXPECT_TRUE(memory->PersistentAddresses(1).empty());
}

TEST(DeviceMemoryTest, LaneChoiceJoinsFreeOpensNewThenGrowsLeast) {
  FakeDevice device({.capacity_bytes = 1 * kGiB});
  auto memory = Make(device, {.max_lanes = 2});
  EXPECT_EQ(memory->Admit(Job(1, {}, 100 * kMiB))->lane, 0);
  // No open lane holds 200 MiB: a new lane.
  EXPECT_EQ(memory->Admit(Job(2, {}, 200 * kMiB))->lane, 1);
  // 50 MiB fits both without growth: the least crowded, then the smaller.
  EXPECT_EQ(memory->Admit(Job(3, {}, 50 * kMiB))->lane, 0);
  EXPECT_EQ(memory->Admit(Job(4, {}, 150 * kMiB))->lane, 1);  // only lane 1 holds it
  // At max_lanes, 300 MiB grows the lane that grows least (lane 1: +100 MiB).
  EXPECT_EQ(memory->Admit(Job(5, {}, 300 * kMiB))->lane, 1);
  DeviceMemoryStats stats = memory->Stats();
  ASSERT_EQ(stats.lanes.size(), 2u);
  EXPECT_EQ(stats.lanes[0].arena_bytes, 100 * kMiB);
  EXPECT_EQ(stats.lanes[1].arena_bytes, 300 * kMiB);
  EXPECT_EQ(stats.lanes[1].jobs, (std::vector<JobId>{2, 4, 5}));
  ExpectAddsUp(*memory);
}

TEST(DeviceMemoryTest, ExplicitLaneAndLaneErrors) {
  FakeDevice device({.capacity_bytes = 1 * kGiB});
  auto memory = Make(device, {.max_lanes = 3});
  EXPECT_EQ(memory->Admit(Job(1, {}, kMiB, /*lane=*/0))->lane, 0);
  EXPECT_EQ(memory->Admit(Job(2, {}, kMiB, /*lane=*/1))->lane, 1);
  EXPECT_EQ(memory->Admit(Job(3, {}, 2 * kMiB, /*lane=*/0))->lane, 0);
  EXPECT_EQ(memory->Admit(Job(4, {}, kMiB, /*lane=*/5)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(memory->Admit(Job(5, {}, kMiB, /*lane=*/-2)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(memory->Admit(Job(1, {}, kMiB)).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(memory->Stats().lanes[0].arena_bytes, 2 * kMiB);
}

TEST(DeviceMemoryTest, GrowthInPlaceKeepsTheOldBytesAndRetiresNothing) {
  FakeDevice device({.capacity_bytes = 1 * kGiB});
  auto memory = Make(device);
  ASSERT_TRUE(memory->Admit(Job(1, {}, 10 * kMiB)).ok());
  auto* before = static_cast<char*>(memory->LaneArena(0));
  ASSERT_TRUE(memory->Admit(Job(2, {}, 30 * kMiB, /*lane=*/0)).ok());
  auto* after = static_cast<char*>(memory->LaneArena(0));
  // The arena sits at the top of the region, so it grows downward: the old
  // range lies inside the new one.
  EXPECT_LE(after, before);
  EXPECT_GE(after + 30 * kMiB, before + 10 * kMiB);
  EXPECT_EQ(memory->Stats().retired_bytes, 0u);
  ExpectAddsUp(*memory);
}

TEST(DeviceMemoryTest, GrowthThatMustMoveRetiresTheOldArena) {
  // Lane 0 (top) and lane 1 (right below it) leave no room to grow lane 1 in
  // place after a persistent tensor fills the space below.
  FakeDevice device({.capacity_bytes = 100 * kMiB});
  auto memory = Make(device);
  ASSERT_TRUE(memory->Admit(Job(1, {}, 10 * kMiB, 0)).ok());
  ASSERT_TRUE(memory->Admit(Job(2, {}, 10 * kMiB, 1)).ok());
  ASSERT_TRUE(memory->Admit(Job(3, {60 * kMiB}, kMiB, 1)).ok());
  // Free: 100 - 10 - 10 - 60 = 20 MiB, all between the tensor and lane 1...
  // so first take 15 MiB of it with another tensor, leaving 5 MiB there.
  ASSERT_TRUE(memory->Admit(Job(4, {15 * kMiB}, kMiB, 0)).ok());
  void* old_arena = memory->LaneArena(1);
  memory->Release(3);  // frees 60 MiB at the bottom
  // Lane 1 must grow to 20 MiB; its neighbours hold 5 MiB: it moves.
  ASSERT_TRUE(memory->Admit(Job(5, {}, 20 * kMiB, 1)).ok());
  EXPECT_NE(memory->LaneArena(1), old_arena);
  DeviceMemoryStats stats = memory->Stats();
  EXPECT_EQ(stats.retired_bytes, 10 * kMiB);
  EXPECT_EQ(stats.lanes[1].retired_bytes, 10 * kMiB);
  ExpectAddsUp(*memory);
  memory->ReleaseRetired(1);
  EXPECT_EQ(memory->Stats().retired_bytes, 0u);
  ExpectAddsUp(*memory);
}

TEST(DeviceMemoryTest, ShrinkKeepsTheBaseAndRetiresTheTail) {
  FakeDevice device({.capacity_bytes = 1 * kGiB});
  auto memory = Make(device);
  ASSERT_TRUE(memory->Admit(Job(1, {}, 10 * kMiB)).ok());
  ASSERT_TRUE(memory->Admit(Job(2, {}, 40 * kMiB, 0)).ok());
  void* arena = memory->LaneArena(0);
  memory->Release(2);
  EXPECT_EQ(memory->LaneArena(0), arena);
  DeviceMemoryStats stats = memory->Stats();
  EXPECT_EQ(stats.lanes[0].arena_bytes, 10 * kMiB);
  EXPECT_EQ(stats.retired_bytes, 30 * kMiB);
  ExpectAddsUp(*memory);
  memory->ReleaseRetired(0);
  EXPECT_EQ(memory->Stats().retired_bytes, 0u);
  EXPECT_EQ(memory->Stats().free_bytes, memory->Stats().usable_bytes - 10 * kMiB);
}

TEST(DeviceMemoryTest, EmptyLaneClosesAndItsIndexIsReused) {
  FakeDevice device({.capacity_bytes = 1 * kGiB});
  auto memory = Make(device, {.max_lanes = 3});
  ASSERT_EQ(memory->Admit(Job(1, {}, 10 * kMiB, 0))->lane, 0);
  ASSERT_EQ(memory->Admit(Job(2, {}, 10 * kMiB, 1))->lane, 1);
  ASSERT_EQ(memory->Admit(Job(3, {}, 10 * kMiB, 2))->lane, 2);
  memory->Release(2);
  EXPECT_EQ(memory->LaneArena(1), nullptr);
  EXPECT_NE(memory->LaneArena(2), nullptr);
  EXPECT_EQ(memory->NumLanes(), 3);
  // A job that no open lane holds opens the lowest closed index.
  EXPECT_EQ(memory->Admit(Job(4, {}, 20 * kMiB))->lane, 1);
  memory->Release(3);
  memory->ReleaseRetired(2);
  EXPECT_EQ(memory->NumLanes(), 2);
}

TEST(DeviceMemoryTest, NeverFitsIsResourceExhaustedWithABreakdown) {
  FakeDevice device({.capacity_bytes = 16 * kGiB, .name = "cuda:0"});
  auto memory = Make(device, {.reserve_bytes = 2 * kGiB});
  ASSERT_TRUE(memory->Admit(Job(1, {4 * kGiB}, kGiB)).ok());
  const DeviceMemoryStats before = memory->Stats();
  JobMemoryRequest request = Job(7, {9 * kGiB + 100 * kMiB}, 5 * kGiB + 300 * kMiB);
  request.name = "resnet50";
  auto refused = memory->Admit(request);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(refused.status().message());
  for (const char* part :
       {"job 7 ('resnet50')", "cuda:0", "never fit", "9.1 GiB persistent", "5.3 GiB ephemeral", "capacity 16.0 GiB",
        "reserve 2.0 GiB", "usable 14.0 GiB", "free", "lane 0", "job 1 'job1'", "smaller batch", "lower the reserve"}) {
    EXPECT_TRUE(absl::StrContains(message, part)) << "missing '" << part << "' in " << message;
  }
  std::printf("example refusal: %s\n", message.c_str());
  const DeviceMemoryStats after = memory->Stats();
  EXPECT_EQ(after.free_bytes, before.free_bytes);
  EXPECT_EQ(after.jobs.size(), 1u);
  EXPECT_EQ(after.jobs_refused, 1u);
}

TEST(DeviceMemoryTest, FitsLaterIsFailedPreconditionAndLeavesNothing) {
  FakeDevice device({.capacity_bytes = 10 * kGiB});
  auto memory = Make(device, {.reserve_bytes = kGiB});
  ASSERT_TRUE(memory->Admit(Job(1, {5 * kGiB}, kGiB)).ok());
  const DeviceMemoryStats before = memory->Stats();
  auto refused = memory->Admit(Job(2, {2 * kGiB, kGiB}, 2 * kGiB));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "wait")) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "3.0 GiB are free")) << refused.status();
  const DeviceMemoryStats after = memory->Stats();
  EXPECT_EQ(after.free_bytes, before.free_bytes);
  EXPECT_EQ(after.persistent_bytes, before.persistent_bytes);
  EXPECT_EQ(after.lane_bytes, before.lane_bytes);
  EXPECT_EQ(memory->NumLanes(), 1);
  EXPECT_TRUE(memory->PersistentAddresses(2).empty());
  memory->Release(1);
  memory->ReleaseRetired(0);
  EXPECT_TRUE(memory->Admit(Job(2, {2 * kGiB, kGiB}, 2 * kGiB)).ok());
}

TEST(DeviceMemoryTest, FragmentationIsNamedInTheRefusal) {
  FakeDevice device({.capacity_bytes = 40 * kMiB});
  auto memory = Make(device);
  // Ten 3-MiB tensors, one per job, and one lane of 1 MiB at the top.
  for (JobId id = 1; id <= 10; ++id) ASSERT_TRUE(memory->Admit(Job(id, {3 * kMiB}, kMiB, 0)).ok());
  for (JobId id = 1; id <= 10; id += 2) memory->Release(id);
  // Freeing every other job leaves five 3-MiB holes and 9 MiB below the
  // lane; a 9-MiB tensor takes the latter.
  ASSERT_TRUE(memory->Admit(Job(20, {9 * kMiB}, kMiB, 0)).ok());
  DeviceMemoryStats stats = memory->Stats();
  ASSERT_GE(stats.free_bytes, 6 * kMiB);
  ASSERT_LT(stats.largest_free_bytes, 6 * kMiB);
  auto refused = memory->Admit(Job(30, {6 * kMiB}, kMiB, 0));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "compact")) << refused.status();
}

TEST(DeviceMemoryTest, QuotaIsEnforcedWithAClearMessage) {
  FakeDevice device({.capacity_bytes = 10 * kGiB});
  auto memory = Make(device, {.max_job_bytes = 4 * kGiB});
  auto over_limit = memory->Admit(Job(1, {3 * kGiB}, 2 * kGiB));
  ASSERT_EQ(over_limit.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over_limit.status().message(), "per-job limit of 4.0 GiB")) << over_limit.status();
  JobMemoryRequest own = Job(2, {kGiB}, kGiB);
  own.quota_bytes = kGiB + kGiB / 2;
  auto over_quota = memory->Admit(own);
  ASSERT_EQ(over_quota.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over_quota.status().message(), "its own quota of 1.5 GiB")) << over_quota.status();
  // A job quota above the daemon's limit does not lift the limit.
  JobMemoryRequest generous = Job(3, {3 * kGiB}, 2 * kGiB);
  generous.quota_bytes = 8 * kGiB;
  EXPECT_EQ(memory->Admit(generous).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(memory->Admit(Job(4, {3 * kGiB}, kGiB)).ok());
  EXPECT_EQ(memory->Stats().jobs_refused, 3u);
  EXPECT_EQ(memory->Stats().jobs_admitted, 1u);
}

TEST(DeviceMemoryTest, DescribeUsageListsLanesAndJobs) {
  FakeDevice device({.capacity_bytes = 16 * kGiB});
  auto memory = Make(device, {.reserve_bytes = kGiB});
  JobMemoryRequest request = Job(1, {kGiB, kGiB}, 3 * kGiB);
  request.name = "mlp";
  ASSERT_TRUE(memory->Admit(request).ok());
  const std::string text = DescribeUsage(memory->Stats());
  for (const char* part : {"capacity 16.0 GiB", "reserve 1.0 GiB", "usable 15.0 GiB", "2.0 GiB persistent",
                           "3.0 GiB in 1 lane", "10.0 GiB free", "lane 0: 3.0 GiB arena, job 1",
                           "job 1 'mlp': 2.0 GiB persistent (2 "
                           "tensors) + 3.0 GiB ephemeral in lane 0"}) {
    EXPECT_TRUE(absl::StrContains(text, part)) << "missing '" << part << "' in " << text;
  }
}

}  // namespace
}  // namespace tandem::memory

namespace tandem::memory {
namespace {

TEST(DeviceMemoryMoveJobTest, MovesBetweenLanesGrowingTheTargetAndShrinkingTheSource) {
  FakeDevice device({.capacity_bytes = 1 * kGiB});
  auto memory = Make(device, {.max_lanes = 3});
  ASSERT_TRUE(memory->Admit(Job(1, {8 * kMiB}, 100 * kMiB, 0)).ok());
  ASSERT_TRUE(memory->Admit(Job(2, {8 * kMiB}, 40 * kMiB, 0)).ok());
  ASSERT_TRUE(memory->Admit(Job(3, {8 * kMiB}, 10 * kMiB, 1)).ok());
  EXPECT_EQ(memory->Stats().lanes[0].arena_bytes, 100 * kMiB);
  // Job 1 (the largest of lane 0) moves to lane 1: lane 1 grows, lane 0 shrinks.
  ASSERT_TRUE(memory->MoveJob(1, 1).ok());
  DeviceMemoryStats stats = memory->Stats();
  EXPECT_EQ(stats.lanes[0].arena_bytes, 40 * kMiB);
  EXPECT_EQ(stats.lanes[1].arena_bytes, 100 * kMiB);
  EXPECT_EQ(stats.lanes[1].jobs.size(), 2u);
  ExpectAddsUp(*memory);
  // Job 2 opens a new lane; lane 0 closes.
  ASSERT_TRUE(memory->MoveJob(2, memory->NumLanes()).ok());
  EXPECT_EQ(memory->LaneArena(0), nullptr);
  EXPECT_NE(memory->LaneArena(2), nullptr);
  ExpectAddsUp(*memory);
  // Bad moves change nothing.
  EXPECT_EQ(memory->MoveJob(9, 0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(memory->MoveJob(1, 7).code(), absl::StatusCode::kInvalidArgument);
  for (int lane = 0; lane < memory->NumLanes(); ++lane) memory->ReleaseRetired(lane);
  for (JobId id : {1, 2, 3}) memory->Release(id);
  for (int lane = 0; lane < memory->NumLanes(); ++lane) memory->ReleaseRetired(lane);
  EXPECT_EQ(memory->Stats().free_bytes, memory->Stats().usable_bytes);
}

TEST(DeviceMemoryMoveJobTest, RefusesATargetThatCannotGrow) {
  FakeDevice device({.capacity_bytes = 256 * kMiB});
  auto memory = Make(device, {.max_lanes = 2});
  ASSERT_TRUE(memory->Admit(Job(1, {}, 150 * kMiB, 0)).ok());
  ASSERT_TRUE(memory->Admit(Job(2, {}, 60 * kMiB, 1)).ok());
  // Lane 1 would need 90 MiB more; only ~46 MiB are free.
  absl::Status s = memory->MoveJob(1, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  DeviceMemoryStats stats = memory->Stats();
  EXPECT_EQ(stats.lanes[0].arena_bytes, 150 * kMiB);
  EXPECT_EQ(stats.lanes[1].arena_bytes, 60 * kMiB);
  ExpectAddsUp(*memory);
}

}  // namespace
}  // namespace tandem::memory

namespace tandem::memory {
namespace {

// Lane slack: a lane keeps bytes beyond its jobs' needs (within the bound),
// so that moving jobs between lanes rarely relocates an arena (a relocated
// arena gives every job in the lane a new address table).
TEST(DeviceMemorySlackTest, ALaneKeepsItsSizeWhenItsLargestJobLeavesOnlyWithinTheSlack) {
  for (uint64_t slack : {32 * kMiB, 16 * kMiB}) {
    SCOPED_TRACE(absl::StrCat("slack ", FormatBytes(slack)));
    FakeDevice device({.capacity_bytes = 1 * kGiB});
    auto memory = Make(device, {.lane_slack_bytes = slack});
    ASSERT_TRUE(memory->Admit(Job(1, {}, 10 * kMiB, 0)).ok());
    ASSERT_TRUE(memory->Admit(Job(2, {}, 40 * kMiB, 0)).ok());
    void* arena = memory->LaneArena(0);
    memory->Release(2);  // 30 MiB beyond job 1's need
    EXPECT_EQ(memory->LaneArena(0), arena);
    DeviceMemoryStats stats = memory->Stats();
    if (slack >= 30 * kMiB) {
      EXPECT_EQ(stats.lanes[0].arena_bytes, 40 * kMiB);
      EXPECT_EQ(stats.retired_bytes, 0u);
    } else {
      EXPECT_EQ(stats.lanes[0].arena_bytes, 10 * kMiB);
      EXPECT_EQ(stats.retired_bytes, 30 * kMiB);
    }
    ExpectAddsUp(*memory);
  }
}

TEST(DeviceMemorySlackTest, ALaneOpensAtTheLargestPeakSoAMoveIntoItKeepsItsBase) {
  for (uint64_t slack : {uint64_t{0}, 4 * kGiB}) {  // 4 GiB: capped at usable / 16 = 64 MiB
    SCOPED_TRACE(absl::StrCat("slack ", FormatBytes(slack)));
    FakeDevice device({.capacity_bytes = 1 * kGiB});
    auto memory = Make(device, {.max_lanes = 4, .lane_slack_bytes = slack});
    ASSERT_TRUE(memory->Admit(Job(1, {}, 50 * kMiB, 0)).ok());
    ASSERT_TRUE(memory->Admit(Job(2, {}, 10 * kMiB, 1)).ok());  // 40 MiB of slack
    ASSERT_TRUE(memory->Admit(Job(3, {}, 30 * kMiB, 2)).ok());  // 20 more: 60 of 64
    ASSERT_TRUE(memory->Admit(Job(4, {}, 10 * kMiB, 3)).ok());  // 40 more would pass 64
    DeviceMemoryStats stats = memory->Stats();
    const uint64_t roomy = slack > 0 ? 50 * kMiB : 10 * kMiB;
    EXPECT_EQ(stats.lanes[1].arena_bytes, roomy);
    EXPECT_EQ(stats.lanes[2].arena_bytes, slack > 0 ? 50 * kMiB : 30 * kMiB);
    EXPECT_EQ(stats.lanes[3].arena_bytes, 10 * kMiB);
    // Job 1 moves into lane 1: with slack the arena already holds it.
    void* arena = memory->LaneArena(1);
    ASSERT_TRUE(memory->MoveJob(1, 1).ok());
    if (slack > 0) {
      EXPECT_EQ(memory->LaneArena(1), arena);
      EXPECT_FALSE(memory->HasRetired(1));
    } else {
      EXPECT_NE(memory->LaneArena(1), arena);  // grown into a new range
      EXPECT_TRUE(memory->HasRetired(1));
    }
    stats = memory->Stats();  // lane 0 closed: it is no longer listed
    ASSERT_EQ(stats.lanes.size(), 3u);
    EXPECT_EQ(stats.lanes[0].lane, 1);
    EXPECT_EQ(stats.lanes[0].arena_bytes, 50 * kMiB);
    ExpectAddsUp(*memory);
  }
}

// Lanes that open while only small jobs are admitted take their share of
// the slack, so a larger job (up to the share) joins or moves in without
// relocating the arena.
TEST(DeviceMemorySlackTest, ALaneOpensAtItsShareOfTheSlackSoLargerJobsMoveInWithoutRelocating) {
  for (uint64_t slack : {uint64_t{0}, 4 * kGiB}) {  // 4 GiB: capped at usable / 16 = 64 MiB, 16 per lane
    SCOPED_TRACE(absl::StrCat("slack ", FormatBytes(slack)));
    FakeDevice device({.capacity_bytes = 1 * kGiB});
    auto memory = Make(device, {.max_lanes = 4, .lane_slack_bytes = slack});
    ASSERT_TRUE(memory->Admit(Job(1, {}, 2 * kMiB, 0)).ok());
    ASSERT_TRUE(memory->Admit(Job(2, {}, 1 * kMiB, 1)).ok());
    DeviceMemoryStats stats = memory->Stats();
    const uint64_t opened = slack > 0 ? 16 * kMiB : 2 * kMiB;
    EXPECT_EQ(stats.lanes[0].arena_bytes, opened);
    EXPECT_EQ(stats.lanes[1].arena_bytes, slack > 0 ? 16 * kMiB : 1 * kMiB);
    // A job larger than any before joins lane 1, and job 1 moves there.
    void* arena = memory->LaneArena(1);
    ASSERT_TRUE(memory->Admit(Job(3, {}, 12 * kMiB, 1)).ok());
    ASSERT_TRUE(memory->MoveJob(1, 1).ok());
    if (slack > 0) {
      EXPECT_EQ(memory->LaneArena(1), arena);
      EXPECT_FALSE(memory->HasRetired(1));
    } else {
      EXPECT_NE(memory->LaneArena(1), arena);  // 1 MiB could not hold 12
    }
    stats = memory->Stats();  // lane 0 closed with job 1's move
    ASSERT_EQ(stats.lanes.size(), 1u);
    EXPECT_EQ(stats.lanes[0].lane, 1);
    EXPECT_EQ(stats.lanes[0].arena_bytes, slack > 0 ? 16 * kMiB : 12 * kMiB);
    ExpectAddsUp(*memory);
  }
}

// The slack never costs a job its admission: one that fits only without it
// trims every lane to its need (bases kept, tails free at once) and is
// admitted; without the trim it would wait for memory.
TEST(DeviceMemorySlackTest, AJobThatFitsOnlyWithoutTheSlackTrimsTheLanesAndIsAdmitted) {
  FakeDevice device({.capacity_bytes = 1 * kGiB});
  auto memory = Make(device, {.max_lanes = 4, .lane_slack_bytes = 64 * kMiB});
  std::vector<void*> arenas;
  for (int lane = 0; lane < 4; ++lane) {
    ASSERT_TRUE(memory->Admit(Job(lane + 1, {}, 1 * kMiB, lane)).ok());
    arenas.push_back(memory->LaneArena(lane));
  }
  DeviceMemoryStats stats = memory->Stats();
  ASSERT_EQ(stats.lane_bytes, 64 * kMiB);  // 16 MiB each: 60 MiB of slack
  // Persistent bytes that fit beside 4 MiB of arenas but not beside 64: the
  // trimmed tails (15 MiB each, between the lanes) take the 10 MiB tensors.
  auto grant = memory->Admit(Job(5, {stats.free_bytes, 10 * kMiB, 10 * kMiB, 10 * kMiB}, 1 * kMiB));
  ASSERT_TRUE(grant.ok()) << grant.status();
  stats = memory->Stats();
  EXPECT_EQ(stats.slack_trims, 4u);
  EXPECT_EQ(stats.lane_bytes, 4 * kMiB);
  EXPECT_EQ(stats.retired_bytes, 0u);
  for (int lane = 0; lane < 4; ++lane) EXPECT_EQ(memory->LaneArena(lane), arenas[lane]);
  ExpectAddsUp(*memory);
  // Nothing fits now, and a refusal trims nothing more.
  EXPECT_TRUE(absl::IsFailedPrecondition(memory->Admit(Job(6, {40 * kMiB}, 1 * kMiB)).status()));
  EXPECT_EQ(memory->Stats().slack_trims, 4u);
}

}  // namespace
}  // namespace tandem::memory
