#include "ir/ops/reduction_rules.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tandem {

absl::StatusOr<std::vector<bool>> ReducedDimsOf(const Attrs& attrs, const TensorType& self) {
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("dim", std::vector<int64_t>{}));
  auto mask = ReductionMask(dims, self.rank());
  if (!mask.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("self is ", self.ToString(), ": ", mask.status().message()));
  }
  return mask;
}

absl::Status RequireNonEmptyReduction(const TensorType& self, const std::vector<bool>& mask, absl::string_view what) {
  for (int d = 0; d < self.rank(); ++d) {
    if (mask[d] && self.shape[d] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("self is ", self.ToString(), ": reduced dim ", d, " is empty and ", what));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> SingleDimOf(const Attrs& attrs, const TensorType& self, bool optional) {
  if (optional && !attrs.Has("dim")) return -1;
  ASSIGN_OR_RETURN(int64_t dim, attrs.GetInt("dim"));
  auto d = NormalizeDim(dim, self.rank());
  if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat("self is ", self.ToString(), ": ", d.status().message()));
  return *d;
}

DimSplit SplitForDim(const Shape& shape, int dim) {
  if (dim < 0) return DimSplit{1, NumElements(shape), 1};
  return SplitAtDim(shape, dim);
}

absl::StatusOr<VectorNorm> VectorNormOf(const Attrs& attrs) {
  ASSIGN_OR_RETURN(double ord, attrs.GetFloat("ord", 2.0));
  if (std::isnan(ord)) return absl::InvalidArgumentError("attribute 'ord' is NaN");
  VectorNorm norm;
  norm.p = ord;
  if (ord == 2.0) {
    norm.kind = NormKind::kSumSquares;
  } else if (ord == 1.0) {
    norm.kind = NormKind::kSumAbs;
  } else if (ord == 0.0) {
    norm.kind = NormKind::kCountNonZero;
  } else if (std::isinf(ord)) {
    norm.kind = ord > 0 ? NormKind::kMaxAbs : NormKind::kMinAbs;
  } else {
    norm.kind = NormKind::kSumPow;
  }
  return norm;
}

absl::StatusOr<double> VarianceCorrectionOf(absl::string_view op, const Attrs& attrs) {
  if (op == "var.dim") {
    ASSIGN_OR_RETURN(bool unbiased, attrs.GetBool("unbiased", true));
    return unbiased ? 1.0 : 0.0;
  }
  ASSIGN_OR_RETURN(double correction, attrs.GetFloat("correction", 1.0));
  if (!std::isfinite(correction)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'correction' is ", correction, "; expected a finite number"));
  }
  return correction;
}

absl::StatusOr<DType> ConvertedResultDType(const Attrs& attrs, const TensorType& self, bool int_to_float) {
  ASSIGN_OR_RETURN(DType dtype, attrs.GetDType("dtype", self.dtype));
  const DType in = self.dtype;
  const bool half_in = in == DType::kBFloat16 || in == DType::kFloat16;
  if (dtype == in || (in == DType::kFloat32 && dtype == DType::kFloat64) || (half_in && dtype == DType::kFloat32) ||
      (int_to_float && in == DType::kInt64 && (dtype == DType::kFloat32 || dtype == DType::kFloat64))) {
    return dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("self is ", self.ToString(), " and attribute 'dtype' is ", DTypeName(dtype),
                   "; supported conversions are float32 to float64, bfloat16 or float16 to float32",
                   int_to_float ? ", int64 to float32 or float64" : "", " (or none)"));
}

}  // namespace tandem
