// Persistence across restarts (state_dir): a job that trains is
// checkpointed, and a restarted daemon (after SIGTERM or kill -9) or a
// restarted client resumes it by name and token, its losses continuing the
// double-precision reference from the checkpoint's iteration on. Resumes
// that must not work are refused with the error that says why, and the
// daemon goes on serving.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "client/client.h"
#include "examples/mlp_train/mlp_graph.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/mlp_reference.h"
#include "tests/mlp_trainer.h"

namespace tandem::testing {
namespace {

// One MLP job (GoodJob) that may resume; every loss is checked against the
// reference at its iteration.
class ResumableTrainer {
 public:
  ResumableTrainer(const std::string& endpoint, const std::string& resume_token = "",
                   examples::MlpJobOptions options = GoodJob())
      : options_(std::move(options)), data_(options_.shape, options_.seed) {
    auto c = client::Client::Connect({.endpoint = endpoint, .name = "resumable"});
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return;
    client_ = *std::move(c);
    v1::RegisterJobRequest request = examples::BuildMlpTrainingJob(options_);
    request.set_resume_token(resume_token);
    registered_ = client_->RegisterJob(std::move(request));
    if (!registered_.ok()) return;
    // The data stream as it was at the checkpoint's iteration.
    for (uint64_t k = 0; k < registered_->resumed_iterations(); ++k) {
      std::vector<float> x;
      std::vector<int64_t> y;
      data_.NextBatch(options_.batch, &x, &y);
    }
    done_ = static_cast<int>(registered_->resumed_iterations());
    MlpReferenceOptions ref;
    ref.shape = options_.shape;
    ref.batch = options_.batch;
    ref.seed = options_.seed;
    want_ = ReferenceMlpLosses(ref, 100);
  }

  const absl::StatusOr<v1::RegisterJobResponse>& registered() const { return registered_; }
  int done() const { return done_; }

  void Step(int n) {
    ASSERT_TRUE(registered_.ok()) << registered_.status();
    for (int k = 0; k < n; ++k) {
      std::vector<float> x;
      std::vector<int64_t> y;
      data_.NextBatch(options_.batch, &x, &y);
      client::NamedTensors feeds{{"x", client::HostTensor::Floats({options_.batch, options_.shape.inputs}, x)},
                                 {"y", client::HostTensor::Int64s({options_.batch}, y)},
                                 {"lr", client::HostTensor::Floats({}, std::vector<float>{0.05f})}};
      auto r = client_->RunIteration(registered_->job_id(), feeds, {"loss"}, done_);
      ASSERT_TRUE(r.ok()) << r.status();
      const double loss = r->fetches.at("loss").values<float>()[0];
      ASSERT_LT(done_, static_cast<int>(want_.size()));
      EXPECT_NEAR(loss, want_[done_], 1e-4 * std::abs(want_[done_])) << "iteration " << done_;
      ++done_;
    }
  }
  absl::Status Close() { return client_->CloseJob(registered_->job_id()); }
  void Disconnect() { client_.reset(); }

 private:
  examples::MlpJobOptions options_;
  examples::BlobDataset data_;
  std::unique_ptr<client::Client> client_;
  absl::StatusOr<v1::RegisterJobResponse> registered_ = absl::UnknownError("not registered");
  std::vector<double> want_;
  int done_ = 0;
};

class CheckpointRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_dir_ = MakeTempDir("tandem-state-");
    ASSERT_FALSE(state_dir_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(state_dir_); }

  std::vector<std::string> Flags(const std::string& interval = "3600") const {
    return {"--state_dir=" + state_dir_, "--checkpoint_interval=" + interval};
  }
  // The checkpoint files under state_dir.
  std::vector<std::string> Checkpoints() const {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(state_dir_)) {
      if (e.is_regular_file() && e.path().extension() == ".ckpt") files.push_back(e.path());
    }
    return files;
  }

  std::string state_dir_;
};

