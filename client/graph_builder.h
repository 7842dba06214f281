// Builds a job's registration (iteration graph, persistent tensors, hints)
// on the client side.
//
//   GraphBuilder b("mlp");
//   auto x = b.Feed("x", v1::FLOAT32, {256, 784});
//   auto w = b.Persistent("w1", HostTensor::Floats({784, 128}, init));
//   auto h = b.Op("mm", {x, w});
//   b.Fetch(h);
//   v1::RegisterJobRequest request = std::move(b).Build();
//
// Names of node outputs are generated ("t0", "t1", ...) unless given. The
// daemon infers every output's type and validates the whole graph at
// registration. Not thread-safe.
#ifndef TANDEM_CLIENT_GRAPH_BUILDER_H_
#define TANDEM_CLIENT_GRAPH_BUILDER_H_

#include <string>
#include <vector>

#include "client/host_tensor.h"
#include "tandem.pb.h"

namespace tandem::client {

class GraphBuilder {
 public:
  explicit GraphBuilder(std::string job_name);

  std::string Feed(std::string name, v1::DType dtype, std::vector<int64_t> shape);
  std::string Persistent(std::string name, HostTensor initial);
  // A node with one output; returns the output's name.
  std::string Op(const std::string& op, std::vector<std::string> inputs, const Attrs& attrs = {},
                 std::string output = "");
  // A node with several outputs; `names` may name some of them (the rest
  // are generated).
  std::vector<std::string> OpN(const std::string& op, std::vector<std::string> inputs, const Attrs& attrs,
                               int num_outputs, std::vector<std::string> names = {});
  void Fetch(const std::string& name);
  void Update(const std::string& persistent, const std::string& value);
  v1::JobHints& hints() { return *request_.mutable_hints(); }

  v1::RegisterJobRequest Build() &&;

 private:
  std::string NextName();
  v1::RegisterJobRequest request_;
  int next_name_ = 0;
};

}  // namespace tandem::client

#endif  // TANDEM_CLIENT_GRAPH_BUILDER_H_
