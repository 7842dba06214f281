#include "ir/attrs.h"
#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

template <typename T>
absl::StatusOr<T> Missing(absl::string_view name, const std::optional<T>& fallback) {
  if (fallback.has_value()) return *fallback;
  return absl::InvalidArgumentError(absl::StrCat("missing attribute '", name, "'"));
}

absl::Status WrongType(absl::string_view name, absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' must be ", want));
}

}  // namespace

absl::StatusOr<int64_t> Attrs::GetInt(absl::string_view name, std::optional<int64_t> fallback) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return Missing(name, fallback);
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  if (auto* v = std::get_if<bool>(&it->second)) return *v ? 1 : 0;
  return WrongType(name, "an int");
}

absl::StatusOr<double> Attrs::GetFloat(absl::string_view name, std::optional<double> fallback) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return Missing(name, fallback);
  if (auto* v = std::get_if<double>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
  if (auto* v = std::get_if<bool>(&it->second)) return *v ? 1.0 : 0.0;
  return WrongType(name, "a number");
}

absl::StatusOr<bool> Attrs::GetBool(absl::string_view name, std::optional<bool> fallback) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return Missing(name, fallback);
  if (auto* v = std::get_if<bool>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v != 0;
  return WrongType(name, "a bool");
}

absl::StatusOr<std::vector<int64_t>> Attrs::GetInts(absl::string_view name,
                                                    std::optional<std::vector<int64_t>> fallback) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return Missing(name, fallback);
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return std::vector<int64_t>{*v};
  return WrongType(name, "a list of ints");
}

absl::StatusOr<std::vector<double>> Attrs::GetFloats(absl::string_view name,
                                                     std::optional<std::vector<double>> fallback) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return Missing(name, fallback);
  if (auto* v = std::get_if<std::vector<double>>(&it->second)) return *v;
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) {
    return std::vector<double>(v->begin(), v->end());
  }
  return WrongType(name, "a list of numbers");
}

absl::StatusOr<std::string> Attrs::GetString(absl::string_view name, std::optional<std::string> fallback) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return Missing(name, fallback);
  if (auto* v = std::get_if<std::string>(&it->second)) return *v;
  return WrongType(name, "a string");
}

absl::StatusOr<DType> Attrs::GetDType(absl::string_view name, std::optional<DType> fallback) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return Missing(name, fallback);
  if (auto* v = std::get_if<DType>(&it->second)) return *v;
  return WrongType(name, "a dtype");
}

}  // namespace tandem
