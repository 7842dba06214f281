// What the simulator knows about the device: each model's solo iteration
// time, memory footprint and op count, and the degradation coefficients
// r(A,B) of running two models side by side.
//
// Defaults are the H200 reference figures (PyTorch 2.11 eager, fp32): solo
// ms/iter fcn5 2.96, resnet50 21.3, vgg19 30.9, lstm 7.7; peak memory 0.7,
// 7.9, 6.0, 0.8 GB. The peak is split into persistent state (weights,
// gradients and SGD momentum: 3 x 4 bytes per parameter) and the
// ephemeral rest. Two presets of r: "mps" (kernels of both jobs run
// concurrently, as lanes on separate streams of one context do) and
// "timeslice" (the driver alternates the two contexts), from measured pairs;
// pairs that were not measured get a configurable default (stated in
// Describe()).
//
// Value types; immutable once built; safe to share between threads.
#ifndef TANDEM_SCHED_SIM_MODEL_CATALOG_H_
#define TANDEM_SCHED_SIM_MODEL_CATALOG_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::sched::sim {

struct ModelSpec {
  std::string name;
  double solo_seconds = 0;  // one iteration alone on the device
  uint64_t persistent_bytes = 0;
  uint64_t ephemeral_bytes = 0;  // one iteration's planned peak
  int ops_per_iteration = 1;     // op boundaries, for op-granularity yields
};

class ModelCatalog {
 public:
  // fcn5, resnet50, vgg19, lstm with the reference figures.
  static ModelCatalog Reference();

  void Add(const ModelSpec& spec) { models_[spec.name] = spec; }
  // NOT_FOUND naming the known models.
  absl::StatusOr<const ModelSpec*> Find(const std::string& name) const;
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, ModelSpec> models_;
};

// r(a, b): a's iteration time beside b / alone. With several co-runners the
// slowdowns add: a's iteration time is solo x (1 + sum over running b of
// (r(a,b) - 1)).
class InterferenceTable {
 public:
  explicit InterferenceTable(double default_r) : default_r_(default_r) {}

  // "mps" or "timeslice"; INVALID_ARGUMENT otherwise.
  static absl::StatusOr<InterferenceTable> Preset(const std::string& name);

  void Set(const std::string& a, const std::string& b, double r) { r_[{a, b}] = r; }
  // Sets r for every ordered pair, measured or not.
  void SetAll(double r);
  double R(const std::string& a, const std::string& b) const;
  bool Measured(const std::string& a, const std::string& b) const { return r_.count({a, b}) > 0; }
  double default_r() const { return default_r_; }

 private:
  double default_r_;
  std::map<std::pair<std::string, std::string>, double> r_;
};

}  // namespace tandem::sched::sim

#endif  // TANDEM_SCHED_SIM_MODEL_CATALOG_H_
