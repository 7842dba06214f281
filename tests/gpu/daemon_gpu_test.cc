// tandemd on the GPU, end to end: a job that feeds an out-of-range class
// label gets INVALID_ARGUMENT naming the op and the value, while another
// job training beside it on the same GPU (same CUDA context) keeps exactly
// the losses of the double-precision reference; the bad job itself recovers
// on its next good batch. Under PRIORITY, the lane of a higher-priority job
// gets a higher CUDA stream priority once it is idle, and both jobs keep
// their reference losses across the change of stream. Skipped, with a
// message, where no GPU exists.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "client/client.h"
#include "device/cuda_device.h"
#include "examples/mlp_train/mlp_graph.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/mlp_trainer.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

TEST(DaemonOnGpu, BadLabelFailsOnlyItsIterationAndTheNeighbourTrainsOn) {
  if (device::CudaDeviceCount() == 0) {
    std::printf("no GPU: skipping\n");
    GTEST_SKIP() << "no GPU";
  }
  // One GPU, so that both jobs share its context (on a machine with several
  // the daemon would place the second job on another GPU).
  DaemonProcess daemon({"--device=cuda", "--gpus=0", "--policy=fair"});
  // float32 on the GPU against the double reference.
  GoodTrainer good(daemon.endpoint(), 1e-4);
  good.Step(3);

  auto bad = client::Client::Connect({.endpoint = daemon.endpoint(), .name = "bad-labels"});
  ASSERT_TRUE(bad.ok()) << bad.status();
  examples::MlpJobOptions o = GoodJob();
  o.name = "bad-labels";
  auto job = (*bad)->RegisterJob(examples::BuildMlpTrainingJob(o));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->device(), "cuda:0");
  std::vector<float> x(static_cast<size_t>(o.batch) * o.shape.inputs, 0.5f);
  std::vector<int64_t> y(o.batch, 1);
  y[7] = 99;  // 4 classes
  client::NamedTensors feeds{{"x", client::HostTensor::Floats({o.batch, o.shape.inputs}, x)},
                             {"y", client::HostTensor::Int64s({o.batch}, y)},
                             {"lr", client::HostTensor::Floats({}, std::vector<float>{0.05f})}};
  for (int round = 0; round < 3; ++round) {
    auto r = (*bad)->RunIteration(job->job_id(), feeds, {"loss"});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("nll_loss"));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("99"));
    good.Step(2);
  }
  // The failed iterations changed nothing: the weights are the initial ones.
  std::vector<std::vector<float>> init = examples::InitialWeights(o.shape, o.seed);
  std::vector<std::string> names = examples::MlpParameterNames(o.shape);
  for (size_t p = 0; p < names.size(); ++p) {
    auto t = (*bad)->ReadTensor(job->job_id(), names[p]);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->values<float>(), init[p]) << names[p];
  }
  // And the job recovers on a good batch.
  y[7] = 2;
  feeds[1].second = client::HostTensor::Int64s({o.batch}, y);
  auto first = (*bad)->RunIteration(job->job_id(), feeds, {"loss"});
  ASSERT_TRUE(first.ok()) << first.status();
  good.Step(3);
  ASSERT_TRUE(daemon.Alive()) << daemon.Log();
}

TEST(DaemonOnGpu, HigherPriorityLaneGetsAHigherStreamPriority) {
  if (device::CudaDeviceCount() == 0) {
    std::printf("no GPU: skipping\n");
    GTEST_SKIP() << "no GPU";
  }
  DaemonProcess daemon({"--device=cuda", "--gpus=0", "--policy=priority"});
  GoodTrainer best_effort(daemon.endpoint(), 1e-4, /*priority=*/0);
  best_effort.Step(2);
  GoodTrainer urgent(daemon.endpoint(), 1e-4, /*priority=*/3);
  // The urgent job's lane was opened at the default level; its stream is
  // replaced once the lane is idle (before its next iteration): the first
  // iteration runs on one stream, the later ones on the new one.
  for (int round = 0; round < 3; ++round) {
    urgent.Step(2);
    best_effort.Step(2);
  }
  auto stats = urgent.client().Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->devices_size(), 1);
  const v1::DeviceStats& dev = stats->devices(0);
  ASSERT_GT(dev.stream_priority_levels(), 0u) << "a CUDA device has stream priorities";
  const uint32_t want = std::min<uint32_t>(3, dev.stream_priority_levels());
  int seen = 0;
  for (const v1::LaneInfo& lane : dev.lane_info()) {
    for (uint64_t job : lane.jobs()) {
      if (job == urgent.job()) {
        EXPECT_EQ(lane.stream_level(), want) << "lane " << lane.lane();
        ++seen;
      }
      if (job == best_effort.job()) {
        EXPECT_EQ(lane.stream_level(), 0u) << "lane " << lane.lane();
        ++seen;
      }
    }
  }
  EXPECT_EQ(seen, 2);
  // The client's shared region (a sealed memfd passed on the fd socket; set
  // up at a session's first large feed, or asked for here) was mapped, and
  // pinned with cudaHostRegister on tandemd's preparation thread, so copies
  // from it are asynchronous.
  ASSERT_TRUE(urgent.client().EnsureSharedMemory().ok()) << urgent.client().shared_memory_status();
  EXPECT_TRUE(urgent.client().shared_memory_pinned());
  // After each job's first iteration on a stream, its iterations replay a
  // captured graph: fewer kernel-by-kernel runs than iterations.
  EXPECT_GT(dev.graph_launches(), 0u);
  EXPECT_GT(dev.graph_captures(), 0u);
  EXPECT_LT(dev.op_by_op_runs(), dev.iterations());
  // The journal names the captures: one or more per job (its first
  // iteration on its lane), on the lane the job is in, each with the host
  // time its run and capture held the lane's thread, split into the
  // kernel-by-kernel run's part and the graph's (both within the whole).
  // (0 s for a capture of node ranges, which a preemptible iteration runs in).
  int urgent_captures = 0, best_effort_captures = 0, timed = 0;
  for (const v1::DeviceEvent& e : dev.events()) {
    if (e.kind() != "capture") continue;
    EXPECT_GE(e.lane(), 0);
    EXPECT_GE(e.seconds(), 0.0);
    EXPECT_LT(e.seconds(), 10.0);
    EXPECT_GE(e.run_seconds(), 0.0);
    EXPECT_GE(e.graph_seconds(), 0.0);
    EXPECT_LE(e.run_seconds() + e.graph_seconds(), e.seconds() + 1e-9);
    if (e.seconds() > 0) {
      ++timed;
      EXPECT_GT(e.run_seconds(), 0.0);
      EXPECT_GT(e.graph_seconds(), 0.0);
    }
    urgent_captures += e.job() == urgent.job() ? 1 : 0;
    best_effort_captures += e.job() == best_effort.job() ? 1 : 0;
  }
  EXPECT_GE(urgent_captures, 1);
  EXPECT_GE(best_effort_captures, 1);
  EXPECT_GE(timed, 1);
  // Lane warm-up: the best-effort job was readied on the urgent job's lane
  // when that lane opened, and the urgent job on the other after its first
  // iteration (an MLP has nothing to set up per stream: a step each).
  EXPECT_GE(dev.warm_steps(), 1u);
  ASSERT_TRUE(daemon.Alive()) << daemon.Log();
}

}  // namespace
}  // namespace tandem::testing
