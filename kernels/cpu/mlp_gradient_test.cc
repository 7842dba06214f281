// The backward ops of an MLP training step (nll_loss_backward,
// _log_softmax_backward_data, threshold_backward, mm, t, sum.dim_IntList)
// against central finite differences of its forward (addmm, relu,
// _log_softmax, nll_loss_forward), in float64, through BuildGraph and
// RunGraphOnCpu as a job's iteration runs.
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/graph_builder.h"
#include "kernels/cpu/cpu_program.h"
#include "tandem.pb.h"

namespace tandem {
namespace {

constexpr int64_t kBatch = 5, kIn = 4, kHidden = 6, kClasses = 3;

void AddSpec(v1::TensorSpec* spec, const std::string& name, v1::DType dtype, const Shape& shape) {
  spec->set_name(name);
  spec->set_dtype(dtype);
  for (int64_t d : shape) spec->add_shape(d);
}

v1::Node* AddNode(v1::Graph& g, const std::string& op, std::vector<std::string> inputs,
                  std::vector<std::string> outputs) {
  v1::Node* node = g.add_nodes();
  node->set_op(op);
  for (auto& in : inputs) node->add_inputs(in);
  for (auto& out : outputs) node->add_outputs(out);
  return node;
}

void SetInt(v1::Node* node, const std::string& name, int64_t v) { (*node->mutable_attrs())[name].set_i(v); }
void SetInts(v1::Node* node, const std::string& name, std::vector<int64_t> v) {
  auto* ints = (*node->mutable_attrs())[name].mutable_ints();
  for (int64_t x : v) ints->add_values(x);
}

// The MLP step: loss = nll(log_softmax(relu(x W1^T + b1) W2^T + b2), y; w),
// and its gradients with respect to W1, b1, W2, b2.
v1::Graph MlpStep() {
  v1::Graph g;
  AddSpec(g.add_feeds(), "x", v1::FLOAT64, {kBatch, kIn});
  AddSpec(g.add_feeds(), "y", v1::INT64, {kBatch});
  AddSpec(g.add_feeds(), "class_weight", v1::FLOAT64, {kClasses});
  AddNode(g, "t", {"W1"}, {"W1t"});
  AddNode(g, "addmm", {"b1", "x", "W1t"}, {"h"});
  AddNode(g, "relu", {"h"}, {"a"});
  AddNode(g, "t", {"W2"}, {"W2t"});
  AddNode(g, "addmm", {"b2", "a", "W2t"}, {"z"});
  v1::Node* lsm = AddNode(g, "_log_softmax", {"z"}, {"lsm"});
  SetInt(lsm, "dim", 1);
  (*lsm->mutable_attrs())["half_to_float"].set_b(false);
  v1::Node* nll = AddNode(g, "nll_loss_forward", {"lsm", "y", "class_weight"}, {"loss", "total_weight"});
  SetInt(nll, "reduction", 1);
  SetInt(nll, "ignore_index", -100);

  AddNode(g, "ones_like", {"loss"}, {"g_loss"});
  v1::Node* nll_back =
      AddNode(g, "nll_loss_backward", {"g_loss", "lsm", "y", "total_weight", "class_weight"}, {"g_lsm"});
  SetInt(nll_back, "reduction", 1);
  SetInt(nll_back, "ignore_index", -100);
  v1::Node* lsm_back = AddNode(g, "_log_softmax_backward_data", {"g_lsm", "lsm"}, {"g_z"});
  SetInt(lsm_back, "dim", 1);
  (*lsm_back->mutable_attrs())["input_dtype"].set_dtype(v1::FLOAT64);
  AddNode(g, "t", {"g_z"}, {"g_zt"});
  AddNode(g, "mm", {"g_zt", "a"}, {"g_W2"});
  v1::Node* sum2 = AddNode(g, "sum.dim_IntList", {"g_z"}, {"g_b2"});
  SetInts(sum2, "dim", {0});
  AddNode(g, "mm", {"g_z", "W2"}, {"g_a"});
  v1::Node* relu_back = AddNode(g, "threshold_backward", {"g_a", "a"}, {"g_h"});
  (*relu_back->mutable_attrs())["threshold"].set_f(0.0);
  AddNode(g, "t", {"g_h"}, {"g_ht"});
  AddNode(g, "mm", {"g_ht", "x"}, {"g_W1"});
  v1::Node* sum1 = AddNode(g, "sum.dim_IntList", {"g_h"}, {"g_b1"});
  SetInts(sum1, "dim", {0});
  (*sum1->mutable_attrs())["keepdim"].set_b(false);
  for (const char* f : {"loss", "h", "g_W1", "g_b1", "g_W2", "g_b2"}) g.add_fetches(f);
  return g;
}

// Runs the step on the CPU with the given parameter and feed values; returns
// every value's contents by name.
class MlpRunner {
 public:
  MlpRunner(const v1::Graph& wire, const google::protobuf::RepeatedPtrField<v1::Tensor>& persistent) {
    auto graph = BuildGraph(wire, persistent);
    EXPECT_TRUE(graph.ok()) << graph.status();
    graph_ = *std::move(graph);
  }

