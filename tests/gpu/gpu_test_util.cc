#include "tests/gpu/gpu_test_util.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>

#include "absl/strings/str_cat.h"
#include "device/cuda_device.h"
#include "ir/op_registry.h"
#include "kernels/cpu/cpu_program.h"
#include "kernels/cuda/cuda_program_options.h"
#include "kernels/half.h"

namespace tandem::gpu_test {

uint64_t TestSeed() {
  static const uint64_t seed = [] {
    uint64_t s = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    if (const char* env = std::getenv("TANDEM_TEST_SEED")) s = std::strtoull(env, nullptr, 10);
    std::printf("random seed %llu (set TANDEM_TEST_SEED to repeat)\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

std::mt19937_64& Rng() {
  static std::mt19937_64 rng(TestSeed());
  return rng;
}

device::Device* Gpu() {
  // Never destroyed: the CUDA runtime may be torn down before static
  // destructors run.
  static device::Device* gpu = []() -> device::Device* {
    if (device::CudaDeviceCount() == 0) return nullptr;
    auto devices = device::CreateCudaDevices(device::CudaDeviceOptions{{0}});
    if (!devices.ok() || devices->empty()) {
      std::printf("CUDA device 0 did not open: %s\n", devices.status().ToString().c_str());
      return nullptr;
    }
    std::printf("GPU: %s\n", (*devices)[0]->info().description.c_str());
    return (*devices)[0].release();
  }();
  return gpu;
}

int GraphMaker::Feed(TensorType type, Fill fill, int64_t labels_upper) {
  const int id = static_cast<int>(graph_.values.size());
  Value value;
  value.name = absl::StrCat("feed", graph_.feeds.size());
  value.type = std::move(type);
  value.kind = ValueKind::kFeed;
  graph_.by_name[value.name] = id;
  graph_.values.push_back(std::move(value));
  graph_.feeds.push_back(id);
  feed_specs_.push_back(FeedSpec{fill, labels_upper});
  return id;
}

std::vector<int> GraphMaker::Add(const std::string& op, std::vector<int> inputs, Attrs attrs) {
  const OpDef* def = OpRegistry::Global().Find(op);
  EXPECT_NE(def, nullptr) << "unknown op " << op;
  if (def == nullptr) return {};
  std::vector<TensorType> in_types;
  for (int v : inputs) in_types.push_back(graph_.values[v].type);
  auto out_types = def->infer(attrs, in_types);
  EXPECT_TRUE(out_types.ok()) << op << ": " << out_types.status();
  if (!out_types.ok()) return {};
  Node node;
  node.op = op;
  node.def = def;
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  node.label = absl::StrCat(op, graph_.nodes.size());
  const int index = static_cast<int>(graph_.nodes.size());
  for (TensorType& type : *out_types) {
    const int id = static_cast<int>(graph_.values.size());
    Value value;
    value.name = absl::StrCat("v", id);
    value.type = std::move(type);
    value.kind = ValueKind::kIntermediate;
    value.producer = index;
    graph_.by_name[value.name] = id;
    graph_.values.push_back(std::move(value));
    graph_.fetchable.push_back(id);
    node.outputs.push_back(id);
  }
  graph_.nodes.push_back(std::move(node));
  return graph_.nodes.back().outputs;
}

namespace {

// A random float of `fill` from the uniform `u` in [-1, 1).
double FloatOf(Fill fill, double u) {
  switch (fill) {
    case Fill::kUniform:
      return u;
    case Fill::kPositive:
      return 1.25 + 0.75 * u;
    case Fill::kNonZero:
      return (u < 0 ? -1.0 : 1.0) * (1.0 + 0.5 * std::fabs(u));
    case Fill::kLabels:
      return 0.0;
    case Fill::kSmall:
      return 0.02 * u;
  }
  return 0.0;
}

template <typename T>
void FillTyped(Bytes& bytes, Fill fill, int64_t labels_upper, std::mt19937_64& rng) {
  T* p = reinterpret_cast<T*>(bytes.data());
  const size_t n = bytes.size() / sizeof(T);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  for (size_t i = 0; i < n; ++i) {
    const double u = unit(rng);
    if constexpr (kIsHalf<T>) {
      p[i] = T(FloatOf(fill, u));
    } else if constexpr (std::is_floating_point_v<T>) {
      switch (fill) {
        case Fill::kUniform:
          p[i] = static_cast<T>(u);
          break;
        case Fill::kPositive:
          p[i] = static_cast<T>(1.25 + 0.75 * u);
          break;
        case Fill::kNonZero:
          p[i] = static_cast<T>((u < 0 ? -1.0 : 1.0) * (1.0 + 0.5 * std::fabs(u)));
          break;
        case Fill::kLabels:
          p[i] = T(0);
          break;
        case Fill::kSmall:
          p[i] = static_cast<T>(0.02 * u);
          break;
      }
    } else if constexpr (std::is_same_v<T, bool>) {
      p[i] = u > 0;
    } else {
      if (fill == Fill::kLabels) {
        p[i] = static_cast<T>(std::uniform_int_distribution<int64_t>(0, labels_upper - 1)(rng));
      } else {
        T v = static_cast<T>(std::llround(u * 50));
        // kNonZero divides: a rounded 0 (about 1 draw in 100) made x / 0 = inf
        // on both sides, which a norm-wise error cannot compare.
        if (fill == Fill::kNonZero && v == T(0)) v = T(1);
        p[i] = v == T(-1) ? T(2) : v;  // -1 is the poison pattern of integers
      }
    }
  }
}

}  // namespace

std::vector<Bytes> GraphMaker::RandomFeeds(std::mt19937_64& rng) const {
  std::vector<Bytes> feeds(graph_.values.size());
  for (size_t f = 0; f < graph_.feeds.size(); ++f) {
    const Value& value = graph_.values[graph_.feeds[f]];
    Bytes& bytes = feeds[graph_.feeds[f]];
    bytes.assign(value.type.bytes(), 0);
    const FeedSpec& spec = feed_specs_[f];
    switch (value.type.dtype) {
      case DType::kFloat32:
        FillTyped<float>(bytes, spec.fill, spec.labels_upper, rng);
        break;
      case DType::kFloat64:
        FillTyped<double>(bytes, spec.fill, spec.labels_upper, rng);
        break;
      case DType::kInt64:
        FillTyped<int64_t>(bytes, spec.fill, spec.labels_upper, rng);
        break;
      case DType::kInt32:
        FillTyped<int32_t>(bytes, spec.fill, spec.labels_upper, rng);
        break;
      case DType::kBool:
        FillTyped<bool>(bytes, spec.fill, spec.labels_upper, rng);
        break;
      case DType::kBFloat16:
        FillTyped<BFloat16>(bytes, spec.fill, spec.labels_upper, rng);
        break;
      case DType::kFloat16:
        FillTyped<Float16>(bytes, spec.fill, spec.labels_upper, rng);
        break;
    }
  }
  return feeds;
}

absl::StatusOr<std::vector<Bytes>> RunOnCpu(const Graph& graph, const std::vector<Bytes>& feeds) {
  std::vector<Bytes> values(graph.values.size());
  std::vector<void*> addresses(graph.values.size());
  for (size_t v = 0; v < graph.values.size(); ++v) {
    if (graph.values[v].kind == ValueKind::kFeed) {
      values[v] = feeds[v];
    } else {
      values[v].assign(graph.values[v].type.bytes(), 0xFF);
    }
    values[v].reserve(8);  // a valid address for empty tensors
    addresses[v] = values[v].data();
  }
  absl::Status status = cpu::RunGraphOnCpu(graph, addresses);
  if (!status.ok()) return status;
  return values;
}

GpuRun::GpuRun(const Graph& graph, std::vector<std::pair<int, int>> alias) : graph_(graph) {
  device::Device& gpu = *Gpu();
  auto stream = gpu.CreateStream();
  EXPECT_TRUE(stream.ok()) << stream.status();
  if (stream.ok()) stream_ = std::move(*stream);
  addresses_.assign(graph.values.size(), nullptr);
  for (size_t v = 0; v < graph.values.size(); ++v) {
    bool aliased = false;
    for (const auto& [out, in] : alias) aliased = aliased || out == static_cast<int>(v);
    if (aliased) continue;
    auto ptr = gpu.Allocate(graph.values[v].type.bytes());
    EXPECT_TRUE(ptr.ok()) << ptr.status();
    if (!ptr.ok()) continue;
    addresses_[v] = *ptr;
    owned_.push_back(*ptr);
  }
  for (const auto& [out, in] : alias) addresses_[out] = addresses_[in];
}

GpuRun::~GpuRun() {
  if (stream_ != nullptr) Gpu()->Synchronize(*stream_).IgnoreError();
  stream_.reset();
  for (void* p : owned_) Gpu()->Free(p);
}

void GpuRun::Reallocate(int value) {
  auto ptr = Gpu()->Allocate(graph_.values[value].type.bytes());
  ASSERT_TRUE(ptr.ok()) << ptr.status();
  addresses_[value] = *ptr;
  owned_.push_back(*ptr);
}

absl::Status GpuRun::Upload(const std::vector<Bytes>& feeds) {
  device::Device& gpu = *Gpu();
  for (size_t v = 0; v < graph_.values.size(); ++v) {
    const size_t bytes = graph_.values[v].type.bytes();
    if (graph_.values[v].kind == ValueKind::kFeed) {
      absl::Status s = gpu.CopyToDevice(*stream_, addresses_[v], feeds[v].data(), bytes);
      if (!s.ok()) return s;
    }
  }
  // Poison after the copies: an aliased output shares its input's buffer and
  // must keep the input's data.
  for (size_t v = 0; v < graph_.values.size(); ++v) {
    if (graph_.values[v].kind == ValueKind::kFeed) continue;
    bool shares_feed = false;
    for (size_t u = 0; u < graph_.values.size(); ++u) {
      shares_feed = shares_feed || (u != v && addresses_[u] == addresses_[v]);
    }
    if (shares_feed) continue;
    absl::Status s = gpu.Fill(*stream_, addresses_[v], 0xFF, graph_.values[v].type.bytes());
    if (!s.ok()) return s;
  }
  return gpu.Synchronize(*stream_);
}

absl::Status GpuRun::RunIteration(Program& program) {
  absl::Status s = program.Enqueue(*stream_, addresses_);
  if (!s.ok()) return s;
  return WaitForCompletion(*Gpu(), *stream_);
}

absl::StatusOr<std::vector<Bytes>> GpuRun::Download() {
  device::Device& gpu = *Gpu();
  std::vector<Bytes> values(graph_.values.size());
  for (size_t v = 0; v < graph_.values.size(); ++v) {
    values[v].assign(graph_.values[v].type.bytes(), 0);
    absl::Status s = gpu.CopyToHost(*stream_, values[v].data(), addresses_[v], values[v].size());
    if (!s.ok()) return s;
  }
  absl::Status s = gpu.Synchronize(*stream_);
  if (!s.ok()) return s;
  return values;
}

absl::Status WaitForCompletion(device::Device& device, device::Stream& stream) {
  auto done = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = done->get_future();
  absl::Status s = device.OnComplete(stream, [done](absl::Status status) { done->set_value(std::move(status)); });
  if (!s.ok()) return s;
  if (result.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    return absl::DeadlineExceededError("the iteration's completion did not come within 120 s");
  }
  return result.get();
}

namespace {

// Element i of a float tensor as a double (16-bit types widened).
template <typename T>
double At(const T* p, size_t i) {
  if constexpr (kIsHalf<T>) {
    return p[i].ToFloat();
  } else {
    return static_cast<double>(p[i]);
  }
}

template <typename T>
::testing::AssertionResult MatchFloats(const Bytes& out, const Bytes& ref, double tolerance) {
  const T* o = reinterpret_cast<const T*>(out.data());
  const T* r = reinterpret_cast<const T*>(ref.data());
  const size_t n = out.size() / sizeof(T);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(At(o, i))) {
      uint8_t poison[sizeof(T)];
      std::memset(poison, 0xFF, sizeof(T));
      const bool unwritten = std::memcmp(&o[i], poison, sizeof(T)) == 0;
      // NaN where the CPU computes NaN too (acos(2), log(-1)) matches;
      // the poison bytes never do.
      if (!unwritten && std::isnan(At(r, i))) continue;
      return ::testing::AssertionFailure()
             << "element " << i << " of " << n << " is NaN"
             << (unwritten ? " (never written: still the poison bytes)" : "") << "; reference " << At(r, i);
    }
    // Equal infinities (log(0) on both sides) match exactly, and stay out
    // of the norms, where they would make NaN.
    if (std::isinf(At(r, i)) && At(o, i) == At(r, i)) continue;
    const double d = At(o, i) - At(r, i);
    diff += d * d;
    norm += At(r, i) * At(r, i);
  }
  const double error = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  if (!(error <= tolerance)) {
    size_t worst = 0;
    double worst_abs = -1;
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(At(o, i))) continue;
      const double a = std::fabs(At(o, i) - At(r, i));
      if (a > worst_abs) {
        worst_abs = a;
        worst = i;
      }
    }
    return ::testing::AssertionFailure() << "relative error " << error << " > " << tolerance << "; worst element "
                                         << worst << ": " << At(o, worst) << " vs " << At(r, worst);
  }
  return ::testing::AssertionSuccess() << "relative error " << error;
}

}  // namespace

