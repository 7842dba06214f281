// Helpers for tests of the compiler's graph passes, written over the wire
// form of a graph (tandem.v1.Graph): building one by hand, running a pass
// on it, and running one on the CPU backend to compare a rewritten graph's
// results with the original's.
#ifndef TANDEM_COMPILER_WIRE_GRAPH_TEST_UTIL_H_
#define TANDEM_COMPILER_WIRE_GRAPH_TEST_UTIL_H_

#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "tandem.pb.h"

namespace tandem::testing {

using Persistent = google::protobuf::RepeatedPtrField<v1::Tensor>;
// Tensor bytes by name.
using Contents = std::map<std::string, std::string>;

void AddSpec(v1::TensorSpec* spec, const std::string& name, v1::DType dtype, const Shape& shape);

// Appends a node of one output (labelled with the output's name).
v1::Node* AddNode(v1::Graph& g, const std::string& op, const std::vector<std::string>& inputs,
                  const std::string& output);

// The ops of `g`'s nodes, in order.
std::vector<std::string> Ops(const v1::Graph& g);

// Builds `wire` with `persistent` (names, types and data) and runs it once
// on the CPU with `feeds`; returns the bytes of every fetchable tensor and
// of every persistent tensor after the run (updates applied).
absl::StatusOr<Contents> RunWireGraphOnCpu(const v1::Graph& wire, const Persistent& persistent, const Contents& feeds);

// Random contents for every feed of `wire` in its dtype (16-bit values
// rounded): uniform in [-1, 1), or in [0.5, 2) for the feeds named in
// `positive` (variances).
Contents RandomFeeds(const v1::Graph& wire, std::mt19937_64& rng, const std::vector<std::string>& positive = {});

// A graph pass of the compiler (FoldTransposes, FuseElementwise).
using IrPass = absl::StatusOr<Graph> (*)(const Graph&);

// `wire` built with `persistent` (BuildGraph), rewritten by `pass`, and in
// wire form again (ToWire: every node output declared).
absl::StatusOr<v1::Graph> ApplyPass(const v1::Graph& wire, const Persistent& persistent, IrPass pass);
// `wire` built and written back unchanged: what ApplyPass gives for a pass
// that changes nothing.
absl::StatusOr<v1::Graph> Normalized(const v1::Graph& wire, const Persistent& persistent);

}  // namespace tandem::testing

#endif  // TANDEM_COMPILER_WIRE_GRAPH_TEST_UTIL_H_
