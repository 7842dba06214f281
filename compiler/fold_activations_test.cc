#include "compiler/fold_activations.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/compile_job.h"
#include "compiler/wire_graph_test_util.h"
#include "ir/graph_builder.h"

namespace tandem {
namespace {

using testing::AddNode;
using testing::AddSpec;
using ::testing::Contains;
using testing::Contents;
using ::testing::Not;
using testing::Ops;
using testing::Persistent;

const v1::Node* NodeOf(const v1::Graph& g, const std::string& op) {
  for (const v1::Node& n : g.nodes()) {
    if (n.op() == op) return &n;
  }
  return nullptr;
}

struct Options {
  v1::DType dtype = v1::FLOAT32;
  bool fetch_bn_out = false;            // the value between the batch norm and the ReLU is fetched
  bool bn_out_read_twice = false;       // ... or read by another node too
  bool masked_grad_read_twice = false;  // the threshold_backward's output has another reader
};

// The feeds of one batch-norm layer: x and g (the incoming gradient) [4, 3,
// 5, 6] of `dtype`, and w, b, rm, rv [3] (float64 for float64, else
// float32).
void AddLayerFeeds(v1::Graph& g, v1::DType dtype) {
  const Shape x_shape = {4, 3, 5, 6};
  AddSpec(g.add_feeds(), "x", dtype, x_shape);
  AddSpec(g.add_feeds(), "g", dtype, x_shape);
  const v1::DType param = dtype == v1::FLOAT64 ? v1::FLOAT64 : v1::FLOAT32;
  for (const char* name : {"w", "b", "rm", "rv"}) AddSpec(g.add_feeds(), name, param, {3});
}

// A training batch norm of `in` with w, b, rm, rv; outputs y, mean, invstd,
// rm2, rv2, each name followed by `suffix`.
void AddBatchNorm(v1::Graph& g, const std::string& in, const std::string& suffix = "") {
  v1::Node* bn = g.add_nodes();
  bn->set_op("_native_batch_norm_legit_functional");
  bn->add_inputs(in);
  for (const char* p : {"w", "b", "rm", "rv"}) bn->add_inputs(p);
  for (const char* out : {"y", "mean", "invstd", "rm2", "rv2"}) bn->add_outputs(out + suffix);
  (*bn->mutable_attrs())["training"].set_b(true);
  (*bn->mutable_attrs())["momentum"].set_f(0.1);
  (*bn->mutable_attrs())["eps"].set_f(1e-5);
}

// The backward of AddBatchNorm(g, "x") for the gradient `grad`: gx, gw, gb.
void AddBatchNormBackward(v1::Graph& g, const std::string& grad) {
  v1::Node* back = g.add_nodes();
  back->set_op("native_batch_norm_backward");
  back->add_inputs(grad);
  for (const char* in : {"x", "w", "rm", "rv", "mean", "invstd"}) back->add_inputs(in);
  for (const char* out : {"gx", "gw", "gb"}) back->add_outputs(out);
  (*back->mutable_attrs())["train"].set_b(true);
  (*back->mutable_attrs())["eps"].set_f(1e-5);
}

// One batch-norm layer's forward (training, running statistics updated),
// its ReLU, and the backward through both, as a captured ResNet step has
// them: x [4, 3, 5, 6], the ReLU's incoming gradient a feed.
v1::Graph Layer(const Options& o) {
  v1::Graph g;
  AddLayerFeeds(g, o.dtype);
  AddBatchNorm(g, "x");
  AddNode(g, "relu", {"y"}, "r");
  if (o.bn_out_read_twice) AddNode(g, "neg", {"y"}, "ny");
  v1::Node* tb = AddNode(g, "threshold_backward", {"g", "r"}, "gm");
  (*tb->mutable_attrs())["threshold"].set_f(0.0);
  if (o.masked_grad_read_twice) AddNode(g, "neg", {"gm"}, "ngm");
  AddBatchNormBackward(g, "gm");
  for (const char* f : {"r", "gx", "gw", "gb", "rm2", "rv2"}) g.add_fetches(f);
  if (o.fetch_bn_out) g.add_fetches("y");
  if (o.bn_out_read_twice) g.add_fetches("ny");
  if (o.masked_grad_read_twice) g.add_fetches("ngm");
  return g;
}

// Runs `g` folded and unfolded on the CPU: every fetch must agree bit for
// bit. Returns the folded graph.
v1::Graph FoldAndCompare(const v1::Graph& g, std::mt19937_64& rng) {
  auto folded = testing::ApplyPass(g, Persistent(), FoldActivations);
  EXPECT_TRUE(folded.ok()) << folded.status();
  if (!folded.ok()) return g;
  for (int trial = 0; trial < 3; ++trial) {
    const Contents feeds = testing::RandomFeeds(g, rng, {"rv"});
    auto want = testing::RunWireGraphOnCpu(g, Persistent(), feeds);
    auto got = testing::RunWireGraphOnCpu(*folded, Persistent(), feeds);
    EXPECT_TRUE(want.ok()) << want.status();
    EXPECT_TRUE(got.ok()) << got.status() << "\n" << folded->DebugString();
    if (!want.ok() || !got.ok()) break;
    for (const std::string& fetch : g.fetches()) {
      EXPECT_TRUE(got->count(fetch) == 1 && got->at(fetch) == want->at(fetch)) << fetch << " differs after folding";
    }
  }
  return *folded;
}

TEST(FoldActivationsTest, ReluAndItsGradientFoldIntoTheBatchNormsExactly) {
  std::mt19937_64 rng(51);
  for (v1::DType dtype : {v1::FLOAT32, v1::FLOAT64, v1::BFLOAT16, v1::FLOAT16}) {
    SCOPED_TRACE(v1::DType_Name(dtype));
    const v1::Graph folded = FoldAndCompare(Layer({.dtype = dtype}), rng);
    EXPECT_THAT(Ops(folded),
                ::testing::ElementsAre("_native_batch_norm_legit_functional", "native_batch_norm_backward"));
    const v1::Node* bn = NodeOf(folded, "_native_batch_norm_legit_functional");
    ASSERT_NE(bn, nullptr);
    EXPECT_TRUE(bn->attrs().at("relu").b());
    EXPECT_EQ(bn->outputs(0), "r");  // the ReLU's value, defined by the batch norm now
    const v1::Node* back = NodeOf(folded, "native_batch_norm_backward");
    ASSERT_NE(back, nullptr);
    EXPECT_EQ(back->inputs(0), "g");
    EXPECT_EQ(back->inputs(back->inputs_size() - 1), "r");
    EXPECT_EQ(back->attrs().at("mask_threshold").f(), 0.0);
  }
}

TEST(FoldActivationsTest, AValueSomethingElseReadsStays) {
  std::mt19937_64 rng(53);
  // The batch norm's output fetched, or read by another node: no forward fold.
  for (const Options& o : {Options{.fetch_bn_out = true}, Options{.bn_out_read_twice = true}}) {
    const v1::Graph folded = FoldAndCompare(Layer(o), rng);
    EXPECT_THAT(Ops(folded), Contains("relu"));
    EXPECT_THAT(Ops(folded), Not(Contains("threshold_backward")));
  }
  // The masked gradient read elsewhere: no backward fold.
  const v1::Graph folded = FoldAndCompare(Layer({.masked_grad_read_twice = true}), rng);
  EXPECT_THAT(Ops(folded), Contains("threshold_backward"));
  EXPECT_THAT(Ops(folded), Not(Contains("relu")));
}

struct ResidualOptions {
  v1::DType dtype = v1::FLOAT32;
  bool downsample = false;  // the residual is a second batch norm's output, computed after the first
  bool relu = true;         // a ReLU after the add
  double alpha = 1.0;       // the add's alpha
  bool broadcast = false;   // the residual is [4, 3, 1, 1], broadcast by the add
};

// A residual block's end, as torchvision's Bottleneck has it: bn(x) +
// identity, then a ReLU, and the backward of the ReLU into the batch norm.
// The identity is a feed, or (downsample) the output of a second batch norm
// of a feed z that the step computes after the first.
v1::Graph Residual(const ResidualOptions& o) {
  v1::Graph g;
  AddLayerFeeds(g, o.dtype);
  AddSpec(g.add_feeds(), o.downsample ? "z" : "id", o.dtype, o.broadcast ? Shape{4, 3, 1, 1} : Shape{4, 3, 5, 6});
  AddBatchNorm(g, "x");
  if (o.downsample) AddBatchNorm(g, "z", "_z");
  v1::Node* add = AddNode(g, "add.Tensor", {"y", o.downsample ? "y_z" : "id"}, "s");
  if (o.alpha != 1.0) (*add->mutable_attrs())["alpha"].set_f(o.alpha);
  const std::string out = o.relu ? "r" : "s";
  if (o.relu) {
    AddNode(g, "relu", {"s"}, "r");
    (*AddNode(g, "threshold_backward", {"g", "r"}, "gm")->mutable_attrs())["threshold"].set_f(0.0);
  }
  AddBatchNormBackward(g, o.relu ? "gm" : "g");
  for (const std::string& f : {out, std::string("gx"), std::string("gw"), std::string("rm2")}) g.add_fetches(f);
  return g;
}

// bn(x) + identity (then a ReLU) is one batch norm with a residual input:
// it stores the add's (the ReLU's) value, bit for bit in every dtype. With a
// downsample, the residual folds into the second batch norm (the first one's
// output is defined before it; the second one's is not before the first).
TEST(FoldActivationsTest, AResidualAddAndItsReluFoldIntoTheBatchNormExactly) {
  std::mt19937_64 rng(57);
  for (v1::DType dtype : {v1::FLOAT32, v1::FLOAT64, v1::BFLOAT16, v1::FLOAT16}) {
    for (bool downsample : {false, true}) {
      for (bool relu : {true, false}) {
        SCOPED_TRACE(absl::StrCat(v1::DType_Name(dtype), downsample ? " downsample" : "", relu ? " relu" : ""));
        const v1::Graph folded =
            FoldAndCompare(Residual({.dtype = dtype, .downsample = downsample, .relu = relu}), rng);
        EXPECT_THAT(Ops(folded), Not(Contains("add.Tensor")));
        EXPECT_THAT(Ops(folded), Not(Contains("relu")));
        int with_residual = 0;
        for (const v1::Node& n : folded.nodes()) {
          if (n.op() != "_native_batch_norm_legit_functional" || !n.attrs().contains("residual")) continue;
          ++with_residual;
          EXPECT_EQ(n.inputs(0), downsample ? "z" : "x");
          EXPECT_EQ(n.inputs(n.inputs_size() - 1), downsample ? "y" : "id");
          EXPECT_EQ(n.outputs(0), relu ? "r" : "s");
          EXPECT_EQ(n.attrs().contains("relu"), relu);
        }
        EXPECT_EQ(with_residual, 1);
      }
    }
  }
}

TEST(FoldActivationsTest, AnAddThatIsNotAPlainResidualStays) {
  std::mt19937_64 rng(59);
  for (const ResidualOptions& o : {ResidualOptions{.alpha = 2.0}, ResidualOptions{.broadcast = true}}) {
    const v1::Graph folded = FoldAndCompare(Residual(o), rng);
    EXPECT_THAT(Ops(folded), Contains("add.Tensor"));
  }
  // A residual of another type than the input is refused by the registry.
  auto folded = testing::ApplyPass(Residual({}), Persistent(), FoldActivations);
  ASSERT_TRUE(folded.ok()) << folded.status();
  v1::Graph wrong = *folded;
  for (v1::Node& n : *wrong.mutable_nodes()) {
    if (n.attrs().contains("residual")) n.set_inputs(n.inputs_size() - 1, "w");
  }
  auto built = BuildGraph(wrong, Persistent());
  ASSERT_FALSE(built.ok());
  EXPECT_THAT(built.status().message(), ::testing::HasSubstr("residual is float32[3]"));
}

// The registry checks what a client could send itself: a mask of another
// type, or a mask input without the attribute, is refused.
TEST(FoldActivationsTest, TheFoldedFormsAreValidated) {
  v1::Graph g = Layer({});
  auto folded = testing::ApplyPass(g, Persistent(), FoldActivations);
  ASSERT_TRUE(folded.ok()) << folded.status();
  v1::Graph wrong_mask = *folded;
  for (v1::Node& n : *wrong_mask.mutable_nodes()) {
    if (n.op() == "native_batch_norm_backward") n.set_inputs(n.inputs_size() - 1, "w");
  }
  auto built = BuildGraph(wrong_mask, Persistent());
  ASSERT_FALSE(built.ok());
  EXPECT_THAT(built.status().message(), ::testing::HasSubstr("mask is float32[3]"));
  v1::Graph no_attribute = *folded;
  for (v1::Node& n : *no_attribute.mutable_nodes()) {
    if (n.op() == "native_batch_norm_backward") n.mutable_attrs()->erase("mask_threshold");
  }
  EXPECT_FALSE(BuildGraph(no_attribute, Persistent()).ok());
}

// CompileJob runs the pass (fusion off here): a layer's graph has no ReLU and no
// threshold_backward left, and the memory plan lost the batch norm's output
// and the masked gradient.
TEST(FoldActivationsTest, CompileJobFolds) {
  v1::RegisterJobRequest request;
  *request.mutable_graph() = Layer({});
  auto folded = CompileJob(request, {.fuse_elementwise = false});
  ASSERT_TRUE(folded.ok()) << folded.status();
  auto plain = CompileJob(request, {.fold_activations = false, .fuse_elementwise = false});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(folded->graph.nodes.size() + 2, plain->graph.nodes.size());
  EXPECT_LT(folded->layout.no_reuse_bytes, plain->layout.no_reuse_bytes);
}

}  // namespace
}  // namespace tandem
