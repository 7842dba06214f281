#include "ir/ops/shape_rules.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/checked_math.h"

namespace tandem {

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // i counts from the last dim.
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", ShapeString(a), " and ", ShapeString(b),
                                                     " do not broadcast: dim -", i + 1, " is ", da, " vs ", db));
    }
    out[rank - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

bool BroadcastsTo(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  }
  return true;
}

std::vector<int64_t> ContiguousStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

std::vector<int64_t> BroadcastStrides(const Shape& from, const Shape& to) {
  std::vector<int64_t> strides(to.size(), 0);
  const std::vector<int64_t> own = ContiguousStrides(from);
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    strides[lead + i] = from[i] == 1 ? 0 : own[i];
  }
  return strides;
}

absl::StatusOr<int> NormalizeDim(int64_t dim, int rank) {
  const int64_t r = std::max(rank, 1);
  if (dim < -r || dim >= r) {
    return absl::InvalidArgumentError(absl::StrCat("dim ", dim, " is out of range for a tensor of rank ", rank,
                                                   " (expected ", -r, " to ", r - 1, ")"));
  }
  return static_cast<int>(dim < 0 ? dim + r : dim);
}

absl::StatusOr<Shape> InferViewShape(const Shape& input, absl::Span<const int64_t> size) {
  const int64_t numel = NumElements(input);
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] == -1) {
      if (inferred >= 0) {
        return absl::InvalidArgumentError(absl::StrCat("size [", absl::StrJoin(size, ", "), "] has more than one -1"));
      }
      inferred = static_cast<int>(i);
    } else if (size[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("size [", absl::StrJoin(size, ", "), "] has the negative dim ", size[i]));
    } else {
      std::optional<int64_t> product = CheckedMul(known, size[i]);
      if (!product.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("size [", absl::StrJoin(size, ", "), "] has more elements than an int64 counts"));
      }
      known = *product;
    }
  }
  Shape out(size.begin(), size.end());
  if (inferred >= 0) {
    if (known == 0 || numel % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(input), " (", numel,
                                                     " elements) cannot be viewed as [", absl::StrJoin(size, ", "),
                                                     "]"));
    }
    out[inferred] = numel / known;
    return out;
  }
  if (known != numel) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(input), " (", numel,
                                                   " elements) cannot be viewed as ", ShapeString(out), " (", known,
                                                   " elements)"));
  }
  return out;
}

absl::StatusOr<std::vector<bool>> ReductionMask(absl::Span<const int64_t> dims, int rank) {
  std::vector<bool> mask(rank, dims.empty());
  for (int64_t d : dims) {
    auto dim = NormalizeDim(d, rank);
    if (!dim.ok()) return dim.status();
    if (rank == 0) continue;  // reducing a scalar over dim 0 or -1 keeps it
    if (mask[*dim]) {
      return absl::InvalidArgumentError(
          absl::StrCat("dim ", *dim, " appears twice in [", absl::StrJoin(dims, ", "), "]"));
    }
    mask[*dim] = true;
  }
  return mask;
}

Shape ReducedShape(const Shape& input, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (size_t i = 0; i < input.size(); ++i) {
    if (!mask[i]) {
      out.push_back(input[i]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

absl::StatusOr<std::vector<int>> NormalizePermutation(absl::Span<const int64_t> dims, int rank) {
  if (static_cast<int>(dims.size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat("dims [", absl::StrJoin(dims, ", "), "] has ", dims.size(),
                                                   " entries for a tensor of rank ", rank));
  }
  std::vector<int> perm;
  std::vector<bool> seen(rank, false);
  for (int64_t d : dims) {
    auto dim = NormalizeDim(d, rank);
    if (!dim.ok()) return dim.status();
    if (seen[*dim]) {
      return absl::InvalidArgumentError(
          absl::StrCat("dims [", absl::StrJoin(dims, ", "), "] is not a permutation: dim ", *dim, " repeats"));
    }
    seen[*dim] = true;
    perm.push_back(*dim);
  }
  return perm;
}

DimSplit SplitAtDim(const Shape& shape, int dim) {
  DimSplit split;
  if (shape.empty()) return split;
  for (int i = 0; i < dim; ++i) split.outer *= shape[i];
  split.size = shape[dim];
  for (size_t i = dim + 1; i < shape.size(); ++i) split.inner *= shape[i];
  return split;
}

}  // namespace tandem
