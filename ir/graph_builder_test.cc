// BuildGraph on small wire graphs: a valid MLP training step, and each way a
// job's graph can be refused at registration.
#include "ir/graph_builder.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_program.h"

namespace tandem {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using Persistent = google::protobuf::RepeatedPtrField<v1::Tensor>;

void SetSpec(v1::TensorSpec* spec, const std::string& name, v1::DType dtype, const Shape& shape) {
  spec->set_name(name);
  spec->set_dtype(dtype);
  for (int64_t d : shape) spec->add_shape(d);
}

v1::Node* AddNode(v1::Graph& g, const std::string& op, std::vector<std::string> inputs,
                  std::vector<std::string> outputs, const std::string& label = "") {
  v1::Node* node = g.add_nodes();
  node->set_op(op);
  for (auto& in : inputs) node->add_inputs(in);
  for (auto& out : outputs) node->add_outputs(out);
  node->set_label(label);
  return node;
}

v1::AttrValue& Attr(v1::Node* node, const std::string& name) { return (*node->mutable_attrs())[name]; }

// float32 persistent tensor with `values` (or zeros).
void AddPersistent(Persistent& persistent, const std::string& name, const Shape& shape,
                   std::vector<float> values = {}) {
  v1::Tensor* t = persistent.Add();
  SetSpec(t->mutable_spec(), name, v1::FLOAT32, shape);
  if (values.empty()) values.assign(NumElements(shape), 0.0f);
  t->set_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
}

struct MlpShape {
  int64_t batch, in, hidden, classes;
};

// One SGD step of a 2-layer MLP classifier, as a PyTorch capture would
// lower it: forward, loss, backward, and `param <- param - lr * grad`
// updates.
v1::Graph MlpTrainingStep(const MlpShape& s, double lr) {
  v1::Graph g;
  SetSpec(g.add_feeds(), "x", v1::FLOAT32, {s.batch, s.in});
  SetSpec(g.add_feeds(), "y", v1::INT64, {s.batch});
  AddNode(g, "t", {"fc1.weight"}, {"w1t"}, "fc1");
  v1::Node* fc1 = AddNode(g, "addmm", {"fc1.bias", "x", "w1t"}, {"h"}, "fc1");
  SetSpec(fc1->add_declared_outputs(), "h", v1::FLOAT32, {s.batch, s.hidden});
  AddNode(g, "relu", {"h"}, {"a"}, "act");
  AddNode(g, "t", {"fc2.weight"}, {"w2t"}, "fc2");
  AddNode(g, "addmm", {"fc2.bias", "a", "w2t"}, {"z"}, "fc2");
  v1::Node* lsm = AddNode(g, "_log_softmax", {"z"}, {"lsm"}, "loss");
  Attr(lsm, "dim").set_i(1);
  Attr(lsm, "half_to_float").set_b(false);
  v1::Node* nll = AddNode(g, "nll_loss_forward", {"lsm", "y"}, {"loss", "total_weight"}, "loss");
  Attr(nll, "reduction").set_i(1);
  Attr(nll, "ignore_index").set_i(-100);
  SetSpec(nll->add_declared_outputs(), "loss", v1::FLOAT32, {});

  AddNode(g, "ones_like", {"loss"}, {"g_loss"});
  v1::Node* nll_back = AddNode(g, "nll_loss_backward", {"g_loss", "lsm", "y", "total_weight"}, {"g_lsm"});
  Attr(nll_back, "reduction").set_i(1);
  Attr(nll_back, "ignore_index").set_i(-100);
  v1::Node* lsm_back = AddNode(g, "_log_softmax_backward_data", {"g_lsm", "lsm"}, {"g_z"});
  Attr(lsm_back, "dim").set_i(1);
  Attr(lsm_back, "input_dtype").set_dtype(v1::FLOAT32);
  AddNode(g, "t", {"g_z"}, {"g_zt"});
  AddNode(g, "mm", {"g_zt", "a"}, {"g_w2"});
  v1::Node* sum2 = AddNode(g, "sum.dim_IntList", {"g_z"}, {"g_b2"});
  Attr(sum2, "dim").mutable_ints()->add_values(0);
  AddNode(g, "mm", {"g_z", "fc2.weight"}, {"g_a"});
  v1::Node* relu_back = AddNode(g, "threshold_backward", {"g_a", "a"}, {"g_h"});
  Attr(relu_back, "threshold").set_i(0);
  AddNode(g, "t", {"g_h"}, {"g_ht"});
  AddNode(g, "mm", {"g_ht", "x"}, {"g_w1"});
  v1::Node* sum1 = AddNode(g, "sum.dim_IntList", {"g_h"}, {"g_b1"});
  Attr(sum1, "dim").mutable_ints()->add_values(0);

  const std::vector<std::pair<std::string, std::string>> grads = {
      {"fc1.weight", "g_w1"}, {"fc1.bias", "g_b1"}, {"fc2.weight", "g_w2"}, {"fc2.bias", "g_b2"}};
  for (const auto& [param, grad] : grads) {
    v1::Node* step = AddNode(g, "sub.Tensor", {param, grad}, {param + ".new"}, "sgd");
    Attr(step, "alpha").set_f(lr);
    v1::Update* update = g.add_updates();
    update->set_persistent(param);
    update->set_value(param + ".new");
  }
  g.add_fetches("loss");
  g.add_fetches("lsm");
  return g;
}

Persistent MlpParameters(const MlpShape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto init = [&](int64_t fan_in, int64_t n) {
    std::uniform_real_distribution<float> u(-1.0f / std::sqrt(static_cast<float>(fan_in)),
                                            1.0f / std::sqrt(static_cast<float>(fan_in)));
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
  };
  Persistent p;
  AddPersistent(p, "fc1.weight", {s.hidden, s.in}, init(s.in, s.hidden * s.in));
  AddPersistent(p, "fc1.bias", {s.hidden}, init(s.in, s.hidden));
  AddPersistent(p, "fc2.weight", {s.classes, s.hidden}, init(s.hidden, s.classes * s.hidden));
  AddPersistent(p, "fc2.bias", {s.classes}, init(s.hidden, s.classes));
  return p;
}

TensorType F32(Shape shape) { return {DType::kFloat32, std::move(shape)}; }

std::string BuildError(const v1::Graph& g, const Persistent& persistent) {
  auto built = BuildGraph(g, persistent);
  EXPECT_FALSE(built.ok()) << "the graph was accepted";
  if (built.ok()) return "";
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument) << built.status();
  return std::string(built.status().message());
}

