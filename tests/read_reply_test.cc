// A read of a large tensor (ReadTensor: a client's checkpoint or evaluation
// of its weights) does not hold the control loop up: the tensor's copy into
// the reply and the reply's serialization run on the daemon's message
// thread, and the loop only sends the bytes. The bytes read back are the
// job's.
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "examples/mlp_train/mlp_graph.h"
#include "examples/mlp_train/synthetic_data.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"

namespace tandem::testing {
namespace {

// The loop's longest run of the work item or section `name` (0 when it never ran).
double LongestLoopItem(const v1::StatsResponse& stats, const std::string& name) {
  for (const v1::LoopHandlerStats& h : stats.loop_handlers()) {
    if (h.name() == name) return h.max_seconds();
  }
  return 0;
}

TEST(ReadReply, ALargeReadIsBuiltOffTheLoop) {
  DaemonProcess daemon;
  auto c = client::Client::Connect({.endpoint = daemon.endpoint(), .name = "reader"});
  ASSERT_TRUE(c.ok()) << c.status();
  examples::MlpJobOptions o;
  o.shape.inputs = 4096;  // W0: 4096 x 4096 floats, 64 MiB
  o.shape.hidden = 4096;
  o.shape.layers = 1;
  o.shape.classes = 4;
  o.batch = 4;
  auto job = (*c)->RegisterJob(examples::BuildMlpTrainingJob(o));
  ASSERT_TRUE(job.ok()) << job.status() << daemon.Log();
  const std::vector<std::vector<float>> initial = examples::InitialWeights(o.shape, o.seed);
  const std::string name = examples::MlpParameterNames(o.shape)[0];
  for (int i = 0; i < 3; ++i) {
    auto read = (*c)->ReadTensor(job->job_id(), name);
    ASSERT_TRUE(read.ok()) << read.status();
    ASSERT_EQ(read->data.size(), initial[0].size() * sizeof(float));
    EXPECT_EQ(read->data, std::string(reinterpret_cast<const char*>(initial[0].data()), read->data.size()));
  }
  auto stats = (*c)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  // On the loop, the reply's two 64 MiB copies took 20-60 ms on 2 cores; the
  // send and the buffer's release take a few.
  EXPECT_GT(LongestLoopItem(*stats, "Service.OnReplyBuilt"), 0) << "the reads' replies were not built off the loop";
  EXPECT_LT(LongestLoopItem(*stats, "Executor.OnReadDone"), 0.015);
  EXPECT_LT(LongestLoopItem(*stats, "Service.OnReplyBuilt"), 0.015);
}

}  // namespace
}  // namespace tandem::testing
