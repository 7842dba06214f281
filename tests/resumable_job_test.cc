// The C++ SDK's ResumableJob (client/resumable_job.h) through a real device
// fault and tandemd's restart in place (--test_faults: the CPU backend's
// stand-in for a sticky CUDA fault): the job re-attaches by itself with its
// resume token and trains on from its checkpoint, its losses those of the
// double-precision reference at every iteration it applied. Without a
// checkpoint to resume, the daemon's UNAVAILABLE comes back as it came.
#include "client/resumable_job.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/graph_builder.h"
#include "examples/mlp_train/mlp_graph.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/mlp_reference.h"
#include "tests/mlp_trainer.h"

namespace tandem::testing {
namespace {

constexpr int kIterations = 16;

// The MLP job and its batches, by iteration: after a re-attach the job's
// iteration count picks the batch, as a data loader resumed from a
// checkpoint would.
struct Training {
  examples::MlpJobOptions options = GoodJob();
  std::vector<client::NamedTensors> batches;
  std::vector<double> want;

  Training() {
    options.name = "resumable";
    examples::BlobDataset data(options.shape, options.seed);
    for (int i = 0; i < kIterations; ++i) {
      std::vector<float> x;
      std::vector<int64_t> y;
      data.NextBatch(options.batch, &x, &y);
      batches.push_back({{"x", client::HostTensor::Floats({options.batch, options.shape.inputs}, x)},
                         {"y", client::HostTensor::Int64s({options.batch}, y)},
                         {"lr", client::HostTensor::Floats({}, std::vector<float>{0.05f})}});
    }
    MlpReferenceOptions ref;
    ref.shape = options.shape;
    ref.batch = options.batch;
    ref.seed = options.seed;
    want = ReferenceMlpLosses(ref, kIterations);
  }

  // One step of `job` on the batch of its iteration count; its loss checked.
  absl::Status Step(client::ResumableJob& job) const {
    const uint64_t i = job.iterations();
    if (i >= batches.size()) return absl::OutOfRangeError("no more batches");
    absl::StatusOr<client::IterationResult> r = job.Run(batches[i], {"loss"});
    if (!r.ok()) return r.status();
    const double loss = r->fetches.at("loss").values<float>()[0];
    EXPECT_NEAR(loss, want[i], 1e-4 * std::abs(want[i])) << "iteration " << i;
    return absl::OkStatus();
  }
};

// Faults the daemon's device from a job of its own (w <- test_fault(w, 1) + x).
absl::Status FaultTheDevice(const std::string& endpoint) {
  auto c = client::Client::Connect({.endpoint = endpoint, .name = "faulty"});
  if (!c.ok()) return c.status();
  client::GraphBuilder g("faulty");
  const std::string x = g.Feed("x", v1::FLOAT32, {4});
  const std::string trigger = g.Feed("trigger", v1::INT64, {});
  const std::string w = g.Persistent("w", client::HostTensor::Floats({4}, std::vector<float>(4, 0.0f)));
  const std::string y = g.Op("test_fault", {w, trigger});
  g.Update(w, g.Op("add.Tensor", {y, x}));
  g.Fetch(y);
  auto job = (*c)->RegisterJob(std::move(g).Build());
  if (!job.ok()) return job.status();
  auto r = (*c)->RunIteration(job->job_id(),
                              {{"x", client::HostTensor::Floats({4}, std::vector<float>(4, 1.0f))},
                               {"trigger", client::HostTensor::Int64s({}, std::vector<int64_t>{1})}},
                              {y});
  return r.ok() ? absl::InternalError("test_fault did not fault the device") : absl::OkStatus();
}

class ResumableJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_dir_ = MakeTempDir("tandem-state-");
    ASSERT_FALSE(state_dir_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(state_dir_); }

  // Until a checkpoint file exists (written after an iteration, off the loop).
  void WaitForCheckpoint() const {
    for (int k = 0; k < 500; ++k) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(state_dir_)) {
        if (e.is_regular_file() && e.path().extension() == ".ckpt") return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "no checkpoint under " << state_dir_;
  }

  std::string state_dir_;
};

TEST_F(ResumableJobTest, ReattachesAfterADeviceFaultAndTrainsOnFromItsCheckpoint) {
  DaemonProcess daemon({"--state_dir=" + state_dir_, "--checkpoint_interval=0", "--test_faults=true"});
  const pid_t pid = daemon.pid();
  const Training training;
  auto job = client::ResumableJob::Register({.endpoint = daemon.endpoint(), .name = "trainer"},
                                            examples::BuildMlpTrainingJob(training.options));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_FALSE((*job)->registration().resume_token().empty());
  for (int k = 0; k < 6; ++k) ASSERT_TRUE(training.Step(**job).ok());
  WaitForCheckpoint();

  ASSERT_TRUE(FaultTheDevice(daemon.endpoint()).ok());
  for (int k = 0; k < 4; ++k) ASSERT_TRUE(training.Step(**job).ok()) << daemon.Log();
  ASSERT_EQ((*job)->recoveries().size(), 1u);
  const client::Recovery& recovery = (*job)->recoveries()[0];
  EXPECT_GE(recovery.resumed_iterations, 1u);
  EXPECT_LE(recovery.resumed_iterations, 6u);
  EXPECT_EQ(recovery.lost, 6 - recovery.resumed_iterations);
  EXPECT_GT(recovery.pause_seconds, 0.0);
  EXPECT_EQ((*job)->iterations(), recovery.resumed_iterations + 4);
  EXPECT_TRUE(daemon.Alive());
  EXPECT_EQ(daemon.pid(), pid);
  EXPECT_NE(daemon.Log().find("started again after a device fault"), std::string::npos);
}

TEST_F(ResumableJobTest, WithoutACheckpointUnavailableComesBackAsItCame) {
  DaemonProcess daemon({"--test_faults=true"});  // no state_dir: no resume token
  const Training training;
  auto job = client::ResumableJob::Register({.endpoint = daemon.endpoint(), .name = "trainer"},
                                            examples::BuildMlpTrainingJob(training.options));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE((*job)->registration().resume_token().empty());
  ASSERT_TRUE(training.Step(**job).ok());
  ASSERT_TRUE(FaultTheDevice(daemon.endpoint()).ok());
  const absl::Status s = training.Step(**job);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE((*job)->recoveries().empty());
}

}  // namespace
}  // namespace tandem::testing