TEST(GraphBuilderTest, MlpTrainingStepBuildsWithTheRightTypes) {
  const MlpShape s{64, 784, 128, 10};
  auto built = BuildGraph(MlpTrainingStep(s, 0.1), MlpParameters(s, 1));
  ASSERT_TRUE(built.ok()) << built.status();
  const Graph& g = *built;
  auto type_of = [&](const std::string& name) {
    const int id = g.Find(name);
    EXPECT_GE(id, 0) << name;
    return id < 0 ? TensorType{} : g.values[id].type;
  };
  EXPECT_EQ(type_of("h"), F32({64, 128}));
  EXPECT_EQ(type_of("z"), F32({64, 10}));
  EXPECT_EQ(type_of("loss"), F32({}));
  EXPECT_EQ(type_of("total_weight"), F32({}));
  EXPECT_EQ(type_of("g_z"), F32({64, 10}));
  EXPECT_EQ(type_of("g_w2"), F32({10, 128}));
  EXPECT_EQ(type_of("g_b2"), F32({10}));
  EXPECT_EQ(type_of("g_w1"), F32({128, 784}));
  EXPECT_EQ(type_of("g_b1"), F32({128}));
  EXPECT_EQ(type_of("fc1.weight.new"), F32({128, 784}));
  EXPECT_EQ(g.persistents.size(), 4u);
  EXPECT_EQ(g.feeds.size(), 2u);
  EXPECT_EQ(g.updates.size(), 4u);
  EXPECT_EQ(g.fetchable.size(), 2u);
  EXPECT_EQ(g.nodes.size(), 22u);
  for (const Node& node : g.nodes) {
    ASSERT_NE(node.def, nullptr) << node.op;
    for (int out : node.outputs) EXPECT_EQ(g.values[out].kind, ValueKind::kIntermediate);
  }
  EXPECT_EQ(g.values[g.Find("x")].kind, ValueKind::kFeed);
  EXPECT_EQ(g.values[g.Find("fc2.bias")].kind, ValueKind::kPersistent);
  EXPECT_EQ(g.values[g.Find("a")].producer, 2);  // relu, the third node
}

