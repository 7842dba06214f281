// Non-tensor arguments of a node (ATen's scalars, dims, flags), by name.
#ifndef TANDEM_IR_ATTRS_H_
#define TANDEM_IR_ATTRS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/dtype.h"

namespace tandem {

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>, DType>;

// Typed lookups with defaults. A present attribute of the wrong type is an
// INVALID_ARGUMENT naming it. An int is accepted where a float is asked for,
// and a single int where a list of ints is asked for (ATen allows both).
class Attrs {
 public:
  void Set(std::string name, AttrValue value) { values_[std::move(name)] = std::move(value); }
  bool Has(absl::string_view name) const { return values_.find(std::string(name)) != values_.end(); }
  const std::map<std::string, AttrValue>& values() const { return values_; }

  absl::StatusOr<int64_t> GetInt(absl::string_view name, std::optional<int64_t> fallback = {}) const;
  absl::StatusOr<double> GetFloat(absl::string_view name, std::optional<double> fallback = {}) const;
  absl::StatusOr<bool> GetBool(absl::string_view name, std::optional<bool> fallback = {}) const;
  absl::StatusOr<std::vector<int64_t>> GetInts(absl::string_view name,
                                               std::optional<std::vector<int64_t>> fallback = {}) const;
  absl::StatusOr<std::vector<double>> GetFloats(absl::string_view name,
                                                std::optional<std::vector<double>> fallback = {}) const;
  absl::StatusOr<std::string> GetString(absl::string_view name, std::optional<std::string> fallback = {}) const;
  absl::StatusOr<DType> GetDType(absl::string_view name, std::optional<DType> fallback = {}) const;

 private:
  std::map<std::string, AttrValue> values_;
};

}  // namespace tandem

#endif  // TANDEM_IR_ATTRS_H_
