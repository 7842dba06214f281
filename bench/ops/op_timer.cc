#include "bench/ops/op_timer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_program_options.h"
#include "kernels/half.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::bench {
namespace {

using gpu_test::Fill;

// Each float pool holds 2 * kPoolBytes; a fill copies chunks of kPoolBytes
// from a random offset into it, so that two feeds filled alike differ.
constexpr size_t kPoolBytes = size_t{16} << 20;
constexpr int kFillKinds = static_cast<int>(Fill::kSmall) + 1;

// GraphMaker and GpuRun serve the tests and report failures through gtest;
// outside a test those land in the ad-hoc result, which is read here.
class GtestFailures {
 public:
  GtestFailures() : seen_(Result().total_part_count()) {}

  // The first failure reported since the last call, as an error.
  absl::Status Check(absl::string_view what) {
    const ::testing::TestResult& result = Result();
    const int count = result.total_part_count();
    absl::Status status;
    for (int i = seen_; i < count && status.ok(); ++i) {
      const ::testing::TestPartResult& part = result.GetTestPartResult(i);
      if (part.failed()) status = absl::InternalError(absl::StrCat(what, ": ", part.message()));
    }
    seen_ = count;
    return status;
  }

 private:
  static const ::testing::TestResult& Result() { return ::testing::UnitTest::GetInstance()->ad_hoc_test_result(); }
  int seen_;
};

// The first failed status of the completions a row's timing took.
class FirstFailure {
 public:
  void Record(absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_.ok()) first_ = std::move(status);
  }
  absl::Status Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(first_, absl::OkStatus());
  }

 private:
  std::mutex mu_;
  absl::Status first_;
};

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

// Milliseconds per call of `enqueue` over one batch of `iterations` calls,
// between two events on `stream`.
absl::StatusOr<double> TimeBatch(device::Device& gpu, device::Stream& stream,
                                 const std::function<absl::Status()>& enqueue, int iterations) {
  ASSIGN_OR_RETURN(std::unique_ptr<device::Event> start, gpu.CreateEvent());
  ASSIGN_OR_RETURN(std::unique_ptr<device::Event> end, gpu.CreateEvent());
  RETURN_IF_ERROR(gpu.RecordEvent(stream, *start));
  absl::Status enqueued;
  for (int i = 0; i < iterations && enqueued.ok(); ++i) enqueued = enqueue();
  if (enqueued.ok()) enqueued = gpu.RecordEvent(stream, *end);
  // Wait even after a failed enqueue: the stream may still use the buffers.
  absl::Status completed = gpu_test::WaitForCompletion(gpu, stream);
  RETURN_IF_ERROR(enqueued);
  RETURN_IF_ERROR(completed);
  ASSIGN_OR_RETURN(double seconds, gpu.ElapsedSeconds(*start, *end));
  return seconds * 1e3 / iterations;
}

// Warm-up, then `options.batches` timed batches. `iterations` > 0 fixes the
// batch size; otherwise it comes from options (or from a probe).
absl::StatusOr<Timing> TimeEnqueued(device::Device& gpu, device::Stream& stream,
                                    const std::function<absl::Status()>& enqueue, const TimingOptions& options,
                                    int iterations) {
  absl::Status warm;
  for (int i = 0; i < options.warmup && warm.ok(); ++i) warm = enqueue();
  absl::Status completed = gpu_test::WaitForCompletion(gpu, stream);
  RETURN_IF_ERROR(warm);
  RETURN_IF_ERROR(completed);
  Timing timing;
  timing.iterations = iterations > 0 ? iterations : options.iterations;
  if (timing.iterations <= 0) {
    ASSIGN_OR_RETURN(double probe_ms, TimeBatch(gpu, stream, enqueue, 3));
    const double wanted = std::ceil(options.batch_ms / std::max(probe_ms, 1e-4));
    timing.iterations = static_cast<int>(std::clamp(wanted, 3.0, 2000.0));
  }
  for (int b = 0; b < std::max(options.batches, 1); ++b) {
    ASSIGN_OR_RETURN(double ms, TimeBatch(gpu, stream, enqueue, timing.iterations));
    timing.batch_ms.push_back(ms);
  }
  timing.ms = Median(timing.batch_ms);
  return timing;
}