// The built step trains: a few SGD iterations on the CPU lower the loss on
// a separable problem (labels from a fixed linear rule).
TEST(GraphBuilderTest, MlpTrainingStepLowersTheLossOnTheCpu) {
  const MlpShape s{32, 8, 16, 3};
  const Persistent params = MlpParameters(s, 2);
  auto built = BuildGraph(MlpTrainingStep(s, 0.5), params);
  ASSERT_TRUE(built.ok()) << built.status();
  const Graph& g = *built;

  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(s.batch * s.in);
  for (float& v : x) v = normal(rng);
  std::vector<int64_t> y(s.batch);
  for (int64_t i = 0; i < s.batch; ++i) {
    const float score = x[i * s.in] - x[i * s.in + 1];
    y[i] = score > 0.5f ? 0 : score < -0.5f ? 1 : 2;
  }
  std::vector<std::vector<uint64_t>> buffers(g.values.size());
  std::vector<void*> addresses;
  for (size_t v = 0; v < g.values.size(); ++v) {
    buffers[v].assign(g.values[v].type.bytes() / 8 + 1, 0);
    addresses.push_back(buffers[v].data());
  }
  for (const v1::Tensor& t : params) std::memcpy(addresses[g.Find(t.spec().name())], t.data().data(), t.data().size());
  std::memcpy(addresses[g.Find("x")], x.data(), x.size() * sizeof(float));
  std::memcpy(addresses[g.Find("y")], y.data(), y.size() * sizeof(int64_t));

  std::vector<float> losses;
  for (int iteration = 0; iteration < 30; ++iteration) {
    absl::Status status = cpu::RunGraphOnCpu(g, addresses);
    ASSERT_TRUE(status.ok()) << status;
    losses.push_back(*static_cast<const float*>(addresses[g.Find("loss")]));
  }
  EXPECT_NEAR(losses.front(), std::log(3.0f), 0.5f) << "an untrained 3-class classifier";
  EXPECT_LT(losses.back(), 0.6f * losses.front()) << "first " << losses.front() << ", last " << losses.back();
}

TEST(GraphBuilderTest, UnknownOpNamesTheOpAndTheLabel) {
  v1::Graph g;
  SetSpec(g.add_feeds(), "x", v1::FLOAT32, {2, 3});
  AddNode(g, "relu", {"x"}, {"a"});
  AddNode(g, "fancy_conv3d", {"a"}, {"b"}, "encoder.block1.conv");
  EXPECT_THAT(BuildError(g, {}), AllOf(HasSubstr("fancy_conv3d"), HasSubstr("encoder.block1.conv"), HasSubstr("node 1"),
                                       HasSubstr("unknown op")));
}

TEST(GraphBuilderTest, DeclaredOutputMismatchIsAShapeMismatch) {
  v1::Graph g;
  SetSpec(g.add_feeds(), "a", v1::FLOAT32, {4, 5});
  SetSpec(g.add_feeds(), "b", v1::FLOAT32, {5, 6});
  v1::Node* mm = AddNode(g, "mm", {"a", "b"}, {"c"}, "proj");
  SetSpec(mm->add_declared_outputs(), "c", v1::FLOAT32, {4, 7});
  EXPECT_THAT(BuildError(g, {}), AllOf(HasSubstr("shape mismatch"), HasSubstr("float32[4, 6]"),
                                       HasSubstr("float32[4, 7]"), HasSubstr("proj")));
}

