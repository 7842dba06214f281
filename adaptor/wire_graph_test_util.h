// Helpers for tests of passes over the wire form of a graph
// (tandem.v1.Graph): building one by hand, and running one on the CPU
// backend to compare a rewritten graph's results with the original's.
#ifndef TANDEM_ADAPTOR_WIRE_GRAPH_TEST_UTIL_H_
#define TANDEM_ADAPTOR_WIRE_GRAPH_TEST_UTIL_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "adaptor/graph.h"
#include "tandem.pb.h"

namespace tandem::testing {

using Persistent = google::protobuf::RepeatedPtrField<v1::Tensor>;
// Tensor bytes by name.
using Contents = std::map<std::string, std::string>;

void AddSpec(v1::TensorSpec* spec, const std::string& name, v1::DType dtype, const Shape& shape);

// Appends a node of one output (labelled with the output's name).
v1::Node* AddNode(v1::Graph& g, const std::string& op, const std::vector<std::string>& inputs,
                  const std::string& output);

// Builds `wire` with `persistent` (names, types and data) and runs it once
// on the CPU with `feeds`; returns the bytes of every fetchable tensor and
// of every persistent tensor after the run (updates applied).
absl::StatusOr<Contents> RunWireGraphOnCpu(const v1::Graph& wire, const Persistent& persistent,
                                           const Contents& feeds);

}  // namespace tandem::testing

#endif  // TANDEM_ADAPTOR_WIRE_GRAPH_TEST_UTIL_H_
