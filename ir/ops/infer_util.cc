#include "ir/ops/infer_util.h"
#include "absl/strings/string_view.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"

namespace tandem::ops {
namespace {

std::string DTypeNames(absl::Span<const DType> allowed) {
  return absl::StrJoin(allowed, ", ", [](std::string* out, DType d) { out->append(DTypeName(d)); });
}

// bool < integer < floating, as PyTorch's promotion categories.
int Category(DType dtype) {
  if (dtype == DType::kBool) return 0;
  if (IsFloating(dtype)) return 2;
  return 1;
}

}  // namespace

absl::Status RequireDType(absl::string_view input, const TensorType& type, absl::Span<const DType> allowed) {
  for (DType d : allowed) {
    if (d == type.dtype) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(input, " is ", type.ToString(), "; supported dtypes are ", DTypeNames(allowed)));
}

absl::Status RequireDTypeValue(absl::string_view what, DType dtype, absl::Span<const DType> allowed) {
  for (DType d : allowed) {
    if (d == dtype) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is ", DTypeName(dtype), "; supported dtypes are ", DTypeNames(allowed)));
}

absl::Status RequireRank(absl::string_view input, const TensorType& type, int rank) {
  if (type.rank() == rank) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(input, " is ", type.ToString(), " (rank ", type.rank(), "); expected rank ", rank));
}

absl::StatusOr<DType> BinaryResultDType(absl::string_view a_name, const TensorType& a, absl::string_view b_name,
                                        const TensorType& b) {
  if (a.dtype == b.dtype) return a.dtype;
  // Which operand is converted: the rank-0 one; of two rank-0 operands, the
  // one of the lower category (or, within a category, the narrower one).
  bool convert_b;
  if (a.rank() == 0 && b.rank() == 0) {
    convert_b = Category(a.dtype) != Category(b.dtype) ? Category(a.dtype) > Category(b.dtype)
                                                       : DTypeSize(a.dtype) >= DTypeSize(b.dtype);
  } else if (b.rank() == 0) {
    convert_b = true;
  } else if (a.rank() == 0) {
    convert_b = false;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(a_name, " is ", a.ToString(), " but ", b_name, " is ", b.ToString(),
                                                   "; dtypes must match (insert _to_copy)"));
  }
  const TensorType& kept = convert_b ? a : b;
  const TensorType& converted = convert_b ? b : a;
  if (Category(converted.dtype) > Category(kept.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(convert_b ? b_name : a_name, " is ", converted.ToString(), " and ",
                                                   convert_b ? a_name : b_name, " is ", kept.ToString(),
                                                   "; PyTorch would promote the result to ", DTypeName(converted.dtype),
                                                   ", which needs an explicit _to_copy here"));
  }
  return kept.dtype;
}

absl::Status RequireScalarFits(const Attrs& attrs, absl::string_view name, absl::string_view input, DType dtype) {
  if (IsFloating(dtype)) return absl::OkStatus();
  auto it = attrs.values().find(std::string(name));
  if (it == attrs.values().end()) return absl::OkStatus();
  if (const double* v = std::get_if<double>(&it->second)) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' is the float ", *v, " but ", input, " is ",
                                                   DTypeName(dtype),
                                                   "; PyTorch would promote the result to float, which needs an "
                                                   "explicit _to_copy here"));
  }
  return absl::OkStatus();
}

InferFn WithOpName(std::string op, InferFn infer) {
  return [op = std::move(op), infer = std::move(infer)](
             const Attrs& attrs, absl::Span<const TensorType> inputs) -> absl::StatusOr<std::vector<TensorType>> {
    auto result = infer(attrs, inputs);
    if (!result.ok()) {
      return absl::Status(result.status().code(), absl::StrCat(op, ": ", result.status().message()));
    }
    return result;
  };
}

void RegisterOp(OpRegistry& registry, std::string name, int min_inputs, int max_inputs, int num_outputs,
                AliasKind alias, InferFn infer, std::initializer_list<absl::string_view> aliases) {
  OpDef def;
  def.name = name;
  def.min_inputs = min_inputs;
  def.max_inputs = max_inputs;
  def.num_outputs = num_outputs;
  def.infer = WithOpName(name, std::move(infer));
  def.alias = alias;
  registry.Register(std::move(def));
  for (absl::string_view other : aliases) registry.Alias(name, other);
}

namespace {

absl::Status CheckSoftmaxDim(const Attrs& attrs, absl::string_view input, const TensorType& type) {
  ASSIGN_OR_RETURN(int64_t dim, attrs.GetInt("dim"));
  auto d = NormalizeDim(dim, type.rank());
  if (!d.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(input, " is ", type.ToString(), ": ", d.status().message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TypeList> InferSoftmaxLike(const Attrs& attrs, absl::Span<const TensorType> in,
                                          absl::Span<const DType> allowed) {
  RETURN_IF_ERROR(RequireDType("self", in[0], allowed));
  RETURN_IF_ERROR(CheckSoftmaxDim(attrs, "self", in[0]));
  ASSIGN_OR_RETURN(bool half_to_float, attrs.GetBool("half_to_float", false));
  if (half_to_float) {
    return absl::InvalidArgumentError(
        absl::StrCat("half_to_float=true (a float32 result from a 16-bit self) is not supported; self is ",
                     in[0].ToString(), "; convert self with _to_copy first"));
  }
  return TypeList{in[0]};
}

absl::StatusOr<TypeList> InferSoftmaxLikeBackward(const Attrs& attrs, absl::Span<const TensorType> in,
                                                  absl::string_view what, absl::Span<const DType> allowed) {
  RETURN_IF_ERROR(RequireDType("grad_output", in[0], allowed));
  if (!(in[0] == in[1])) {
    return absl::InvalidArgumentError(absl::StrCat("grad_output is ", in[0].ToString(), " but output is ",
                                                   in[1].ToString(), "; they must have the same type"));
  }
  RETURN_IF_ERROR(CheckSoftmaxDim(attrs, "grad_output", in[0]));
  ASSIGN_OR_RETURN(DType input_dtype, attrs.GetDType("input_dtype", in[0].dtype));
  if (input_dtype != in[0].dtype) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'input_dtype' is ", DTypeName(input_dtype),
                                                   " but grad_output is ", in[0].ToString(), "; mixed-precision ", what,
                                                   " is not supported"));
  }
  return TypeList{in[0]};
}

}  // namespace tandem::ops
