#include "ir/ops/slice_rules.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/checked_math.h"
#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

absl::StatusOr<int> DimOf(const Attrs& attrs, const Shape& shape, std::optional<int64_t> fallback) {
  ASSIGN_OR_RETURN(int64_t dim, attrs.GetInt("dim", fallback));
  const int rank = static_cast<int>(shape.size());
  if (rank == 0) {
    return absl::InvalidArgumentError(absl::StrCat("the input is rank 0; there is no dim ", dim, " to slice"));
  }
  return NormalizeDim(dim, rank);
}

}  // namespace

absl::StatusOr<SliceRange> ResolveSelect(const Attrs& attrs, const Shape& shape) {
  ASSIGN_OR_RETURN(int dim, DimOf(attrs, shape, std::nullopt));
  ASSIGN_OR_RETURN(int64_t index, attrs.GetInt("index"));
  const int64_t size = shape[dim];
  if (index < -size || index >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'index' is ", index, " but dim ", dim, " has size ", size));
  }
  return SliceRange{dim, index < 0 ? index + size : index, 1, 1};
}

absl::StatusOr<SliceRange> ResolveSlice(const Attrs& attrs, const Shape& shape) {
  ASSIGN_OR_RETURN(int dim, DimOf(attrs, shape, 0));
  const int64_t size = shape[dim];
  ASSIGN_OR_RETURN(int64_t start, attrs.GetInt("start", 0));
  ASSIGN_OR_RETURN(int64_t end, attrs.GetInt("end", std::numeric_limits<int64_t>::max()));
  ASSIGN_OR_RETURN(int64_t step, attrs.GetInt("step", 1));
  if (step <= 0) return absl::InvalidArgumentError(absl::StrCat("attribute 'step' is ", step, "; must be positive"));
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  return SliceRange{dim, start, CeilDiv(end - start, step), step};
}

absl::StatusOr<SplitPieces> ResolveSplit(const Attrs& attrs, const Shape& shape, bool with_sizes) {
  SplitPieces pieces;
  ASSIGN_OR_RETURN(pieces.dim, DimOf(attrs, shape, 0));
  const int64_t size = shape[pieces.dim];
  if (with_sizes) {
    ASSIGN_OR_RETURN(pieces.sizes, attrs.GetInts("split_sizes"));
    int64_t total = 0;
    for (int64_t s : pieces.sizes) {
      if (s < 0) return absl::InvalidArgumentError(absl::StrCat("attribute 'split_sizes' has the negative size ", s));
      std::optional<int64_t> sum = CheckedAdd(total, s);
      if (!sum.has_value() || *sum > size) {
        return absl::InvalidArgumentError(absl::StrCat("attribute 'split_sizes' [", absl::StrJoin(pieces.sizes, ", "),
                                                       "] sums to more than dim ", pieces.dim, "'s size ", size));
      }
      total = *sum;
    }
    if (total != size) {
      return absl::InvalidArgumentError(absl::StrCat("attribute 'split_sizes' [", absl::StrJoin(pieces.sizes, ", "),
                                                     "] sums to ", total, " but dim ", pieces.dim, " has size ", size));
    }
    return pieces;
  }
  ASSIGN_OR_RETURN(int64_t split_size, attrs.GetInt("split_size"));
  if (split_size < 0 || (split_size == 0 && size != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'split_size' is ", split_size, " for a dim of size ", size));
  }
  if (size == 0) {
    pieces.sizes = {0};
    return pieces;
  }
  for (int64_t at = 0; at < size; at += split_size) pieces.sizes.push_back(std::min(split_size, size - at));
  return pieces;
}

absl::StatusOr<Shape> InputSizesAttr(const Attrs& attrs) {
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, attrs.GetInts("input_sizes"));
  for (int64_t d : sizes) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("attribute 'input_sizes' has the negative dim ", d));
  }
  return Shape(sizes.begin(), sizes.end());
}

std::vector<int> CatParticipants(const std::vector<Shape>& inputs) {
  std::vector<int> kept;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!(inputs[i].size() == 1 && inputs[i][0] == 0)) kept.push_back(static_cast<int>(i));
  }
  // All of them 1-D empty: the result is one of them.
  if (kept.empty() && !inputs.empty()) kept.push_back(0);
  return kept;
}

}  // namespace tandem
