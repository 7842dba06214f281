// Structure-aware fuzzing of registration: the input's bytes are choices
// that build a job (feeds and persistent tensors of fuzzed types and
// shapes, then nodes of any registered op, on defined values, with fuzzed
// attributes, both ordinary and extreme), keeping each node the graph
// builder accepts; the job then goes through everything a registration
// does, and runs one iteration on the CPU kernels (fuzz/registration.h).
// Finds what raw protobuf mutation rarely reaches: an accepted graph whose
// kernels read or write outside a tensor.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fuzz/byte_source.h"
#include "fuzz/registration.h"
#include "ir/graph_builder.h"
#include "ir/op_registry.h"

namespace tandem::fuzz {
namespace {

enum class AttrKind { kInt, kInts, kFloat, kFloats, kBool, kDType, kString };

struct AttrName {
  const char* name;
  AttrKind kind;
};

// The attributes the ops read, with the kind each usually has (a fuzzed
// node sometimes gets another kind).
constexpr AttrName kAttrs[] = {
    {"dim", AttrKind::kInt},
    {"dim", AttrKind::kInts},
    {"dims", AttrKind::kInts},
    {"dim0", AttrKind::kInt},
    {"dim1", AttrKind::kInt},
    {"keepdim", AttrKind::kBool},
    {"size", AttrKind::kInts},
    {"stride", AttrKind::kInts},
    {"padding", AttrKind::kInts},
    {"dilation", AttrKind::kInts},
    {"kernel_size", AttrKind::kInts},
    {"output_size", AttrKind::kInts},
    {"groups", AttrKind::kInt},
    {"start", AttrKind::kInt},
    {"end", AttrKind::kInt},
    {"step", AttrKind::kInt},
    {"index", AttrKind::kInt},
    {"split_size", AttrKind::kInt},
    {"split_sizes", AttrKind::kInts},
    {"alpha", AttrKind::kFloat},
    {"other", AttrKind::kFloat},
    {"value", AttrKind::kFloat},
    {"fill_value", AttrKind::kFloat},
    {"dtype", AttrKind::kDType},
    {"eps", AttrKind::kFloat},
    {"momentum", AttrKind::kFloat},
    {"training", AttrKind::kBool},
    {"train", AttrKind::kBool},
    {"p", AttrKind::kFloat},
    {"reduction", AttrKind::kInt},
    {"ignore_index", AttrKind::kInt},
    {"num_weights", AttrKind::kInt},
    {"padding_idx", AttrKind::kInt},
    {"accumulate", AttrKind::kBool},
    {"normalized_shape", AttrKind::kInts},
    {"output_mask", AttrKind::kInts},
    {"ceil_mode", AttrKind::kBool},
    {"count_include_pad", AttrKind::kBool},
    {"divisor_override", AttrKind::kInt},
    {"half_to_float", AttrKind::kBool},
    {"input_dtype", AttrKind::kDType},
    {"input_sizes", AttrKind::kInts},
    {"scale", AttrKind::kFloat},
    {"is_causal", AttrKind::kBool},
    {"min", AttrKind::kFloat},
    {"max", AttrKind::kFloat},
    {"exponent", AttrKind::kFloat},
    {"approximate", AttrKind::kString},
    {"code", AttrKind::kInts},
    {"consts", AttrKind::kFloats},
    {"outputs", AttrKind::kInts},
    {"transposed", AttrKind::kBool},
    {"output_padding", AttrKind::kInts},
    {"seed", AttrKind::kInt},
    {"physical_layout", AttrKind::kInts},
    {"bias_sizes", AttrKind::kInts},
    {"threshold", AttrKind::kFloat},
    {"beta", AttrKind::kFloat},
    {"transpose_a", AttrKind::kBool},
    {"transpose_b", AttrKind::kBool},
    {"grad_input_mask", AttrKind::kInts},
    {"dropout_p", AttrKind::kFloat},
    {"compute_log_sumexp", AttrKind::kBool},
    {"pad", AttrKind::kInts},
    {"input_size", AttrKind::kInts},
    {"scale_factors", AttrKind::kFloats},
    {"scales_h", AttrKind::kFloat},
    {"scales_w", AttrKind::kFloat},
    {"align_corners", AttrKind::kBool},
    {"N", AttrKind::kInt},
    {"C", AttrKind::kInt},
    {"HxW", AttrKind::kInt},
    {"group", AttrKind::kInt},
    {"indexed_dims", AttrKind::kInts},
    {"storage_offset", AttrKind::kInt},
    {"offset", AttrKind::kInt},
    {"dim2", AttrKind::kInt},
    {"repeats", AttrKind::kInts},
    {"reduce", AttrKind::kString},
    {"include_self", AttrKind::kBool},
};

constexpr v1::DType kDTypes[] = {v1::FLOAT32, v1::INT64, v1::BOOL, v1::BFLOAT16, v1::FLOAT16, v1::INT32, v1::FLOAT64};

v1::DType TakeDType(ByteSource& in) {
  // float32 half the time: most ops take it.
  if (in.TakeBool()) return v1::FLOAT32;
  return kDTypes[in.TakeByte() % (sizeof(kDTypes) / sizeof(kDTypes[0]))];
}

void TakeShape(ByteSource& in, v1::TensorSpec* spec) {
  const int rank = static_cast<int>(in.TakeInRange(0, 4));
  for (int d = 0; d < rank; ++d) spec->add_shape(in.TakeByte() % 16 == 0 ? 0 : in.TakeInRange(1, 6));
}

void TakeAttr(ByteSource& in, v1::Node* node) {
  const AttrName& a = kAttrs[in.TakeByte() % (sizeof(kAttrs) / sizeof(kAttrs[0]))];
  AttrKind kind = in.TakeByte() % 8 == 0 ? static_cast<AttrKind>(in.TakeInRange(0, 6)) : a.kind;
  v1::AttrValue& v = (*node->mutable_attrs())[a.name];
  switch (kind) {
    case AttrKind::kInt:
      v.set_i(in.TakeAttrInt());
      break;
    case AttrKind::kInts: {
      v.mutable_ints();
      const int n = static_cast<int>(in.TakeInRange(0, 4));
      for (int i = 0; i < n; ++i) v.mutable_ints()->add_values(in.TakeAttrInt());
      break;
    }
    case AttrKind::kFloat:
      v.set_f(in.TakeAttrFloat());
      break;
    case AttrKind::kFloats: {
      v.mutable_floats();
      const int n = static_cast<int>(in.TakeInRange(0, 4));
      for (int i = 0; i < n; ++i) v.mutable_floats()->add_values(in.TakeAttrFloat());
      break;
    }
    case AttrKind::kBool:
      v.set_b(in.TakeBool());
      break;
    case AttrKind::kDType:
      v.set_dtype(in.TakeByte() % 16 == 0 ? static_cast<v1::DType>(in.TakeByte()) : TakeDType(in));
      break;
    case AttrKind::kString:
      v.set_s(in.TakeBool() ? "tanh" : in.TakeString(8));
      break;
  }
}

}  // namespace
}  // namespace tandem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  using namespace tandem::fuzz;
  static const std::vector<std::string> kOps = OpRegistry::Global().Names();
  ByteSource in(data, size);
  v1::RegisterJobRequest reg;
  std::vector<std::string> defined;
  const int feeds = static_cast<int>(in.TakeInRange(1, 3));
  for (int i = 0; i < feeds; ++i) {
    v1::TensorSpec* spec = reg.mutable_graph()->add_feeds();
    spec->set_name(absl::StrCat("f", i));
    spec->set_dtype(TakeDType(in));
    TakeShape(in, spec);
    defined.push_back(spec->name());
  }
  const int persistents = static_cast<int>(in.TakeInRange(0, 2));
  for (int i = 0; i < persistents; ++i) {
    v1::Tensor* t = reg.add_persistent();
    t->mutable_spec()->set_name(absl::StrCat("w", i));
    t->mutable_spec()->set_dtype(v1::FLOAT32);
    TakeShape(in, t->mutable_spec());
    int64_t n = 1;
    for (int64_t d : t->spec().shape()) n *= d;
    std::string bytes(static_cast<size_t>(n) * 4, '\0');
    for (size_t b = 0; b < bytes.size(); b += 4) bytes[b + 3] = static_cast<char>(0x3f);  // about 0.5
    t->set_data(std::move(bytes));
    defined.push_back(t->spec().name());
  }
  // Nodes, each kept only if the graph so far still builds, so that a long
  // input makes a long valid graph instead of failing at its first node.
  const int nodes = static_cast<int>(in.TakeInRange(1, 10));
  for (int k = 0; k < nodes && !in.empty(); ++k) {
    v1::Node* node = reg.mutable_graph()->add_nodes();
    const std::string& op = kOps[in.TakeInRange(0, static_cast<int64_t>(kOps.size()) - 1)];
    node->set_op(op);
    const OpDef* def = OpRegistry::Global().Find(op);
    const int max_inputs = def->max_inputs < 0 ? def->min_inputs + 3 : def->max_inputs;
    const int inputs = static_cast<int>(in.TakeInRange(def->min_inputs, std::max(def->min_inputs, max_inputs)));
    for (int i = 0; i < inputs; ++i) {
      node->add_inputs(defined[in.TakeInRange(0, static_cast<int64_t>(defined.size()) - 1)]);
    }
    const int attrs = static_cast<int>(in.TakeInRange(0, 5));
    for (int i = 0; i < attrs; ++i) TakeAttr(in, node);
    const int outputs =
        def->num_outputs == kVariableOutputs ? static_cast<int>(in.TakeInRange(1, 4)) : def->num_outputs;
    for (int o = 0; o < outputs; ++o) node->add_outputs(absl::StrCat("n", k, "_", o));
    if (BuildGraph(reg.graph(), reg.persistent()).ok()) {
      for (const std::string& out : node->outputs()) defined.push_back(out);
    } else {
      reg.mutable_graph()->mutable_nodes()->RemoveLast();
    }
  }
  for (const std::string& name : defined) reg.mutable_graph()->add_fetches(name);
  ExerciseRegistration(reg, size);
  return 0;
}
