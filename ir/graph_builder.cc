#include "ir/graph_builder.h"

#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"

namespace tandem {
namespace {

absl::Status Invalid(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

absl::StatusOr<AttrValue> AttrFromProto(const v1::AttrValue& attr) {
  switch (attr.value_case()) {
    case v1::AttrValue::kI:
      return AttrValue(static_cast<int64_t>(attr.i()));
    case v1::AttrValue::kF:
      return AttrValue(attr.f());
    case v1::AttrValue::kS:
      return AttrValue(attr.s());
    case v1::AttrValue::kB:
      return AttrValue(attr.b());
    case v1::AttrValue::kInts:
      return AttrValue(std::vector<int64_t>(attr.ints().values().begin(), attr.ints().values().end()));
    case v1::AttrValue::kFloats:
      return AttrValue(std::vector<double>(attr.floats().values().begin(), attr.floats().values().end()));
    case v1::AttrValue::kDtype: {
      ASSIGN_OR_RETURN(DType dtype, DTypeFromProto(attr.dtype()));
      return AttrValue(dtype);
    }
    case v1::AttrValue::VALUE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("attribute has no value");
}

}  // namespace

std::string Node::Describe(int index) const {
  if (label.empty()) return absl::StrCat("node ", index, " (", op, ")");
  return absl::StrCat("node ", index, " (", op, " '", label, "')");
}

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return DType::kFloat32;
    case v1::FLOAT64:
      return DType::kFloat64;
    case v1::INT64:
      return DType::kInt64;
    case v1::INT32:
      return DType::kInt32;
    case v1::BOOL:
      return DType::kBool;
    case v1::BFLOAT16:
      return DType::kBFloat16;
    case v1::FLOAT16:
      return DType::kFloat16;
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", static_cast<int>(dtype)));
}

v1::DType DTypeToProto(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return v1::FLOAT32;
    case DType::kFloat64:
      return v1::FLOAT64;
    case DType::kInt64:
      return v1::INT64;
    case DType::kInt32:
      return v1::INT32;
    case DType::kBool:
      return v1::BOOL;
    case DType::kBFloat16:
      return v1::BFLOAT16;
    case DType::kFloat16:
      return v1::FLOAT16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

absl::Status CheckTensorType(const TensorType& type, const GraphLimits& limits) {
  if (type.rank() > limits.max_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(type.ToString(), " has rank ", type.rank(), "; the limit is ", limits.max_rank));
  }
  for (int64_t d : type.shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(ShapeString(type.shape), " has the negative dimension ", d));
    }
  }
  const std::optional<int64_t> bytes = type.CheckedBytes();
  if (!bytes.has_value() || *bytes > limits.max_tensor_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(type.ToString(), " exceeds the tensor size limit of ", limits.max_tensor_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorType> TensorTypeFromProto(const v1::TensorSpec& spec, const GraphLimits& limits) {
  std::string where = absl::StrCat("tensor '", spec.name(), "'");
  auto dtype = DTypeFromProto(spec.dtype());
  if (!dtype.ok()) return Invalid(where, dtype.status().message());
  // The rank first, so that a huge shape list is refused before it is copied.
  if (spec.shape_size() > limits.max_rank) {
    return Invalid(where, absl::StrCat("rank ", spec.shape_size(), " exceeds the limit of ", limits.max_rank));
  }
  TensorType type{*dtype, Shape(spec.shape().begin(), spec.shape().end())};
  absl::Status valid = CheckTensorType(type, limits);
  if (!valid.ok()) return Invalid(where, valid.message());
  return type;
}

void TensorTypeToProto(const TensorType& type, v1::TensorSpec* spec) {
  spec->set_dtype(DTypeToProto(type.dtype));
  spec->clear_shape();
  for (int64_t d : type.shape) spec->add_shape(d);
}

namespace {

// An op's input and output counts against a node's.
absl::Status CheckArity(const OpDef& def, int inputs, int outputs, const std::string& where) {
  if (inputs < def.min_inputs || (def.max_inputs >= 0 && inputs > def.max_inputs)) {
    return Invalid(where, absl::StrCat("takes ", def.min_inputs,
                                       def.max_inputs == def.min_inputs ? ""
                                       : def.max_inputs < 0             ? " or more"
                                                                        : absl::StrCat(" to ", def.max_inputs),
                                       " inputs, got ", inputs));
  }
  if (def.num_outputs != kVariableOutputs && outputs != def.num_outputs) {
    return Invalid(where, absl::StrCat("defines ", def.num_outputs, " outputs, got ", outputs));
  }
  return absl::OkStatus();
}

absl::Status UnknownOp(const std::string& where, const std::string& op, const std::string& label) {
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": unknown op '", op, "'", label.empty() ? "" : absl::StrCat(" in ", label),
                   "; Tandem has no kernel for it (see docs/ops.md for the supported ops)"));
}

}  // namespace

absl::StatusOr<int> IrBuilder::Define(const std::string& name, TensorType type, ValueKind kind, int producer,
                                      const std::string& where) {
  if (name.empty()) return Invalid(where, "a tensor has an empty name");
  int id = static_cast<int>(graph_.values.size());
  if (!graph_.by_name.emplace(name, id).second) {
    return Invalid(where, absl::StrCat("tensor '", name, "' is defined twice"));
  }
  graph_.values.push_back(Value{name, std::move(type), kind, producer});
  return id;
}

absl::StatusOr<int> IrBuilder::AddPersistent(const std::string& name, const TensorType& type) {
  const std::string where = absl::StrCat("persistent tensor '", name, "'");
  if (absl::Status valid = CheckTensorType(type, limits_); !valid.ok()) return Invalid(where, valid.message());
  ASSIGN_OR_RETURN(int id, Define(name, type, ValueKind::kPersistent, -1, where));
  graph_.persistents.push_back(id);
  return id;
}

absl::StatusOr<int> IrBuilder::AddFeed(const std::string& name, const TensorType& type) {
  const std::string where = absl::StrCat("feed '", name, "'");
  if (absl::Status valid = CheckTensorType(type, limits_); !valid.ok()) return Invalid(where, valid.message());
  ASSIGN_OR_RETURN(int id, Define(name, type, ValueKind::kFeed, -1, where));
  graph_.feeds.push_back(id);
  return id;
}

absl::StatusOr<std::vector<int>> IrBuilder::AddNode(const std::string& op, std::vector<int> inputs, Attrs attrs,
                                                    const std::vector<std::string>& outputs, std::string label,
                                                    const std::vector<std::optional<TensorType>>& declared) {
  const int index = static_cast<int>(graph_.nodes.size());
  if (index >= limits_.max_nodes) {
    return absl::InvalidArgumentError(absl::StrCat("graph has more than ", limits_.max_nodes, " nodes"));
  }
  Node node;
  node.op = op;
  node.label = std::move(label);
  node.attrs = std::move(attrs);
  const std::string where = node.Describe(index);
  node.def = OpRegistry::Global().Find(op);
  if (node.def == nullptr) return UnknownOp(where, op, node.label);
  const OpDef& def = *node.def;
  RETURN_IF_ERROR(CheckArity(def, static_cast<int>(inputs.size()), static_cast<int>(outputs.size()), where));
  std::vector<TensorType> input_types;
  for (int id : inputs) {
    if (id < 0 || id >= static_cast<int>(graph_.values.size())) {
      return absl::InternalError(absl::StrCat(where, ": input value ", id, " does not exist"));
    }
    input_types.push_back(graph_.values[id].type);
  }
  node.inputs = std::move(inputs);
  auto inferred = def.infer(node.attrs, input_types);
  if (!inferred.ok()) return Invalid(where, inferred.status().message());
  const int num_outputs = static_cast<int>(inferred->size());
  if (def.num_outputs == kVariableOutputs && static_cast<int>(outputs.size()) != num_outputs) {
    return Invalid(
        where, absl::StrCat("defines ", num_outputs, " outputs for these attributes and inputs, got ", outputs.size()));
  }
  if (def.num_outputs != kVariableOutputs && num_outputs != def.num_outputs) {
    return absl::InternalError(absl::StrCat(where, ": inference returned the wrong number of outputs"));
  }
  for (int o = 0; o < num_outputs; ++o) {
    const TensorType& type = (*inferred)[o];
    // An inferred type is checked as a wire one is: a size computed from
    // attributes (zeros' size, view's shape) must not wrap around.
    if (absl::Status valid = CheckTensorType(type, limits_); !valid.ok()) {
      return Invalid(where, absl::StrCat("output ", o, ": ", valid.message()));
    }
    // A view shares its input's buffer (the memory plan aliases the two),
    // so it must not be larger than the input.
    if (o == 0 && def.alias == AliasKind::kView && (input_types.empty() || type.bytes() > input_types[0].bytes())) {
      return Invalid(where, absl::StrCat("output ", type.ToString(), " is a view larger than its input"));
    }
    if (o < static_cast<int>(declared.size()) && declared[o].has_value() && !(*declared[o] == type)) {
      return Invalid(
          where, absl::StrCat("shape mismatch: output '", outputs[o], "' is ", type.ToString(), " from inputs (",
                              absl::StrJoin(input_types, ", ",
                                            [](std::string* out, const TensorType& t) { out->append(t.ToString()); }),
                              "), but declared ", declared[o]->ToString()));
    }
    ASSIGN_OR_RETURN(int id, Define(outputs[o], type, ValueKind::kIntermediate, index, where));
    node.outputs.push_back(id);
  }
  std::vector<int> ids = node.outputs;
  graph_.nodes.push_back(std::move(node));
  return ids;
}

absl::Status IrBuilder::AddFetch(int value) {
  if (value < 0 || value >= static_cast<int>(graph_.values.size())) {
    return absl::InternalError(absl::StrCat("fetch of value ", value, ", which does not exist"));
  }
  graph_.fetchable.push_back(value);
  return absl::OkStatus();
}

absl::Status IrBuilder::AddUpdate(int target, int value) {
  const int n = static_cast<int>(graph_.values.size());
  if (target < 0 || target >= n || value < 0 || value >= n) {
    return absl::InternalError(absl::StrCat("update ", target, " <- ", value, " of values that do not exist"));
  }
  const std::string where =
      absl::StrCat("update '", graph_.values[target].name, "' <- '", graph_.values[value].name, "'");
  if (graph_.values[target].kind != ValueKind::kPersistent)
    return Invalid(where, "the target is not a persistent tensor");
  if (!(graph_.values[target].type == graph_.values[value].type)) {
    return Invalid(where, absl::StrCat("type mismatch: ", graph_.values[target].type.ToString(), " <- ",
                                       graph_.values[value].type.ToString()));
  }
  for (const auto& [t, v] : graph_.updates) {
    if (t == target) return Invalid(where, "the target is updated twice");
  }
  graph_.updates.emplace_back(target, value);
  return absl::OkStatus();
}

absl::StatusOr<Graph> BuildGraph(const v1::Graph& wire,
                                 const google::protobuf::RepeatedPtrField<v1::Tensor>& persistent,
                                 const GraphLimits& limits) {
  IrBuilder b(limits);
  for (const v1::Tensor& t : persistent) {
    ASSIGN_OR_RETURN(TensorType type, TensorTypeFromProto(t.spec(), limits));
    // A tensor whose bytes travel in a frame of their own (Tensor.frame) is
    // checked by whoever holds the frames.
    if (t.frame() == 0 && t.data().size() != type.bytes()) {
      return Invalid(
          absl::StrCat("persistent tensor '", t.spec().name(), "'"),
          absl::StrCat("has ", t.data().size(), " bytes of data; ", type.ToString(), " needs ", type.bytes()));
    }
    RETURN_IF_ERROR(b.AddPersistent(t.spec().name(), type).status());
  }
  for (const v1::TensorSpec& spec : wire.feeds()) {
    ASSIGN_OR_RETURN(TensorType type, TensorTypeFromProto(spec, limits));
    RETURN_IF_ERROR(b.AddFeed(spec.name(), type).status());
  }
  if (wire.nodes_size() > limits.max_nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph has ", wire.nodes_size(), " nodes; the limit is ", limits.max_nodes));
  }
  for (int i = 0; i < wire.nodes_size(); ++i) {
    const v1::Node& wn = wire.nodes(i);
    Node described;
    described.op = wn.op();
    described.label = wn.label();
    const std::string where = described.Describe(i);
    // The checks that need the wire form, in the order a user fixes them:
    // the op, its arity, its attributes, its input names.
    const OpDef* def = OpRegistry::Global().Find(wn.op());
    if (def == nullptr) return UnknownOp(where, wn.op(), wn.label());
    RETURN_IF_ERROR(CheckArity(*def, wn.inputs_size(), wn.outputs_size(), where));
    Attrs attrs;
    for (const auto& [name, value] : wn.attrs()) {
      auto attr = AttrFromProto(value);
      if (!attr.ok()) return Invalid(where, absl::StrCat("attribute '", name, "': ", attr.status().message()));
      attrs.Set(name, *std::move(attr));
    }
    std::vector<int> inputs;
    for (const std::string& in : wn.inputs()) {
      int id = b.graph().Find(in);
      if (id < 0) return Invalid(where, absl::StrCat("input '", in, "' is not defined before this node"));
      inputs.push_back(id);
    }
    std::vector<std::optional<TensorType>> declared;
    for (const v1::TensorSpec& spec : wn.declared_outputs()) {
      auto type = TensorTypeFromProto(spec, limits);
      if (!type.ok()) return Invalid(where, type.status().message());
      declared.push_back(*std::move(type));
    }
    RETURN_IF_ERROR(b.AddNode(wn.op(), std::move(inputs), std::move(attrs), {wn.outputs().begin(), wn.outputs().end()},
                              wn.label(), declared)
                        .status());
  }
  for (const std::string& name : wire.fetches()) {
    int id = b.graph().Find(name);
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("fetch '", name, "' names no tensor"));
    RETURN_IF_ERROR(b.AddFetch(id));
  }
  for (const v1::Update& u : wire.updates()) {
    int target = b.graph().Find(u.persistent());
    int value = b.graph().Find(u.value());
    const std::string where = absl::StrCat("update '", u.persistent(), "' <- '", u.value(), "'");
    if (target < 0) return Invalid(where, "the target is not a persistent tensor");
    if (value < 0) return Invalid(where, "the value names no tensor");
    RETURN_IF_ERROR(b.AddUpdate(target, value));
  }
  return std::move(b).Build();
}