// Runs the row's setup graph once and copies the linked values into the
// row's feeds at `addresses`.
absl::Status RunSetup(const OpRow& row, FeedFiller& filler, const std::vector<void*>& addresses) {
  device::Device& gpu = *gpu_test::Gpu();
  GtestFailures failures;
  const Graph& graph = row.setup->graph();
  gpu_test::GpuRun setup(graph);
  RETURN_IF_ERROR(failures.Check("allocating the setup graph's buffers"));
  for (const FeedSpec& spec : row.setup_feeds) {
    RETURN_IF_ERROR(filler.Fill(setup.stream(), graph, spec, setup.addresses()[spec.value]));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Program> program,
                   cuda::CreateCudaProgram(graph, gpu, cuda::CudaProgramOptions{.use_graphs = false}));
  RETURN_IF_ERROR(setup.RunIteration(*program));
  const Graph& target = row.graph.graph();
  for (const auto& [from, to] : row.setup_links) {
    const size_t bytes = graph.values[from].type.bytes();
    if (bytes != target.values[to].type.bytes()) {
      return absl::InternalError(absl::StrCat(row.name, ": setup value ", graph.values[from].type.ToString(),
                                              " does not fit feed ", target.values[to].type.ToString()));
    }
    RETURN_IF_ERROR(gpu.CopyOnDevice(setup.stream(), addresses[to], setup.addresses()[from], bytes));
  }
  return gpu.Synchronize(setup.stream());
}

float RandomValue(Fill fill, double u) {
  switch (fill) {
    case Fill::kUniform:
      return static_cast<float>(u);
    case Fill::kPositive:
      return static_cast<float>(1.25 + 0.75 * u);
    case Fill::kNonZero:
      return static_cast<float>((u < 0 ? -1.0 : 1.0) * (1.0 + 0.5 * std::fabs(u)));
    case Fill::kSmall:
      return static_cast<float>(0.02 * u);
    case Fill::kLabels:
      break;
  }
  return 0.0f;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FeedFiller>> FeedFiller::Create(uint64_t seed) {
  device::Device* gpu = gpu_test::Gpu();
  if (gpu == nullptr) return absl::FailedPreconditionError("no CUDA device");
  std::unique_ptr<FeedFiller> filler(new FeedFiller(*gpu, seed));
  ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> stream, gpu->CreateStream());
  std::vector<float> host(2 * kPoolBytes / sizeof(float));
  std::vector<uint16_t> host16(2 * kPoolBytes / sizeof(uint16_t));
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  auto upload = [&](const void* data, void** pool) -> absl::Status {
    ASSIGN_OR_RETURN(*pool, gpu->Allocate(2 * kPoolBytes));
    RETURN_IF_ERROR(gpu->CopyToDevice(*stream, *pool, data, 2 * kPoolBytes));
    return gpu->Synchronize(*stream);
  };
  for (auto* pools : {&filler->pools_, &filler->bf16_pools_, &filler->f16_pools_}) pools->assign(kFillKinds, nullptr);
  for (int kind = 0; kind < kFillKinds; ++kind) {
    // Inside FeedFiller, plain `Fill` names the member function.
    const gpu_test::Fill fill = static_cast<gpu_test::Fill>(kind);
    if (fill == gpu_test::Fill::kLabels) continue;
    for (float& x : host) x = RandomValue(fill, unit(filler->rng_));
    RETURN_IF_ERROR(upload(host.data(), &filler->pools_[kind]));
    for (uint16_t& x : host16) x = FloatToBFloat16Bits(RandomValue(fill, unit(filler->rng_)));
    RETURN_IF_ERROR(upload(host16.data(), &filler->bf16_pools_[kind]));
    for (uint16_t& x : host16) x = FloatToFloat16Bits(RandomValue(fill, unit(filler->rng_)));
    RETURN_IF_ERROR(upload(host16.data(), &filler->f16_pools_[kind]));
  }
  return filler;
}

