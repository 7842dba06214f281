// request_rate_bench: how many tiny iterations per second tandemd turns
// around, and how long each waits: the inference-hosting regime, where many
// small models each send one short iteration per request and the daemon's
// own work per request (receive, parse, schedule, launch, complete, reply)
// is what limits the count of models it serves.
//
//   request_rate_bench --endpoint=ipc:///tmp/t/tandemd.sock --clients=8 --jobs_per_client=4 --depth=2
//
// Each of `clients` threads opens a session with `jobs_per_client` jobs of a
// small graph (x[batch, width] @ w[width, width] -> relu, the result
// fetched; `shapes` distinct widths, so as many interference keys) and
// keeps `depth` iterations of each job in flight for `seconds`
// (after `warmup_s`). Prints one JSON object: iterations per second, the
// latency from submit to result (p50, p99), and the mean device time per
// iteration the daemon reported.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/graph_builder.h"

ABSL_FLAG(std::string, endpoint, "", "tandemd endpoint");
ABSL_FLAG(int, clients, 8, "client sessions, one thread each");
ABSL_FLAG(int, jobs_per_client, 4, "jobs per session");
ABSL_FLAG(int, depth, 2, "iterations of each job in flight");
ABSL_FLAG(int, batch, 1, "rows of x");
ABSL_FLAG(int, width, 64, "columns of x, and w is width x width");
ABSL_FLAG(int, shapes, 1,
          "distinct graphs: job k is width + 16 * (k % shapes) wide, so the scheduler sees that many "
          "interference keys");
ABSL_FLAG(double, seconds, 3.0, "timed seconds");
ABSL_FLAG(double, warmup_s, 0.5, "untimed seconds first");

namespace {

using tandem::client::Client;
using tandem::client::GraphBuilder;
using tandem::client::HostTensor;
using Clock = std::chrono::steady_clock;

tandem::v1::RegisterJobRequest TinyJob(int id, int64_t batch, int64_t width) {
  GraphBuilder b(absl::StrCat("tiny-", id));
  std::string x = b.Feed("x", tandem::v1::FLOAT32, {batch, width});
  std::vector<float> w(width * width);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 7 + id) % 13) / 13.0f - 0.5f;
  std::string wv = b.Persistent("w", HostTensor::Floats({width, width}, w));
  std::string y = b.Op("mm", {x, wv}, {}, "xw");
  y = b.Op("relu", {y}, {}, "y");
  b.Fetch(y);
  return std::move(b).Build();
}

struct Totals {
  std::mutex mu;
  std::vector<double> latency_ms;
  double run_seconds = 0;
  int64_t iterations = 0;
  std::string error;
};

void RunClient(int index, Clock::time_point start, Clock::time_point end, Totals* totals) {
  const int jobs = absl::GetFlag(FLAGS_jobs_per_client), depth = absl::GetFlag(FLAGS_depth);
  const int64_t batch = absl::GetFlag(FLAGS_batch);
  const int shapes = std::max(1, absl::GetFlag(FLAGS_shapes));
  std::vector<int64_t> widths;
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(totals->mu);
    if (totals->error.empty()) totals->error = what;
  };
  auto client = Client::Connect({.endpoint = absl::GetFlag(FLAGS_endpoint), .name = absl::StrCat("rate-", index)});
  if (!client.ok()) return fail(client.status().ToString());
  std::vector<uint64_t> ids;
  for (int j = 0; j < jobs; ++j) {
    const int k = index * jobs + j;
    widths.push_back(absl::GetFlag(FLAGS_width) + 16 * (k % shapes));
    auto job = (*client)->RegisterJob(TinyJob(k, batch, widths.back()));
    if (!job.ok()) return fail(job.status().ToString());
    ids.push_back(job->job_id());
  }
  std::vector<tandem::client::NamedTensors> feeds;
  for (int64_t w : widths) {
    std::vector<float> x(batch * w, 0.5f);
    feeds.push_back({{"x", HostTensor::Floats({batch, w}, x)}});
  }
  struct InFlight {
    uint64_t ticket;
    Clock::time_point sent;
    int job;
  };
  std::deque<InFlight> pending;
  auto submit = [&](int j) {
    auto t = (*client)->SubmitIteration(ids[j], feeds[j], {"y"});
    if (!t.ok()) return fail(t.status().ToString()), false;
    pending.push_back({*t, Clock::now(), j});
    return true;
  };
  for (int d = 0; d < depth; ++d)
    for (int j = 0; j < jobs; ++j)
      if (!submit(j)) return;
  std::vector<double> latency;
  double run_seconds = 0;
  int64_t count = 0;
  while (!pending.empty()) {
    InFlight f = pending.front();
    pending.pop_front();
    auto r = (*client)->WaitIteration(f.ticket);
    if (!r.ok()) return fail(r.status().ToString());
    const Clock::time_point now = Clock::now();
    if (f.sent >= start && now <= end) {
      latency.push_back(std::chrono::duration<double, std::milli>(now - f.sent).count());
      run_seconds += r->run_seconds;
      ++count;
    }
    if (now < end && !submit(f.job)) return;
  }
  std::lock_guard<std::mutex> lock(totals->mu);
  totals->latency_ms.insert(totals->latency_ms.end(), latency.begin(), latency.end());
  totals->run_seconds += run_seconds;
  totals->iterations += count;
}

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const auto start = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(absl::GetFlag(FLAGS_warmup_s)));
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  Totals totals;
  std::vector<std::thread> threads;
  for (int c = 0; c < absl::GetFlag(FLAGS_clients); ++c) threads.emplace_back(RunClient, c, start, end, &totals);
  for (auto& t : threads) t.join();
  if (!totals.error.empty()) {
    std::fprintf(stderr, "request_rate_bench: %s\n", totals.error.c_str());
    return 1;
  }
  const double p50 = Percentile(totals.latency_ms, 0.5), p99 = Percentile(totals.latency_ms, 0.99);
  std::printf(
      "{\"clients\": %d, \"jobs_per_client\": %d, \"depth\": %d, \"batch\": %d, \"width\": %d, \"shapes\": %d, "
      "\"seconds\": %.2f, "
      "\"iterations\": %lld, \"iterations_per_s\": %.1f, \"latency_ms\": {\"p50\": %.3f, \"p99\": %.3f}, "
      "\"device_ms_mean\": %.4f}\n",
      absl::GetFlag(FLAGS_clients), absl::GetFlag(FLAGS_jobs_per_client), absl::GetFlag(FLAGS_depth),
      absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_width), absl::GetFlag(FLAGS_shapes), seconds,
      static_cast<long long>(totals.iterations), totals.iterations / seconds, p50, p99,
      totals.iterations ? totals.run_seconds / totals.iterations * 1e3 : 0.0);
  return 0;
}
