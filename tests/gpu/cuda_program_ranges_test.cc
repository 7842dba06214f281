// Program::EnqueueNodes on the CUDA backend (op-granularity preemption runs a
// best-effort iteration in ranges of nodes): an MLP training step laid out
// as the daemon lays it out (an arena, updates in place) gives the same
// losses and weights in ranges as whole (graph replay), for several range
// sizes, each range followed by its own completion as in the daemon (the
// first ranged iteration runs op by op and captures each range, the later
// ones replay the ranges' graphs); a bad
// label in one range fails the completion after the last range with
// INVALID_ARGUMENT and leaves every weight unchanged, and the next
// iteration runs clean, as it does after an iteration abandoned midway.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/compile_job.h"
#include "examples/mlp_train/mlp_graph.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_program_options.h"
#include "kernels/program.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

constexpr double kTolerance = 1e-5;  // op by op vs graph replay: same kernels, same order

examples::MlpJobOptions SmallMlp() {
  examples::MlpJobOptions o;
  o.shape.inputs = 32;
  o.shape.hidden = 64;
  o.shape.layers = 4;
  o.shape.classes = 10;
  o.batch = 32;
  o.seed = 21;
  return o;
}

struct Batch {
  std::vector<float> x;
  std::vector<int64_t> y;
};

std::vector<Batch> Batches(const examples::MlpJobOptions& options, int count) {
  examples::BlobDataset data(options.shape, options.seed);
  std::vector<Batch> batches(count);
  for (Batch& b : batches) data.NextBatch(options.batch, &b.x, &b.y);
  return batches;
}

// A job's program and memory on the GPU: persistents in their own buffers,
// feeds and intermediates in one arena at their planned offsets.
class JobOnGpu {
 public:
  explicit JobOnGpu(const examples::MlpJobOptions& options) : gpu_(*Gpu()) {
    v1::RegisterJobRequest reg = examples::BuildMlpTrainingJob(options);
    auto compiled = CompileJob(reg);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    graph_ = std::make_unique<Graph>(std::move(compiled->graph));
    const IterationLayout* layout = &compiled->layout;
    auto stream = gpu_.CreateStream();
    EXPECT_TRUE(stream.ok()) << stream.status();
    stream_ = *std::move(stream);
    auto program = CreateProgram(*graph_, gpu_);
    EXPECT_TRUE(program.ok()) << program.status();
    program_ = *std::move(program);

    addresses_.assign(graph_->values.size(), nullptr);
    for (int v : graph_->persistents) addresses_[v] = Allocate(graph_->values[v].type.bytes());
    char* arena = static_cast<char*>(Allocate(std::max<uint64_t>(layout->arena_bytes, 1)));
    for (size_t v = 0; v < graph_->values.size(); ++v) {
      if (layout->offset[v] >= 0) addresses_[v] = arena + layout->offset[v];
    }
    for (size_t v = 0; v < graph_->values.size(); ++v) {
      if (layout->stored_in[v] >= 0) addresses_[v] = addresses_[layout->stored_in[v]];
    }
    for (const v1::Tensor& t : reg.persistent()) {
      EXPECT_TRUE(
          gpu_.CopyToDevice(*stream_, addresses_[graph_->Find(t.spec().name())], t.data().data(), t.data().size())
              .ok());
    }
    EXPECT_TRUE(gpu_.Synchronize(*stream_).ok());
  }
  ~JobOnGpu() {
    (void)gpu_.Synchronize(*stream_);
    program_.reset();
    stream_.reset();
    for (void* p : owned_) gpu_.Free(p);
  }

  int num_nodes() const { return static_cast<int>(graph_->nodes.size()); }
  const Graph& graph() const { return *graph_; }
  cuda::CudaProgramStats stats() const { return cuda::GetCudaProgramStats(*program_); }

