// Program::EnqueueNodes on the CPU backend: an iteration run in ranges of
// nodes gives the whole iteration's fetches and persistent tensors bit for
// bit (the update schedule included: momentum SGD with in-place and copied
// updates, placed in the arena as the daemon places them), for every range
// size; a bad label fails the range holding the check, later ranges do
// nothing, and no persistent tensor changes.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiler/compile_job.h"
#include "compiler/iteration_layout.h"
#include "compiler/update_schedule.h"
#include "device/cpu_device.h"
#include "examples/mlp_train/mlp_graph.h"
#include "gtest/gtest.h"
#include "ir/graph_builder.h"
#include "kernels/program.h"

namespace tandem {
namespace {

constexpr int kBatch = 8;

examples::MlpJobOptions SmallMlp() {
  examples::MlpJobOptions o;
  o.shape.inputs = 6;
  o.shape.hidden = 10;
  o.shape.layers = 3;
  o.shape.classes = 4;
  o.batch = kBatch;
  o.seed = 17;
  return o;
}

// One job's graph, program and memory on the CPU device, laid out the way
// the daemon lays it out: persistents in their own buffers, feeds and
// intermediates at their planned arena offsets, in-place updates in their
// persistent's storage.
class JobOnCpu {
 public:
  // `fuse`: the daemon's default graph passes, under which the optimizer's
  // new values are computed in place of the old ones; without them every
  // update is a copy.
  JobOnCpu(const examples::MlpJobOptions& options, bool fuse) {
    v1::RegisterJobRequest reg = examples::BuildMlpTrainingJob(options);
    auto compiled = CompileJob(reg, {.fuse_elementwise = fuse});
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    graph_ = std::make_unique<Graph>(std::move(compiled->graph));
    layout_ = std::move(compiled->layout);
    auto device = device::CreateCpuDevice({});
    EXPECT_TRUE(device.ok());
    device_ = *std::move(device);
    auto stream = device_->CreateStream();
    EXPECT_TRUE(stream.ok());
    stream_ = *std::move(stream);
    auto program = CreateProgram(*graph_, *device_);
    EXPECT_TRUE(program.ok()) << program.status();
    program_ = *std::move(program);

    arena_.assign(layout_.arena_bytes / 8 + 1, 0);
    addresses_.assign(graph_->values.size(), nullptr);
    for (int v : graph_->persistents) {
      persistent_.emplace_back(graph_->values[v].type.bytes() / 8 + 1, 0);
      addresses_[v] = persistent_.back().data();
    }
    char* arena = reinterpret_cast<char*>(arena_.data());
    for (size_t v = 0; v < graph_->values.size(); ++v) {
      if (layout_.offset[v] >= 0) addresses_[v] = arena + layout_.offset[v];
    }
    for (size_t v = 0; v < graph_->values.size(); ++v) {
      if (layout_.stored_in[v] >= 0) addresses_[v] = addresses_[layout_.stored_in[v]];
    }
    for (const v1::Tensor& t : reg.persistent()) {
      std::memcpy(addresses_[graph_->Find(t.spec().name())], t.data().data(), t.data().size());
    }
  }

  const Graph& graph() const { return *graph_; }
  int num_nodes() const { return static_cast<int>(graph_->nodes.size()); }

  void Feed(const std::vector<float>& x, const std::vector<int64_t>& y, float lr) {
    std::memcpy(addresses_[graph_->Find("x")], x.data(), x.size() * sizeof(float));
    std::memcpy(addresses_[graph_->Find("y")], y.data(), y.size() * sizeof(int64_t));
    std::memcpy(addresses_[graph_->Find("lr")], &lr, sizeof(float));
  }

  absl::Status RunWhole() {
    if (absl::Status s = program_->Enqueue(*stream_, addresses_); !s.ok()) return s;
    return device_->Synchronize(*stream_);
  }

  // Enqueues the ranges [cuts[i], cuts[i+1]) each followed by its own
  // completion, as the daemon's executor does, and returns the statuses
  // those completions reported.
  std::vector<absl::Status> RunCuts(const std::vector<int>& cuts) {
    struct Report {
      std::mutex mu;
      std::vector<absl::Status> statuses;
    };
    auto report = std::make_shared<Report>();
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      absl::Status enqueued = program_->EnqueueNodes(*stream_, addresses_, cuts[i], cuts[i + 1]);
      EXPECT_TRUE(enqueued.ok()) << enqueued;
      EXPECT_TRUE(device_
                      ->OnComplete(*stream_,
                                   [report](absl::Status s) {
                                     std::lock_guard<std::mutex> lock(report->mu);
                                     report->statuses.push_back(s);
                                   })
                      .ok());
    }
    EXPECT_TRUE(device_->Synchronize(*stream_).ok());
    std::lock_guard<std::mutex> lock(report->mu);
    return report->statuses;
  }