  std::map<std::string, std::vector<double>> Run(const std::map<std::string, std::vector<double>>& doubles,
                                                 const std::vector<int64_t>& labels) {
    std::vector<std::vector<uint64_t>> buffers(graph_.values.size());
    std::vector<void*> addresses;
    for (size_t v = 0; v < graph_.values.size(); ++v) {
      const Value& value = graph_.values[v];
      buffers[v].assign(value.type.bytes() / 8 + 1, 0);
      addresses.push_back(buffers[v].data());
      if (value.name == "y") {
        std::memcpy(addresses[v], labels.data(), labels.size() * sizeof(int64_t));
      } else if (auto it = doubles.find(value.name); it != doubles.end()) {
        EXPECT_EQ(static_cast<int64_t>(it->second.size()), value.type.numel()) << value.name;
        std::memcpy(addresses[v], it->second.data(), it->second.size() * sizeof(double));
      }
    }
    absl::Status status = cpu::RunGraphOnCpu(graph_, addresses);
    EXPECT_TRUE(status.ok()) << status;
    std::map<std::string, std::vector<double>> out;
    for (size_t v = 0; v < graph_.values.size(); ++v) {
      const Value& value = graph_.values[v];
      if (value.type.dtype != DType::kFloat64) continue;
      const double* p = static_cast<const double*>(addresses[v]);
      out[value.name] = std::vector<double>(p, p + value.type.numel());
    }
    return out;
  }

 private:
  Graph graph_;
};

TEST(MlpGradientTest, BackwardOpsMatchFiniteDifferencesOfTheForward) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto random = [&](int64_t n, double scale) {
    std::vector<double> v(n);
    for (double& x : v) x = scale * normal(rng);
    return v;
  };
  std::map<std::string, std::vector<double>> values = {
      {"W1", random(kHidden * kIn, 0.7)}, {"b1", random(kHidden, 0.3)},     {"W2", random(kClasses * kHidden, 0.7)},
      {"b2", random(kClasses, 0.3)},      {"x", random(kBatch * kIn, 1.0)}, {"class_weight", {0.5, 1.0, 2.0}},
  };
  const std::vector<int64_t> labels = {0, 2, -100, 1, 2};  // one ignored sample

  google::protobuf::RepeatedPtrField<v1::Tensor> persistent;
  for (auto [name, shape] : std::vector<std::pair<std::string, Shape>>{
           {"W1", {kHidden, kIn}}, {"b1", {kHidden}}, {"W2", {kClasses, kHidden}}, {"b2", {kClasses}}}) {
    v1::Tensor* t = persistent.Add();
    AddSpec(t->mutable_spec(), name, v1::FLOAT64, shape);
    t->set_data(std::string(reinterpret_cast<const char*>(values[name].data()), values[name].size() * 8));
  }
  MlpRunner runner(MlpStep(), persistent);
  const auto base = runner.Run(values, labels);
  ASSERT_EQ(base.count("loss"), 1u);
  // Finite differences need every pre-activation away from relu's kink.
  for (double h : base.at("h")) ASSERT_GT(std::abs(h), 1e-3) << "reseed: a pre-activation sits on the kink";

  constexpr double kEps = 1e-6;
  for (const char* param : {"W1", "b1", "W2", "b2"}) {
    const std::vector<double>& analytic = base.at(std::string("g_") + param);
    ASSERT_EQ(analytic.size(), values[param].size()) << param;
    for (size_t i = 0; i < analytic.size(); ++i) {
      auto plus = values;
      plus[param][i] += kEps;
      auto minus = values;
      minus[param][i] -= kEps;
      const double numeric =
          (runner.Run(plus, labels).at("loss")[0] - runner.Run(minus, labels).at("loss")[0]) / (2 * kEps);
      EXPECT_NEAR(analytic[i], numeric, 1e-7 + 1e-6 * std::abs(numeric)) << "d loss / d " << param << "[" << i << "]";
    }
  }
  // The gradient is not trivially zero.
  double norm = 0;
  for (double g : base.at("g_W1")) norm += g * g;
  EXPECT_GT(norm, 1e-6);
}

}  // namespace
}  // namespace tandem
