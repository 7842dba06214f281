// Helpers for the ops' inference functions (ir/ops/*_ops.cc only): dtype
// and rank checks with messages that name the op's input, the binary
// elementwise type rule, and the wrapper that prefixes every inference error
// with the op's name. Plain functions; thread-safe.
#ifndef TANDEM_IR_OPS_INFER_UTIL_H_
#define TANDEM_IR_OPS_INFER_UTIL_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ir/op_registry.h"

namespace tandem::ops {

using TypeList = std::vector<TensorType>;

inline constexpr DType kFloatTypes[] = {DType::kFloat32, DType::kFloat64};
inline constexpr DType kNumericTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt64};
// Types a copy or a fill can produce.
inline constexpr DType kStorableTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32,
                                           DType::kBool};
// The lists above plus the 16-bit floats (bfloat16, float16), for the ops
// whose CPU and CUDA kernels both take them (computing in float32 and
// rounding once when they store, as PyTorch does). An op opts in by naming
// one of these; the others keep refusing 16-bit tensors at registration.
inline constexpr DType kFloatAndHalfTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16};
inline constexpr DType kNumericAndHalfTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kBFloat16,
                                                 DType::kFloat16};
inline constexpr DType kStorableAndHalfTypes[] = {DType::kFloat32, DType::kFloat64,  DType::kInt64,  DType::kInt32,
                                                  DType::kBool,    DType::kBFloat16, DType::kFloat16};

// INVALID_ARGUMENT "<input> is <type>; <op> supports <list>" unless `type`'s
// dtype is in `allowed`.
absl::Status RequireDType(absl::string_view input, const TensorType& type, absl::Span<const DType> allowed);
absl::Status RequireDTypeValue(absl::string_view what, DType dtype, absl::Span<const DType> allowed);
absl::Status RequireRank(absl::string_view input, const TensorType& type, int rank);

// The dtype of a binary elementwise op's result: equal dtypes, or a rank-0
// operand converted to the other operand's dtype. A conversion PyTorch would
// not make (a float rank-0 onto an integer tensor, which PyTorch promotes to
// float) is refused with a hint.
absl::StatusOr<DType> BinaryResultDType(absl::string_view a_name, const TensorType& a, absl::string_view b_name,
                                        const TensorType& b);

// OK unless `dtype` is an integer type and the number attribute `name` is a
// float (PyTorch would promote the result to float). An absent attribute is
// fine.
absl::Status RequireScalarFits(const Attrs& attrs, absl::string_view name, absl::string_view input, DType dtype);

// The rules of the softmax family (`_softmax`, `_log_softmax`): a self of
// an `allowed` dtype, a valid `dim`, half_to_float false; the output has
// self's type.
absl::StatusOr<TypeList> InferSoftmaxLike(const Attrs& attrs, absl::Span<const TensorType> in,
                                          absl::Span<const DType> allowed = kFloatTypes);
// Their backward ops: grad_output and output of one `allowed` type, a valid
// `dim`, input_dtype (if given) equal to it. `what` names the op family in
// errors ("softmax", "log-softmax").
absl::StatusOr<TypeList> InferSoftmaxLikeBackward(const Attrs& attrs, absl::Span<const TensorType> in,
                                                  absl::string_view what,
                                                  absl::Span<const DType> allowed = kFloatTypes);

// Wraps `infer` so that its errors read "<op>: <message>".
InferFn WithOpName(std::string op, InferFn infer);

// Registers `op` (inference wrapped by WithOpName) and its aliases.
void RegisterOp(OpRegistry& registry, std::string name, int min_inputs, int max_inputs, int num_outputs,
                AliasKind alias, InferFn infer, std::initializer_list<absl::string_view> aliases = {});

}  // namespace tandem::ops

#endif  // TANDEM_IR_OPS_INFER_UTIL_H_
