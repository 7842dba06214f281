#include "compiler/graph_rewriter.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tandem {
namespace {

absl::Status Internal(const absl::Status& s) {
  if (s.ok()) return s;
  return absl::InternalError(absl::StrCat("a graph pass produced an invalid graph: ", s.message()));
}

}  // namespace

GraphRewriter::GraphRewriter(const Graph& source, const GraphLimits& limits)
    : source_(source), builder_(limits), map_(source.values.size(), -1) {
  for (int v : source.persistents) {
    auto id = builder_.AddPersistent(source.values[v].name, source.values[v].type);
    if (!id.ok()) status_.Update(Internal(id.status()));
    if (id.ok()) map_[v] = *id;
  }
  for (int v : source.feeds) {
    auto id = builder_.AddFeed(source.values[v].name, source.values[v].type);
    if (!id.ok()) status_.Update(Internal(id.status()));
    if (id.ok()) map_[v] = *id;
  }
}

absl::Status GraphRewriter::Copy(const Node& node) {
  std::vector<std::string> names;
  for (int v : node.outputs) names.push_back(source_.values[v].name);
  return Add(node.op, node.inputs, node.attrs, names, node.outputs, node.label);
}

absl::Status GraphRewriter::Add(const std::string& op, const std::vector<int>& inputs, Attrs attrs,
                                const std::vector<std::string>& names, const std::vector<int>& replaces,
                                std::string label) {
  RETURN_IF_ERROR(status_);
  std::vector<int> mapped;
  for (int v : inputs) {
    if (map_[v] < 0) {
      status_ = absl::InternalError(
          absl::StrCat("a graph pass reads '", source_.values[v].name, "', which it dropped or has not defined yet"));
      return status_;
    }
    mapped.push_back(map_[v]);
  }
  auto outputs = builder_.AddNode(op, std::move(mapped), std::move(attrs), names, std::move(label));
  if (!outputs.ok()) {
    status_ = Internal(outputs.status());
    return status_;
  }
  for (size_t o = 0; o < replaces.size() && o < outputs->size(); ++o) {
    if (replaces[o] >= 0) map_[replaces[o]] = (*outputs)[o];
  }
  return absl::OkStatus();
}

std::vector<int> GraphRewriter::AddNew(const std::string& op, std::vector<int> new_inputs, Attrs attrs,
                                       const std::vector<std::string>& names, std::string label) {
  if (!status_.ok()) return {};
  auto outputs = builder_.AddNode(op, std::move(new_inputs), std::move(attrs), names, std::move(label));
  if (!outputs.ok()) {
    status_ = Internal(outputs.status());
    return {};
  }
  return *std::move(outputs);
}

absl::StatusOr<Graph> GraphRewriter::Finish() && {
  RETURN_IF_ERROR(status_);
  for (int v : source_.fetchable) {
    if (map_[v] < 0)
      return absl::InternalError(absl::StrCat("a graph pass dropped fetch '", source_.values[v].name, "'"));
    RETURN_IF_ERROR(Internal(builder_.AddFetch(map_[v])));
  }
  for (const auto& [target, value] : source_.updates) {
    if (map_[value] < 0) {
      return absl::InternalError(absl::StrCat("a graph pass dropped '", source_.values[value].name,
                                              "', which updates '", source_.values[target].name, "'"));
    }
    RETURN_IF_ERROR(Internal(builder_.AddUpdate(map_[target], map_[value])));
  }
  return std::move(builder_).Build();
}

}  // namespace tandem
