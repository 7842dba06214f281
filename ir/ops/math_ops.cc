// Registry entries of the pointwise math family (ir/ops/math_table.h): one
// inference rule per MathKind, the attributes of each op, and MathCallOf.
#include "ir/ops/math_ops.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

constexpr DType kBitwiseTypes[] = {DType::kInt64, DType::kInt32, DType::kBool};
constexpr DType kNumberTypes[] = {DType::kFloat32, DType::kFloat64,  DType::kInt64,
                                  DType::kInt32,   DType::kBFloat16, DType::kFloat16};

bool IsIntegral(DType dtype) { return dtype == DType::kInt64 || dtype == DType::kInt32 || dtype == DType::kBool; }

bool IsFloatingOrHalf(DType dtype) { return !IsIntegral(dtype); }

// The result dtype of an op that computes in floats: a bool or integer
// result becomes float32, as PyTorch's default dtype.
DType FloatResult(DType dtype) { return IsIntegral(dtype) ? DType::kFloat32 : dtype; }

// The number attributes of each op: (name, default); a missing name with no
// default is an error.
struct ParamSpec {
  const char* name;
  bool has_default;
  double fallback;
};

struct OpParams {
  ParamSpec a, b, c;
};

OpParams ParamsOf(MathOp op) {
  constexpr ParamSpec kNone{nullptr, false, 0.0};
  switch (op) {
    case MathOp::kHardtanh:
      return {{"min_val", true, -1.0}, {"max_val", true, 1.0}, kNone};
    case MathOp::kLeakyRelu:
      return {{"negative_slope", true, 0.01}, kNone, kNone};
    case MathOp::kElu:
      return {{"alpha", true, 1.0}, {"scale", true, 1.0}, {"input_scale", true, 1.0}};
    case MathOp::kHardtanhBackward:
      return {{"min_val", false, 0.0}, {"max_val", false, 0.0}, kNone};
    case MathOp::kLeakyReluBackward:
      return {{"negative_slope", false, 0.0}, kNone, kNone};
    case MathOp::kEluBackward:
      return {{"alpha", false, 0.0}, {"scale", false, 0.0}, {"input_scale", false, 0.0}};
    default:
      return {kNone, kNone, kNone};
  }
}

absl::StatusOr<double> ReadParam(const Attrs& attrs, const ParamSpec& spec) {
  if (spec.name == nullptr) return 0.0;
  return spec.has_default ? attrs.GetFloat(spec.name, spec.fallback) : attrs.GetFloat(spec.name);
}

// The op a div.*_mode node computes.
absl::StatusOr<MathOp> DivModeOp(const Attrs& attrs) {
  if (!attrs.Has("rounding_mode")) return MathOp::kDivTrue;
  // A StatusOr kept whole: GCC 12 misreads a moved-out string as
  // uninitialized here.
  const absl::StatusOr<std::string> mode = attrs.GetString("rounding_mode");
  if (!mode.ok()) return mode.status();
  if (*mode == "trunc") return MathOp::kDivTrunc;
  if (*mode == "floor") return MathOp::kDivFloor;
  return absl::InvalidArgumentError(
      absl::StrCat("attribute 'rounding_mode' is '", *mode, "'; expected 'trunc' or 'floor' (or none)"));
}

// The dtype and broadcast shape of (self, other), by the binary rule.
absl::StatusOr<TensorType> BinaryResult(const TensorType& self, const TensorType& other) {
  ASSIGN_OR_RETURN(DType dtype, ops::BinaryResultDType("self", self, "other", other));
  auto shape = BroadcastShapes(self.shape, other.shape);
  if (!shape.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("self is ", self.ToString(), " and other is ", other.ToString(), "; ", shape.status().message()));
  }
  return TensorType{dtype, *shape};
}

// The shape of a logical op's result: self and other broadcast, any dtypes.
absl::StatusOr<Shape> LogicalShape(const TensorType& self, const TensorType& other) {
  auto shape = BroadcastShapes(self.shape, other.shape);
  if (!shape.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("self is ", self.ToString(), " and other is ", other.ToString(), "; ", shape.status().message()));
  }
  return *shape;
}

