// mlp_train: trains an MLP classifier on a synthetic, learnable dataset
// through tandemd, printing `iter N loss X` lines and the final accuracy.
//
//   mlp_train --iterations=200 --batch=256 --hidden=128 --seed=1
//
// Several iterations stay in flight (--inflight) so the device never waits
// for a round trip. When tandemd restarts (a device fault, an upgrade) and
// has a state_dir, the job re-attaches by itself and trains on from its
// last checkpoint (client/resumable_job.h; --reattach_timeout_s). The final
// accuracy is computed here, on a held-out set, from the weights read back
// from the daemon.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "client/resumable_job.h"
#include "examples/mlp_train/mlp_graph.h"

ABSL_FLAG(std::string, endpoint, "", "tandemd endpoint (default: $TANDEM_ENDPOINT, else the local socket)");
ABSL_FLAG(int, iterations, 200, "training iterations");
ABSL_FLAG(int, batch, 256, "batch size");
ABSL_FLAG(int, hidden, 128, "width of each hidden layer");
ABSL_FLAG(int, layers, 2, "number of hidden layers");
ABSL_FLAG(int, inputs, 64, "input features");
ABSL_FLAG(int, classes, 10, "classes");
ABSL_FLAG(uint64_t, seed, 1, "seed of the data and the initial weights");
ABSL_FLAG(double, lr, 0.05, "learning rate");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum");
ABSL_FLAG(int, inflight, 2, "iterations kept in flight");
ABSL_FLAG(int, print_every, 10, "print the loss every N iterations (1: every one)");
ABSL_FLAG(std::string, name, "", "job name (default: mlp-<pid>)");
ABSL_FLAG(int, pause_ms, 0, "host time between a step's result and the next submission (a slow data loader)");
ABSL_FLAG(int, priority, 0, "job priority (higher first under the priority policy)");
ABSL_FLAG(double, reattach_timeout_s, 60,
          "when tandemd goes away, how long to try to re-attach to the job's checkpoint (0: fail at once)");
ABSL_FLAG(int, eval_samples, 2000,
          "held-out samples of the final accuracy, computed on the host (0: skip it; wide MLPs take long)");

namespace {

using tandem::client::HostTensor;
namespace ex = tandem::examples;

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "mlp_train: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

// Forward pass on the host, in double, for the accuracy.
double Accuracy(const ex::MlpShape& shape, const std::vector<std::vector<float>>& params, const std::vector<float>& x,
                const std::vector<int64_t>& y) {
  std::vector<int> widths = shape.Widths();
  int n = static_cast<int>(y.size());
  int correct = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<double> a(x.begin() + static_cast<size_t>(i) * widths[0],
                          x.begin() + static_cast<size_t>(i + 1) * widths[0]);
    for (size_t l = 0; l + 1 < widths.size(); ++l) {
      std::vector<double> z(widths[l + 1]);
      for (int o = 0; o < widths[l + 1]; ++o) {
        double s = params[2 * l + 1][o];
        for (int k = 0; k < widths[l]; ++k) s += a[k] * params[2 * l][static_cast<size_t>(k) * widths[l + 1] + o];
        z[o] = (l + 2 < widths.size()) ? std::max(0.0, s) : s;
      }
      a = std::move(z);
    }
    correct += (std::max_element(a.begin(), a.end()) - a.begin()) == y[i];
  }
  return static_cast<double>(correct) / n;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Trains an MLP through tandemd and prints its progress.");
  absl::ParseCommandLine(argc, argv);
  ex::MlpJobOptions job_options;
  job_options.shape.inputs = absl::GetFlag(FLAGS_inputs);
  job_options.shape.hidden = absl::GetFlag(FLAGS_hidden);
  job_options.shape.layers = absl::GetFlag(FLAGS_layers);
  job_options.shape.classes = absl::GetFlag(FLAGS_classes);
  job_options.batch = absl::GetFlag(FLAGS_batch);
  job_options.momentum = absl::GetFlag(FLAGS_momentum);
  job_options.seed = absl::GetFlag(FLAGS_seed);
  job_options.name = absl::GetFlag(FLAGS_name).empty() ? absl::StrCat("mlp-", ::getpid()) : absl::GetFlag(FLAGS_name);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  const int inflight = std::max(1, absl::GetFlag(FLAGS_inflight));
  const int print_every = std::max(1, absl::GetFlag(FLAGS_print_every));
  if (job_options.batch < 1 || job_options.shape.hidden < 1 || job_options.shape.layers < 0 || iterations < 0) {
    std::fprintf(stderr, "mlp_train: --batch and --hidden must be >= 1, --layers and --iterations >= 0\n");
    return 2;
  }

