// Op-granularity preemption in a real tandemd on the CPU device
// (policy=priority): a best-effort training iteration runs in segments and
// pauses while a high-priority job's burst of iterations runs, so the burst
// finishes first; with preemption=iteration the best-effort iteration runs
// through beside it and finishes first. Either way every loss equals the
// loss of the same job run alone, bit for bit. A paused iteration does not
// keep its job alive: closing the job, the client vanishing and the daemon
// shutting down each release it at once.
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "examples/mlp_train/mlp_graph.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/service/service_test_util.h"

namespace tandem::testing {
namespace {

using Clock = std::chrono::steady_clock;

// The jobs: MLPs of 64 inputs, 160 hidden features, 10 classes, batch 96,
// differing only in depth. The best-effort one has 16 layers: about 140 nodes
// (18 segments of 8), about 100 ms an iteration on the CPU device. The
// high-priority one has 3: a short iteration (about 20 ms), so a burst of
// kBurst of them outlasts a best-effort iteration several times.
examples::MlpJobOptions MlpJob(const std::string& name, int layers, uint64_t seed) {
  examples::MlpJobOptions o;
  o.shape.inputs = 64;
  o.shape.hidden = 160;
  o.shape.layers = layers;
  o.shape.classes = 10;
  o.batch = 96;
  o.seed = seed;
  o.name = name;
  return o;
}
examples::MlpJobOptions BestEffortJob() { return MlpJob("best-effort", 16, 3); }
examples::MlpJobOptions HighPriorityJob() { return MlpJob("high", 3, 8); }

constexpr int kBestEffortPriority = 0;
constexpr int kHighPriority = 10;
constexpr int kBurst = 40;  // high-priority iterations submitted at once

// One training client: a job, and its batches in order.
class Trainer {
 public:
  Trainer(const std::string& endpoint, const examples::MlpJobOptions& options, int priority, int iterations)
      : options_(options) {
    auto c = client::Client::Connect({.endpoint = endpoint, .name = options.name});
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return;
    client_ = *std::move(c);
    v1::RegisterJobRequest reg = examples::BuildMlpTrainingJob(options);
    reg.mutable_hints()->set_priority(priority);
    auto job = client_->RegisterJob(std::move(reg));
    EXPECT_TRUE(job.ok()) << job.status();
    if (job.ok()) job_ = job->job_id();
    examples::BlobDataset data(options.shape, options.seed);
    batches_.resize(iterations);
    for (Batch& b : batches_) data.NextBatch(options.batch, &b.x, &b.y);
  }

  uint64_t Submit(int i) {
    if (!ready()) return 0;  // the constructor reported why
    const Batch& b = batches_[i];
    client::NamedTensors feeds{{"x", client::HostTensor::Floats({options_.batch, options_.shape.inputs}, b.x)},
                               {"y", client::HostTensor::Int64s({options_.batch}, b.y)},
                               {"lr", client::HostTensor::Floats({}, std::vector<float>{0.02f})}};
    auto ticket = client_->SubmitIteration(job_, feeds, {"loss"}, i);
    EXPECT_TRUE(ticket.ok()) << ticket.status();
    return ticket.ok() ? *ticket : 0;
  }
  absl::StatusOr<float> Wait(uint64_t ticket) {
    if (!ready()) return absl::FailedPreconditionError("the trainer has no job");
    auto r = client_->WaitIteration(ticket);
    if (!r.ok()) return r.status();
    run_seconds_ += r->run_seconds;
    return r->fetches.at("loss").values<float>()[0];
  }
  // The device time of the iterations waited for so far.
  double run_seconds() const { return run_seconds_; }
  // Runs iterations [0, n) one after another; their losses.
  std::vector<float> Run(int n) {
    std::vector<float> losses;
    for (int i = 0; i < n; ++i) {
      auto loss = Wait(Submit(i));
      EXPECT_TRUE(loss.ok()) << loss.status();
      losses.push_back(loss.ok() ? *loss : -1.0f);
    }
    return losses;
  }

  client::Client& client() { return *client_; }
  uint64_t job() const { return job_; }
  // Connected and registered (else the constructor reported why).
  bool ready() const { return client_ != nullptr && job_ != 0; }
  std::unique_ptr<client::Client> TakeClient() { return std::move(client_); }

