// DeviceDispatcher driven through its interface on the CPU device, with a
// fake DispatcherHost in place of Service: an iteration queued with the
// scheduler is dispatched, runs on a lane's executor and is answered
// through the host (reply, OnIterationReplied, OnDeviceWorkDone); a read
// gets a persistent tensor's bytes; under PRIORITY with preemption=op a
// lower-priority job's iteration runs in segments, and so does PACK's solo
// probe of a newcomer beside a job that has run; nothing is dispatched
// while the host shuts down.
#include "server/device_dispatcher.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "compiler/compile_job.h"
#include "device/cpu_device.h"
#include "examples/mlp_train/mlp_graph.h"
#include "gtest/gtest.h"
#include "kernels/program.h"

namespace tandem::server {
namespace {

constexpr int kBatch = 4;

// A training job of 3 hidden layers: enough nodes for several segments.
const examples::MlpShape kShape{.inputs = 6, .hidden = 10, .layers = 3, .classes = 4};

// The service's side, recorded: replies by request id, and the calls.
class FakeHost : public DispatcherHost {
 public:
  explicit FakeHost(EventLoop& loop) : loop_(loop) {}

  const DaemonOptions& Options() const override { return options; }
  bool ShuttingDown() const override { return shutting_down; }
  Job* JobById(uint64_t id) override {
    auto it = jobs.find(id);
    return it == jobs.end() ? nullptr : it->second.get();
  }
  void ForEachJob(absl::FunctionRef<bool(Job&)> fn) override {
    for (const auto& [id, job] : jobs) {
      if (!fn(*job)) return;
    }
  }
  void MaybeFinishClose(Job& job) override { finish_close_calls++; }
  ServiceMeasurements& Measurements() override { return measurements; }
  void OnDeviceWorkDone(uint64_t job_id) override {
    if (Job* job = JobById(job_id); job != nullptr) job->device_work--;
  }
  void OnIterationReplied(Job& job) override { iterations_replied++; }
  void Reply(const PendingReply& to, v1::Response response) override {
    responses[to.request_id] = std::move(response);
    MaybeStop();
  }
  void ReplyError(const PendingReply& to, const absl::Status& status) override {
    errors[to.request_id] = status;
    MaybeStop();
  }
  // Built here, on the loop: the service's thread for it is the service's.
  void ReplyBuiltOffLoop(const PendingReply& to, std::function<v1::Response()> build,
                         std::function<void()> then) override {
    replies_built++;
    Reply(to, build());
    then();
  }
  void OnDeviceFault(Job&, const PendingReply& to, uint64_t, const absl::Status& status) override {
    ReplyError(to, status);
  }

  // Stops the loop once `n` requests are answered.
  void StopAfter(size_t n) { stop_after_ = n; }

  DaemonOptions options;
  bool shutting_down = false;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Job>> jobs;
  ServiceMeasurements measurements;
  absl::flat_hash_map<uint64_t, v1::Response> responses;
  absl::flat_hash_map<uint64_t, absl::Status> errors;
  int iterations_replied = 0;
  int replies_built = 0;  // replies built by ReplyBuiltOffLoop
  int finish_close_calls = 0;

 private:
  void MaybeStop() {
    if (responses.size() + errors.size() >= stop_after_) loop_.Stop();
  }
  EventLoop& loop_;
  size_t stop_after_ = 1;
};

class DeviceDispatcherTest : public ::testing::Test {
 protected:
  // A dispatcher for a CPU device under `policy` (and its preemption).
  void Open(const std::string& policy, const std::string& preemption) {
    host_.options.policy = policy;
    host_.options.preemption = preemption;
    host_.options.preemption_segment_nodes = 4;
    auto rt = std::make_unique<DeviceRuntime>();
    auto device = device::CreateCpuDevice({});
    ASSERT_TRUE(device.ok()) << device.status();
    auto memory = memory::DeviceMemory::Create(**device, {});
    ASSERT_TRUE(memory.ok()) << memory.status();
    rt->memory = *std::move(memory);
    auto scheduler = sched::CreateScheduler(
        {.policy = policy, .preemption = preemption, .lookahead = host_.options.max_inflight_per_lane - 1});
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    rt->scheduler = *std::move(scheduler);
    rt->device = *std::move(device);
    dispatcher_ = std::make_unique<DeviceDispatcher>(std::move(rt), host_, loop_);
  }