FeedFiller::~FeedFiller() {
  for (const auto* pools : {&pools_, &bf16_pools_, &f16_pools_}) {
    for (void* pool : *pools) {
      if (pool != nullptr) device_.Free(pool);
    }
  }
}

absl::Status FeedFiller::Fill(device::Stream& stream, const Graph& graph, const FeedSpec& spec, void* address) {
  const TensorType& type = graph.values[spec.value].type;
  const size_t bytes = type.bytes();
  if (bytes == 0) return absl::OkStatus();
  if (type.dtype == DType::kInt64 && spec.fill == gpu_test::Fill::kLabels) {
    std::vector<int64_t> host(static_cast<size_t>(type.numel()));
    std::uniform_int_distribution<int64_t> label(0, std::max<int64_t>(spec.labels_upper, 1) - 1);
    for (int64_t& x : host) x = label(rng_);
    RETURN_IF_ERROR(device_.CopyToDevice(stream, address, host.data(), bytes));
    return device_.Synchronize(stream);  // before `host` goes
  }
  const std::vector<void*>* pools = type.dtype == DType::kFloat32    ? &pools_
                                    : type.dtype == DType::kBFloat16 ? &bf16_pools_
                                    : type.dtype == DType::kFloat16  ? &f16_pools_
                                                                     : nullptr;
  if (pools == nullptr || spec.fill == gpu_test::Fill::kLabels) {
    return absl::UnimplementedError(absl::StrCat("no fill for a feed of ", type.ToString()));
  }
  const char* pool = static_cast<const char*>((*pools)[static_cast<int>(spec.fill)]);
  const size_t start = std::uniform_int_distribution<size_t>(0, kPoolBytes / 256 - 1)(rng_) * 256;
  for (size_t offset = 0; offset < bytes; offset += kPoolBytes) {
    RETURN_IF_ERROR(device_.CopyOnDevice(stream, static_cast<char*>(address) + offset, pool + start,
                                         std::min(kPoolBytes, bytes - offset)));
  }
  return device_.Synchronize(stream);
}

namespace {

// The row's buffers, its feeds filled and its setup run.
absl::StatusOr<std::unique_ptr<gpu_test::GpuRun>> ReadyRow(const OpRow& row, FeedFiller& filler) {
  const Graph& graph = row.graph.graph();
  if (graph.nodes.empty()) return absl::InternalError(absl::StrCat(row.name, ": the graph has no node"));
  GtestFailures failures;
  auto run = std::make_unique<gpu_test::GpuRun>(graph);
  RETURN_IF_ERROR(failures.Check("allocating the row's buffers"));
  for (const FeedSpec& spec : row.feeds) {
    RETURN_IF_ERROR(filler.Fill(run->stream(), graph, spec, run->addresses()[spec.value]));
  }
  if (row.setup.has_value()) RETURN_IF_ERROR(RunSetup(row, filler, run->addresses()));
  return run;
}

}  // namespace

absl::StatusOr<RowTiming> TimeRow(const OpRow& row, FeedFiller& filler, const TimingOptions& options) {
  device::Device* gpu = gpu_test::Gpu();
  if (gpu == nullptr) return absl::FailedPreconditionError("no CUDA device");
  const Graph& graph = row.graph.graph();
  ASSIGN_OR_RETURN(std::unique_ptr<gpu_test::GpuRun> ready, ReadyRow(row, filler));
  gpu_test::GpuRun& run = *ready;

  RowTiming timing;
  // Completions are taken every few runs, as the daemon takes one per
  // iteration: a data-checking Program's checks of its error word run there.
  // Without them its 16 host slots fill and every 16th run flushes the checks
  // into the stream (a host callback the GPU waits for), which the daemon
  // does not: the embedding rows' batches spread by up to 15% that way,
  // PyTorch's by 0.2%.
  constexpr int kRunsPerCompletion = 4;
  auto failure = std::make_shared<FirstFailure>();
  for (bool graphs : {true, false}) {
    ASSIGN_OR_RETURN(std::unique_ptr<Program> program,
                     cuda::CreateCudaProgram(graph, *gpu, cuda::CudaProgramOptions{.use_graphs = graphs}));
    int runs = 0;
    auto enqueue = [&]() -> absl::Status {
      RETURN_IF_ERROR(program->Enqueue(run.stream(), run.addresses()));
      if (++runs % kRunsPerCompletion != 0) return absl::OkStatus();
      return gpu->OnComplete(run.stream(), [failure](absl::Status status) { failure->Record(std::move(status)); });
    };
    if (graphs) {
      ASSIGN_OR_RETURN(timing.replay, TimeEnqueued(*gpu, run.stream(), enqueue, options, 0));
      timing.replayed = cuda::GetCudaProgramStats(*program).graph_launches > 0;
    } else {
      ASSIGN_OR_RETURN(timing.eager, TimeEnqueued(*gpu, run.stream(), enqueue, options, timing.replay.iterations));
    }
  }
  RETURN_IF_ERROR(failure->Take());
  if (row.ops_per_run > 1) {  // per copy of the op
    for (Timing* t : {&timing.replay, &timing.eager}) {
      t->ms /= row.ops_per_run;
      for (double& ms : t->batch_ms) ms /= row.ops_per_run;
    }
  }
  return timing;
}

