#include "server/job_state.h"

#include <vector>

#include "gtest/gtest.h"

namespace tandem::server {
namespace {

const std::vector<JobState> kAll = {JobState::kWaitingForMemory, JobState::kUploading, JobState::kRunning,
                                    JobState::kClosing};

TEST(JobState, OnlyTheDiagramsTransitions) {
  int allowed = 0;
  for (JobState from : kAll) {
    for (JobState to : kAll) allowed += JobCanMove(from, to);
  }
  EXPECT_EQ(allowed, 5);
  EXPECT_TRUE(JobCanMove(JobState::kWaitingForMemory, JobState::kUploading));
  EXPECT_TRUE(JobCanMove(JobState::kUploading, JobState::kRunning));
  for (JobState from : {JobState::kWaitingForMemory, JobState::kUploading, JobState::kRunning}) {
    EXPECT_TRUE(JobCanMove(from, JobState::kClosing)) << JobStateName(from);
  }
  for (JobState to : kAll) EXPECT_FALSE(JobCanMove(JobState::kClosing, to)) << JobStateName(to);
  EXPECT_FALSE(JobCanMove(JobState::kRunning, JobState::kUploading));
  EXPECT_FALSE(JobCanMove(JobState::kWaitingForMemory, JobState::kRunning));
}

TEST(JobState, TheMachineRefusesAndStays) {
  JobStateMachine job;
  EXPECT_EQ(job.get(), JobState::kWaitingForMemory);
  EXPECT_TRUE(job.MoveTo(JobState::kUploading).ok());
  absl::Status back = job.MoveTo(JobState::kWaitingForMemory);
  EXPECT_EQ(back.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(back.message(), "a job cannot go from uploading to waiting-for-memory");
  EXPECT_EQ(job.get(), JobState::kUploading);
  EXPECT_TRUE(job.MoveTo(JobState::kRunning).ok());
  EXPECT_FALSE(job.MoveTo(JobState::kRunning).ok());
  EXPECT_TRUE(job.MoveTo(JobState::kClosing).ok());
  EXPECT_FALSE(job.MoveTo(JobState::kClosing).ok());
  EXPECT_TRUE(job == JobState::kClosing);  // reads like the state
}

}  // namespace
}  // namespace tandem::server