  // A running MLP training job of `priority`, admitted into memory, a lane
  // and the scheduler as Service::Admit does, its initial values uploaded.
  Job& AddJob(uint64_t id, int priority) {
    DeviceRuntime& dev = dispatcher_->runtime();
    v1::RegisterJobRequest reg = examples::BuildMlpTrainingJob({.shape = kShape, .batch = kBatch});
    auto compiled = CompileJob(reg);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    auto job = std::make_unique<Job>();
    job->id = id;
    job->name = absl::StrCat("mlp", id);
    job->device = &dev;
    job->hints.set_priority(priority);
    job->graph = std::make_unique<Graph>(std::move(compiled->graph));
    job->layout = std::move(compiled->layout);
    auto program = CreateProgram(*job->graph, *dev.device);
    EXPECT_TRUE(program.ok()) << program.status();
    job->program = *std::move(program);
    memory::JobMemoryRequest mem;
    mem.job = id;
    mem.name = job->name;
    for (int v : job->graph->persistents) mem.persistent_bytes.push_back(job->graph->values[v].type.bytes());
    mem.ephemeral_bytes = job->ArenaBytes();
    auto grant = dev.memory->Admit(mem);
    EXPECT_TRUE(grant.ok()) << grant.status();
    job->lane = grant->lane;
    job->persistent = grant->persistent;
    EXPECT_TRUE(dispatcher_->EnsureLane(job->lane).ok());
    sched::JobParams params;
    params.priority = priority;
    params.lane = job->lane;
    EXPECT_TRUE(dev.scheduler->AddJob(id, params).ok());
    dispatcher_->JournalArenaMoves(id);
    for (int i = 0; i < reg.persistent_size(); ++i) {
      const v1::Tensor& t = reg.persistent(i);
      std::memcpy(job->persistent[i], t.data().data(), t.data().size());
    }
    EXPECT_TRUE(job->state.MoveTo(JobState::kUploading).ok());
    EXPECT_TRUE(job->state.MoveTo(JobState::kRunning).ok());
    Job& raw = *job;
    host_.jobs[id] = std::move(job);
    return raw;
  }

  // Queues an iteration of `job` (feeds inline, fetching the loss) as
  // Service::OnRunIteration does; answered under `request_id`.
  void Queue(Job& job, uint64_t request_id) {
    auto request = std::make_shared<v1::Request>();
    v1::RunIterationRequest* run = request->mutable_run_iteration();
    run->set_job_id(job.id);
    run->set_iteration(request_id);
    auto feed = [&](const std::string& name, const void* data, size_t bytes) {
      v1::Tensor* t = run->add_feeds();
      t->mutable_spec()->set_name(name);
      t->set_data(data, bytes);
    };
    std::vector<float> x(kBatch * kShape.inputs, 0.5f);
    std::vector<int64_t> y(kBatch, 1);
    const float lr = 0.01f;
    feed("x", x.data(), x.size() * sizeof(float));
    feed("y", y.data(), y.size() * sizeof(int64_t));
    feed("lr", &lr, sizeof(lr));
    run->add_fetches("loss");
    const uint64_t ticket = next_ticket_++;
    ASSERT_TRUE(dispatcher_->runtime().scheduler->Enqueue(job.id, ticket).ok());
    QueuedIteration it;
    it.reply = PendingReply{"peer", request_id};
    it.request = request;
    it.regions.resize(run->feeds_size());
    it.enqueued = Clock::now();
    job.queued.emplace(ticket, std::move(it));
    job.received++;
  }

  // Runs the loop until `n` requests are answered.
  void RunUntilAnswered(size_t n) {
    host_.StopAfter(n);
    loop_.context().restart();  // after an earlier run's Stop
    loop_.Run();
  }

  // As Service's shutdown: the executors stop, then the jobs go (their
  // memory released), then the page-locked buffers; the device last.
  void TearDown() override {
    if (dispatcher_ == nullptr) return;
    dispatcher_->StopExecutors();
    for (auto& [id, job] : host_.jobs) dispatcher_->runtime().memory->Release(id);
    host_.jobs.clear();
    dispatcher_->FreeHostBuffers();
  }

