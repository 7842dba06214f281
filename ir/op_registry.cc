#include "ir/op_registry.h"
#include "absl/strings/string_view.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace tandem {

const OpRegistry& OpRegistry::Global() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    RegisterElementwiseOps(*r);
    RegisterLinalgOps(*r);
    RegisterReductionOps(*r);
    RegisterShapeOps(*r);
    RegisterLossOps(*r);
    RegisterFactoryOps(*r);
    RegisterConvolutionOps(*r);
    RegisterPoolingOps(*r);
    RegisterBatchNormOps(*r);
    RegisterIndexingOps(*r);
    RegisterSlicingOps(*r);  // after RegisterShapeOps: it aliases "view"
    RegisterActivationOps(*r);
    RegisterComparisonOps(*r);
    RegisterNormalizationOps(*r);
    RegisterAttentionOps(*r);
    RegisterFusedOps(*r);
    RegisterRecurrentOps(*r);
    RegisterMathOps(*r);
    RegisterGroupNormOps(*r);
    RegisterSpatialOps(*r);
    RegisterAdvancedIndexOps(*r);
    RegisterStridedOps(*r);
    RegisterRandomOps(*r);
    RegisterTestOps(*r);
    return r;
  }();
  return *registry;
}

void OpRegistry::Register(OpDef def) {
  std::string name = def.name;
  auto [it, inserted] = ops_.emplace(name, std::make_shared<const OpDef>(std::move(def)));
  if (!inserted) {
    std::fprintf(stderr, "op '%s' registered twice\n", name.c_str());
    std::abort();
  }
}

void OpRegistry::Alias(absl::string_view existing, absl::string_view alias) {
  auto it = ops_.find(existing);
  if (it == ops_.end()) {
    std::fprintf(stderr, "alias of unknown op '%s'\n", std::string(existing).c_str());
    std::abort();
  }
  auto def = it->second;
  if (!ops_.emplace(std::string(alias), def).second) {
    std::fprintf(stderr, "op '%s' registered twice\n", std::string(alias).c_str());
    std::abort();
  }
}

const OpDef* OpRegistry::Find(absl::string_view name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

std::vector<std::string> OpRegistry::Names() const {
  std::vector<std::string> names;
  names.reserve(ops_.size());
  for (const auto& [name, def] : ops_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

bool OpChecksData(absl::string_view op) {
  // Aliases (_unsafe_index.Tensor, _unsafe_index_put) check as their ops do.
  const OpDef* def = OpRegistry::Global().Find(op);
  if (def != nullptr) op = def->name;
  return op == "nll_loss_forward" || op == "nll_loss_backward" || op == "embedding" ||
         op == "embedding_dense_backward" || op == "gather" || op == "scatter.value" || op == "scatter.src" ||
         op == "index_select" || op == "index_put" || op == "index.Tensor" || op == "scatter_add" ||
         op == "scatter_reduce.two" || op == "masked_scatter";
}

}  // namespace tandem
