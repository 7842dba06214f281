#include "compiler/wire_graph_test_util.h"

#include <cstdint>
#include <cstring>

#include "base/status_macros.h"
#include "ir/graph_builder.h"
#include "kernels/cpu/cpu_program.h"

namespace tandem::testing {

void AddSpec(v1::TensorSpec* spec, const std::string& name, v1::DType dtype, const Shape& shape) {
  spec->set_name(name);
  spec->set_dtype(dtype);
  for (int64_t d : shape) spec->add_shape(d);
}

v1::Node* AddNode(v1::Graph& g, const std::string& op, const std::vector<std::string>& inputs,
                  const std::string& output) {
  v1::Node* node = g.add_nodes();
  node->set_op(op);
  node->set_label(output);
  for (const std::string& in : inputs) node->add_inputs(in);
  node->add_outputs(output);
  return node;
}

absl::StatusOr<Contents> RunWireGraphOnCpu(const v1::Graph& wire, const Persistent& persistent, const Contents& feeds) {
  ASSIGN_OR_RETURN(Graph graph, BuildGraph(wire, persistent));
  std::vector<std::vector<uint64_t>> buffers(graph.values.size());
  std::vector<void*> addresses;
  for (size_t v = 0; v < graph.values.size(); ++v) {
    buffers[v].assign(graph.values[v].type.bytes() / 8 + 1, 0);
    addresses.push_back(buffers[v].data());
  }
  for (const v1::Tensor& t : persistent) {
    std::memcpy(addresses[graph.Find(t.spec().name())], t.data().data(), t.data().size());
  }
  for (const auto& [name, bytes] : feeds) {
    const int id = graph.Find(name);
    if (id < 0 || graph.values[id].type.bytes() != bytes.size()) {
      return absl::InvalidArgumentError("feed " + name + " does not fit the graph");
    }
    std::memcpy(addresses[id], bytes.data(), bytes.size());
  }
  RETURN_IF_ERROR(cpu::RunGraphOnCpu(graph, addresses));
  Contents out;
  auto read = [&](int id) {
    out[graph.values[id].name] = std::string(static_cast<const char*>(addresses[id]), graph.values[id].type.bytes());
  };
  for (int id : graph.fetchable) read(id);
  for (int id : graph.persistents) read(id);
  return out;
}

absl::StatusOr<v1::Graph> ApplyPass(const v1::Graph& wire, const Persistent& persistent, IrPass pass) {
  ASSIGN_OR_RETURN(Graph graph, BuildGraph(wire, persistent));
  ASSIGN_OR_RETURN(Graph passed, pass(graph));
  return ToWire(passed);
}

absl::StatusOr<v1::Graph> Normalized(const v1::Graph& wire, const Persistent& persistent) {
  ASSIGN_OR_RETURN(Graph graph, BuildGraph(wire, persistent));
  return ToWire(graph);
}

}  // namespace tandem::testing
