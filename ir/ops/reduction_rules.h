// Attribute rules of the reductions, scans and sorts, shared by the op
// registry and every backend's kernels, so that a node means the same on
// each: which dims a node reduces, the [outer, size, inner] view of a
// single-dim op (argmax without a dim reduces the flattened tensor),
// linalg_vector_norm's `ord`, var's correction, and the `dtype` attribute
// of prod, cumsum and linalg_vector_norm.
//
// Plain functions without state; thread-safe. Errors are INVALID_ARGUMENT
// messages naming the attribute or input; the registry prefixes the op.
#ifndef TANDEM_IR_OPS_REDUCTION_RULES_H_
#define TANDEM_IR_OPS_REDUCTION_RULES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/attrs.h"
#include "ir/dtype.h"
#include "ir/ops/shape_rules.h"

namespace tandem {

// The dims a node's `dim` attribute (ints) reduces: absent or empty means
// every dim (sum, mean, amax, var, linalg_vector_norm all read it so).
absl::StatusOr<std::vector<bool>> ReducedDimsOf(const Attrs& attrs, const TensorType& self);

// INVALID_ARGUMENT unless every reduced dim of `self` is non-empty: for the
// reductions without an identity (amax, argmax, max.dim, the inf norms).
// `what` ends the message ("amax has no identity").
absl::Status RequireNonEmptyReduction(const TensorType& self, const std::vector<bool>& mask, absl::string_view what);

// The `dim` attribute (one int) of a single-dim op, normalized. With
// `optional`, an absent dim is -1 (meaning: the flattened tensor).
absl::StatusOr<int> SingleDimOf(const Attrs& attrs, const TensorType& self, bool optional = false);

// `self` seen as [outer, size, inner] around `dim` (SingleDimOf's; -1: the
// flattened tensor, [1, numel, 1]).
DimSplit SplitForDim(const Shape& shape, int dim);

// linalg_vector_norm's `ord` (default 2): which accumulation it takes. A
// general ord p accumulates |x|^p and takes the 1/p-th power; p may be
// negative (an element 0 then makes the norm 0).
enum class NormKind {
  kSumSquares,    // ord 2: sqrt(sum x^2)
  kSumAbs,        // ord 1: sum |x|
  kMaxAbs,        // ord inf (NaN propagates)
  kMinAbs,        // ord -inf (NaN propagates)
  kCountNonZero,  // ord 0: the count of x != 0 (NaN counts)
  kSumPow,        // any other ord p: (sum |x|^p)^(1/p)
};
struct VectorNorm {
  NormKind kind = NormKind::kSumSquares;
  double p = 2.0;
};
absl::StatusOr<VectorNorm> VectorNormOf(const Attrs& attrs);

// The correction of var.correction (`correction`, default 1; any finite
// number) or var.dim (`unbiased`, default true: 1, else 0). The variance is
// sum((x - mean)^2) / max(0, N - correction), as PyTorch divides.
absl::StatusOr<double> VarianceCorrectionOf(absl::string_view op, const Attrs& attrs);

// The result dtype of an op with a `dtype` attribute that converts self
// before reducing (prod, cumsum, linalg_vector_norm): the attribute, or
// self's dtype. Accepted conversions: none, float32 to float64, a 16-bit
// float to float32, and with `int_to_float` int64 to float32 or float64;
// anything else is INVALID_ARGUMENT (PyTorch allows a few more that no model
// uses).
absl::StatusOr<DType> ConvertedResultDType(const Attrs& attrs, const TensorType& self, bool int_to_float);

}  // namespace tandem

#endif  // TANDEM_IR_OPS_REDUCTION_RULES_H_
