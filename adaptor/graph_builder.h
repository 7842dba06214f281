// Builds and validates the IR from its wire form (tandem.v1.Graph).
//
// Every check a job can fail happens here, at registration: unknown ops (by
// name, with the node's label), wrong input counts, undefined or redefined
// tensor names, shape and dtype rules (via each op's inference), declared
// output types that differ from the inferred ones, fetches and updates that
// name nothing or mismatch. Errors are INVALID_ARGUMENT with a message a user
// can act on.
#ifndef TANDEM_ADAPTOR_GRAPH_BUILDER_H_
#define TANDEM_ADAPTOR_GRAPH_BUILDER_H_

#include "absl/status/statusor.h"
#include "adaptor/graph.h"
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

}  // namespace tandem

#endif  // TANDEM_ADAPTOR_GRAPH_BUILDER_H_