  void Feed(const Batch& b, float lr) {
    ASSERT_TRUE(gpu_.CopyToDevice(*stream_, addresses_[graph_->Find("x")], b.x.data(), b.x.size() * 4).ok());
    ASSERT_TRUE(gpu_.CopyToDevice(*stream_, addresses_[graph_->Find("y")], b.y.data(), b.y.size() * 8).ok());
    lr_ = lr;
    ASSERT_TRUE(gpu_.CopyToDevice(*stream_, addresses_[graph_->Find("lr")], &lr_, sizeof(float)).ok());
  }
  absl::Status RunWhole() {
    if (absl::Status s = program_->Enqueue(*stream_, addresses_); !s.ok()) return s;
    return WaitForCompletion(gpu_, *stream_);
  }
  // Nodes [begin, end) only, followed by a completion.
  absl::Status RunNodes(int begin, int end) {
    if (absl::Status s = program_->EnqueueNodes(*stream_, addresses_, begin, end); !s.ok()) return s;
    return WaitForCompletion(gpu_, *stream_);
  }
  // Ranges of `range` nodes, each followed by a completion; their statuses.
  std::vector<absl::Status> RunInRanges(int range) {
    std::vector<absl::Status> statuses;
    for (int begin = 0; begin < num_nodes(); begin += range) {
      absl::Status s = program_->EnqueueNodes(*stream_, addresses_, begin, std::min(num_nodes(), begin + range));
      if (s.ok()) s = WaitForCompletion(gpu_, *stream_);
      statuses.push_back(s);
    }
    return statuses;
  }
  // Loss and every persistent tensor, by name.
  std::map<std::string, Bytes> Contents() {
    std::map<std::string, Bytes> out;
    std::vector<int> ids = graph_->persistents;
    ids.push_back(graph_->Find("loss"));
    for (int v : ids) {
      Bytes bytes(graph_->values[v].type.bytes());
      EXPECT_TRUE(gpu_.CopyToHost(*stream_, bytes.data(), addresses_[v], bytes.size()).ok());
      out[graph_->values[v].name] = std::move(bytes);
    }
    EXPECT_TRUE(gpu_.Synchronize(*stream_).ok());
    return out;
  }
  void ExpectMatches(const std::map<std::string, Bytes>& got, const std::map<std::string, Bytes>& want,
                     const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, bytes] : want) {
      EXPECT_TRUE(Matches(got.at(name), bytes, graph_->values[graph_->Find(name)].type, kTolerance))
          << what << ": " << name;
    }
  }

 private:
  void* Allocate(uint64_t bytes) {
    auto p = gpu_.Allocate(bytes);
    EXPECT_TRUE(p.ok()) << p.status();
    owned_.push_back(p.ok() ? *p : nullptr);
    return owned_.back();
  }

  device::Device& gpu_;
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<device::Stream> stream_;
  std::unique_ptr<Program> program_;
  std::vector<void*> addresses_;
  std::vector<void*> owned_;
  float lr_ = 0;
};

// The loss and weights of a job that ran batches[0] and batches[1] as
// whole iterations: what a job that failed or abandoned its second
// iteration must hold after running batches[1] again.
std::map<std::string, Bytes> TwoGoodIterations(const examples::MlpJobOptions& options,
                                               const std::vector<Batch>& batches) {
  JobOnGpu reference(options);
  for (int i = 0; i < 2; ++i) {
    reference.Feed(batches[i], 0.05f);
    EXPECT_TRUE(reference.RunWhole().ok()) << "reference iteration " << i;
  }
  return reference.Contents();
}

TEST(CudaProgramRanges, RangesGiveTheWholeIterationsResults) {
  TANDEM_SKIP_WITHOUT_GPU();
  const examples::MlpJobOptions options = SmallMlp();
  std::vector<Batch> batches = Batches(options, 3);
  batches.push_back(batches[0]);
  // Whole iterations (the first op by op, then graph replays).
  JobOnGpu whole(options);
  std::vector<std::map<std::string, Bytes>> want;
  for (const Batch& b : batches) {
    whole.Feed(b, 0.05f);
    ASSERT_TRUE(whole.RunWhole().ok());
    want.push_back(whole.Contents());
  }
  const int n = whole.num_nodes();
  for (int range : {1, 3, 8, n - 1}) {
    JobOnGpu ranged(options);
    for (size_t i = 0; i + 1 < batches.size(); ++i) {
      ranged.Feed(batches[i], 0.05f);
      for (const absl::Status& s : ranged.RunInRanges(range)) ASSERT_TRUE(s.ok()) << "range " << range << ": " << s;
      ranged.ExpectMatches(ranged.Contents(), want[i], "ranges of " + std::to_string(range));
    }
    // Each range ran op by op once and was captured, then replayed its graph.
    const int64_t ranges = (n + range - 1) / range;
    const int64_t ranged_iterations = static_cast<int64_t>(batches.size()) - 1;
    EXPECT_EQ(ranged.stats().range_captures, ranges) << "ranges of " << range;
    EXPECT_EQ(ranged.stats().range_graph_launches, ranges * (ranged_iterations - 1)) << "ranges of " << range;
    // A whole iteration after ranged ones.
    ranged.Feed(batches.back(), 0.05f);
    ASSERT_TRUE(ranged.RunWhole().ok());
    ranged.ExpectMatches(ranged.Contents(), want.back(), "whole after ranges of " + std::to_string(range));
  }
}

