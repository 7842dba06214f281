// Fuzzing of fused-program validation: a `fused_elementwise` node whose
// program (code, consts, outputs; ir/ops/fused_program.h) is the
// input's choices, over one to three inputs of one shape and dtype (and
// sometimes a rank-0 one). Validation must refuse every program that
// would read a register not yet written, index past the constants or
// write past the registers; an accepted one runs on the CPU kernel.
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "fuzz/byte_source.h"
#include "fuzz/registration.h"
#include "tandem.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tandem::fuzz::ByteSource;
  namespace v1 = tandem::v1;
  ByteSource in(data, size);
  v1::RegisterJobRequest reg;
  v1::Graph* g = reg.mutable_graph();
  static constexpr v1::DType kTypes[] = {v1::FLOAT32, v1::FLOAT64, v1::BFLOAT16, v1::FLOAT16, v1::INT64};
  const v1::DType dtype = kTypes[in.TakeByte() % 5];
  const int inputs = static_cast<int>(in.TakeInRange(1, 3));
  v1::Node* node = g->add_nodes();
  node->set_op("fused_elementwise");
  for (int i = 0; i < inputs; ++i) {
    v1::TensorSpec* feed = g->add_feeds();
    feed->set_name(absl::StrCat("x", i));
    feed->set_dtype(dtype);
    if (i == 0 || !in.TakeBool()) {
      feed->add_shape(3);
      feed->add_shape(5);
    }
    node->add_inputs(feed->name());
  }
  // Mostly well-formed programs (each instruction writes the next
  // register from registers already written, its operands matching its
  // opcode), each field sometimes replaced by anything: validation must
  // catch the second kind, and the kernels run the first.
  auto& attrs = *node->mutable_attrs();
  const int consts = static_cast<int>(in.TakeInRange(0, 3));
  attrs["consts"].mutable_floats();
  for (int i = 0; i < consts; ++i) attrs["consts"].mutable_floats()->add_values(in.TakeAttrFloat());
  auto maybe_wild = [&](int64_t usual) { return in.TakeByte() % 16 == 0 ? in.TakeAttrInt() : usual; };
  const int instructions = static_cast<int>(in.TakeInRange(0, 6));
  attrs["code"].mutable_ints();
  int written = inputs;  // registers 0..written-1 hold values
  for (int i = 0; i < instructions; ++i) {
    const int64_t op = in.TakeInRange(1, 12);
    const bool binary = op <= 4 || op == 11 || op == 12;
    const bool scalar = op >= 5 && op <= 8;
    const bool has_alpha = op == 1 || op == 2 || op == 5 || op == 6;
    const int64_t a = in.TakeInRange(0, written - 1);
    const int64_t b = binary                 ? in.TakeInRange(0, written - 1)
                      : scalar && consts > 0 ? in.TakeInRange(0, consts - 1)
                                             : -1;
    const int64_t k = has_alpha && consts > 0 && in.TakeBool() ? in.TakeInRange(0, consts - 1) : -1;
    for (int64_t field : {op, static_cast<int64_t>(written), a, b, k}) {
      attrs["code"].mutable_ints()->add_values(maybe_wild(field));
    }
    ++written;
  }
  attrs["outputs"].mutable_ints();
  const int outputs = static_cast<int>(in.TakeInRange(1, 3));
  for (int i = 0; i < outputs; ++i) {
    attrs["outputs"].mutable_ints()->add_values(maybe_wild(in.TakeInRange(inputs, std::max(inputs, written - 1))));
    node->add_outputs(absl::StrCat("y", i));
    g->add_fetches(node->outputs(i));
  }
  tandem::fuzz::ExerciseRegistration(reg, size);
  return 0;
}