absl::StatusOr<FirstUse> TimeFirstUse(const OpRow& row, FeedFiller& filler,
                                      const std::vector<device::Stream*>& streams) {
  device::Device* gpu = gpu_test::Gpu();
  if (gpu == nullptr) return absl::FailedPreconditionError("no CUDA device");
  const Graph& graph = row.graph.graph();
  ASSIGN_OR_RETURN(std::unique_ptr<gpu_test::GpuRun> ready, ReadyRow(row, filler));
  gpu_test::GpuRun& run = *ready;
  ASSIGN_OR_RETURN(std::unique_ptr<Program> program, cuda::CreateCudaProgram(graph, *gpu, cuda::CudaProgramOptions{}));
  // One enqueue's host milliseconds; the stream is drained before and after,
  // so that each stream's run has the device to itself.
  auto enqueue_ms = [&](device::Stream& stream) -> absl::StatusOr<double> {
    RETURN_IF_ERROR(gpu->Synchronize(stream));
    const absl::Time began = absl::Now();
    RETURN_IF_ERROR(program->Enqueue(stream, run.addresses()));
    const double ms = absl::ToDoubleMilliseconds(absl::Now() - began);
    RETURN_IF_ERROR(gpu_test::WaitForCompletion(*gpu, stream));
    return ms;
  };
  FirstUse use;
  ASSIGN_OR_RETURN(use.first_ms, enqueue_ms(run.stream()));
  for (device::Stream* stream : streams) {
    ASSIGN_OR_RETURN(double ms, enqueue_ms(*stream));
    use.other_ms.push_back(ms);
  }
  if (!streams.empty()) {
    ASSIGN_OR_RETURN(use.replay_ms, enqueue_ms(*streams.back()));
  }
  return use;
}

absl::StatusOr<Timing> TimeDeviceCopy(int64_t bytes, const TimingOptions& options) {
  device::Device* gpu = gpu_test::Gpu();
  if (gpu == nullptr) return absl::FailedPreconditionError("no CUDA device");
  ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> stream, gpu->CreateStream());
  ASSIGN_OR_RETURN(void* src, gpu->Allocate(static_cast<size_t>(bytes)));
  absl::StatusOr<void*> dst = gpu->Allocate(static_cast<size_t>(bytes));
  if (!dst.ok()) {
    gpu->Free(src);
    return dst.status();
  }
  absl::StatusOr<Timing> timing = [&]() -> absl::StatusOr<Timing> {
    RETURN_IF_ERROR(gpu->Fill(*stream, src, 0x3F, static_cast<size_t>(bytes)));
    auto enqueue = [&] { return gpu->CopyOnDevice(*stream, *dst, src, static_cast<size_t>(bytes)); };
    return TimeEnqueued(*gpu, *stream, enqueue, options, 0);
  }();
  gpu->Synchronize(*stream).IgnoreError();
  gpu->Free(src);
  gpu->Free(*dst);
  return timing;
}

}  // namespace tandem::bench