// A `.Scalar` form's 'other' must be present and, for an integer self, an
// integer (PyTorch would promote to float); bitwise ops take integers only.
absl::Status CheckOther(const Attrs& attrs, DType self) {
  RETURN_IF_ERROR(attrs.GetFloat("other").status());
  return ops::RequireScalarFits(attrs, "other", "self", self);
}

absl::StatusOr<TypeList> Infer(const MathOpInfo& info, const Attrs& attrs, absl::Span<const TensorType> in) {
  const TensorType& self = in[0];
  const OpParams params = ParamsOf(info.op);
  for (const ParamSpec* spec : {&params.a, &params.b, &params.c}) {
    RETURN_IF_ERROR(ReadParam(attrs, *spec).status());
  }
  switch (info.kind) {
    case MathKind::kFloatUnary:
      RETURN_IF_ERROR(ops::RequireDType("self", self, ops::kStorableAndHalfTypes));
      return TypeList{{FloatResult(self.dtype), self.shape}};
    case MathKind::kNumericUnary:
      RETURN_IF_ERROR(ops::RequireDType("self", self, kNumberTypes));
      return TypeList{self};
    case MathKind::kPredicate:
      RETURN_IF_ERROR(ops::RequireDType("self", self, ops::kStorableAndHalfTypes));
      return TypeList{{DType::kBool, self.shape}};
    case MathKind::kActivation:
      RETURN_IF_ERROR(ops::RequireDType("self", self, ops::kFloatAndHalfTypes));
      return TypeList{self};
    case MathKind::kBitwiseUnary:
      RETURN_IF_ERROR(ops::RequireDType("self", self, kBitwiseTypes));
      return TypeList{self};
    case MathKind::kBitwise:
      if (info.scalar_other) {
        RETURN_IF_ERROR(ops::RequireDType("self", self, kBitwiseTypes));
        RETURN_IF_ERROR(CheckOther(attrs, self.dtype));
        return TypeList{self};
      } else {
        ASSIGN_OR_RETURN(TensorType out, BinaryResult(self, in[1]));
        RETURN_IF_ERROR(ops::RequireDTypeValue("the result", out.dtype, kBitwiseTypes));
        return TypeList{out};
      }
    case MathKind::kLogical: {
      RETURN_IF_ERROR(ops::RequireDType("self", self, ops::kStorableAndHalfTypes));
      RETURN_IF_ERROR(ops::RequireDType("other", in[1], ops::kStorableAndHalfTypes));
      ASSIGN_OR_RETURN(Shape shape, LogicalShape(self, in[1]));
      return TypeList{{DType::kBool, shape}};
    }
    case MathKind::kFloatBinary:
    case MathKind::kNumericBinary:
    case MathKind::kDivMode: {
      bool float_result = info.kind == MathKind::kFloatBinary;
      if (info.kind == MathKind::kDivMode) {
        ASSIGN_OR_RETURN(MathOp op, DivModeOp(attrs));
        float_result = op == MathOp::kDivTrue;
      }
      TensorType out = self;
      if (info.scalar_other) {
        RETURN_IF_ERROR(ops::RequireDType("self", self, kNumberTypes));
        // A float 'other' with an integer self: PyTorch's result is float,
        // which a float result rule gives; an integer result must stay exact.
        if (!float_result) RETURN_IF_ERROR(CheckOther(attrs, self.dtype));
        RETURN_IF_ERROR(attrs.GetFloat("other").status());
      } else {
        ASSIGN_OR_RETURN(out, BinaryResult(self, in[1]));
        RETURN_IF_ERROR(ops::RequireDTypeValue("the result", out.dtype, kNumberTypes));
      }
      if (float_result) out.dtype = FloatResult(out.dtype);
      return TypeList{out};
    }
    case MathKind::kActivationBackward: {
      RETURN_IF_ERROR(ops::RequireDType("grad_output", self, ops::kFloatAndHalfTypes));
      const char* second = info.op == MathOp::kEluBackward ? "self_or_result" : "self";
      if (!(in[1] == self)) {
        return absl::InvalidArgumentError(absl::StrCat("grad_output is ", self.ToString(), " but ", second, " is ",
                                                       in[1].ToString(), "; they must have the same type"));
      }
      if (info.op == MathOp::kEluBackward) RETURN_IF_ERROR(attrs.GetBool("is_result").status());
      if (info.op == MathOp::kLeakyReluBackward) RETURN_IF_ERROR(attrs.GetBool("self_is_result", false).status());
      return TypeList{self};
    }
  }
  return absl::InternalError("unknown math kind");
}