 private:
  struct Batch {
    std::vector<float> x;
    std::vector<int64_t> y;
  };
  examples::MlpJobOptions options_;
  std::unique_ptr<client::Client> client_;
  uint64_t job_ = 0;
  std::vector<Batch> batches_;
  double run_seconds_ = 0;
};

// The losses of each job run alone: its first iterations in a daemon with no
// other job.
struct SoloLosses {
  std::vector<float> best_effort;  // 2 iterations
  std::vector<float> high;         // kBurst iterations
};

const SoloLosses& Solo() {
  static const SoloLosses* solo = [] {
    auto* s = new SoloLosses;
    DaemonProcess daemon({"--policy=priority"});
    {
      Trainer be(daemon.endpoint(), BestEffortJob(), kBestEffortPriority, 2);
      s->best_effort = be.Run(2);
    }
    {
      Trainer high(daemon.endpoint(), HighPriorityJob(), kHighPriority, kBurst);
      s->high = high.Run(kBurst);
    }
    return s;
  }();
  return *solo;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// A daemon under policy=priority with the given preemption and a metrics
// endpoint.
class PriorityDaemon {
 public:
  explicit PriorityDaemon(const std::string& preemption, std::vector<std::string> extra = {})
      : port_(FreeTcpPort()), daemon_(Flags(preemption, port_, std::move(extra))) {}

  const std::string& endpoint() const { return daemon_.endpoint(); }
  DaemonProcess& process() { return daemon_; }
  std::map<std::string, double> Metrics() { return ParsePrometheus(HttpGet(port_, "/metrics")); }
  double Metric(const std::string& key) {
    auto m = Metrics();
    auto it = m.find(key);
    return it == m.end() ? -1 : it->second;
  }
  // Waits until `key` is at least `value`; false after 20 s.
  bool WaitMetricAtLeast(const std::string& key, double value) {
    for (int i = 0; i < 2000; ++i) {
      if (Metric(key) >= value) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

 private:
  static std::vector<std::string> Flags(const std::string& preemption, int port, std::vector<std::string> extra) {
    std::vector<std::string> flags{"--policy=priority", "--preemption=" + preemption, "--preemption_segment_nodes=8",
                                   absl::StrCat("--metrics_port=", port)};
    for (auto& f : extra) flags.push_back(std::move(f));
    return flags;
  }
  int port_;
  DaemonProcess daemon_;
};

// Waits until some lane of the daemon has an iteration on its stream.
void WaitForRunningIteration(client::Client& client) {
  for (int i = 0; i < 2000; ++i) {
    auto stats = client.Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    for (const v1::LaneInfo& lane : stats->devices(0).lane_info()) {
      if (lane.running_iterations() > 0) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  FAIL() << "no iteration started";
}

class Preemption : public ::testing::TestWithParam<std::string> {};

TEST_P(Preemption, HighPriorityBurstAgainstARunningBestEffortIteration) {
  const SoloLosses& solo = Solo();
  ASSERT_EQ(solo.best_effort.size(), 2u);
  const bool op = GetParam() == "op";
  PriorityDaemon daemon(GetParam());
  Trainer be(daemon.endpoint(), BestEffortJob(), kBestEffortPriority, 2);
  Trainer high(daemon.endpoint(), HighPriorityJob(), kHighPriority, kBurst);
  ASSERT_TRUE(be.ready() && high.ready()) << daemon.process().Log();

  // The best-effort job's two iterations, submitted at once; the time its
  // first one completes.
  const Clock::time_point submitted = Clock::now();
  const uint64_t be0 = be.Submit(0);
  const uint64_t be1 = be.Submit(1);
  auto be_first = std::async(std::launch::async, [&] {
    auto loss = be.Wait(be0);
    return std::make_pair(loss, Clock::now());
  });
  ASSERT_NO_FATAL_FAILURE(WaitForRunningIteration(high.client()));
  // The burst arrives while it runs.
  std::vector<uint64_t> tickets;
  for (int i = 0; i < kBurst; ++i) tickets.push_back(high.Submit(i));
  std::vector<float> high_losses;
  for (uint64_t t : tickets) {
    auto loss = high.Wait(t);
    ASSERT_TRUE(loss.ok()) << loss.status();
    high_losses.push_back(*loss);
  }
  const Clock::time_point burst_done = Clock::now();
  auto [be_loss0, be_done] = be_first.get();
  ASSERT_TRUE(be_loss0.ok()) << be_loss0.status();
  auto be_loss1 = be.Wait(be1);
  ASSERT_TRUE(be_loss1.ok()) << be_loss1.status();
  // When each finished, in ms since the best-effort iterations were submitted.
  const double burst_ms = std::chrono::duration<double, std::milli>(burst_done - submitted).count();
  const double be_ms = std::chrono::duration<double, std::milli>(be_done - submitted).count();
  std::printf(
      "preemption=%s: best-effort iterations %.1f ms of device time each, high-priority %.1f ms; the "
      "burst ended %.1f ms %s the first best-effort iteration; %g yields, %g segments, %.3f ms between "
      "segments\n",
      GetParam().c_str(), be.run_seconds() / 2 * 1e3, high.run_seconds() / kBurst * 1e3, std::abs(be_ms - burst_ms),
      burst_ms < be_ms ? "before" : "after", daemon.Metric("tandem_iteration_yields_total"),
      daemon.Metric("tandem_device_segments_total{device=\"cpu\"}"),
      daemon.Metric("tandem_device_segment_gap_seconds_total{device=\"cpu\"}") * 1e3);

  if (op) {
    // It paused for the whole burst, and ran in segments.
    EXPECT_LT(burst_ms, be_ms) << "the best-effort iteration finished before the high-priority burst";
    EXPECT_GE(daemon.Metric("tandem_iteration_yields_total"), 1);
    EXPECT_GE(daemon.Metric(absl::StrCat("tandem_job_iteration_yields_total{job_id=\"", be.job(),
                                         "\",name=\"best-effort\",device=\"cpu\"}")),
              1);
    EXPECT_EQ(daemon.Metric(absl::StrCat("tandem_job_iteration_yields_total{job_id=\"", high.job(),
                                         "\",name=\"high\",device=\"cpu\"}")),
              0);
    EXPECT_GT(daemon.Metric("tandem_device_segments_total{device=\"cpu\"}"), 0);
    // The device's journal has the segmented iteration, with its pauses,
    // its device time, and a span that holds its pauses too.
    auto stats = high.client().Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    int segmented = 0, paused = 0;
    for (const v1::DeviceEvent& e : stats->devices(0).events()) {
      if (e.kind() != "segmented") continue;
      EXPECT_EQ(e.job(), be.job());
      EXPECT_GT(e.run_seconds(), 0);
      EXPECT_GE(e.seconds(), e.run_seconds());
      ++segmented;
      paused += e.pauses();
    }
    EXPECT_GE(segmented, 1);
    EXPECT_GE(paused, 1);
  } else {
    // It ran through beside the burst.
    EXPECT_LT(be_ms, burst_ms) << "the burst overtook the best-effort iteration without op preemption";
    EXPECT_EQ(daemon.Metric("tandem_iteration_yields_total"), 0);
    EXPECT_EQ(daemon.Metric("tandem_device_segments_total{device=\"cpu\"}"), 0);
  }
  // Each lane's busy time is its share of the device's, and lies within the
  // wall time the lane had iterations enqueued.
  double lanes_busy = 0;
  for (int lane = 0; lane < 4; ++lane) {
    const std::string labels = absl::StrCat("{device=\"cpu\",lane=\"", lane, "\"}");
    const double busy = daemon.Metric(absl::StrCat("tandem_lane_busy_seconds_total", labels));
    if (busy >= 0) lanes_busy += busy;
    const double occupied = daemon.Metric(absl::StrCat("tandem_lane_occupied_seconds_total", labels));
    if (busy > 0) {
      EXPECT_GE(occupied, busy * 0.99) << "lane " << lane;
      EXPECT_LT(occupied, daemon.Metric("tandem_uptime_seconds")) << "lane " << lane;
    }
  }
  // Each lane that ran iterations had an enqueuing thread of its own
  // (server/executor.h), which ran at least its iterations and was busy
  // for part of the daemon's life.
  int lanes_used = 0;
  for (int lane = 0; lane < 4; ++lane) {
    const std::string labels = absl::StrCat("{device=\"cpu\",lane=\"", lane, "\"}");
    if (daemon.Metric(absl::StrCat("tandem_lane_busy_seconds_total", labels)) <= 0) continue;
    ++lanes_used;
    const std::string executor = absl::StrCat("{device=\"cpu\",executor=\"cpu/", lane, "\"}");
    EXPECT_GT(daemon.Metric(absl::StrCat("tandem_executor_items_total", executor)), 0) << "lane " << lane;
    const double busy = daemon.Metric(absl::StrCat("tandem_executor_busy_seconds_total", executor));
    EXPECT_GT(busy, 0) << "lane " << lane;
    EXPECT_LT(busy, daemon.Metric("tandem_uptime_seconds")) << "lane " << lane;
    EXPECT_GE(daemon.Metric(absl::StrCat("tandem_executor_wait_seconds_total", executor)), 0) << "lane " << lane;
  }
  EXPECT_GE(lanes_used, 2) << "the best-effort and high-priority jobs ran in one lane";
  const double device_busy = daemon.Metric("tandem_device_busy_seconds_total{device=\"cpu\"}");
  EXPECT_GT(lanes_busy, 0);
  EXPECT_NEAR(lanes_busy, device_busy, 1e-6 + 1e-6 * device_busy);
  // The control loop ran every request it received, and its busy time is
  // a part of the daemon's life.
  const double handled = daemon.Metric("tandem_loop_handled_total{handler=\"Transport.OnMessage\"}");
  EXPECT_GE(handled, daemon.Metric("tandem_requests_total"));
  EXPECT_GT(handled, 0);
  const double loop_busy = daemon.Metric("tandem_loop_busy_seconds_total{handler=\"Transport.OnMessage\"}");
  EXPECT_GT(loop_busy, 0);
  EXPECT_LT(loop_busy, daemon.Metric("tandem_uptime_seconds"));
  // Every request waited some time in the queue (at least the loop thread's
  // wake-up), and not longer than the daemon has lived.
  const double message_wait = daemon.Metric("tandem_loop_wait_seconds_total{handler=\"Transport.OnMessage\"}");
  EXPECT_GT(message_wait, 0);
  EXPECT_LT(message_wait / handled, daemon.Metric("tandem_uptime_seconds"));
  // An iteration end's sections lie inside the time of the handlers that
  // end iterations (one snapshot: the daemon may still be answering).
  const std::map<std::string, double> m = daemon.Metrics();
  auto value = [&m](const std::string& key) {
    auto it = m.find(key);
    return it == m.end() ? 0.0 : it->second;
  };
  double ends = 0;
  for (const char* handler : {"Executor.OnIterationDone", "Executor.OnSegmentDone", "Service.EndParkedIteration"}) {
    ends += value(absl::StrCat("tandem_loop_busy_seconds_total{handler=\"", handler, "\"}"));
  }
  double sections = 0;
  for (const char* part : {"event reads", "reply", "scheduler", "rebalance", "dispatch"}) {
    const double t = value(absl::StrCat("tandem_loop_section_seconds_total{section=\"IterationEnd/", part, "\"}"));
    EXPECT_GT(t, 0) << part;
    sections += t;
  }
  EXPECT_GT(ends, 0);
  EXPECT_LE(sections, ends * 1.0001 + 1e-6);
  // Results as if each job ran alone.
  EXPECT_TRUE(SameBits(*be_loss0, solo.best_effort[0])) << *be_loss0 << " vs " << solo.best_effort[0];
  EXPECT_TRUE(SameBits(*be_loss1, solo.best_effort[1])) << *be_loss1 << " vs " << solo.best_effort[1];
  for (int i = 0; i < kBurst; ++i) {
    EXPECT_TRUE(SameBits(high_losses[i], solo.high[i]))
        << "iteration " << i << ": " << high_losses[i] << " vs " << solo.high[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Granularity, Preemption, ::testing::Values("op", "iteration"),
                         [](const auto& info) { return info.param; });

// A best-effort iteration parked behind a running high-priority burst,
// with the burst's tickets.
struct ParkedScene {
  std::unique_ptr<Trainer> be;
  std::unique_ptr<Trainer> high;
  uint64_t be_ticket = 0;
  std::vector<uint64_t> burst;
};

void Park(PriorityDaemon& daemon, ParkedScene* scene) {
  scene->be = std::make_unique<Trainer>(daemon.endpoint(), BestEffortJob(), kBestEffortPriority, 1);
  scene->high = std::make_unique<Trainer>(daemon.endpoint(), HighPriorityJob(), kHighPriority, kBurst);
  ASSERT_TRUE(scene->be->ready() && scene->high->ready()) << daemon.process().Log();
  scene->be_ticket = scene->be->Submit(0);
  ASSERT_NO_FATAL_FAILURE(WaitForRunningIteration(scene->high->client()));
  for (int i = 0; i < kBurst; ++i) scene->burst.push_back(scene->high->Submit(i));
  ASSERT_TRUE(daemon.WaitMetricAtLeast("tandem_iteration_yields_total", 1)) << daemon.process().Log();
}

// Iterations of the burst not completed yet (tandem_job_iterations_total
// of the high-priority job).
double BurstLeft(PriorityDaemon& daemon, const Trainer& high) {
  return kBurst - daemon.Metric(absl::StrCat("tandem_job_iterations_total{job_id=\"", high.job(),
                                             "\",name=\"high\",device=\"cpu\"}"));
}

TEST(ParkedIteration, ClosingItsJobCancelsItAtOnce) {
  PriorityDaemon daemon("op");
  ParkedScene scene;
  ASSERT_NO_FATAL_FAILURE(Park(daemon, &scene));
  ASSERT_TRUE(scene.be->client().CloseJob(scene.be->job()).ok());
  // Closed while the burst still runs: the pause did not hold the job.
  EXPECT_GT(BurstLeft(daemon, *scene.high), 0);
  auto be = scene.be->Wait(scene.be_ticket);
  EXPECT_EQ(be.status().code(), absl::StatusCode::kCancelled) << be.status();
  auto stats = scene.high->client().Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->jobs(), 1u);
  for (uint64_t t : scene.burst) {
    auto loss = scene.high->Wait(t);
    ASSERT_TRUE(loss.ok()) << loss.status();
  }
  // The lane took other work: a new best-effort job trains as if alone.
  Trainer next(daemon.endpoint(), BestEffortJob(), kBestEffortPriority, 1);
  std::vector<float> losses = next.Run(1);
  EXPECT_TRUE(SameBits(losses[0], Solo().best_effort[0])) << losses[0] << " vs " << Solo().best_effort[0];
}

TEST(ParkedIteration, ClientVanishingReleasesItsJob) {
  PriorityDaemon daemon("op");
  ParkedScene scene;
  ASSERT_NO_FATAL_FAILURE(Park(daemon, &scene));
  const uint64_t persistent_before = [&] {
    auto stats = scene.high->client().Stats();
    return stats.ok() ? stats->devices(0).persistent_bytes() : 0;
  }();
  scene.be->TakeClient().reset();  // closes its session with a parked iteration
  bool released = false;
  for (int i = 0; i < 500 && !released; ++i) {
    auto stats = scene.high->client().Stats();
    ASSERT_TRUE(stats.ok());
    released = stats->jobs() == 1 && stats->devices(0).persistent_bytes() < persistent_before;
    if (!released) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_TRUE(released) << daemon.process().Log();
  EXPECT_GT(BurstLeft(daemon, *scene.high), 0) << "released only once the burst ended";
  for (uint64_t t : scene.burst) EXPECT_TRUE(scene.high->Wait(t).ok());
}

TEST(ParkedIteration, DaemonShutsDownCleanly) {
  PriorityDaemon daemon("op");
  ParkedScene scene;
  ASSERT_NO_FATAL_FAILURE(Park(daemon, &scene));
  const Clock::time_point asked = Clock::now();
  const int status = daemon.process().Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << daemon.process().Log();
  EXPECT_LT(Clock::now() - asked, std::chrono::seconds(8));
  // The clients learn that the daemon is gone instead of waiting forever.
  EXPECT_FALSE(scene.be->Wait(scene.be_ticket).ok());
}

}  // namespace
}  // namespace tandem::testing