  // The bytes of every fetchable and every persistent tensor, by name.
  std::map<std::string, std::string> Contents() const {
    std::map<std::string, std::string> out;
    auto read = [&](int v) {
      out[graph_->values[v].name] =
          std::string(static_cast<const char*>(addresses_[v]), graph_->values[v].type.bytes());
    };
    for (int v : graph_->fetchable) read(v);
    for (int v : graph_->persistents) read(v);
    return out;
  }
  std::map<std::string, std::string> PersistentContents() const {
    std::map<std::string, std::string> out;
    for (int v : graph_->persistents) {
      out[graph_->values[v].name] =
          std::string(static_cast<const char*>(addresses_[v]), graph_->values[v].type.bytes());
    }
    return out;
  }

  Program& program() { return *program_; }
  device::Stream& stream() { return *stream_; }
  device::Device& device() { return *device_; }
  std::vector<void*>& addresses() { return addresses_; }

 private:
  std::unique_ptr<Graph> graph_;
  IterationLayout layout_;
  std::unique_ptr<device::Device> device_;
  std::unique_ptr<device::Stream> stream_;
  std::unique_ptr<Program> program_;
  std::vector<uint64_t> arena_;
  std::vector<std::vector<uint64_t>> persistent_;
  std::vector<void*> addresses_;
};

// Cuts [0, n) into ranges of `range` nodes.
std::vector<int> EvenCuts(int n, int range) {
  std::vector<int> cuts;
  for (int c = 0; c < n; c += range) cuts.push_back(c);
  cuts.push_back(n);
  return cuts;
}

struct Batch {
  std::vector<float> x;
  std::vector<int64_t> y;
  float lr = 0.05f;
};

std::vector<Batch> Batches(const examples::MlpJobOptions& options, int count) {
  examples::BlobDataset data(options.shape, options.seed);
  std::vector<Batch> batches(count);
  for (Batch& b : batches) data.NextBatch(options.batch, &b.x, &b.y);
  return batches;
}

// Fused (updates in place) and unfused (updates copied) graphs.
class CpuProgramRanges : public ::testing::TestWithParam<bool> {
 protected:
  bool fuse() const { return GetParam(); }
};

TEST_P(CpuProgramRanges, TheGraphHasUpdatesLandingMidIteration) {
  // What makes the comparisons below meaningful: updates that land before
  // the last node (so a range boundary can fall right after them), written
  // in place of the old values (fused) or copied (unfused).
  JobOnCpu job(SmallMlp(), fuse());
  const UpdateSchedule schedule = ScheduleUpdates(job.graph());
  int in_place = 0, copied_mid_iteration = 0;
  for (size_t k = 0; k < schedule.copy_after.size(); ++k) {
    if (schedule.in_place[k]) ++in_place;
    if (!schedule.in_place[k] && schedule.copy_after[k] < job.num_nodes() - 1) ++copied_mid_iteration;
  }
  EXPECT_GT(job.num_nodes(), 20);
  if (fuse()) {
    EXPECT_GT(in_place, 0);
  } else {
    EXPECT_EQ(in_place, 0);
    EXPECT_GT(copied_mid_iteration, 0);
  }
}

TEST_P(CpuProgramRanges, RangesConcatenatedEqualTheWholeIterationBitForBit) {
  const examples::MlpJobOptions options = SmallMlp();
  const std::vector<Batch> batches = Batches(options, 3);
  JobOnCpu whole(options, fuse());
  std::vector<std::map<std::string, std::string>> want;
  for (const Batch& b : batches) {
    whole.Feed(b.x, b.y, b.lr);
    ASSERT_TRUE(whole.RunWhole().ok());
    want.push_back(whole.Contents());
  }
  // The training moved the weights (so equal contents mean something).
  JobOnCpu fresh(options, fuse());
  EXPECT_NE(fresh.PersistentContents(), whole.PersistentContents());

  const int n = whole.num_nodes();
  for (int range : {1, 2, 3, 5, 7, n / 2, n - 1, n}) {
    JobOnCpu ranged(options, fuse());
    for (size_t i = 0; i < batches.size(); ++i) {
      ranged.Feed(batches[i].x, batches[i].y, batches[i].lr);
      std::vector<absl::Status> statuses = ranged.RunCuts(EvenCuts(n, range));
      ASSERT_EQ(statuses.size(), EvenCuts(n, range).size() - 1);
      for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << "range " << range << ": " << s;
      EXPECT_EQ(ranged.Contents(), want[i]) << "ranges of " << range << " nodes, iteration " << i;
    }
  }
}

TEST_P(CpuProgramRanges, UnevenRangesAndWholeIterationsMix) {
  const examples::MlpJobOptions options = SmallMlp();
  const std::vector<Batch> batches = Batches(options, 3);
  JobOnCpu whole(options, fuse());
  JobOnCpu mixed(options, fuse());
  const int n = whole.num_nodes();
  const std::vector<std::vector<int>> cuts = {{0, 1, n - 1, n}, {0, n}, {0, n / 3, n / 3 + 1, 2 * n / 3, n}};
  for (size_t i = 0; i < batches.size(); ++i) {
    whole.Feed(batches[i].x, batches[i].y, batches[i].lr);
    ASSERT_TRUE(whole.RunWhole().ok());
    mixed.Feed(batches[i].x, batches[i].y, batches[i].lr);
    if (i == 1) {
      ASSERT_TRUE(mixed.RunWhole().ok());
    } else {
      for (const absl::Status& s : mixed.RunCuts(cuts[i])) ASSERT_TRUE(s.ok()) << s;
    }
    EXPECT_EQ(mixed.Contents(), whole.Contents()) << "iteration " << i;
  }
}

TEST_P(CpuProgramRanges, BadLabelFailsItsRangeSkipsTheRestAndLeavesPersistentsUnchanged) {
  const examples::MlpJobOptions options = SmallMlp();
  const std::vector<Batch> batches = Batches(options, 2);
  JobOnCpu job(options, fuse());
  job.Feed(batches[0].x, batches[0].y, batches[0].lr);
  ASSERT_TRUE(job.RunWhole().ok());
  const auto before = job.PersistentContents();

  // The nll_loss_forward node checks the labels.
  int check = -1;
  for (int i = 0; i < job.num_nodes(); ++i) {
    if (job.graph().nodes[i].op == "nll_loss_forward") check = i;
  }
  ASSERT_GT(check, 0);
  ASSERT_LT(check + 1, job.num_nodes());
  std::vector<int64_t> bad = batches[1].y;
  bad[3] = options.shape.classes + 5;
  job.Feed(batches[1].x, bad, batches[1].lr);
  const std::vector<int> cuts = {0, check, check + 1, job.num_nodes()};
  std::vector<absl::Status> statuses = job.RunCuts(cuts);
  ASSERT_EQ(statuses.size(), 3u);
  EXPECT_TRUE(statuses[0].ok()) << statuses[0];
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kInvalidArgument) << statuses[1];
  EXPECT_NE(statuses[1].message().find("nll_loss_forward"), std::string::npos) << statuses[1];
  EXPECT_EQ(statuses[2].code(), absl::StatusCode::kAborted) << statuses[2];
  EXPECT_EQ(job.PersistentContents(), before);

