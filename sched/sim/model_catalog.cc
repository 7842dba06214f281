#include "sched/sim/model_catalog.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::sched::sim {
namespace {

constexpr double kGB = 1e9;

ModelSpec Spec(const std::string& name, double solo_ms, double parameters_millions, double peak_gb, int ops) {
  ModelSpec spec;
  spec.name = name;
  spec.solo_seconds = solo_ms * 1e-3;
  // fp32 weights, gradients and SGD momentum stay resident.
  spec.persistent_bytes = static_cast<uint64_t>(parameters_millions * 1e6 * 4 * 3);
  const uint64_t peak = static_cast<uint64_t>(peak_gb * kGB);
  spec.ephemeral_bytes = peak > spec.persistent_bytes ? peak - spec.persistent_bytes : 0;
  spec.ops_per_iteration = ops;
  return spec;
}

}  // namespace

ModelCatalog ModelCatalog::Reference() {
  ModelCatalog catalog;
  // Parameters: fcn5 784-4096x4-10 (53.6M), ResNet-50 (25.6M), VGG-19
  // (143.7M), 2x1024 LSTM with a 10k vocabulary (37.0M). Ops per iteration:
  // forward, backward and optimizer kernels, roughly.
  catalog.Add(Spec("fcn5", 2.96, 53.6, 0.7, 40));
  catalog.Add(Spec("resnet50", 21.3, 25.6, 7.9, 500));
  catalog.Add(Spec("vgg19", 30.9, 143.7, 6.0, 150));
  catalog.Add(Spec("lstm", 7.7, 37.0, 0.8, 400));
  return catalog;
}

absl::StatusOr<const ModelSpec*> ModelCatalog::Find(const std::string& name) const {
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown model '", name, "'; known: ", absl::StrJoin(Names(), ", ")));
  }
  return &it->second;
}

std::vector<std::string> ModelCatalog::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, spec] : models_) names.push_back(name);
  return names;
}

absl::StatusOr<InterferenceTable> InterferenceTable::Preset(const std::string& name) {
  // Measured pairs (GPU.md): (a, b) -> (r(a,b), r(b,a)).
  struct Pair {
    const char* a;
    const char* b;
    double rab;
    double rba;
  };
  if (name == "mps") {
    // Unmeasured pairs (resnet50 with the others, vgg19 with itself): 1.6,
    // between the measured same-model (1.44-1.63) and mixed (1.26-2.94) pairs.
    InterferenceTable table(1.6);
    for (const Pair& p : {Pair{"fcn5", "fcn5", 1.565, 1.565}, Pair{"lstm", "lstm", 1.625, 1.625},
                          Pair{"resnet50", "resnet50", 1.44, 1.44}, Pair{"fcn5", "vgg19", 2.40, 1.36},
                          Pair{"vgg19", "lstm", 1.26, 2.94}, Pair{"fcn5", "lstm", 1.33, 1.83}}) {
      table.Set(p.a, p.b, p.rab);
      table.Set(p.b, p.a, p.rba);
    }
    return table;
  }
  if (name == "timeslice") {
    InterferenceTable table(2.0);
    for (const Pair& p :
         {Pair{"fcn5", "fcn5", 1.94, 1.94}, Pair{"lstm", "lstm", 2.00, 2.00}, Pair{"resnet50", "resnet50", 1.86, 1.86},
          Pair{"fcn5", "vgg19", 2.53, 1.77}, Pair{"vgg19", "lstm", 2.00, 2.16}, Pair{"fcn5", "lstm", 2.09, 1.74}}) {
      table.Set(p.a, p.b, p.rab);
      table.Set(p.b, p.a, p.rba);
    }
    return table;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown interference preset '", name, "'; valid: mps, timeslice"));
}

void InterferenceTable::SetAll(double r) {
  default_r_ = r;
  r_.clear();
}

double InterferenceTable::R(const std::string& a, const std::string& b) const {
  auto it = r_.find({a, b});
  return it == r_.end() ? default_r_ : it->second;
}

}  // namespace tandem::sched::sim
