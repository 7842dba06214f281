// Builds and validates the IR: from its wire form (tandem.v1.Graph), or piece
// by piece (IrBuilder).
//
// Every check a job can fail happens here, at registration: unknown ops (by
// name, with the node's label), wrong input counts, undefined or redefined
// tensor names, shape and dtype rules (via each op's inference), declared
// output types that differ from the inferred ones, fetches and updates that
// name nothing or mismatch. Errors are INVALID_ARGUMENT with a message a user
// can act on.
#ifndef TANDEM_IR_GRAPH_BUILDER_H_
#define TANDEM_IR_GRAPH_BUILDER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "tandem.pb.h"

namespace tandem {

struct GraphLimits {
  int max_nodes = 200000;
  int max_rank = 8;
  int64_t max_tensor_bytes = int64_t{64} << 30;
};

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype);
v1::DType DTypeToProto(DType dtype);
// OK when `type` is within `limits`: rank, no negative dim, and a byte
// count that neither overflows nor exceeds max_tensor_bytes. Every type of
// a built graph passes it, wire and inferred alike.
absl::Status CheckTensorType(const TensorType& type, const GraphLimits& limits);
// Validates a wire TensorSpec (known dtype, rank and dims in range).
absl::StatusOr<TensorType> TensorTypeFromProto(const v1::TensorSpec& spec, const GraphLimits& limits);
void TensorTypeToProto(const TensorType& type, v1::TensorSpec* spec);

// `persistent` are the job's persistent tensors (name, type, data). Their
// data sizes are checked here too, except for tensors whose bytes travel in
// a frame of their own (Tensor.frame != 0: the server checks those).
absl::StatusOr<Graph> BuildGraph(const v1::Graph& graph,
                                 const google::protobuf::RepeatedPtrField<v1::Tensor>& persistent,
                                 const GraphLimits& limits = {});

// Builds a Graph value by value and node by node, validating each piece as
// it is added, by the rules BuildGraph applies to a wire graph (BuildGraph
// reads the wire graph through it, and the compiler's passes write the
// graphs they rewrite through it, so that a rewritten graph is held to the
// rules a client's graph is). Errors are INVALID_ARGUMENT; a node's name it
// as Node::Describe does. Not thread-safe.
class IrBuilder {
 public:
  explicit IrBuilder(const GraphLimits& limits = {}) : limits_(limits) {}

  // A persistent tensor or a feed named `name` of `type`.
  absl::StatusOr<int> AddPersistent(const std::string& name, const TensorType& type);
  absl::StatusOr<int> AddFeed(const std::string& name, const TensorType& type);
  // A node of `op` reading `inputs` (value ids); infers its outputs' types,
  // checks them against the limits and, where given, `declared`, and defines
  // them as `outputs`. Returns the outputs' ids.
  absl::StatusOr<std::vector<int>> AddNode(const std::string& op, std::vector<int> inputs, Attrs attrs,
                                           const std::vector<std::string>& outputs, std::string label = "",
                                           const std::vector<std::optional<TensorType>>& declared = {});
  absl::Status AddFetch(int value);
  // persistent <- value after every iteration.
  absl::Status AddUpdate(int persistent, int value);

  const Graph& graph() const { return graph_; }
  Graph Build() && { return std::move(graph_); }

 private:
  absl::StatusOr<int> Define(const std::string& name, TensorType type, ValueKind kind, int producer,
                             const std::string& where);

  const GraphLimits limits_;
  Graph graph_;
};

// The wire form of `graph` (feeds, nodes with their attributes, labels and
// declared output types, fetches, updates; persistent tensors are not part
// of tandem.v1.Graph), for tests of passes and for showing a compiled graph.
v1::Graph ToWire(const Graph& graph);
void AttrToProto(const AttrValue& value, v1::AttrValue* out);

}  // namespace tandem

#endif  // TANDEM_IR_GRAPH_BUILDER_H_