  tandem::v1::RegisterJobRequest request = ex::BuildMlpTrainingJob(job_options);
  request.mutable_hints()->set_priority(absl::GetFlag(FLAGS_priority));
  request.mutable_hints()->set_expected_iterations(iterations);
  auto registered = tandem::client::ResumableJob::Register(
      {.endpoint = absl::GetFlag(FLAGS_endpoint), .name = job_options.name}, std::move(request),
      absl::Seconds(absl::GetFlag(FLAGS_reattach_timeout_s)));
  if (!registered.ok()) return Fail("register", registered.status());
  tandem::client::ResumableJob& job = **registered;
  const tandem::v1::RegisterJobResponse& info = job.registration();
  std::printf("job %s (id %lu) on %s lane %u: %.1f KiB persistent, %.1f KiB per iteration\n", job_options.name.c_str(),
              static_cast<unsigned long>(info.job_id()), info.device().c_str(), info.lane(),
              info.persistent_bytes() / 1024.0, info.ephemeral_peak_bytes() / 1024.0);
  std::fflush(stdout);

  ex::BlobDataset data(job_options.shape, job_options.seed);
  const float lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  std::vector<float> x;
  std::vector<int64_t> y;
  auto start = std::chrono::steady_clock::now();
  double device_seconds = 0;
  int submitted = 0, finished = 0;
  size_t recoveries = 0;
  while (finished < iterations) {
    while (submitted < iterations && static_cast<int>(job.in_flight()) < inflight) {
      data.NextBatch(job_options.batch, &x, &y);
      tandem::client::NamedTensors feeds{
          {"x", HostTensor::Floats({job_options.batch, job_options.shape.inputs}, x)},
          {"y", HostTensor::Int64s({job_options.batch}, y)},
          {"lr", HostTensor::Floats({}, std::vector<float>{lr})},
      };
      if (absl::Status s = job.Submit(std::move(feeds), {"loss"}); !s.ok()) return Fail("submit", s);
      ++submitted;
    }
    auto result = job.Wait();
    if (!result.ok()) return Fail(absl::StrCat("iteration ", finished), result.status());
    for (; recoveries < job.recoveries().size(); ++recoveries) {
      const tandem::client::Recovery& r = job.recoveries()[recoveries];
      std::printf(
          "re-attached after %.2f s: tandemd restarted; the job resumed from its checkpoint at iteration %lu, "
          "%lu iterations lost\n",
          r.pause_seconds, static_cast<unsigned long>(r.resumed_iterations), static_cast<unsigned long>(r.lost));
    }
    device_seconds += result->run_seconds;
    float loss = result->fetches.at("loss").values<float>()[0];
    if (finished % print_every == 0 || finished + 1 == iterations) {
      std::printf("iter %d loss %.9g\n", finished, loss);
      std::fflush(stdout);
    }
    ++finished;
    if (const int pause = absl::GetFlag(FLAGS_pause_ms); pause > 0 && finished < iterations) {
      std::this_thread::sleep_for(std::chrono::milliseconds(pause));
    }
  }
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Read the trained weights back and measure accuracy on held-out data.
  const int eval_samples = absl::GetFlag(FLAGS_eval_samples);
  double accuracy = 0;
  if (eval_samples > 0) {
    std::vector<std::vector<float>> params;
    for (const std::string& name : ex::MlpParameterNames(job_options.shape)) {
      auto t = job.client().ReadTensor(job.job_id(), name);
      if (!t.ok()) return Fail(absl::StrCat("read ", name), t.status());
      params.push_back(t->values<float>());
    }
    ex::BlobDataset test(job_options.shape, job_options.seed, /*stream=*/1);
    test.NextBatch(eval_samples, &x, &y);
    accuracy = Accuracy(job_options.shape, params, x, y);
  }
  if (absl::Status s = job.client().CloseJob(job.job_id()); !s.ok()) return Fail("close", s);
  std::printf("done: %d iterations in %.2f s (%.2f ms/iter wall, %.2f ms/iter on the device)\n", iterations, wall,
              iterations ? 1e3 * wall / iterations : 0.0, iterations ? 1e3 * device_seconds / iterations : 0.0);
  if (eval_samples > 0) std::printf("final accuracy %.4f on %d held-out samples\n", accuracy, eval_samples);
  return 0;
}