  EventLoop loop_;
  FakeHost host_{loop_};
  std::unique_ptr<DeviceDispatcher> dispatcher_;
  uint64_t next_ticket_ = 1;
};

TEST_F(DeviceDispatcherTest, DispatchesAnIterationAndAnswersThroughTheHost) {
  Open("fifo", "iteration");
  Job& job = AddJob(1, 0);
  Queue(job, 7);
  dispatcher_->DispatchAll();
  EXPECT_EQ(job.dispatched, 1u);
  EXPECT_EQ(job.device_work, 1);
  RunUntilAnswered(1);

  ASSERT_TRUE(host_.errors.empty()) << host_.errors.begin()->second;
  ASSERT_TRUE(host_.responses.contains(7));
  const v1::RunIterationResponse& r = host_.responses[7].run_iteration();
  EXPECT_EQ(r.job_id(), 1u);
  EXPECT_EQ(r.iteration(), 7u);
  ASSERT_EQ(r.fetches_size(), 1);
  EXPECT_EQ(r.fetches(0).spec().name(), "loss");
  EXPECT_EQ(r.fetches(0).data().size(), sizeof(float));
  EXPECT_EQ(host_.iterations_replied, 1);
  EXPECT_EQ(job.done, 1u);
  EXPECT_EQ(job.device_work, 0);  // OnDeviceWorkDone came back
  EXPECT_EQ(dispatcher_->runtime().iterations, 1u);
  EXPECT_EQ(dispatcher_->runtime().lanes[job.lane].outstanding, 0);
  EXPECT_FALSE(dispatcher_->HasSegmentedIteration(job));

  v1::DeviceStats stats;
  dispatcher_->FillDeviceDetails(&stats);
  ASSERT_EQ(stats.lane_info_size(), 1);
  EXPECT_EQ(stats.lane_info(0).iterations(), 1u);
}

TEST_F(DeviceDispatcherTest, ReadsAPersistentTensorInOrder) {
  Open("fifo", "iteration");
  Job& job = AddJob(1, 0);
  const int w0 = job.graph->Find("W0");
  ASSERT_GE(w0, 0);
  const std::string before(static_cast<const char*>(job.persistent[0]), job.graph->values[w0].type.bytes());
  ASSERT_EQ(job.graph->persistents[0], w0);
  job.reads.push_back(PendingRead{PendingReply{"peer", 3}, w0, job.received});
  dispatcher_->StartReads(job);
  RunUntilAnswered(1);
  ASSERT_TRUE(host_.responses.contains(3));
  EXPECT_EQ(host_.responses[3].read_tensor().tensor().data(), before);
  EXPECT_EQ(host_.replies_built, 1);
  EXPECT_EQ(job.device_work, 0);
}

TEST_F(DeviceDispatcherTest, ALowerPriorityIterationRunsInSegments) {
  Open("priority", "op");
  Job& low = AddJob(1, 0);
  AddJob(2, 5);  // present, with nothing queued: the low job's iteration may have to yield
  Queue(low, 9);
  dispatcher_->DispatchAll();
  RunUntilAnswered(1);
  ASSERT_TRUE(host_.responses.contains(9)) << (host_.errors.empty() ? "" : host_.errors.begin()->second.ToString());
  EXPECT_EQ(host_.responses[9].run_iteration().fetches_size(), 1);
  EXPECT_GT(dispatcher_->runtime().segments, 1u);
  EXPECT_FALSE(dispatcher_->HasSegmentedIteration(low));
  EXPECT_EQ(low.device_work, 0);
}

// PACK measures a newcomer's solo time with probes that run alone; beside
// a job that has run, the probe goes in segments, so that it can pause and
// let that job run in between (sched::SoloProbes).
TEST_F(DeviceDispatcherTest, APackSoloProbeBesideAJobThatRanRunsInSegments) {
  Open("pack", "iteration");
  Job& first = AddJob(1, 0);
  Queue(first, 1);
  dispatcher_->DispatchAll();
  RunUntilAnswered(1);
  ASSERT_TRUE(host_.responses.contains(1));
  EXPECT_EQ(dispatcher_->runtime().segments, 0u) << "the first job's probes have nobody to let through";
  Job& newcomer = AddJob(2, 0);
  Queue(newcomer, 2);
  dispatcher_->DispatchAll();
  RunUntilAnswered(2);
  ASSERT_TRUE(host_.responses.contains(2)) << (host_.errors.empty() ? "" : host_.errors.begin()->second.ToString());
  EXPECT_EQ(host_.responses[2].run_iteration().fetches_size(), 1);
  EXPECT_GT(dispatcher_->runtime().segments, 1u);
  EXPECT_FALSE(dispatcher_->HasSegmentedIteration(newcomer));
  EXPECT_EQ(newcomer.device_work, 0);
}

// Before each iteration the lane's stream learns whether another job has
// work on the device (device::Stream::device_shared: the kernels then
// choose algorithms without timing candidates there): not for a job alone,
// yes beside a job that ended an iteration within the last second, not
// once that job has been idle longer.
TEST_F(DeviceDispatcherTest, MarksTheLaneStreamSharedWhileAnotherJobIsActive) {
  Open("pack", "iteration");
  // The flag each iteration found on its lane's stream (what the last
  // StartIteration set there; nothing else runs meanwhile).
  const auto shared_after = [&](Job& job, uint64_t request_id) {
    Queue(job, request_id);
    dispatcher_->DispatchAll();
    RunUntilAnswered(request_id);
    EXPECT_TRUE(host_.responses.contains(request_id));
    return dispatcher_->runtime().lanes[job.lane].stream->device_shared();
  };
  Job& first = AddJob(1, 0);
  EXPECT_FALSE(shared_after(first, 1));
  Job& newcomer = AddJob(2, 0);
  EXPECT_TRUE(shared_after(newcomer, 2));
  first.last_done_at = Clock::now() - std::chrono::seconds(2);
  EXPECT_FALSE(shared_after(newcomer, 3));
}

TEST_F(DeviceDispatcherTest, DispatchesNothingWhileShuttingDown) {
  Open("fifo", "iteration");
  Job& job = AddJob(1, 0);
  Queue(job, 1);
  host_.shutting_down = true;
  dispatcher_->DispatchAll();
  EXPECT_EQ(job.dispatched, 0u);
  EXPECT_EQ(job.queued.size(), 1u);
}

}  // namespace
}  // namespace tandem::server
