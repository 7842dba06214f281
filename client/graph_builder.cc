#include "client/graph_builder.h"

#include "absl/strings/str_cat.h"

namespace tandem::client {

GraphBuilder::GraphBuilder(std::string job_name) { request_.set_name(std::move(job_name)); }

std::string GraphBuilder::NextName() { return absl::StrCat("t", next_name_++); }

std::string GraphBuilder::Feed(std::string name, v1::DType dtype, std::vector<int64_t> shape) {
  v1::TensorSpec* spec = request_.mutable_graph()->add_feeds();
  spec->set_name(name);
  spec->set_dtype(dtype);
  for (int64_t d : shape) spec->add_shape(d);
  return name;
}

std::string GraphBuilder::Persistent(std::string name, HostTensor initial) {
  initial.ToProto(name, request_.add_persistent());
  return name;
}

std::string GraphBuilder::Op(const std::string& op, std::vector<std::string> inputs, const Attrs& attrs,
                             std::string output) {
  if (output.empty()) output = NextName();
  v1::Node* node = request_.mutable_graph()->add_nodes();
  node->set_op(op);
  for (auto& in : inputs) node->add_inputs(std::move(in));
  node->add_outputs(output);
  for (const auto& [name, value] : attrs) (*node->mutable_attrs())[name] = value;
  return output;
}

std::vector<std::string> GraphBuilder::OpN(const std::string& op, std::vector<std::string> inputs, const Attrs& attrs,
                                           int num_outputs, std::vector<std::string> names) {
  v1::Node* node = request_.mutable_graph()->add_nodes();
  node->set_op(op);
  for (auto& in : inputs) node->add_inputs(std::move(in));
  std::vector<std::string> outputs;
  for (int i = 0; i < num_outputs; ++i) {
    outputs.push_back(i < static_cast<int>(names.size()) && !names[i].empty() ? names[i] : NextName());
    node->add_outputs(outputs.back());
  }
  for (const auto& [name, value] : attrs) (*node->mutable_attrs())[name] = value;
  return outputs;
}

void GraphBuilder::Fetch(const std::string& name) { request_.mutable_graph()->add_fetches(name); }

void GraphBuilder::Update(const std::string& persistent, const std::string& value) {
  v1::Update* u = request_.mutable_graph()->add_updates();
  u->set_persistent(persistent);
  u->set_value(value);
}

v1::RegisterJobRequest GraphBuilder::Build() && { return std::move(request_); }

}  // namespace tandem::client
