// A well-behaved training client for tests: one small MLP job stepped a few
// iterations at a time, every loss checked against the double-precision
// reference (tests/mlp_reference.h), so any disturbance by other clients
// shows up as a wrong loss.
#ifndef TANDEM_TESTS_MLP_TRAINER_H_
#define TANDEM_TESTS_MLP_TRAINER_H_

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "examples/mlp_train/mlp_graph.h"
#include "gtest/gtest.h"
#include "tests/mlp_reference.h"

namespace tandem::testing {

inline examples::MlpJobOptions GoodJob() {
  examples::MlpJobOptions o;
  o.shape.inputs = 16;
  o.shape.hidden = 32;
  o.shape.layers = 1;
  o.shape.classes = 4;
  o.batch = 16;
  o.seed = 5;
  o.name = "good";
  return o;
}

// The well-behaved client: one MLP job, stepped a few iterations at a time.
class GoodTrainer {
 public:
  // `priority`: the job's scheduling priority hint.
  explicit GoodTrainer(const std::string& endpoint, double tolerance = 1e-4, int priority = 0)
      : options_(GoodJob()), data_(options_.shape, options_.seed), tolerance_(tolerance) {
    auto c = client::Client::Connect({.endpoint = endpoint, .name = "good"});
    EXPECT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
    v1::RegisterJobRequest request = examples::BuildMlpTrainingJob(options_);
    request.mutable_hints()->set_priority(priority);
    auto job = client_->RegisterJob(std::move(request));
    EXPECT_TRUE(job.ok()) << job.status();
    job_ = job->job_id();
    MlpReferenceOptions ref;
    ref.shape = options_.shape;
    ref.batch = options_.batch;
    ref.seed = options_.seed;
    want_ = ReferenceMlpLosses(ref, 200);
  }

  // Runs `n` iterations and checks each loss against the reference.
  void Step(int n) {
    for (int k = 0; k < n; ++k) {
      std::vector<float> x;
      std::vector<int64_t> y;
      data_.NextBatch(options_.batch, &x, &y);
      client::NamedTensors feeds{{"x", client::HostTensor::Floats({options_.batch, options_.shape.inputs}, x)},
                                 {"y", client::HostTensor::Int64s({options_.batch}, y)},
                                 {"lr", client::HostTensor::Floats({}, std::vector<float>{0.05f})}};
      auto r = client_->RunIteration(job_, feeds, {"loss"}, done_);
      ASSERT_TRUE(r.ok()) << r.status();
      double loss = r->fetches.at("loss").values<float>()[0];
      ASSERT_LT(done_, static_cast<int>(want_.size()));
      EXPECT_NEAR(loss, want_[done_], tolerance_ * std::abs(want_[done_])) << "iteration " << done_;
      ++done_;
    }
  }

  client::Client& client() { return *client_; }
  uint64_t job() const { return job_; }

 private:
  examples::MlpJobOptions options_;
  examples::BlobDataset data_;
  std::unique_ptr<client::Client> client_;
  uint64_t job_ = 0;
  double tolerance_;
  std::vector<double> want_;
  int done_ = 0;
};

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_MLP_TRAINER_H_
