// Graph variants: one job, several graphs over its one set of persistent
// tensors (RegisterJobRequest.variants): a training step for another batch
// size and an evaluation pass read and update the same weights, with no copy;
// the arena is planned for the largest graph, and a run names its graph.
#include <string>
#include <vector>

#include "client/client.h"
#include "client/graph_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"

namespace tandem::testing {
namespace {

using client::Client;
using client::GraphBuilder;
using client::HostTensor;
using ::testing::HasSubstr;

constexpr int64_t kWidth = 4;

// A step over a batch of `rows`: s = sum(x * w); with `train`, also
// w <- w - 0.1 * sum(x, dim 0) (s's gradient). w starts at ones.
v1::RegisterJobRequest Step(int64_t rows, bool train) {
  GraphBuilder b("variants");
  std::string w = b.Persistent("w", HostTensor::Floats({kWidth}, std::vector<float>(kWidth, 1.f)));
  std::string x = b.Feed("x", v1::FLOAT32, {rows, kWidth});
  std::string y = b.Op("mul.Tensor", {x, w}, {}, "y");
  std::string s = b.Op("sum", {y}, {}, "s");
  b.Fetch(s);
  if (train) {
    std::string g = b.Op("sum.dim_IntList", {x}, {{"dim", client::AttrInts({0})}}, "g");
    std::string step = b.Op("mul.Scalar", {g}, {{"other", client::AttrFloat(0.1)}}, "step");
    std::string next = b.Op("sub.Tensor", {w, step}, {}, "next");
    b.Update(w, next);
  }
  return std::move(b).Build();
}

HostTensor Ones(int64_t rows) { return HostTensor::Floats({rows, kWidth}, std::vector<float>(rows * kWidth, 1.f)); }

class GraphVariantsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Client::Connect({.endpoint = daemon_.endpoint(), .name = "variants"});
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }

  std::vector<float> Weights(uint64_t job) {
    auto w = client_->ReadTensor(job, "w");
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? w->values<float>() : std::vector<float>{};
  }

  DaemonProcess daemon_;
  std::unique_ptr<Client> client_;
};

TEST_F(GraphVariantsTest, VariantsShareTheWeightsAndTheArenaFitsTheLargest) {
  v1::RegisterJobRequest request = Step(8, true);
  v1::RegisterJobRequest short_batch = Step(3, true);
  v1::RegisterJobRequest eval = Step(64, false);  // the largest batch: its plan sizes the arena
  auto* v = request.add_variants();
  v->set_name("short");
  *v->mutable_graph() = short_batch.graph();
  v = request.add_variants();
  v->set_name("eval");
  *v->mutable_graph() = eval.graph();
  auto job = client_->RegisterJob(request);
  ASSERT_TRUE(job.ok()) << job.status();
  // The arena holds at least the evaluation's 64 x 4 floats of x, more than
  // the registered graph alone plans.
  auto alone = client_->RegisterJob(Step(8, true));
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_GE(job->ephemeral_peak_bytes(), 64 * kWidth * sizeof(float));
  EXPECT_LT(alone->ephemeral_peak_bytes(), 64 * kWidth * sizeof(float));

  auto r = client_->RunIteration(job->job_id(), {{"x", Ones(8)}}, {"s"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->fetches.at("s").values<float>()[0], 8 * kWidth);
  EXPECT_THAT(Weights(job->job_id()), ::testing::Each(::testing::FloatEq(1.f - 0.8f)));

  r = client_->RunIteration(job->job_id(), {{"x", Ones(3)}}, {"s"}, 1, "short");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->fetches.at("s").values<float>()[0], 3 * kWidth * 0.2f);
  EXPECT_THAT(Weights(job->job_id()), ::testing::Each(::testing::FloatNear(0.2f - 0.3f, 1e-6f)));

  // The evaluation reads the live weights and changes nothing.
  r = client_->RunIteration(job->job_id(), {{"x", Ones(64)}}, {"s"}, 2, "eval");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->fetches.at("s").values<float>()[0], 64 * kWidth * -0.1f, 1e-4);
  EXPECT_THAT(Weights(job->job_id()), ::testing::Each(::testing::FloatNear(-0.1f, 1e-6f)));

  // And the registered graph again, after the others.
  r = client_->RunIteration(job->job_id(), {{"x", Ones(8)}}, {"s"}, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Weights(job->job_id()), ::testing::Each(::testing::FloatNear(-0.1f - 0.8f, 1e-6f)));
}

TEST_F(GraphVariantsTest, ARunChecksItsFeedsAgainstTheGraphItNames) {
  v1::RegisterJobRequest request = Step(8, true);
  auto* v = request.add_variants();
  v->set_name("short");
  *v->mutable_graph() = Step(3, true).graph();
  auto job = client_->RegisterJob(request);
  ASSERT_TRUE(job.ok()) << job.status();
  auto wrong = client_->RunIteration(job->job_id(), {{"x", Ones(8)}}, {"s"}, 0, "short");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("float32[3, 4]"));
  auto unknown = client_->RunIteration(job->job_id(), {{"x", Ones(8)}}, {"s"}, 0, "long");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("no graph variant 'long'"));
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("'short'"));
  // Nothing ran: the weights are the initial ones.
  EXPECT_THAT(Weights(job->job_id()), ::testing::Each(::testing::FloatEq(1.f)));
}

TEST_F(GraphVariantsTest, BadVariantsAreRefusedAtRegistration) {
  auto refused = [&](const std::vector<std::pair<std::string, v1::Graph>>& variants) {
    v1::RegisterJobRequest request = Step(8, true);
    for (const auto& [name, graph] : variants) {
      auto* v = request.add_variants();
      v->set_name(name);
      *v->mutable_graph() = graph;
    }
    auto r = client_->RegisterJob(request);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  const v1::Graph other = Step(3, true).graph();
  EXPECT_THAT(refused({{"", other}}), HasSubstr("needs a name"));
  EXPECT_THAT(refused({{"a", other}, {"a", other}}), HasSubstr("'a' is named twice"));
  // A variant whose node reads a tensor that is none of the job's.
  v1::Graph broken = other;
  broken.mutable_nodes(0)->set_inputs(1, "bias");
  EXPECT_THAT(refused({{"b", broken}}), HasSubstr("graph variant 'b'"));
  std::vector<std::pair<std::string, v1::Graph>> many;
  for (int i = 0; i < 17; ++i) many.push_back({"v" + std::to_string(i), other});
  EXPECT_THAT(refused(many), HasSubstr("at most 16"));
}

}  // namespace
}  // namespace tandem::testing