TEST(GraphBuilderTest, InferenceErrorsCarryTheNode) {
  v1::Graph g;
  SetSpec(g.add_feeds(), "a", v1::FLOAT32, {256, 784});
  SetSpec(g.add_feeds(), "b", v1::FLOAT32, {512, 10});
  AddNode(g, "mm", {"a", "b"}, {"c"}, "fc");
  EXPECT_THAT(BuildError(g, {}), AllOf(HasSubstr("node 0 (mm 'fc')"), HasSubstr("inner dims 784 and 512 differ")));
}

TEST(GraphBuilderTest, WrongInputCount) {
  v1::Graph g;
  SetSpec(g.add_feeds(), "a", v1::FLOAT32, {3});
  AddNode(g, "neg", {"a", "a"}, {"b"});
  EXPECT_THAT(BuildError(g, {}), HasSubstr("takes 1 inputs, got 2"));
}

TEST(GraphBuilderTest, UndefinedInput) {
  v1::Graph g;
  SetSpec(g.add_feeds(), "a", v1::FLOAT32, {3});
  AddNode(g, "add.Tensor", {"a", "later"}, {"b"});
  AddNode(g, "neg", {"a"}, {"later"});
  EXPECT_THAT(BuildError(g, {}), AllOf(HasSubstr("input 'later'"), HasSubstr("not defined before this node")));
}

TEST(GraphBuilderTest, TensorDefinedTwice) {
  v1::Graph g;
  SetSpec(g.add_feeds(), "a", v1::FLOAT32, {3});
  AddNode(g, "neg", {"a"}, {"b"});
  AddNode(g, "relu", {"a"}, {"b"});
  EXPECT_THAT(BuildError(g, {}), HasSubstr("tensor 'b' is defined twice"));

  Persistent p;
  AddPersistent(p, "a", {3});
  v1::Graph feeds_clash;
  SetSpec(feeds_clash.add_feeds(), "a", v1::FLOAT32, {3});
  EXPECT_THAT(BuildError(feeds_clash, p), HasSubstr("tensor 'a' is defined twice"));
}

TEST(GraphBuilderTest, PersistentDataOfTheWrongSize) {
  Persistent p;
  v1::Tensor* t = p.Add();
  SetSpec(t->mutable_spec(), "w", v1::FLOAT32, {2, 3});
  t->set_data(std::string(20, '\0'));
  EXPECT_THAT(BuildError(v1::Graph(), p),
              AllOf(HasSubstr("persistent tensor 'w'"), HasSubstr("20 bytes"), HasSubstr("needs 24")));
}

TEST(GraphBuilderTest, UpdateWithATypeMismatch) {
  Persistent p;
  AddPersistent(p, "w", {3});
  v1::Graph g;
  SetSpec(g.add_feeds(), "g", v1::FLOAT32, {4});
  AddNode(g, "neg", {"g"}, {"w_new"});
  v1::Update* u = g.add_updates();
  u->set_persistent("w");
  u->set_value("w_new");
  EXPECT_THAT(BuildError(g, p), AllOf(HasSubstr("type mismatch"), HasSubstr("float32[3] <- float32[4]")));

  v1::Graph not_persistent = g;
  not_persistent.mutable_updates(0)->set_persistent("g");
  EXPECT_THAT(BuildError(not_persistent, p), HasSubstr("not a persistent tensor"));
}

TEST(GraphBuilderTest, FetchNamingNothing) {
  v1::Graph g;
  SetSpec(g.add_feeds(), "a", v1::FLOAT32, {3});
  AddNode(g, "neg", {"a"}, {"b"});
  g.add_fetches("b");
  g.add_fetches("ghost");
  EXPECT_THAT(BuildError(g, {}), HasSubstr("fetch 'ghost' names no tensor"));
}

