#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "memory/device_memory.h"
#include "memory/fake_device.h"

namespace tandem::memory {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = kKiB * 1024;

JobMemoryRequest Job(JobId id, std::vector<uint64_t> persistent, uint64_t ephemeral, int lane) {
  JobMemoryRequest request;
  request.job = id;
  request.name = absl::StrCat("job", id);
  request.persistent_bytes = std::move(persistent);
  request.ephemeral_bytes = ephemeral;
  request.lane = lane;
  return request;
}

// Host-backed device: tensors hold a pattern derived from (job, tensor), so
// a test can check that every byte survives a compaction.
class CompactionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto memory = DeviceMemory::Create(device_, {.max_lanes = 4});
    ASSERT_TRUE(memory.ok()) << memory.status();
    memory_ = std::move(*memory);
    auto stream = device_.CreateStream();
    ASSERT_TRUE(stream.ok());
    stream_ = std::move(*stream);
  }

  void Admit(JobMemoryRequest request) {
    auto grant = memory_->Admit(request);
    ASSERT_TRUE(grant.ok()) << grant.status();
    for (size_t t = 0; t < grant->persistent.size(); ++t) {
      std::memset(grant->persistent[t], Pattern(request.job, t), request.persistent_bytes[t]);
    }
    sizes_[request.job] = request.persistent_bytes;
  }

  void Release(JobId job) {
    memory_->Release(job);
    sizes_.erase(job);
  }

  static int Pattern(JobId job, size_t tensor) { return static_cast<int>(job * 31 + tensor) & 0xff; }

  void ExpectDataIntact() {
    for (const auto& [job, sizes] : sizes_) {
      std::vector<void*> addresses = memory_->PersistentAddresses(job);
      ASSERT_EQ(addresses.size(), sizes.size());
      for (size_t t = 0; t < sizes.size(); ++t) {
        const auto* bytes = static_cast<const unsigned char*>(addresses[t]);
        for (uint64_t b = 0; b < sizes[t]; ++b) {
          ASSERT_EQ(bytes[b], Pattern(job, t)) << "job " << job << " tensor " << t << " byte " << b;
        }
      }
    }
  }

  FakeDevice device_{{.capacity_bytes = 16 * kMiB, .backed = true}};
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<device::Stream> stream_;
  std::map<JobId, std::vector<uint64_t>> sizes_;
};

TEST_F(CompactionTest, PacksTensorsDownAndArenasUpPreservingData) {
  for (JobId id = 1; id <= 12; ++id) {
    Admit(Job(id, {(id % 3 + 1) * 100 * kKiB, 7 * kKiB + id, 50 * kKiB}, (id % 4 + 1) * 64 * kKiB,
              static_cast<int>((id - 1) % 3)));
  }
  for (JobId id : {1, 4, 5, 8, 10}) Release(id);
  for (int lane = 0; lane < memory_->NumLanes(); ++lane) memory_->ReleaseRetired(lane);
  std::map<JobId, std::vector<void*>> before;
  for (const auto& [job, sizes] : sizes_) before[job] = memory_->PersistentAddresses(job);
  std::vector<void*> arenas_before;
  for (int lane = 0; lane < memory_->NumLanes(); ++lane) arenas_before.push_back(memory_->LaneArena(lane));
  const DeviceMemoryStats stats_before = memory_->Stats();
  ASSERT_LT(stats_before.largest_free_bytes, stats_before.free_bytes);  // fragmented

  CompactionResult result = memory_->Compact(*stream_);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_FALSE(result.moves.empty());
  EXPECT_EQ(device_.bad_copies(), 0);
  const DeviceMemoryStats stats = memory_->Stats();
  EXPECT_EQ(stats.free_bytes, stats_before.free_bytes);
  EXPECT_EQ(stats.largest_free_bytes, stats.free_bytes);  // one free range is left
  EXPECT_EQ(result.largest_free_after, stats.largest_free_bytes);
  EXPECT_EQ(result.largest_free_before, stats_before.largest_free_bytes);
  EXPECT_EQ(stats.compactions, 1u);
  EXPECT_EQ(stats.compaction_bytes_moved, result.bytes_moved);

  // Applying the moves to the old addresses gives the new ones.
  std::map<JobId, std::vector<void*>> applied = before;
  uint64_t moved = 0;
  for (const TensorMove& move : result.moves) {
    ASSERT_EQ(applied[move.job][move.tensor], move.from);
    applied[move.job][move.tensor] = move.to;
    EXPECT_EQ(move.bytes, sizes_[move.job][move.tensor]);
    moved += move.bytes;
  }
  EXPECT_EQ(moved, result.bytes_moved);
  for (const auto& [job, addresses] : applied) {
    EXPECT_EQ(addresses, memory_->PersistentAddresses(job)) << "job " << job;
  }
  for (int lane = 0; lane < memory_->NumLanes(); ++lane) {
    const bool listed =
        std::find(result.lanes_moved.begin(), result.lanes_moved.end(), lane) != result.lanes_moved.end();
    EXPECT_EQ(listed, memory_->LaneArena(lane) != arenas_before[lane]) << "lane " << lane;
  }
  ExpectDataIntact();
  // A job as large as all the free memory now fits in one piece.
  Admit(Job(100, {stats.free_bytes - 256}, 1, 0));
  ExpectDataIntact();
}