TEST(CudaProgramRanges, BadLabelFailsAfterTheLastRangeAndChangesNothing) {
  TANDEM_SKIP_WITHOUT_GPU();
  const examples::MlpJobOptions options = SmallMlp();
  const std::vector<Batch> batches = Batches(options, 2);
  JobOnGpu job(options);
  job.Feed(batches[0], 0.05f);
  ASSERT_TRUE(job.RunWhole().ok());
  const auto before = job.Contents();

  Batch bad = batches[1];
  bad.y[5] = options.shape.classes + 3;
  job.Feed(bad, 0.05f);
  std::vector<absl::Status> statuses = job.RunInRanges(4);
  ASSERT_GE(statuses.size(), 3u);
  for (size_t i = 0; i + 1 < statuses.size(); ++i) EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i];
  EXPECT_EQ(statuses.back().code(), absl::StatusCode::kInvalidArgument) << statuses.back();
  EXPECT_NE(statuses.back().message().find("nll_loss"), std::string::npos) << statuses.back();
  auto after = job.Contents();
  for (int v : job.graph().persistents) {
    const std::string& name = job.graph().values[v].name;
    EXPECT_TRUE(SameBytes(after.at(name), before.at(name))) << name;
  }

  // The next iteration, in ranges, runs clean and matches a whole run.
  job.Feed(batches[1], 0.05f);
  for (const absl::Status& s : job.RunInRanges(4)) ASSERT_TRUE(s.ok()) << s;
  job.ExpectMatches(job.Contents(), TwoGoodIterations(options, batches), "after a failed ranged iteration");
  // That iteration replayed the ranges' graphs captured by the failed one:
  // the error word spans graphs as it spans op-by-op ranges.
  EXPECT_EQ(job.stats().range_graph_launches, (job.num_nodes() + 3) / 4);
}

// An iteration abandoned after its bad label was seen (its later ranges
// never enqueued, so its error word was never read back and zeroed) leaves
// the next iteration clean: that one zeroes the word before its first node.
TEST(CudaProgramRanges, AnAbandonedIterationLeavesTheNextClean) {
  TANDEM_SKIP_WITHOUT_GPU();
  const examples::MlpJobOptions options = SmallMlp();
  const std::vector<Batch> batches = Batches(options, 2);
  JobOnGpu job(options);
  job.Feed(batches[0], 0.05f);
  ASSERT_TRUE(job.RunWhole().ok());

  int loss_node = -1;
  for (int i = 0; i < job.num_nodes() && loss_node < 0; ++i) {
    if (job.graph().nodes[i].op == "nll_loss_forward") loss_node = i;
  }
  ASSERT_GE(loss_node, 0);
  ASSERT_LT(loss_node + 1, job.num_nodes());
  Batch bad = batches[1];
  bad.y[2] = -7;
  job.Feed(bad, 0.05f);
  ASSERT_TRUE(job.RunNodes(0, loss_node + 1).ok());  // the word is set; the rest never comes

  job.Feed(batches[1], 0.05f);
  absl::Status s = job.RunWhole();
  ASSERT_TRUE(s.ok()) << s;
  job.ExpectMatches(job.Contents(), TwoGoodIterations(options, batches), "after an abandoned iteration");
}

}  // namespace
}  // namespace tandem::gpu_test
