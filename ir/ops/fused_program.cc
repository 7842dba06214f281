#include "ir/ops/fused_program.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tandem {
namespace {

absl::Status Invalid(int instruction, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("instruction ", instruction, " of attribute 'code': ", what));
}

// What fields b and k of an opcode hold.
enum class Field { kRegister, kConst, kUnused };
struct Layout {
  Field b;
  Field k;
};

bool LayoutOf(int64_t opcode, Layout* layout) {
  switch (static_cast<FusedOpcode>(opcode)) {
    case FusedOpcode::kAdd:
    case FusedOpcode::kSub:
      *layout = {Field::kRegister, Field::kConst};
      return true;
    case FusedOpcode::kMul:
    case FusedOpcode::kDiv:
    case FusedOpcode::kMaximum:
    case FusedOpcode::kMinimum:
      *layout = {Field::kRegister, Field::kUnused};
      return true;
    case FusedOpcode::kAddScalar:
    case FusedOpcode::kSubScalar:
      *layout = {Field::kConst, Field::kConst};
      return true;
    case FusedOpcode::kMulScalar:
    case FusedOpcode::kDivScalar:
      *layout = {Field::kConst, Field::kUnused};
      return true;
    case FusedOpcode::kNeg:
    case FusedOpcode::kSqrt:
    case FusedOpcode::kRelu:
      *layout = {Field::kUnused, Field::kUnused};
      return true;
    case FusedOpcode::kThresholdBackward:
      *layout = {Field::kRegister, Field::kConst};
      return true;
  }
  return false;
}

}  // namespace

const char* FusedOpcodeOpName(FusedOpcode op) {
  switch (op) {
    case FusedOpcode::kAdd:
      return "add.Tensor";
    case FusedOpcode::kSub:
      return "sub.Tensor";
    case FusedOpcode::kMul:
      return "mul.Tensor";
    case FusedOpcode::kDiv:
      return "div.Tensor";
    case FusedOpcode::kAddScalar:
      return "add.Scalar";
    case FusedOpcode::kSubScalar:
      return "sub.Scalar";
    case FusedOpcode::kMulScalar:
      return "mul.Scalar";
    case FusedOpcode::kDivScalar:
      return "div.Scalar";
    case FusedOpcode::kNeg:
      return "neg";
    case FusedOpcode::kSqrt:
      return "sqrt";
    case FusedOpcode::kMaximum:
      return "maximum";
    case FusedOpcode::kMinimum:
      return "minimum";
    case FusedOpcode::kRelu:
      return "relu";
    case FusedOpcode::kThresholdBackward:
      return "threshold_backward";
  }
  return "unknown";
}

absl::StatusOr<FusedProgram> DecodeFusedProgram(const Attrs& attrs, int num_inputs) {
  ASSIGN_OR_RETURN(std::vector<int64_t> code, attrs.GetInts("code"));
  ASSIGN_OR_RETURN(std::vector<double> consts, attrs.GetFloats("consts", std::vector<double>{}));
  ASSIGN_OR_RETURN(std::vector<int64_t> outputs, attrs.GetInts("outputs"));
  if (num_inputs < 1 || num_inputs > kFusedMaxInputs) {
    return absl::InvalidArgumentError(absl::StrCat("takes 1 to ", kFusedMaxInputs, " inputs, got ", num_inputs));
  }
  if (code.empty() || code.size() % kFusedFieldsPerInstruction != 0) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'code' has ", code.size(), " ints; it needs ",
                                                   kFusedFieldsPerInstruction,
                                                   " per instruction (opcode, dst, a, b, k) and at least one "
                                                   "instruction"));
  }
  const int num_instructions = static_cast<int>(code.size() / kFusedFieldsPerInstruction);
  if (num_instructions > kFusedMaxInstructions) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'code' has ", num_instructions, " instructions; the limit is ", kFusedMaxInstructions));
  }
  if (consts.size() > static_cast<size_t>(kFusedMaxConsts)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'consts' has ", consts.size(), " numbers; the limit is ", kFusedMaxConsts));
  }
  if (outputs.empty() || outputs.size() > static_cast<size_t>(kFusedMaxOutputs)) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'outputs' names ", outputs.size(),
                                                   " registers; a fused node has 1 to ", kFusedMaxOutputs, " outputs"));
  }

  FusedProgram program;
  program.num_inputs = num_inputs;
  std::vector<bool> written(kFusedMaxRegisters, false);
  auto readable = [&](int64_t r) { return r >= 0 && (r < num_inputs || (r < kFusedMaxRegisters && written[r])); };
  auto constant = [&](int64_t index, double fallback, int i, const char* field) -> absl::StatusOr<double> {
    if (index == -1) return fallback;
    if (index < 0 || index >= static_cast<int64_t>(consts.size())) {
      return Invalid(i, absl::StrCat("field ", field, " = ", index, " is no index of attribute 'consts' (",
                                     consts.size(), " numbers)"));
    }
    return consts[index];
  };
  for (int i = 0; i < num_instructions; ++i) {
    const int64_t* f = &code[static_cast<size_t>(i) * kFusedFieldsPerInstruction];
    const int64_t opcode = f[0], dst = f[1], a = f[2], b = f[3], k = f[4];
    Layout layout;
    if (!LayoutOf(opcode, &layout)) return Invalid(i, absl::StrCat("unknown opcode ", opcode));
    FusedInstruction ins;
    ins.op = static_cast<FusedOpcode>(opcode);
    const std::string op = FusedOpcodeOpName(ins.op);
    if (dst < num_inputs || dst >= kFusedMaxRegisters) {
      return Invalid(i, absl::StrCat(op, " writes register ", dst, "; it must be in [", num_inputs, ", ",
                                     kFusedMaxRegisters, ") (registers below ", num_inputs, " are the inputs)"));
    }
    if (!readable(a)) return Invalid(i, absl::StrCat(op, " reads register ", a, ", which holds no value yet"));
    ins.dst = static_cast<int>(dst);
    ins.a = static_cast<int>(a);
    switch (layout.b) {
      case Field::kRegister:
        if (!readable(b)) return Invalid(i, absl::StrCat(op, " reads register ", b, ", which holds no value yet"));
        ins.b = static_cast<int>(b);
        break;
      case Field::kConst: {
        if (b == -1) return Invalid(i, absl::StrCat(op, " needs field b: the index of 'other' in 'consts'"));
        ASSIGN_OR_RETURN(ins.other, constant(b, 0.0, i, "b"));
        break;
      }
      case Field::kUnused:
        if (b != -1) return Invalid(i, absl::StrCat(op, " takes no field b; it must be -1, got ", b));
        break;
    }
    if (ins.op == FusedOpcode::kThresholdBackward && k == -1) {
      return Invalid(i, absl::StrCat(op, " needs field k: the index of its threshold in 'consts'"));
    }
    if (layout.k == Field::kConst) {
      ASSIGN_OR_RETURN(ins.alpha, constant(k, 1.0, i, "k"));
    } else if (k != -1) {
      return Invalid(i, absl::StrCat(op, " takes no field k; it must be -1, got ", k));
    }
    written[ins.dst] = true;
    program.code.push_back(ins);
  }
  for (size_t o = 0; o < outputs.size(); ++o) {
    const int64_t r = outputs[o];
    if (r < num_inputs || r >= kFusedMaxRegisters || !written[r]) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'outputs': output ", o, " reads register ", r, ", which no instruction writes"));
    }
    program.outputs.push_back(static_cast<int>(r));
  }
  return program;
}

}  // namespace tandem
