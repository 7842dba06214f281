#include "absl/strings/string_view.h"
#include "adaptor/graph_builder.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace tandem {
namespace {

absl::Status Invalid(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

absl::StatusOr<AttrValue> AttrFromProto(const v1::AttrValue& attr) {
  switch (attr.value_case()) {
    case v1::AttrValue::kI: return AttrValue(static_cast<int64_t>(attr.i()));
    case v1::AttrValue::kF: return AttrValue(attr.f());
    case v1::AttrValue::kS: return AttrValue(attr.s());
    case v1::AttrValue::kB: return AttrValue(attr.b());
    case v1::AttrValue::kInts:
      return AttrValue(std::vector<int64_t>(attr.ints().values().begin(), attr.ints().values().end()));
    case v1::AttrValue::kFloats:
      return AttrValue(std::vector<double>(attr.floats().values().begin(), attr.floats().values().end()));
    case v1::AttrValue::kDtype: {
      ASSIGN_OR_RETURN(DType dtype, DTypeFromProto(attr.dtype()));
      return AttrValue(dtype);
    }
    case v1::AttrValue::VALUE_NOT_SET: break;
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
    case v1::FLOAT32: return DType::kFloat32;
    case v1::FLOAT64: return DType::kFloat64;
    case v1::INT64: return DType::kInt64;
    case v1::INT32: return DType::kInt32;
    case v1::BOOL: return DType::kBool;
    case v1::BFLOAT16: return DType::kBFloat16;
    case v1::FLOAT16: return DType::kFloat16;
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", static_cast<int>(dtype)));
}

v1::DType DTypeToProto(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return v1::FLOAT32;
    case DType::kFloat64: return v1::FLOAT64;
    case DType::kInt64: return v1::INT64;
    case DType::kInt32: return v1::INT32;
    case DType::kBool: return v1::BOOL;
    case DType::kBFloat16: return v1::BFLOAT16;
    case DType::kFloat16: return v1::FLOAT16;
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
    return absl::InvalidArgumentError(absl::StrCat(type.ToString(), " exceeds the tensor size limit of ",
                                                   limits.max_tensor_bytes, " bytes"));
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

absl::StatusOr<Graph> BuildGraph(const v1::Graph& wire,
                                 const google::protobuf::RepeatedPtrField<v1::Tensor>& persistent,
                                 const GraphLimits& limits) {
  Graph g;
  const OpRegistry& registry = OpRegistry::Global();

  auto define = [&](const std::string& name, TensorType type, ValueKind kind, int producer,
                    const std::string& where) -> absl::StatusOr<int> {
    if (name.empty()) return Invalid(where, "a tensor has an empty name");
    int id = static_cast<int>(g.values.size());
    if (!g.by_name.emplace(name, id).second) {
      return Invalid(where, absl::StrCat("tensor '", name, "' is defined twice"));
    }
    g.values.push_back(Value{name, std::move(type), kind, producer});
    return id;
  };

  for (const v1::Tensor& t : persistent) {
    ASSIGN_OR_RETURN(TensorType type, TensorTypeFromProto(t.spec(), limits));
    std::string where = absl::StrCat("persistent tensor '", t.spec().name(), "'");
    // A tensor whose bytes travel in a frame of their own (Tensor.frame) is
    // checked by whoever holds the frames.
    if (t.frame() == 0 && t.data().size() != type.bytes()) {
      return Invalid(where, absl::StrCat("has ", t.data().size(), " bytes of data; ", type.ToString(),
                                         " needs ", type.bytes()));
    }
    ASSIGN_OR_RETURN(int id, define(t.spec().name(), type, ValueKind::kPersistent, -1, where));
    g.persistents.push_back(id);
  }
  for (const v1::TensorSpec& spec : wire.feeds()) {
    ASSIGN_OR_RETURN(TensorType type, TensorTypeFromProto(spec, limits));
    ASSIGN_OR_RETURN(int id, define(spec.name(), type, ValueKind::kFeed, -1,
                                    absl::StrCat("feed '", spec.name(), "'")));
    g.feeds.push_back(id);
  }

  if (wire.nodes_size() > limits.max_nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph has ", wire.nodes_size(), " nodes; the limit is ", limits.max_nodes));
  }
  std::vector<TensorType> input_types;
  for (int i = 0; i < wire.nodes_size(); ++i) {
    const v1::Node& wn = wire.nodes(i);
    Node node;
    node.op = wn.op();
    node.label = wn.label();
    const std::string where = node.Describe(i);
    node.def = registry.Find(wn.op());
    if (node.def == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": unknown op '", wn.op(), "'", wn.label().empty() ? "" : absl::StrCat(" in ", wn.label()),
          "; Tandem has no kernel for it (see docs/ops.md for the supported ops)"));
    }
    const OpDef& def = *node.def;
    if (wn.inputs_size() < def.min_inputs || (def.max_inputs >= 0 && wn.inputs_size() > def.max_inputs)) {
      return Invalid(where, absl::StrCat("takes ", def.min_inputs,
                                         def.max_inputs == def.min_inputs ? ""
                                         : def.max_inputs < 0             ? " or more"
                                                                          : absl::StrCat(" to ", def.max_inputs),
                                         " inputs, got ", wn.inputs_size()));
    }
    if (def.num_outputs != kVariableOutputs && wn.outputs_size() != def.num_outputs) {
      return Invalid(where, absl::StrCat("defines ", def.num_outputs, " outputs, got ", wn.outputs_size()));
    }
    for (const auto& [name, value] : wn.attrs()) {
      auto attr = AttrFromProto(value);
      if (!attr.ok()) return Invalid(where, absl::StrCat("attribute '", name, "': ", attr.status().message()));
      node.attrs.Set(name, *std::move(attr));
    }
    input_types.clear();
    for (const std::string& in : wn.inputs()) {
      int id = g.Find(in);
      if (id < 0) return Invalid(where, absl::StrCat("input '", in, "' is not defined before this node"));
      node.inputs.push_back(id);
      input_types.push_back(g.values[id].type);
    }
    auto inferred = def.infer(node.attrs, input_types);
    if (!inferred.ok()) return Invalid(where, inferred.status().message());
    const int num_outputs = static_cast<int>(inferred->size());
    if (def.num_outputs == kVariableOutputs && wn.outputs_size() != num_outputs) {
      return Invalid(where, absl::StrCat("defines ", num_outputs, " outputs for these attributes and inputs, got ",
                                         wn.outputs_size()));
    }
    if (def.num_outputs != kVariableOutputs && num_outputs != def.num_outputs) {
      return absl::InternalError(absl::StrCat(where, ": inference returned the wrong number of outputs"));
    }
    for (int o = 0; o < num_outputs; ++o) {
      const TensorType& type = (*inferred)[o];
      // An inferred type is checked as a wire one is: a size computed from
      // attributes (zeros' size, view's shape) must not wrap around.
      if (absl::Status valid = CheckTensorType(type, limits); !valid.ok()) {
        return Invalid(where, absl::StrCat("output ", o, ": ", valid.message()));
      }
      // A view shares its input's buffer (the memory plan aliases the two),
      // so it must not be larger than the input.
      if (o == 0 && def.alias == AliasKind::kView &&
          (input_types.empty() || type.bytes() > input_types[0].bytes())) {
        return Invalid(where, absl::StrCat("output ", type.ToString(), " is a view larger than its input"));
      }
      if (o < wn.declared_outputs_size()) {
        const v1::TensorSpec& declared = wn.declared_outputs(o);
        auto declared_type = TensorTypeFromProto(declared, limits);
        if (!declared_type.ok()) return Invalid(where, declared_type.status().message());
        if (!(*declared_type == type)) {
          return Invalid(where, absl::StrCat("shape mismatch: output '", wn.outputs(o), "' is ", type.ToString(),
                                             " from inputs (",
                                             absl::StrJoin(input_types, ", ",
                                                           [](std::string* out, const TensorType& t) {
                                                             out->append(t.ToString());
                                                           }),
                                             "), but declared ", declared_type->ToString()));
        }
      }
      ASSIGN_OR_RETURN(int id, define(wn.outputs(o), type, ValueKind::kIntermediate, i, where));
      node.outputs.push_back(id);
    }
    g.nodes.push_back(std::move(node));
  }

  for (const std::string& name : wire.fetches()) {
    int id = g.Find(name);
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("fetch '", name, "' names no tensor"));
    g.fetchable.push_back(id);
  }
  for (const v1::Update& u : wire.updates()) {
    int target = g.Find(u.persistent());
    int value = g.Find(u.value());
    std::string where = absl::StrCat("update '", u.persistent(), "' <- '", u.value(), "'");
    if (target < 0 || g.values[target].kind != ValueKind::kPersistent) {
      return Invalid(where, "the target is not a persistent tensor");
    }
    if (value < 0) return Invalid(where, "the value names no tensor");
    if (!(g.values[target].type == g.values[value].type)) {
      return Invalid(where, absl::StrCat("type mismatch: ", g.values[target].type.ToString(), " <- ",
                                         g.values[value].type.ToString()));
    }
    for (const auto& [t, v] : g.updates) {
      if (t == target) return Invalid(where, "the target is updated twice");
    }
    g.updates.emplace_back(target, value);
  }
  return g;
}

}  // namespace tandem