// Whether the op's result always has input 0's dtype and shape when it has
// its byte size (what AliasKind::kInPlace needs): the unary ops whose result
// dtype is that of self. Binary ops may broadcast input 0, and the
// predicates and logical ops change the element size.
bool InPlaceSafe(const MathOpInfo& info) {
  switch (info.kind) {
    case MathKind::kFloatUnary:
    case MathKind::kNumericUnary:
    case MathKind::kActivation:
    case MathKind::kBitwiseUnary:
      return true;
    case MathKind::kBitwise:
    case MathKind::kNumericBinary:
    case MathKind::kFloatBinary:
    case MathKind::kDivMode:
      return info.scalar_other;
    default:
      return false;
  }
}

}  // namespace

const MathOpInfo* FindMathOp(absl::string_view op) {
  for (const MathOpInfo& info : kMathOps) {
    if (op == info.name) return &info;
  }
  return nullptr;
}

absl::StatusOr<MathCall> MathCallOf(const MathOpInfo& info, const Attrs& attrs, DType out) {
  MathCall call;
  call.op = info.op;
  if (info.kind == MathKind::kDivMode) {
    ASSIGN_OR_RETURN(call.op, DivModeOp(attrs));
  }
  const OpParams params = ParamsOf(info.op);
  ASSIGN_OR_RETURN(call.params.a, ReadParam(attrs, params.a));
  ASSIGN_OR_RETURN(call.params.b, ReadParam(attrs, params.b));
  ASSIGN_OR_RETURN(call.params.c, ReadParam(attrs, params.c));
  if (info.op == MathOp::kEluBackward) {
    ASSIGN_OR_RETURN(call.params.is_result, attrs.GetBool("is_result"));
  }
  if (info.scalar_other) {
    ASSIGN_OR_RETURN(call.params.other_f, attrs.GetFloat("other"));
    if (IsIntegral(out)) {
      if (attrs.Has("other")) {
        auto exact = attrs.GetInt("other");
        call.params.other_i = exact.ok() ? *exact : static_cast<int64_t>(call.params.other_f);
      }
    }
  }
  call.params.bool_out = out == DType::kBool;
  return call;
}

MathCompute MathComputeOf(MathKind kind, DType out, DType in0, DType in1) {
  if (kind == MathKind::kLogical || kind == MathKind::kPredicate) {
    if (in0 == DType::kFloat64 || in1 == DType::kFloat64) return MathCompute::kFloat64;
    const bool any_float = IsFloatingOrHalf(in0) || (kind == MathKind::kLogical && IsFloatingOrHalf(in1));
    return any_float ? MathCompute::kFloat32 : MathCompute::kInt64;
  }
  if (out == DType::kFloat64) return MathCompute::kFloat64;
  if (IsIntegral(out)) return MathCompute::kInt64;
  return MathCompute::kFloat32;
}

void RegisterMathOps(OpRegistry& registry) {
  for (const MathOpInfo& info : kMathOps) {
    const int inputs = MathKindIsBinary(info.kind) && !info.scalar_other ? 2 : 1;
    const MathOpInfo* entry = &info;
    ops::RegisterOp(registry, info.name, inputs, inputs, 1, InPlaceSafe(info) ? AliasKind::kInPlace : AliasKind::kNone,
                    [entry](const Attrs& attrs, absl::Span<const TensorType> in) { return Infer(*entry, attrs, in); });
  }
}

}  // namespace tandem