void AttrToProto(const AttrValue& value, v1::AttrValue* out) {
  std::visit(
      [out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          out->set_i(v);
        } else if constexpr (std::is_same_v<T, double>) {
          out->set_f(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          out->set_b(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out->set_s(v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          out->mutable_ints();
          for (int64_t x : v) out->mutable_ints()->add_values(x);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          out->mutable_floats();
          for (double x : v) out->mutable_floats()->add_values(x);
        } else {
          out->set_dtype(DTypeToProto(v));
        }
      },
      value);
}

v1::Graph ToWire(const Graph& graph) {
  v1::Graph wire;
  for (int v : graph.feeds) {
    v1::TensorSpec* spec = wire.add_feeds();
    spec->set_name(graph.values[v].name);
    TensorTypeToProto(graph.values[v].type, spec);
  }
  for (const Node& node : graph.nodes) {
    v1::Node* n = wire.add_nodes();
    n->set_op(node.op);
    n->set_label(node.label);
    for (int v : node.inputs) n->add_inputs(graph.values[v].name);
    for (int v : node.outputs) {
      n->add_outputs(graph.values[v].name);
      v1::TensorSpec* declared = n->add_declared_outputs();
      declared->set_name(graph.values[v].name);
      TensorTypeToProto(graph.values[v].type, declared);
    }
    for (const auto& [name, value] : node.attrs.values()) AttrToProto(value, &(*n->mutable_attrs())[name]);
  }
  for (int v : graph.fetchable) wire.add_fetches(graph.values[v].name);
  for (const auto& [target, value] : graph.updates) {
    v1::Update* u = wire.add_updates();
    u->set_persistent(graph.values[target].name);
    u->set_value(graph.values[value].name);
  }
  return wire;
}

}  // namespace tandem