TEST_F(CheckpointRestartTest, SigtermCheckpointsAndARestartedDaemonResumes) {
  std::string token;
  {
    DaemonProcess daemon(Flags());
    ResumableTrainer trainer(daemon.endpoint());
    ASSERT_TRUE(trainer.registered().ok()) << trainer.registered().status();
    token = trainer.registered()->resume_token();
    EXPECT_EQ(token.size(), 16u);
    EXPECT_EQ(trainer.registered()->resumed_iterations(), 0u);
    trainer.Step(5);
    EXPECT_TRUE(Checkpoints().empty()) << "the hour-long interval has not passed";
    const int status = daemon.Stop();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << daemon.Log();
    ASSERT_EQ(Checkpoints().size(), 1u) << daemon.Log();
    struct stat st {};
    ASSERT_EQ(::stat(Checkpoints()[0].c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  DaemonProcess restarted(Flags());
  ResumableTrainer resumed(restarted.endpoint(), token);
  ASSERT_TRUE(resumed.registered().ok()) << resumed.registered().status() << restarted.Log();
  EXPECT_EQ(resumed.registered()->resumed_iterations(), 5u);
  EXPECT_EQ(resumed.registered()->resume_token(), token);
  resumed.Step(5);  // iterations 5..9 of the reference
  // Closing the job ends it: its checkpoint goes, and it cannot be resumed.
  ASSERT_TRUE(resumed.Close().ok());
  for (int i = 0; i < 100 && !Checkpoints().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(Checkpoints().empty());
  ResumableTrainer again(restarted.endpoint(), token);
  EXPECT_TRUE(absl::IsNotFound(again.registered().status())) << again.registered().status();
}

TEST_F(CheckpointRestartTest, ACheckpointNobodyResumedWithinTheTtlIsDeleted) {
  std::string token;
  {
    DaemonProcess daemon(Flags());
    ResumableTrainer trainer(daemon.endpoint());
    ASSERT_TRUE(trainer.registered().ok()) << trainer.registered().status();
    token = trainer.registered()->resume_token();
    trainer.Step(2);
    daemon.Stop();
  }
  ASSERT_EQ(Checkpoints().size(), 1u);
  // Last written 8 days ago, as if its user never came back.
  const std::string path = Checkpoints()[0];
  const time_t eight_days_ago =
      std::chrono::system_clock::to_time_t(std::chrono::system_clock::now() - std::chrono::hours(24 * 8));
  const struct timespec times[2] = {{eight_days_ago, 0}, {eight_days_ago, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  {
    // A ttl of 9 days keeps it: the restarted daemon resumes it.
    std::vector<std::string> flags = Flags();
    flags.push_back("--checkpoint_ttl=" + std::to_string(9 * 86400));
    DaemonProcess daemon(flags);
    ResumableTrainer resumed(daemon.endpoint(), token);
    ASSERT_TRUE(resumed.registered().ok()) << resumed.registered().status() << daemon.Log();
    EXPECT_EQ(resumed.registered()->resumed_iterations(), 2u);
    resumed.Disconnect();
    daemon.Stop();  // the final checkpoint is written now: fresh again
  }
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  // The default ttl (7 days) deletes it at start.
  DaemonProcess daemon(Flags());
  for (int i = 0; i < 250 && !Checkpoints().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(Checkpoints().empty()) << daemon.Log();
  ResumableTrainer late(daemon.endpoint(), token);
  EXPECT_TRUE(absl::IsNotFound(late.registered().status())) << late.registered().status();
}

TEST_F(CheckpointRestartTest, KillNineLosesAtMostWhatFollowedTheLastCheckpoint) {
  std::string token;
  {
    DaemonProcess daemon(Flags("0"));  // a checkpoint after every iteration, one at a time
    ResumableTrainer trainer(daemon.endpoint());
    ASSERT_TRUE(trainer.registered().ok()) << trainer.registered().status();
    token = trainer.registered()->resume_token();
    trainer.Step(8);
    // The first checkpoint lands a write (and fsync) later; then more
    // iterations, and the daemon dies between two checkpoints or in one.
    for (int i = 0; i < 250 && Checkpoints().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    trainer.Step(2);
    ASSERT_EQ(::kill(daemon.pid(), SIGKILL), 0);
    const int status = daemon.Stop();  // reaps it
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    ASSERT_EQ(Checkpoints().size(), 1u);
  }
  DaemonProcess restarted(Flags("0"));
  ResumableTrainer resumed(restarted.endpoint(), token);
  ASSERT_TRUE(resumed.registered().ok()) << resumed.registered().status() << restarted.Log();
  EXPECT_GE(resumed.registered()->resumed_iterations(), 1u);
  EXPECT_LE(resumed.registered()->resumed_iterations(), 10u);
  std::printf("resumed at iteration %llu of 10\n",
              static_cast<unsigned long long>(resumed.registered()->resumed_iterations()));
  resumed.Step(4);  // its losses continue the reference from the checkpoint's iteration
}

TEST_F(CheckpointRestartTest, AClientThatGoesAwayResumesWhereItStopped) {
  DaemonProcess daemon(Flags());
  std::string token;
  {
    ResumableTrainer trainer(daemon.endpoint());
    ASSERT_TRUE(trainer.registered().ok()) << trainer.registered().status();
    token = trainer.registered()->resume_token();
    trainer.Step(4);
    trainer.Disconnect();  // the session ends without closing the job: a final checkpoint
  }
  // The old job is freed once its session's end is noticed; until then the
  // name is taken.
  absl::StatusOr<v1::RegisterJobResponse> registered = absl::UnknownError("");
  for (int i = 0; i < 100; ++i) {
    ResumableTrainer resumed(daemon.endpoint(), token);
    registered = resumed.registered();
    if (registered.ok()) {
      EXPECT_EQ(registered->resumed_iterations(), 4u);
      resumed.Step(3);
      break;
    }
    ASSERT_TRUE(absl::IsAlreadyExists(registered.status()) || absl::IsNotFound(registered.status()))
        << registered.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(registered.ok()) << registered.status() << daemon.Log();
}

// A job whose weights came through shared memory, larger than the largest
// message plus the header's room, resumes too (its checkpoint, 136 MiB with
// momentum, used to be refused as over the limit of a message).
TEST_F(CheckpointRestartTest, AJobLargerThanAMessageResumes) {
  examples::MlpJobOptions options = GoodJob();
  options.shape.hidden = 4096;
  options.shape.layers = 2;
  options.batch = 4;
  std::vector<std::string> flags = Flags();
  flags.push_back("--max_message_bytes=1048576");
  client::NamedTensors feeds;
  {
    std::vector<float> x;
    std::vector<int64_t> y;
    examples::BlobDataset(options.shape, options.seed).NextBatch(options.batch, &x, &y);
    feeds = {{"x", client::HostTensor::Floats({options.batch, options.shape.inputs}, x)},
             {"y", client::HostTensor::Int64s({options.batch}, y)},
             {"lr", client::HostTensor::Floats({}, std::vector<float>{0.05f})}};
  }
  std::string token;
  {
    DaemonProcess daemon(flags);
    auto c = client::Client::Connect({.endpoint = daemon.endpoint(), .name = "large"});
    ASSERT_TRUE(c.ok()) << c.status();
    auto job = (*c)->RegisterJob(examples::BuildMlpTrainingJob(options));
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_GT(job->persistent_bytes(), uint64_t{128} << 20);
    token = job->resume_token();
    for (int k = 0; k < 2; ++k) ASSERT_TRUE((*c)->RunIteration(job->job_id(), feeds, {"loss"}).ok());
    const int status = daemon.Stop();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << daemon.Log();
  }
  ASSERT_EQ(Checkpoints().size(), 1u);
  EXPECT_GT(std::filesystem::file_size(Checkpoints()[0]), (uint64_t{64} << 20) + 1048576);
  DaemonProcess restarted(flags);
  auto c = client::Client::Connect({.endpoint = restarted.endpoint(), .name = "large"});
  ASSERT_TRUE(c.ok()) << c.status();
  v1::RegisterJobRequest request = examples::BuildMlpTrainingJob(options);
  request.set_resume_token(token);
  auto job = (*c)->RegisterJob(std::move(request));
  ASSERT_TRUE(job.ok()) << job.status() << restarted.Log();
  EXPECT_EQ(job->resumed_iterations(), 2u);
  EXPECT_TRUE((*c)->RunIteration(job->job_id(), feeds, {"loss"}).ok());
}

TEST_F(CheckpointRestartTest, ResumesThatMustNotWorkAreRefused) {
  DaemonProcess daemon(Flags());
  std::string token;
  {
    ResumableTrainer trainer(daemon.endpoint());
    ASSERT_TRUE(trainer.registered().ok()) << trainer.registered().status();
    token = trainer.registered()->resume_token();
    trainer.Step(2);
    // Its name is taken while it runs: a second job of that name trains
    // without checkpoints (they would share one file), and cannot resume.
    ResumableTrainer twin(daemon.endpoint());
    ASSERT_TRUE(twin.registered().ok()) << twin.registered().status();
    EXPECT_TRUE(twin.registered()->resume_token().empty());
    twin.Step(1);
    ResumableTrainer thief(daemon.endpoint(), token);
    EXPECT_TRUE(absl::IsAlreadyExists(thief.registered().status())) << thief.registered().status();
    trainer.Disconnect();
  }
  for (int i = 0; i < 100 && Checkpoints().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(Checkpoints().size(), 1u);

  // Another token.
  std::string wrong = token;
  wrong[0] = static_cast<char>(wrong[0] ^ 1);
  absl::Status status;
  for (int i = 0; i < 100; ++i) {  // until the old job is gone
    ResumableTrainer forged(daemon.endpoint(), wrong);
    status = forged.registered().status();
    if (!absl::IsAlreadyExists(status)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;

  // Another model under the same name.
  examples::MlpJobOptions other = GoodJob();
  other.shape.hidden = 48;
  ResumableTrainer reshaped(daemon.endpoint(), token, other);
  EXPECT_TRUE(absl::IsFailedPrecondition(reshaped.registered().status())) << reshaped.registered().status();

  // A damaged file: refused as such, and the daemon serves on.
  const std::string path = Checkpoints()[0];
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(std::filesystem::file_size(path) - 7)), 0);
  ResumableTrainer damaged(daemon.endpoint(), token);
  EXPECT_EQ(damaged.registered().status().code(), absl::StatusCode::kDataLoss) << damaged.registered().status();
  ResumableTrainer fresh(daemon.endpoint());
  ASSERT_TRUE(fresh.registered().ok()) << fresh.registered().status();
  fresh.Step(2);
  EXPECT_TRUE(daemon.Alive());

  // A daemon without state_dir resumes nothing.
  DaemonProcess plain;
  ResumableTrainer nowhere(plain.endpoint(), token);
  EXPECT_TRUE(absl::IsFailedPrecondition(nowhere.registered().status())) << nowhere.registered().status();
  ResumableTrainer unnamed_token(plain.endpoint());
  ASSERT_TRUE(unnamed_token.registered().ok());
  EXPECT_TRUE(unnamed_token.registered()->resume_token().empty());
}

}  // namespace
}  // namespace tandem::testing