  // The next iteration starts afresh and matches a whole run from the same state.
  JobOnCpu reference(options, fuse());
  reference.Feed(batches[0].x, batches[0].y, batches[0].lr);
  ASSERT_TRUE(reference.RunWhole().ok());
  reference.Feed(batches[1].x, batches[1].y, batches[1].lr);
  ASSERT_TRUE(reference.RunWhole().ok());
  job.Feed(batches[1].x, batches[1].y, batches[1].lr);
  for (const absl::Status& s : job.RunCuts(EvenCuts(job.num_nodes(), 4))) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(job.Contents(), reference.Contents());
}

TEST_P(CpuProgramRanges, RangeOutsideTheGraphIsRefused) {
  JobOnCpu job(SmallMlp(), fuse());
  const int n = job.num_nodes();
  for (auto [begin, end] : {std::pair{-1, 2}, std::pair{3, 2}, std::pair{0, n + 1}}) {
    absl::Status s = job.program().EnqueueNodes(job.stream(), job.addresses(), begin, end);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << begin << ", " << end;
  }
  std::vector<void*> short_table(job.addresses().begin(), job.addresses().end() - 1);
  EXPECT_FALSE(job.program().EnqueueNodes(job.stream(), short_table, 0, 1).ok());
  EXPECT_TRUE(job.device().Synchronize(job.stream()).ok());  // nothing was enqueued
}

INSTANTIATE_TEST_SUITE_P(Graphs, CpuProgramRanges, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Fused" : "Unfused"; });

}  // namespace
}  // namespace tandem