// Sizes computed from attributes are checked as wire shapes are: a byte
// count that wraps around plans a buffer far smaller than the kernels use
// (zeros of 2^62 floats planned as 0 bytes and killed the daemon; a 4-float
// tensor viewed as [2^62 + 1, 4] wrapped to 4 elements, and slicing it read
// another job's weights).
TEST(GraphBuilderTest, InferredSizesThatOverflowAreRefused) {
  constexpr int64_t k2To62 = int64_t{1} << 62;
  {
    v1::Graph g;
    v1::Node* zeros = AddNode(g, "zeros", {}, {"z"});
    Attr(zeros, "size").mutable_ints()->add_values(k2To62);
    EXPECT_THAT(BuildError(g, {}), AllOf(HasSubstr("node 0 (zeros)"), HasSubstr("exceeds the tensor size limit")));
  }
  {
    v1::Graph g;
    v1::Node* zeros = AddNode(g, "zeros", {}, {"z"});
    for (int i = 0; i < 4; ++i) Attr(zeros, "size").mutable_ints()->add_values(int64_t{1} << 16);
    EXPECT_THAT(BuildError(g, {}), HasSubstr("exceeds the tensor size limit"));
  }
  {
    v1::Graph g;
    SetSpec(g.add_feeds(), "a", v1::FLOAT32, {4});
    v1::Node* view = AddNode(g, "view", {"a"}, {"v"});
    Attr(view, "size").mutable_ints()->add_values(k2To62 + 1);
    Attr(view, "size").mutable_ints()->add_values(4);
    v1::Node* slice = AddNode(g, "slice.Tensor", {"v"}, {"s"});
    Attr(slice, "dim").set_i(0);
    Attr(slice, "start").set_i(k2To62);
    Attr(slice, "end").set_i(k2To62 + 1);
    g.add_fetches("s");
    EXPECT_THAT(BuildError(g, {}), AllOf(HasSubstr("node 0 (view)"), HasSubstr("more elements than an int64")));
    // -1 beside a huge dim: the known product overflows before the division.
    Attr(g.mutable_nodes(0), "size").mutable_ints()->set_values(0, -1);
    Attr(g.mutable_nodes(0), "size").mutable_ints()->set_values(1, k2To62);
    Attr(g.mutable_nodes(0), "size").mutable_ints()->add_values(8);
    EXPECT_THAT(BuildError(g, {}), HasSubstr("node 0 (view)"));
  }
  {
    v1::Graph g;
    SetSpec(g.add_feeds(), "a", v1::FLOAT32, {4});
    v1::Node* split = AddNode(g, "split_with_sizes", {"a"}, {"p", "q", "r"});
    Attr(split, "split_sizes").mutable_ints()->add_values(std::numeric_limits<int64_t>::max());
    Attr(split, "split_sizes").mutable_ints()->add_values(std::numeric_limits<int64_t>::max());
    Attr(split, "split_sizes").mutable_ints()->add_values(6);  // wraps to 4
    EXPECT_THAT(BuildError(g, {}), HasSubstr("sums to more than dim 0's size 4"));
  }
  {
    v1::Graph g;
    v1::Node* arange = AddNode(g, "arange.start_step", {}, {"r"});
    Attr(arange, "start").set_i(std::numeric_limits<int64_t>::min());
    Attr(arange, "end").set_i(std::numeric_limits<int64_t>::max());
    Attr(arange, "step").set_i(1);
    EXPECT_THAT(BuildError(g, {}), HasSubstr("too long"));
    Attr(g.mutable_nodes(0), "start").set_f(0);
    Attr(g.mutable_nodes(0), "end").set_f(1e30);
    Attr(g.mutable_nodes(0), "step").set_f(1);
    EXPECT_THAT(BuildError(g, {}), HasSubstr("too long"));
  }
  {
    v1::Graph g;
    SetSpec(g.add_feeds(), "x", v1::FLOAT32, {1, 1, 8, 8});
    SetSpec(g.add_feeds(), "w", v1::FLOAT32, {1, 1, 3, 3});
    v1::Node* conv = AddNode(g, "convolution", {"x", "w"}, {"y"});
    Attr(conv, "dilation").mutable_ints()->add_values(std::numeric_limits<int64_t>::max());
    EXPECT_THAT(BuildError(g, {}), HasSubstr("must be at most 2147483647"));
    Attr(conv, "dilation").mutable_ints()->set_values(0, 1);
    Attr(conv, "groups").set_i(std::numeric_limits<int64_t>::max());
    EXPECT_THAT(BuildError(g, {}), HasSubstr("groups="));
  }
}

}  // namespace
}  // namespace tandem
