#include "compiler/fuse_elementwise.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "compiler/graph_rewriter.h"
#include "compiler/value_uses.h"
#include "ir/ops/fused_program.h"

namespace tandem {
namespace {

// A fusable node, as one instruction of a fused program.
struct Candidate {
  FusedOpcode op;
  double alpha = 1.0;
  double other = 0.0;
};

std::optional<FusedOpcode> OpcodeOf(absl::string_view op) {
  static const auto* opcodes = new absl::flat_hash_map<std::string, FusedOpcode>{
      {"add.Tensor", FusedOpcode::kAdd},
      {"sub.Tensor", FusedOpcode::kSub},
      {"mul.Tensor", FusedOpcode::kMul},
      {"div.Tensor", FusedOpcode::kDiv},
      {"add.Scalar", FusedOpcode::kAddScalar},
      {"sub.Scalar", FusedOpcode::kSubScalar},
      {"mul.Scalar", FusedOpcode::kMulScalar},
      {"div.Scalar", FusedOpcode::kDivScalar},
      {"neg", FusedOpcode::kNeg},
      {"sqrt", FusedOpcode::kSqrt},
      {"maximum", FusedOpcode::kMaximum},
      {"minimum", FusedOpcode::kMinimum},
      {"relu", FusedOpcode::kRelu},
      {"threshold_backward", FusedOpcode::kThresholdBackward},
  };
  auto it = opcodes->find(op);
  if (it == opcodes->end()) return std::nullopt;
  return it->second;
}

bool ReadsRegister(FusedOpcode op) {
  return op == FusedOpcode::kAdd || op == FusedOpcode::kSub || op == FusedOpcode::kMul || op == FusedOpcode::kDiv ||
         op == FusedOpcode::kMaximum || op == FusedOpcode::kMinimum || op == FusedOpcode::kThresholdBackward;
}

bool IsHalfDType(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// Whether a fused program of output type `out` can read `in`: of `out`'s
// type, or rank 0 of its dtype, or (16-bit `out` of rank > 0, whose fused
// node has an input of rank > 0 that fixes its dtype) rank 0 of any float
// dtype, converted as the unfused op converts it.
bool FusableInput(const TensorType& in, const TensorType& out) {
  if (in == out) return true;
  if (in.rank() != 0) return false;
  if (in.dtype == out.dtype) return true;
  return IsHalfDType(out.dtype) && out.rank() > 0 && IsFloating(in.dtype);
}
bool HasAlpha(FusedOpcode op) {
  return op == FusedOpcode::kAdd || op == FusedOpcode::kSub || op == FusedOpcode::kAddScalar ||
         op == FusedOpcode::kSubScalar;
}
bool HasOther(FusedOpcode op) {
  return op == FusedOpcode::kAddScalar || op == FusedOpcode::kSubScalar || op == FusedOpcode::kMulScalar ||
         op == FusedOpcode::kDivScalar;
}

std::optional<Candidate> AsCandidate(const Graph& g, const Node& node) {
  std::optional<FusedOpcode> op = OpcodeOf(node.def->name);
  if (!op.has_value() || node.outputs.size() != 1) return std::nullopt;
  if (node.inputs.size() != (ReadsRegister(*op) ? 2u : 1u)) return std::nullopt;
  const TensorType& out = g.values[node.outputs[0]].type;
  if (out.dtype != DType::kFloat32 && out.dtype != DType::kFloat64 && !IsHalfDType(out.dtype)) return std::nullopt;
  for (int v : node.inputs) {
    if (!FusableInput(g.values[v].type, out)) return std::nullopt;
  }
  Candidate c{*op};
  if (HasAlpha(*op)) {
    auto alpha = node.attrs.GetFloat("alpha", 1.0);
    if (!alpha.ok()) return std::nullopt;
    c.alpha = *alpha;
  }
  if (HasOther(*op)) {
    auto other = node.attrs.GetFloat("other");
    if (!other.ok()) return std::nullopt;
    c.other = *other;
  }
  if (*op == FusedOpcode::kThresholdBackward) {
    auto threshold = node.attrs.GetFloat("threshold");
    if (!threshold.ok()) return std::nullopt;
    c.alpha = *threshold;  // the program keeps it where add's alpha goes
  }
  return c;
}

class DisjointSets {
 public:
  explicit DisjointSets(int n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  int Find(int x) {
    while (parent_[x] != x) {
      parent_[x] = parent_[parent_[x]];
      x = parent_[x];
    }
    return x;
  }
  void Union(int a, int b) {
    a = Find(a);
    b = Find(b);
    if (a != b) parent_[std::max(a, b)] = std::min(a, b);
  }

 private:
  std::vector<int> parent_;
};

class Fuser {
 public:
  explicit Fuser(const Graph& g) : g_(g), uses_(g) {}

  absl::StatusOr<Graph> Run() {
    const int num_nodes = static_cast<int>(g_.nodes.size());
    std::vector<std::optional<Candidate>> candidates(num_nodes);
    for (int i = 0; i < num_nodes; ++i) candidates[i] = AsCandidate(g_, g_.nodes[i]);
    DisjointSets sets(num_nodes);
    for (int i = 0; i < num_nodes; ++i) {
      if (!candidates[i].has_value()) continue;
      const TensorType& out = OutputType(i);
      for (int v : g_.nodes[i].inputs) {
        const int p = g_.values[v].producer;
        if (p >= 0 && candidates[p].has_value() && OutputType(p) == out) sets.Union(i, p);
      }
    }
    // Groups in order of their first node; members in node order.
    std::vector<std::vector<int>> groups;
    absl::flat_hash_map<int, size_t> group_of_root;
    for (int i = 0; i < num_nodes; ++i) {
      if (!candidates[i].has_value()) continue;
      auto [it, inserted] = group_of_root.emplace(sets.Find(i), groups.size());
      if (inserted) groups.emplace_back();
      groups[it->second].push_back(i);
    }

    std::vector<int> part_of(num_nodes, -1);  // index into parts_
    for (const std::vector<int>& group : groups) {
      if (group.size() < 2) continue;
      size_t next = 0;
      while (next < group.size()) {
        std::vector<int> part = {group[next]};
        while (next + part.size() < group.size() && CanExtend(part, group[next + part.size()])) {
          part.push_back(group[next + part.size()]);
        }
        // A value read only by later members is no output, so the output
        // count can fall as a part grows (an optimizer step's intermediate
        // values): the part is the longest prefix within the limit.
        while (part.size() > 1 && static_cast<int>(Outputs(part).size()) > kFusedMaxOutputs) part.pop_back();
        ClosePart(part, part_of);
        next += part.size();
      }
    }
    GraphRewriter out(g_);
    for (int i = 0; i < num_nodes; ++i) {
      if (part_of[i] < 0) {
        RETURN_IF_ERROR(out.Copy(g_.nodes[i]));
      } else if (parts_[part_of[i]].back() == i) {
        RETURN_IF_ERROR(AddFusedNode(parts_[part_of[i]], candidates, out));
      }
    }
    return std::move(out).Finish();
  }

 private:
  const TensorType& OutputType(int node) const { return g_.values[g_.nodes[node].outputs[0]].type; }
  int ValueOf(int node) const { return g_.nodes[node].outputs[0]; }

  // Values of `part` read outside it (or fetched or updated), in node order.
  std::vector<int> Outputs(const std::vector<int>& part) const {
    std::vector<int> outputs;
    for (int m : part) {
      const int v = ValueOf(m);
      bool outside = uses_.kept[v];
      for (int r : uses_.readers[v]) outside = outside || !std::binary_search(part.begin(), part.end(), r);
      if (outside) outputs.push_back(v);
    }
    return outputs;
  }

  // Distinct values read by `part` that it does not define, in first-read order.
  std::vector<int> Inputs(const std::vector<int>& part) const {
    std::vector<int> inputs;
    for (int m : part) {
      for (int v : g_.nodes[m].inputs) {
        const int p = g_.values[v].producer;
        if (p >= 0 && std::binary_search(part.begin(), part.end(), p)) continue;
        if (std::find(inputs.begin(), inputs.end(), v) == inputs.end()) inputs.push_back(v);
      }
    }
    return inputs;
  }

  // Whether node `next` (after every member) may join `part`: the
  // instruction and input limits hold (both only grow with the part), and
  // no node outside the extended part that comes before `next` reads a
  // value of the part (the fused node will sit at `next`). The output limit
  // is the caller's.
  bool CanExtend(const std::vector<int>& part, int next) const {
    if (static_cast<int>(part.size()) + 1 > kFusedMaxInstructions) return false;
    std::vector<int> extended = part;
    extended.push_back(next);
    for (int m : part) {
      for (int r : uses_.readers[ValueOf(m)]) {
        if (r < next && !std::binary_search(part.begin(), part.end(), r)) return false;
      }
    }
    return static_cast<int>(Inputs(extended).size()) <= kFusedMaxInputs;
  }

  void ClosePart(const std::vector<int>& part, std::vector<int>& part_of) {
    if (part.size() < 2) return;
    for (int m : part) part_of[m] = static_cast<int>(parts_.size());
    parts_.push_back(part);
  }

  absl::Status AddFusedNode(const std::vector<int>& part, const std::vector<std::optional<Candidate>>& candidates,
                            GraphRewriter& out) const {
    const std::vector<int> inputs = Inputs(part);
    std::vector<int> outputs = Outputs(part);
    if (outputs.empty()) outputs.push_back(ValueOf(part.back()));
    const int num_inputs = static_cast<int>(inputs.size());
    absl::flat_hash_map<int, int> register_of;  // value id -> register
    for (int k = 0; k < num_inputs; ++k) register_of[inputs[k]] = k;

    std::vector<int64_t> code, output_regs;
    std::vector<double> consts;
    auto add_const = [&](double value) -> int64_t {
      consts.push_back(value);
      return static_cast<int64_t>(consts.size()) - 1;
    };
    std::vector<std::string> labels;
    for (size_t t = 0; t < part.size(); ++t) {
      const Node& node = g_.nodes[part[t]];
      const Candidate& c = *candidates[part[t]];
      const int dst = num_inputs + static_cast<int>(t);
      int64_t a = register_of.at(node.inputs[0]);
      int64_t b = -1;
      int64_t k = -1;
      if (ReadsRegister(c.op)) b = register_of.at(node.inputs[1]);
      if (HasOther(c.op)) b = add_const(c.other);
      if (HasAlpha(c.op) && c.alpha != 1.0) k = add_const(c.alpha);
      if (c.op == FusedOpcode::kThresholdBackward) k = add_const(c.alpha);
      for (int64_t field : {static_cast<int64_t>(c.op), int64_t{dst}, a, b, k}) code.push_back(field);
      register_of[ValueOf(part[t])] = dst;
      labels.push_back(node.label.empty() ? node.op : node.label);
    }
    std::vector<std::string> names;
    for (int v : outputs) {
      names.push_back(g_.values[v].name);
      output_regs.push_back(register_of.at(v));
    }
    Attrs attrs;
    attrs.Set("code", std::move(code));
    attrs.Set("consts", std::move(consts));
    attrs.Set("outputs", std::move(output_regs));
    return out.Add(kFusedElementwiseOp, inputs, std::move(attrs), names, outputs,
                   absl::StrCat("fused(", absl::StrJoin(labels, "; "), ")"));
  }

  const Graph& g_;
  const ValueUses uses_;
  std::vector<std::vector<int>> parts_;  // each: members in node order
};

}  // namespace

absl::StatusOr<Graph> FuseElementwise(const Graph& graph) { return Fuser(graph).Run(); }

}  // namespace tandem
