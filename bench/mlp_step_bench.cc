// mlp_step_bench: times the MLP training step of examples/mlp_train through
// tandemd, the way a client runs it: feeds sent over the socket, several
// iterations in flight, the loss fetched every step.
//
//   mlp_step_bench --endpoint=ipc:///tmp/t/tandemd.sock --inputs=784 --hidden=4096 --layers=4 --batch=256
//
// Prints one JSON object: wall-clock ms per iteration at each in-flight
// depth (the throughput a client sees), and the device time per iteration
// the daemon measured (events around the iteration's kernels). Batches are
// generated before timing and cycled, so the client's own work is not timed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "examples/mlp_train/mlp_graph.h"

ABSL_FLAG(std::string, endpoint, "", "tandemd endpoint");
ABSL_FLAG(int, inputs, 784, "input features");
ABSL_FLAG(int, hidden, 4096, "hidden width");
ABSL_FLAG(int, layers, 4, "hidden layers");
ABSL_FLAG(int, classes, 10, "classes");
ABSL_FLAG(int, batch, 256, "batch size");
ABSL_FLAG(int, iterations, 200, "timed iterations per depth");
ABSL_FLAG(int, warmup, 20, "untimed iterations first");
ABSL_FLAG(std::string, depths, "1,2,3", "in-flight depths to time");

namespace {

using tandem::client::HostTensor;
namespace ex = tandem::examples;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
#ifndef NDEBUG
  std::fprintf(stderr, "mlp_step_bench: WARNING: built without optimization (NDEBUG unset)\n");
#endif
  absl::ParseCommandLine(argc, argv);
  ex::MlpJobOptions o;
  o.shape.inputs = absl::GetFlag(FLAGS_inputs);
  o.shape.hidden = absl::GetFlag(FLAGS_hidden);
  o.shape.layers = absl::GetFlag(FLAGS_layers);
  o.shape.classes = absl::GetFlag(FLAGS_classes);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.name = "mlp-bench";
  auto client = tandem::client::Client::Connect({.endpoint = absl::GetFlag(FLAGS_endpoint), .name = "mlp-bench"});
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  auto job = (*client)->RegisterJob(ex::BuildMlpTrainingJob(o));
  if (!job.ok()) {
    std::fprintf(stderr, "register: %s\n", job.status().ToString().c_str());
    return 1;
  }
  ex::BlobDataset data(o.shape, 1);
  std::vector<tandem::client::NamedTensors> batches;
  for (int i = 0; i < 4; ++i) {
    std::vector<float> x;
    std::vector<int64_t> y;
    data.NextBatch(o.batch, &x, &y);
    batches.push_back({{"x", HostTensor::Floats({o.batch, o.shape.inputs}, x)},
                       {"y", HostTensor::Int64s({o.batch}, y)},
                       {"lr", HostTensor::Floats({}, std::vector<float>{0.01f})}});
  }
  auto run = [&](int count, int depth, std::vector<double>* device_s) -> bool {
    std::deque<uint64_t> tickets;
    int sent = 0, done = 0;
    while (done < count) {
      while (sent < count && static_cast<int>(tickets.size()) < depth) {
        auto t = (*client)->SubmitIteration(job->job_id(), batches[sent % batches.size()], {"loss"});
        if (!t.ok()) return false;
        tickets.push_back(*t);
        ++sent;
      }
      auto r = (*client)->WaitIteration(tickets.front());
      tickets.pop_front();
      if (!r.ok()) {
        std::fprintf(stderr, "iteration: %s\n", r.status().ToString().c_str());
        return false;
      }
      if (device_s != nullptr) device_s->push_back(r->run_seconds);
      ++done;
    }
    return true;
  };
  if (!run(absl::GetFlag(FLAGS_warmup), 2, nullptr)) return 1;
  std::vector<std::string> rows;
  const int iters = absl::GetFlag(FLAGS_iterations);
  for (absl::string_view d : absl::StrSplit(absl::GetFlag(FLAGS_depths), ',')) {
    int depth = std::stoi(std::string(d));
    std::vector<double> device_s;
    auto start = std::chrono::steady_clock::now();
    if (!run(iters, depth, &device_s)) return 1;
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rows.push_back(absl::StrCat("{\"inflight\": ", depth, ", \"wall_ms_per_iter\": ", 1e3 * wall / iters,
                                ", \"device_ms_median\": ", 1e3 * Median(device_s), "}"));
    std::fprintf(stderr, "inflight %d: %.3f ms/iter wall, %.3f ms/iter on the device (median)\n", depth,
                 1e3 * wall / iters, 1e3 * Median(device_s));
  }
  std::printf(
      "{\"model\": \"mlp %d-%dx%d-%d\", \"batch\": %d, \"device\": \"%s\", \"iterations\": %d, \"tandem\": [%s]}\n",
      o.shape.inputs, o.shape.hidden, o.shape.layers, o.shape.classes, o.batch, job->device().c_str(), iters,
      absl::StrJoin(rows, ", ").c_str());
  (void)(*client)->CloseJob(job->job_id());
  return 0;
}
