#include "server/waiting_jobs.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::server {
namespace {

std::unique_ptr<Job> JobOf(uint64_t id, uint64_t session) {
  auto job = std::make_unique<Job>();
  job->id = id;
  job->session = session;
  return job;
}

std::vector<uint64_t> Ids(const WaitingJobs& line) {
  std::vector<uint64_t> ids;
  for (const auto& job : line) ids.push_back(job->id);
  return ids;
}

TEST(WaitingJobs, KeepsArrivalOrderAndFindsAndTakesByJob) {
  WaitingJobs line;
  for (uint64_t id : {5, 3, 9, 4}) line.Push(JobOf(id, id % 2));
  EXPECT_EQ(Ids(line), (std::vector<uint64_t>{5, 3, 9, 4}));
  ASSERT_NE(line.Find(9), nullptr);
  EXPECT_EQ(line.Find(9)->id, 9u);
  EXPECT_EQ(line.Find(7), nullptr);
  std::unique_ptr<Job> taken = line.Take(3);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->id, 3u);
  EXPECT_EQ(line.Take(3), nullptr);
  EXPECT_EQ(Ids(line), (std::vector<uint64_t>{5, 9, 4}));
  EXPECT_EQ(line.size(), 3u);
}

TEST(WaitingJobs, TakeIfAsksInArrivalOrderAndTakesOnlyThoseItAdmits) {
  WaitingJobs line;
  for (uint64_t id : {1, 2, 3, 4, 5}) line.Push(JobOf(id, 0));
  std::vector<uint64_t> asked;
  std::vector<std::unique_ptr<Job>> taken;
  line.TakeIf(
      [&](Job& job) {
        asked.push_back(job.id);
        return job.id % 2 == 0;
      },
      [&](std::unique_ptr<Job> job) {
        asked.push_back(100 + job->id);  // handed over at once, before the next job is asked
        taken.push_back(std::move(job));
      });
  EXPECT_EQ(asked, (std::vector<uint64_t>{1, 2, 102, 3, 4, 104, 5}));
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0]->id, 2u);
  EXPECT_EQ(taken[1]->id, 4u);
  EXPECT_EQ(Ids(line), (std::vector<uint64_t>{1, 3, 5}));
}

TEST(WaitingJobs, DropsAndCountsASessionsJobs) {
  WaitingJobs line;
  line.Push(JobOf(1, 7));
  line.Push(JobOf(2, 8));
  line.Push(JobOf(3, 7));
  EXPECT_EQ(line.CountOf(7), 2u);
  EXPECT_EQ(line.CountOf(9), 0u);
  EXPECT_EQ(line.DropSession(7), 2u);
  EXPECT_EQ(line.CountOf(7), 0u);
  EXPECT_EQ(Ids(line), (std::vector<uint64_t>{2}));
  EXPECT_EQ(line.DropSession(7), 0u);
}

}  // namespace
}  // namespace tandem::server
