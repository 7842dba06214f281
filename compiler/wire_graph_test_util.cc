#include "compiler/wire_graph_test_util.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/status_macros.h"
#include "ir/graph_builder.h"
#include "kernels/cpu/cpu_program.h"
#include "kernels/half.h"

namespace tandem::testing {

namespace {

size_t ElementSize(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT64:
      return 8;
    case v1::BFLOAT16:
    case v1::FLOAT16:
      return 2;
    default:
      return 4;
  }
}

// n values of `dtype` drawn from [lo, hi) (16-bit ones rounded).
std::string RandomBytes(v1::DType dtype, int64_t n, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::string bytes(n * ElementSize(dtype), '\0');
  for (int64_t i = 0; i < n; ++i) {
    const double v = u(rng);
    char* at = bytes.data() + i * ElementSize(dtype);
    if (dtype == v1::FLOAT64) {
      std::memcpy(at, &v, 8);
    } else if (dtype == v1::FLOAT32) {
      const float f = static_cast<float>(v);
      std::memcpy(at, &f, 4);
    } else {
      const uint16_t h =
          dtype == v1::BFLOAT16 ? BFloat16(static_cast<float>(v)).bits : Float16(static_cast<float>(v)).bits;
      std::memcpy(at, &h, 2);
    }
  }
  return bytes;
}

}  // namespace

Contents RandomFeeds(const v1::Graph& wire, std::mt19937_64& rng, const std::vector<std::string>& positive) {
  Contents feeds;
  for (const v1::TensorSpec& f : wire.feeds()) {
    int64_t n = 1;
    for (int64_t d : f.shape()) n *= d;
    const bool up = std::find(positive.begin(), positive.end(), f.name()) != positive.end();
    feeds[f.name()] = RandomBytes(f.dtype(), n, rng, up ? 0.5 : -1.0, up ? 2.0 : 1.0);
  }
  return feeds;
}

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

std::vector<std::string> Ops(const v1::Graph& g) {
  std::vector<std::string> ops;
  for (const v1::Node& n : g.nodes()) ops.push_back(n.op());
  return ops;
}

}  // namespace tandem::testing