::testing::AssertionResult Matches(const Bytes& out, const Bytes& ref, const TensorType& type, double tolerance) {
  if (out.size() != ref.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << out.size() << " vs " << ref.size();
  }
  switch (type.dtype) {
    case DType::kFloat32:
      return MatchFloats<float>(out, ref, tolerance);
    case DType::kFloat64:
      return MatchFloats<double>(out, ref, tolerance);
    case DType::kBFloat16:
      return MatchFloats<BFloat16>(out, ref, tolerance);
    case DType::kFloat16:
      return MatchFloats<Float16>(out, ref, tolerance);
    default:
      return SameBytes(out, ref);
  }
}

::testing::AssertionResult SameBytes(const Bytes& a, const Bytes& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) {
      return ::testing::AssertionFailure()
             << "byte " << i << " of " << a.size() << " differs: " << static_cast<int>(a[i]) << " vs "
             << static_cast<int>(b[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

std::string OutputPair::Where() const {
  return absl::StrCat(graph->nodes[node].Describe(node), " output ", type().ToString(),
                      replay ? " (graph replay)" : " (op by op)");
}

void CompareWithCpu(const GraphMaker& maker, const std::function<void(const OutputPair&)>& check,
                    std::vector<std::pair<int, int>> alias, std::vector<Bytes> feeds, bool expect_capture) {
  const Graph& graph = maker.graph();
  if (feeds.empty()) feeds = maker.RandomFeeds(Rng());
  auto ref = RunOnCpu(graph, feeds);
  ASSERT_TRUE(ref.ok()) << ref.status();
  GpuRun run(graph, std::move(alias));
  auto program = cuda::CreateCudaProgram(graph, *Gpu(), cuda::CudaProgramOptions{});
  ASSERT_TRUE(program.ok()) << program.status();
  int compared = 0;
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(run.Upload(feeds).ok());
    absl::Status status = run.RunIteration(**program);
    ASSERT_TRUE(status.ok()) << status;
    auto out = run.Download();
    ASSERT_TRUE(out.ok()) << out.status();
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      for (int v : graph.nodes[i].outputs) {
        check(OutputPair{&graph, static_cast<int>(i), v, &(*out)[v], &(*ref)[v], pass == 1});
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0) << "the graph has no node output to compare";
  if (expect_capture) {
    const cuda::CudaProgramStats stats = cuda::GetCudaProgramStats(**program);
    EXPECT_EQ(stats.op_by_op_runs, 1);
    EXPECT_EQ(stats.graph_launches, 1);
    EXPECT_EQ(stats.capture_failures, 0);
  }
}

void CompareWithCpuWithin(const GraphMaker& maker, double tolerance32, double tolerance64,
                          std::vector<std::pair<int, int>> alias, std::vector<Bytes> feeds) {
  CompareWithCpu(
      maker,
      [&](const OutputPair& o) {
        const double tolerance = o.type().dtype == DType::kFloat64 ? tolerance64 : tolerance32;
        EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), tolerance)) << o.Where();
      },
      std::move(alias), std::move(feeds));
}

}  // namespace tandem::gpu_test
