// The C++ SDK's ResumableJob (client/resumable_job.h) through a real device
// fault and tandemd's restart in place (--test_faults: the CPU backend's
// stand-in for a sticky CUDA fault): the job re-attaches by itself with its
// resume token and trains on from its checkpoint, its losses those of the
// double-precision reference at every iteration it applied. Without a
// checkpoint to resume, the daemon's UNAVAILABLE comes back as it came.
// Pipelined iterations in flight at the fault are sent again after the
// re-attach, and mlp_train, which keeps some in flight, trains through it.
#include "client/resumable_job.h"

#include <sys/wait.h>
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
#include "tests/fault_device.h"
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

TEST_F(ResumableJobTest, PipelinedIterationsInFlightAreSentAgainAfterTheReattach) {
  DaemonProcess daemon({"--state_dir=" + state_dir_, "--checkpoint_interval=0", "--test_faults=true"});
  const Training training;
  auto registered = client::ResumableJob::Register({.endpoint = daemon.endpoint(), .name = "trainer"},
                                                   examples::BuildMlpTrainingJob(training.options));
  ASSERT_TRUE(registered.ok()) << registered.status();
  client::ResumableJob& job = **registered;
  for (int k = 0; k < 6; ++k) ASSERT_TRUE(training.Step(job).ok());
  WaitForCheckpoint();

  // Three iterations in flight when the device faults: the first Wait finds
  // the daemon gone, re-attaches and sends all three again, in order.
  ASSERT_TRUE(FaultTheDevice(daemon.endpoint()).ok());
  constexpr int kInFlight = 3;
  for (int k = 0; k < kInFlight; ++k) ASSERT_TRUE(job.Submit(training.batches[6 + k], {"loss"}).ok());
  EXPECT_EQ(job.in_flight(), static_cast<size_t>(kInFlight));
  std::vector<double> losses;
  for (int k = 0; k < kInFlight; ++k) {
    absl::StatusOr<client::IterationResult> r = job.Wait();
    ASSERT_TRUE(r.ok()) << r.status() << daemon.Log();
    losses.push_back(r->fetches.at("loss").values<float>()[0]);
  }
  EXPECT_EQ(job.in_flight(), 0u);
  EXPECT_EQ(job.Wait().status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(job.recoveries().size(), 1u);
  const client::Recovery& recovery = job.recoveries()[0];
  EXPECT_EQ(recovery.lost, 6 - recovery.resumed_iterations);
  EXPECT_EQ(job.iterations(), recovery.resumed_iterations + kInFlight);
  // Nothing lost: the three are the reference's iterations 6, 7 and 8.
  if (recovery.lost == 0) {
    for (int k = 0; k < kInFlight; ++k) EXPECT_NEAR(losses[k], training.want[6 + k], 1e-4 * training.want[6 + k]);
  }
  // Run refuses while an iteration is in flight.
  ASSERT_TRUE(job.Submit(training.batches[9], {"loss"}).ok());
  EXPECT_EQ(job.Run(training.batches[10], {"loss"}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(job.Wait().ok());
}

// The demo's job, mlp_train, with iterations in flight, through the same
// fault: it says that it re-attached, finishes every iteration and learns.
TEST_F(ResumableJobTest, MlpTrainReattachesThroughADeviceFault) {
  DaemonProcess daemon({"--state_dir=" + state_dir_, "--checkpoint_interval=0", "--test_faults=true"});
  const std::string log = daemon.dir() + "/mlp.log";
  const pid_t pid = Spawn({MlpTrainPath(), "--endpoint=" + daemon.endpoint(), "--name=demo", "--iterations=60",
                           "--batch=64", "--inflight=3", "--pause_ms=20", "--print_every=1", "--eval_samples=500"},
                          log);
  for (int k = 0; k < 1000 && ReadFile(log).find("iter 10 ") == std::string::npos; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(ReadFile(log).find("iter 10 "), std::string::npos) << ReadFile(log);
  WaitForCheckpoint();
  ASSERT_TRUE(FaultTheDevice(daemon.endpoint()).ok());
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string out = ReadFile(log);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out << "\ndaemon log:\n" << daemon.Log();
  EXPECT_NE(out.find("re-attached after"), std::string::npos) << out;
  EXPECT_NE(out.find("iter 59 "), std::string::npos) << out;
  const size_t at = out.find("final accuracy ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GT(std::stod(out.substr(at + 15)), 0.5) << out;  // chance is 0.1
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