TEST_F(CompactionTest, SlidesATensorDownByLessThanItsSizeThroughATemporary) {
  Admit(Job(1, {kMiB}, 64 * kKiB, 0));
  Admit(Job(2, {3 * kMiB}, 64 * kKiB, 0));
  void* big = memory_->PersistentAddresses(2)[0];
  void* low = memory_->PersistentAddresses(1)[0];
  ASSERT_LT(low, big);
  Release(1);  // a 1-MiB gap right below the 3-MiB tensor
  CompactionResult result = memory_->Compact(*stream_);
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.moves.size(), 1u);
  EXPECT_EQ(result.moves[0].from, big);
  EXPECT_EQ(result.moves[0].to, low);
  EXPECT_EQ(device_.bad_copies(), 0);  // no copy overlapped itself
  EXPECT_EQ(device_.device_copies(), 2);
  ExpectDataIntact();
}

TEST_F(CompactionTest, CompactionFreesRetiredRangesAndIsANoOpWhenPacked) {
  Admit(Job(1, {kMiB}, 64 * kKiB, 0));
  Admit(Job(2, {kMiB}, 512 * kKiB, 0));
  Release(2);  // lane 0 shrinks; its tail is retired
  ASSERT_GT(memory_->Stats().retired_bytes, 0u);
  CompactionResult first = memory_->Compact(*stream_);
  ASSERT_TRUE(first.status.ok());
  EXPECT_EQ(memory_->Stats().retired_bytes, 0u);
  ExpectDataIntact();
  CompactionResult second = memory_->Compact(*stream_);
  ASSERT_TRUE(second.status.ok());
  EXPECT_TRUE(second.moves.empty());
  EXPECT_TRUE(second.lanes_moved.empty());
}

TEST_F(CompactionTest, AFailedCopyStopsCompactionWithConsistentMoves) {
  for (JobId id = 1; id <= 6; ++id) Admit(Job(id, {200 * kKiB, 100 * kKiB}, 64 * kKiB, 0));
  for (JobId id : {1, 3}) Release(id);
  std::map<JobId, std::vector<void*>> before;
  for (const auto& [job, sizes] : sizes_) before[job] = memory_->PersistentAddresses(job);
  device_.FailNextCopies(1);
  CompactionResult result = memory_->Compact(*stream_);
  EXPECT_FALSE(result.status.ok());
  // The failing copy was the first: nothing moved and every tensor is where it was.
  EXPECT_TRUE(result.moves.empty());
  for (const auto& [job, addresses] : before) EXPECT_EQ(addresses, memory_->PersistentAddresses(job));
  ExpectDataIntact();
  const DeviceMemoryStats stats = memory_->Stats();
  EXPECT_EQ(stats.persistent_bytes + stats.lane_bytes + stats.retired_bytes + stats.free_bytes, stats.usable_bytes);
  // A later compaction completes.
  CompactionResult retry = memory_->Compact(*stream_);
  ASSERT_TRUE(retry.status.ok()) << retry.status;
  EXPECT_FALSE(retry.moves.empty());
  ExpectDataIntact();
}

}  // namespace
}  // namespace tandem::memory
