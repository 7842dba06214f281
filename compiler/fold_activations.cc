#include "compiler/fold_activations.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/graph_rewriter.h"
#include "compiler/value_uses.h"

namespace tandem {
namespace {

bool IsBatchNormForward(const std::string& op) {
  return op == "native_batch_norm" || op == "_native_batch_norm_legit_functional";
}

class Folder {
 public:
  Folder(const Graph& g, bool fold_residuals) : g_(g), uses_(g), fold_residuals_(fold_residuals) {}

  absl::StatusOr<Graph> Run() {
    const int num_nodes = static_cast<int>(g_.nodes.size());
    std::vector<int> relu_of(num_nodes, -1);      // batch norm -> the ReLU folded into it
    std::vector<int> residual_of(num_nodes, -1);  // batch norm -> the residual add folded into it
    std::vector<int> add_into(num_nodes, -1);     // residual add -> the batch norm it is folded into
    std::vector<int> mask_of(num_nodes, -1);      // backward -> the threshold_backward folded into it
    std::vector<bool> dropped(num_nodes, false);
    for (int i = 0; i < num_nodes; ++i) {
      const Node& n = g_.nodes[i];
      if (n.op == "relu" && n.inputs.size() == 1) {
        const int v = n.inputs[0];
        int p = g_.values[v].producer;
        if (p >= 0 && add_into[p] >= 0) p = add_into[p];  // relu(bn(x) + residual)
        const bool reads_fold =
            p >= 0 && IsBatchNormForward(g_.nodes[p].op) &&
            (residual_of[p] >= 0 ? g_.nodes[residual_of[p]].outputs[0] == v : g_.nodes[p].outputs[0] == v);
        if (reads_fold && OnlyReader(v, i) && Foldable(g_.nodes[p]) && relu_of[p] < 0) {
          relu_of[p] = i;
          dropped[i] = true;
        }
      } else if (fold_residuals_ && n.op == "add.Tensor" && n.inputs.size() == 2 && n.outputs.size() == 1 &&
                 n.attrs.GetFloat("alpha", 1.0).value_or(0.0) == 1.0) {
        for (int k = 0; k < 2; ++k) {
          const int v = n.inputs[k];
          const int other = n.inputs[1 - k];
          const int p = g_.values[v].producer;
          // The batch norm takes `other` where it stands, so `other` must
          // be defined before it.
          if (p >= 0 && IsBatchNormForward(g_.nodes[p].op) && g_.nodes[p].outputs[0] == v && OnlyReader(v, i) &&
              Foldable(g_.nodes[p]) && relu_of[p] < 0 && residual_of[p] < 0 && other != v &&
              g_.values[other].producer < p && g_.values[other].type == g_.values[v].type &&
              g_.values[n.outputs[0]].type == g_.values[v].type) {
            residual_of[p] = i;
            add_into[i] = p;
            dropped[i] = true;
            break;
          }
        }
      } else if (n.op == "native_batch_norm_backward" && !n.attrs.Has("mask_threshold") && !n.inputs.empty()) {
        const int v = n.inputs[0];
        const int p = g_.values[v].producer;
        if (p >= 0 && g_.nodes[p].op == "threshold_backward" && g_.nodes[p].inputs.size() == 2 && OnlyReader(v, i) &&
            g_.nodes[p].attrs.GetFloat("threshold").ok() &&
            g_.values[g_.nodes[p].inputs[1]].type == g_.values[v].type) {
          mask_of[i] = p;
          dropped[p] = true;
        }
      }
    }
    GraphRewriter out(g_);
    for (int i = 0; i < num_nodes; ++i) {
      const Node& n = g_.nodes[i];
      if (dropped[i]) continue;
      if (relu_of[i] >= 0 || residual_of[i] >= 0) {
        Attrs attrs = n.attrs;
        std::vector<int> inputs = n.inputs;
        std::vector<int> replaces = n.outputs;
        std::string label = Label(n);
        if (residual_of[i] >= 0) {
          const Node& add = g_.nodes[residual_of[i]];
          attrs.Set("residual", true);
          inputs.push_back(add.inputs[add.inputs[0] == n.outputs[0] ? 1 : 0]);
          replaces[0] = add.outputs[0];
          absl::StrAppend(&label, " + ", Label(add));
        }
        if (relu_of[i] >= 0) {
          const Node& relu = g_.nodes[relu_of[i]];
          attrs.Set("relu", true);
          replaces[0] = relu.outputs[0];
          absl::StrAppend(&label, " + ", Label(relu));
        }
        std::vector<std::string> names;
        for (int v : replaces) names.push_back(g_.values[v].name);
        RETURN_IF_ERROR(out.Add(n.op, inputs, std::move(attrs), names, replaces, label));
      } else if (mask_of[i] >= 0) {
        const Node& mask = g_.nodes[mask_of[i]];
        Attrs attrs = n.attrs;
        attrs.Set("mask_threshold", *mask.attrs.GetFloat("threshold"));
        std::vector<int> inputs = n.inputs;
        inputs[0] = mask.inputs[0];
        inputs.push_back(mask.inputs[1]);
        std::vector<std::string> names;
        for (int v : n.outputs) names.push_back(g_.values[v].name);
        RETURN_IF_ERROR(
            out.Add(n.op, inputs, std::move(attrs), names, n.outputs, absl::StrCat(Label(mask), " + ", Label(n))));
      } else {
        RETURN_IF_ERROR(out.Copy(n));
      }
    }
    return std::move(out).Finish();
  }

 private:
  // Whether node `reader` is the only reader of `v` (reading it once), and
  // `v` is neither fetched nor updated.
  bool OnlyReader(int v, int reader) const {
    return !uses_.kept[v] && uses_.readers[v].size() == 1 && uses_.readers[v][0] == reader;
  }
  static std::string Label(const Node& n) { return n.label.empty() ? n.op : n.label; }
  // A batch norm with nothing folded into it yet.
  static bool Foldable(const Node& bn) {
    return !bn.attrs.GetBool("relu", false).value_or(true) && !bn.attrs.GetBool("residual", false).value_or(true);
  }

  const Graph& g_;
  const ValueUses uses_;
  const bool fold_residuals_;
};

}  // namespace

absl::StatusOr<Graph> FoldActivations(const Graph& graph, bool fold_residuals) {
  return Folder(graph, fold_residuals).Run();
}

}  // namespace tandem
